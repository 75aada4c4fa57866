// What the files of src/queue/distributed share and nothing else uses.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "pg/guard.hpp"
#include "queue/distributed/distributed.hpp"

extern "C" {
#include "utils/guc.h"
}

namespace concurrency::queue {

// The next shard position to start a claim at, per backend (shards.cpp).
uint32 next_cursor();

// Whether the objects installed are 0.3.0's or later (schema
// concurrency_internal), not 0.2.0's (shards.cpp).
bool objects_current();

// The routed function `function`, qualified with its schema (routing.cpp).
std::string routed_function(const char *function);

// Runs a routed statement `sql` (whose first "{}" stands for the qualified
// routed function `function`); the number of rows, in SPI_tuptable
// (routing.cpp).
uint64 run_routed(const char *function, const char *sql, int nargs, const Oid *types, const Datum *values,
                  const char *nulls = nullptr);

// One shard position on each other node that holds shards of the queue
// (routing.cpp).
std::vector<int32> other_nodes(const Shards &shards);

// The DDL of distributed queues (ddl.cpp), SPI connected:
// One row of the settings of distributed queue `queue` in SPI_tuptable
// (concurrency_internal.distributed_queue_settings' columns); 42704 when it
// is not one.
uint64 distributed_settings(const std::string &queue);
// Its leased tasks, a query over every shard (42704 as above).
struct LeasedTask {
	int64 id;
	std::optional<int64> lease_token;
	std::optional<TimestampTz> lease_expires_at;
};
std::vector<LeasedTask> distributed_leased(const std::string &queue);
// Gives it lease slots 1..max_leased (0: none), the running leases written
// into the empty ones; 22023 for a missing or negative max_leased.
void resize_lease_slots(const std::string &queue, std::optional<int32> max_leased);
// Copies its catalog rows and permissions to every other node (a
// coordinator with workers only), as the caller.
void sync_catalog_here(const std::string &queue);
// Distributes its slots of key_rate_limit beside its tasks (55000 when it is
// not distributed or has none).
void distribute_key_rate_slots_here(const std::string &queue);
// Makes the empty queue `queue` distributed, with `shard_count` shards
// (default citus.shard_count) (concurrency.distribute_queue).
void distribute_queue_here(const std::string &queue, std::optional<int32> shard_count);

// Runs `fn` with the settings `settings` (name, value) made for that while
// only, as a function's SET clause makes them: undone after it, whether it
// returns or raises.
template <typename F>
auto with_settings(std::initializer_list<std::pair<const char *, const char *>> settings, F &&fn)
    -> decltype(fn()) {
	int level = pg::guard([&] {
		int nest = NewGUCNestLevel();
		for (const auto &[name, value] : settings)
			(void)set_config_option(name, value, PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0, false);
		return nest;
	});
	try {
		auto result = fn();
		pg::guard([&] { AtEOXact_GUC(true, level); });
		return result;
	} catch (...) {
		pg::guard([&] { AtEOXact_GUC(false, level); });
		throw;
	}
}

} // namespace concurrency::queue
