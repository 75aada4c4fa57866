// Backend start-up for the named-locks capability: the relcache callback that
// keeps the name cache true, and the transaction callbacks that keep the hold
// counts of concurrency.my_locks true.
#include "locks/registry.hpp"
#include "locks/tracking.hpp"

namespace concurrency {

void locks_init() {
	locks::registry_init();
	locks::tracking_init();
}

} // namespace concurrency
