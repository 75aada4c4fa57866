// Distributed queues on Citus: the C++ side. A queue made distributed by
// concurrency.distribute_queue (src/sql/41_distributed_queue.sql) keeps its
// SQL functions; their entry points hand the call to the SQL function
// concurrency.distributed_<op>, which sends each statement to one shard.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "pg/srf.hpp"
#include "pg/spi.hpp"

extern "C" {
#include "utils/timestamp.h"
}

namespace concurrency::queue {

// Whether the queue whose table is `relid` is distributed. False at once
// where Citus is not loaded; otherwise read from concurrency.distributed_queue
// once per backend and table, until a relcache invalidation of the table.
// Call while SPI is connected.
bool is_distributed(Oid relid);

// Runs concurrency.<function>(the caller's arguments; the first `max_args`
// of them when given) and returns its result as the caller's: the scalar
// result, or the rows into `out` for a set-returning caller (columns that
// the distributed function does not return are NULL). Ends the caller's SPI
// connection.
Datum forward_distributed(FunctionCallInfo fcinfo, const char *function, const pg::ResultSet *out = nullptr,
                          int max_args = -1);

// 0A000 for what distributed queues do not do yet (`what`: release, wait,
// progress), naming the queue.
[[noreturn]] void refuse_on_distributed(std::string_view queue, const char *what);

// For create_queue(…, distributed => true), before it changes anything:
// 0A000 unless this server is a Citus coordinator.
void require_coordinator(const std::string &queue);

// Makes the queue distributed: concurrency.distribute_queue(queue) with its
// default shard count (a no-op for a queue that is distributed already).
// Call while SPI is connected.
void distribute(const std::string &queue);

// After alter_queue changed the limits of a distributed queue: when
// key_limit changed, concurrency.distributed_rebalance(queue) admits and
// holds back the tasks of every key, shard by shard; when max_leased is set
// (0: none), concurrency.distributed_resize_slots gives the queue that many
// lease slots. Call while SPI is connected.
void distributed_limits(const std::string &queue, bool key_limit_changed, std::optional<int32> max_leased);

// One chunk of the purge that queue calls do, on a distributed queue:
// concurrency.distributed_purge_chunk(queue, chunk) on one shard at random.
// Returns how many finished tasks it deleted. Call while SPI is connected.
uint64 distributed_purge_chunk(const std::string &queue, int32 chunk);

// Runs concurrency.distributed_stats(queue, now): its one row (the six counts
// of queue_stats) is left in SPI_tuptable.
void distributed_stats(const std::string &queue, TimestampTz now);

} // namespace concurrency::queue
