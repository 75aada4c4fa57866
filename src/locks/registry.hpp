// The subsystem registry (concurrency.subsystem) as seen by the lock
// functions: a backend-local name → (key, slot, xact_only) cache.
//
// The cache is loaded from the table in one query and kept until a relcache
// invalidation for the table arrives: the table's statement trigger sends one
// for every INSERT, UPDATE, DELETE or TRUNCATE (plain DML sends none), DDL on
// it sends its own, and a full cache reset counts too. Other backends receive
// it at their next transaction start, so a registry change is seen by every
// backend's next transaction — as with the system catalogs. A name missing
// from the cache first processes pending invalidations and reloads if needed,
// so a subsystem registered a moment ago is found even inside an open
// transaction.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "locks/lock_keys.hpp"

#include "pg/guard.hpp"

namespace concurrency::locks {

struct Subsystem {
	std::int64_t key = 0;
	int slot = 0;
	bool xact_only = false;
};

// The registered subsystem `name`. Throws Error 42704 (not registered, with a
// hint) or 22023 (not a valid subsystem name at all).
const Subsystem &lookup_subsystem(std::string_view name);

// Every registered subsystem, from the same cache (for the diagnostics and
// concurrency.held_locks, which name advisory locks after them). Valid until
// the next lookup: copy what must outlive it.
const std::vector<SubsystemKey> &registered_subsystems();

// Registers the relcache invalidation callback; called once from _PG_init.
void registry_init();

} // namespace concurrency::locks
