// What this backend holds through the named functions, with hold counts per
// level — which pg_locks cannot show (it has one row per lock and mode, with
// no count and no level). Backs the view concurrency.my_locks.
//
// The lock manager's own per-backend table (LockMethodLocalHash) is private to
// lock.c, so we keep a parallel account: every acquisition and release made
// through the named functions is recorded here, transaction-level holds per
// subtransaction, and transaction and subtransaction callbacks drop what the
// lock manager drops at commit, abort and rollback to savepoint. Raw
// pg_advisory_* calls on the same locks are not counted; when they release a
// lock completely the view notices, because it keeps only what pg_locks still
// shows as held, and the next named acquisition starts counting afresh.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "locks/lock_keys.hpp"

namespace concurrency::locks {

enum class Level { transaction, session };

// After LockAcquire succeeded. `newly` is true when the lock manager reports a
// fresh acquisition (LOCKACQUIRE_OK: no level held it before), which resets
// counts that raw calls may have made stale.
void track_acquired(const AdvisoryTag &tag, bool shared, Level level, bool newly, std::string_view name,
                    std::optional<std::int64_t> resource);

// After LockRelease of a session lock; `released` is its result.
void track_session_released(const AdvisoryTag &tag, bool shared, bool released);

// Registers the transaction callbacks; called once from _PG_init.
void tracking_init();

} // namespace concurrency::locks
