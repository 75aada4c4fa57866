#include "pg/invalidation.hpp"

#include "pg/guard.hpp"

namespace concurrency::pg {

namespace {

struct Listener {
	RelcacheCallbackFunction func;
	Datum arg;
};
Listener listeners[8];
int count = 0;

void dispatch(Datum, Oid relid) {
	for (int i = 0; i < count; ++i)
		listeners[i].func(listeners[i].arg, relid);
}

} // namespace

void register_relcache_callback(RelcacheCallbackFunction func, Datum arg) {
	if (count == static_cast<int>(sizeof listeners / sizeof listeners[0]))
		throw Error(sqlstate::internal_error, "too many relcache callbacks in concurrency_ext");
	if (count == 0)
		guard([] { CacheRegisterRelcacheCallback(dispatch, (Datum)0); });
	listeners[count++] = Listener{func, arg};
}

} // namespace concurrency::pg
