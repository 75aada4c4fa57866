// Keyed concurrency and queue-wide limits, the PostgreSQL side (the SQL and
// how the limits are kept: queue/keys_sql.hpp; for users: docs/queue.md,
// "Keys and limits"). Internal to src/queue.
#pragma once

#include <string>
#include <vector>

#include "queue/flow/keys_sql.hpp"
#include "queue/queue.hpp"

namespace concurrency::queue {

// The SQL of the keys (key_limit) and lease slots (max_leased) of `q`, on
// the queue's own side tables or on the key table's shard beside a shard
// (42704 where that is not on this node).
KeySql key_sql(const Queue &q);

// Adds a task of a key to a queue with a key_limit, deciding 'blocked' under
// its key's lock. `values`/`nulls` are the six parameters of
// QueueSql::enqueue, the concurrency_key not NULL. Returns SPI_processed (1,
// or 0 on a dedupe_key conflict); the id is in SPI_tuptable.
uint64 enqueue_keyed(Queue &q, const Datum *values, const char *nulls);

// Locks the rows of `keys` in the key table, in sorted order (a batch that
// enqueues tasks of several keys, before it adds them one by one).
void lock_keys(Queue &q, std::vector<std::string> keys);

// Keys whose tasks left the admitted set (completed, failed for good,
// cancelled, dead): admits their next blocked tasks, each key once, locking
// the keys in sorted order (so that two callers cannot deadlock on them).
void release_keys(Queue &q, std::vector<std::string> keys, TimestampTz now);

// The concurrency_key column (text) of row `row` of SPI_tuptable, if any.
std::optional<std::string> key_column(int row, int col);

// The keys in column `col` of the first `n` rows of SPI_tuptable, when the
// queue limits its keys (nothing otherwise: nothing to release).
std::vector<std::string> keys_of_rows(Queue &q, uint64 n, int col);

// max_leased: locks up to `wanted` free lease slots (never waiting) and
// returns their numbers; fill_slots writes the leases taken into them.
std::vector<int32> take_slots(Queue &q, int32 wanted);
void fill_slots(Queue &q, const std::vector<int32> &slots, const std::vector<int64> &task_ids,
                const std::vector<int64> &lease_tokens);

// After create_queue / alter_queue changed the limits: re-admits and holds
// back the tasks of every key when key_limit changed, and gives the slot
// table `max_leased` slots when that is set (0: none).
void apply_limits(Queue &q, TimestampTz now, bool key_limit_changed, std::optional<int32> max_leased);

} // namespace concurrency::queue
