// dequeue's claim without the executor: the ready index scanned, each task
// locked FOR UPDATE SKIP LOCKED, leased with heap_update, and every index of
// the table given the new row's entries, as the claim statement
// (QueueSql::claim) does, at a third of its cost. Internal to src/queue.
#pragma once

#include "pg/postgres.hpp"
#include "queue/claim_cursor.hpp"
#include "queue/flow/fair.hpp"

extern "C" {
#include "utils/timestamp.h"
}

namespace concurrency::queue {

struct QueueInfo;

// One task that claim_direct leased: dequeue's six columns, and the task's
// place in claim order (for the cursor).
struct ClaimedTask {
	Datum cols[6];
	bool isnull[6];
	ClaimKey key;
};

// Claims up to `wanted` ready tasks at or after `start` in claim order, in
// that order, into `tasks` (palloc'd in the current memory context; *count
// of them), as the claim statement would: the same rows written, the same
// index entries, a fresh lease token per task; unlike the statement, it
// locks no row that it does not lease (claim_direct.cpp, take). Returns
// false, having done nothing, where the statement must run instead: a
// read-only transaction (or a standby), a transaction that uses one snapshot
// throughout (REPEATABLE READ, SERIALIZABLE), or a table with anything the direct path does not
// reproduce (triggers, rules, row security, CHECK constraints, generated
// columns, a table access method other than heap, an index that is not a
// plain btree), a server with Citus (whose tables may keep their rows in
// shards) but for a distributed queue's shard on this node, or a queue
// whose cache entry was invalidated since the call
// began. Runs as the caller's current role (the queue's owner). Adds to
// *scanned the shared buffers its scan of the ready index read (index pages
// and the rows' table pages: what dead entries at the front cost shows
// there, for the claim cursor).
bool claim_direct(QueueInfo &info, TimestampTz now, int32 wanted, const Interval &lease, Datum worker,
                  bool worker_null, const ClaimKey &start, ClaimedTask **tasks, int *count, uint64 *scanned);

// The fair claim without the executor (QueueSql::claim_fair's effects):
// up to `wanted` tasks, each the first ready task, in the fair index's order,
// after the rotation's position `at` that no other claim holds, the position
// then moved to its key (at the index's end, on from its beginning). False,
// having done nothing, where claim_direct would be, or where the queue has
// no fair index. Like claim_direct, it locks no row it does not lease.
bool claim_direct_fair(QueueInfo &info, TimestampTz now, int32 wanted, const Interval &lease, Datum worker,
                       bool worker_null, FairPosition &at, ClaimedTask **tasks, int *count);

// Frees what claim_direct keeps for the queue (its index descriptions): on
// every revalidation of the queue's cache entry and when the queue is
// forgotten.
void forget_direct(QueueInfo &info);

} // namespace concurrency::queue
