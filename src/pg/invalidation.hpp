// One relcache-invalidation callback for the whole extension.
//
// PostgreSQL gives a server ten relcache-callback slots (MAX_RELCACHE_CALLBACKS)
// for everything loaded into a backend, and Citus alone takes five: a module
// that registers one callback per cache runs out of slots on a Citus node,
// and every backend then fails (FATAL) at its first use of the extension.
// So every cache of the extension registers its callback here: this module
// takes one slot and calls each of them in turn.
#pragma once

#include "pg/postgres.hpp"

extern "C" {
#include "utils/inval.h"
}

namespace concurrency::pg {

// Same contract as CacheRegisterRelcacheCallback; at most 8 callbacks.
void register_relcache_callback(RelcacheCallbackFunction func, Datum arg);

} // namespace concurrency::pg
