// One consistent picture of the heavyweight lock manager: who waits, for
// which lock, and who stands in the way (pg_blocking_pids' edges), taken in a
// single pass under ProcArrayLock and every lock-partition lock.
#pragma once

#include <cstdint>
#include <vector>

#include "diagnostics/wait_graph.hpp"
#include "pg/guard.hpp"

extern "C" {
#include "storage/lock.h"
}

namespace concurrency::diagnostics {

// A session in the picture: a backend named by its lock-group leader's pid, or
// a prepared transaction (pid 0, told apart by its xid).
struct Session {
	int pid = 0;
	TransactionId xid = InvalidTransactionId; // prepared transactions only
	bool waiting = false;                     // some process of the session waits for a lock
	TimestampTz waiting_since = 0;            // when it began to wait (0: unknown, or before PostgreSQL 14)

	bool prepared() const { return pid == 0; }
};

struct WaitPicture {
	TimestampTz taken_at = 0;      // the instant of the snapshot
	std::vector<LOCKTAG> locks;    // the awaited locks; BlockEdge::lock indexes them
	std::vector<Session> sessions; // by (pid, xid) ascending; edges use these indexes
	std::vector<BlockEdge> edges;  // sorted by waiter, lock, blocker
};

// Takes the snapshot (nothing is allocated, logged or raised while the
// LWLocks are held) and derives the edges outside the locks. Throws on error.
WaitPicture take_wait_picture();

} // namespace concurrency::diagnostics
