// Backends on their way out, for the lock-wait history's ended_by.
//
// An exiting backend lets go of its locks early and leaves the backend
// status array (pg_stat_activity) late: its transaction is rolled back by the
// first exit callback that needs it and its session locks by
// ShutdownPostgres, while its status entry is cleared among the last
// callbacks. In between it may drop its temporary tables (waiting for their
// locks) or simply not be scheduled on a loaded machine. A sample taken then
// sees the waiters through and the root still listed, as if it had committed.
//
// So a backend marks itself, by pid and start time, in a slot of shared
// memory of its own (its PGPROC's number) before its exit can release a lock:
// from the transaction callbacks while proc_exit runs (the rollback of its
// transaction, whichever exit callback does it), and, for client backends,
// from an exit callback registered at authentication, which runs before
// ShutdownPostgres releases the session locks. The sampler asks about the
// root of an episode that ended (history_exiting); a mark is never cleared,
// a later backend with the same slot writes over it when it exits in turn.
#pragma once

#include "pg/postgres.hpp"

extern "C" {
#include "datatype/timestamp.h"
}

namespace concurrency::diagnostics {

// Whether the backend with this pid and start time (st_proc_start_timestamp)
// has begun to exit. False when the module was not preloaded.
bool history_exiting(int pid, TimestampTz started);

// Called from history_init when preloading: requests the slots and installs
// the callbacks that fill them.
void history_exits_init();

} // namespace concurrency::diagnostics
