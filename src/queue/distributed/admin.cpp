// Distributed queues on Citus: distributing a queue, keeping its catalog and
// limits on every node, and the purge of its shards (see
// queue/distributed/distributed.hpp).
#include "queue/distributed/distributed.hpp"
#include "queue/distributed/internal.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "citus/node.hpp"
#include "common/sql_text.hpp"
#include "pg/datum.hpp"
#include "pg/invalidation.hpp"
#include "queue/lifecycle/claim.hpp"
#include "queue/graphs/dependencies.hpp"
#include "queue/flow/keys.hpp"
#include "queue/permissions.hpp"
#include "queue/flow/rate_sql.hpp"
#include "queue/queue.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
}

namespace concurrency::queue {
void sync_catalog(const std::string &queue) {
	// Between a package update and ALTER EXTENSION … UPDATE the objects are
	// 0.2.0's, which have no copy to sync (nor nodes that serve a queue)
	// (their routed functions are in schema concurrency rather than
	// concurrency_internal: routed_function)
	if (routed_function("distributed_sync_catalog").rfind("concurrency_internal.", 0) != 0)
		return;
	static const Oid types[1] = {TEXTOID};
	Datum values[1] = {pg::text_datum(queue)};
	run_routed("distributed_sync_catalog", "SELECT {}($1)", 1, types, values);
}

void require_coordinator_for(std::string_view queue, const char *what, bool catalog) {
	if (citus::local_role().role != citus::Role::worker)
		return;
	std::string coordinator = citus::coordinator_address();
	throw Error(
	    sqlstate::feature_not_supported,
	    fmt::format("{} of distributed queue \"{}\" is not supported on a Citus worker node", what, queue),
	    catalog
	        ? "The coordinator keeps the catalog of distributed queues and copies it to every node."
	        : "The lease slots of a queue with max_leased and the rate slots of a queue with rate_limit are "
	          "tables on the coordinator.",
	    coordinator.empty() ? std::string("Call it on the coordinator.")
	                        : fmt::format("Call it on the coordinator ({}).", coordinator));
}

void distribute(const std::string &queue) {
	static const Oid types[1] = {TEXTOID};
	Datum values[1] = {pg::text_datum(queue)};
	SPIPlanPtr plan =
	    pg::prepared_plan("distributed:distribute", "SELECT concurrency.distribute_queue($1)", 1, types);
	pg::execute(plan, values, nullptr, false);
}

void rebalance_keys(Queue &whole, int32 key_limit, TimestampTz now) {
	// a copy: an invalidation while a shard is opened may drop the cached list
	const Shards shards = distributed_shards(whole);
	static const Oid types[2] = {INT4OID, TIMESTAMPTZOID};
	Datum values[2] = {Int32GetDatum(key_limit), TimestampTzGetDatum(now)};
	for (const LocalShard &s : shards.local) {
		Queue shard(whole.name(), s);
		// (Citus lets a client session lock a shard only with manual changes
		// to shards allowed; a call routed here is Citus's own session)
		with_settings({{"citus.enable_manual_changes_to_shards", "on"}}, [&] {
			return shard.run_internal("keys_lock_all", key_sql(shard).lock_keys(), 0, nullptr, nullptr,
			                          nullptr, Access::owner);
		});
		shard.run_internal("keys_rebalance_to", key_sql(shard).rebalance(true), 2, types, values, nullptr,
		                   Access::latest);
	}
	if (citus::in_routed_call())
		return;
	static const Oid routed_types[3] = {TEXTOID, INT4OID, TIMESTAMPTZOID};
	Datum routed_values[3] = {pg::text_datum(whole.name()), Int32GetDatum(key_limit),
	                          TimestampTzGetDatum(now)};
	for (int32 position : other_nodes(shards))
		call_on_shard(whole, position, "distributed_rebalance", 3, routed_types, routed_values, nullptr,
		              false, true, "concurrency_internal");
}

void distributed_limits(const std::string &queue, bool key_limit_changed, std::optional<int32> max_leased) {
	static const Oid types[2] = {TEXTOID, INT4OID};
	Datum values[2] = {pg::text_datum(queue), Int32GetDatum(max_leased.value_or(0))};
	if (key_limit_changed) {
		if (objects_current()) {
			Queue q(queue); // the catalog's trigger has invalidated the cache: the new key_limit
			rebalance_keys(q, q.info().key_limit, clock_now());
		} else { // 0.2.0's own function
			run_routed("distributed_rebalance", "SELECT {}($1)", 1, types, values);
		}
	}
	if (max_leased)
		run_routed("distributed_resize_slots", "SELECT {}($1, $2)", 2, types, values);
}

uint64 distributed_purge_chunk(Queue &whole, int32 chunk, TimestampTz now) {
	if (!objects_current()) { // 0.2.0's own function
		static const Oid types[2] = {TEXTOID, INT4OID};
		Datum values[2] = {pg::text_datum(whole.name()), Int32GetDatum(chunk)};
		run_routed("distributed_purge_chunk", "SELECT {}($1, $2)", 2, types, values);
		bool isnull = false;
		Datum purged = pg::column(0, 1, &isnull);
		return isnull ? 0 : static_cast<uint64>(DatumGetInt64(purged));
	}
	const Shards &shards = distributed_shards(whole);
	if (shards.count < 1)
		return 0;
	int32 position = next_position(shards);
	if (const LocalShard *here = shards.at(position)) {
		Queue shard(whole.name(), *here);
		return shard.purge(now, chunk);
	}
	static const Oid types[3] = {TEXTOID, INT4OID, INT4OID};
	Datum values[3] = {pg::text_datum(whole.name()), Int32GetDatum(chunk), Int32GetDatum(position)};
	uint64 n = call_on_shard(whole, position, "distributed_purge_chunk", 3, types, values, nullptr, false,
	                         true, "concurrency_internal");
	bool isnull = true;
	Datum purged = n == 1 ? pg::column(0, 1, &isnull) : Datum(0);
	return isnull ? 0 : static_cast<uint64>(DatumGetInt64(purged));
}

} // namespace concurrency::queue

using namespace concurrency;
using namespace concurrency::queue;

// concurrency_internal.distributed_rebalance(queue, key_limit, now) — on a
// node that holds shards of the queue, called by the coordinator's
// alter_queue after key_limit changed: rebalance_keys on this node's shards.
// Needs permission manage.
CONCURRENCY_FUNCTION(concurrency_distributed_rebalance) {
	QueueName name = queue_name(fcinfo);
	pg::require_arg(fcinfo, 1, "key_limit");
	pg::require_arg(fcinfo, 2, "now");
	int32 key_limit = PG_GETARG_INT32(1);
	TimestampTz now = PG_GETARG_TIMESTAMPTZ(2);
	pg::spi_connect();
	Queue whole(name.view());
	AsRole as_owner = authorize(whole, Permission::manage, "alter_queue");
	if (!is_distributed(whole.info().relid))
		throw Error(sqlstate::object_not_in_prerequisite_state,
		            fmt::format("queue \"{}\" is not a distributed queue", whole.name()));
	rebalance_keys(whole, key_limit, now);
	pg::spi_finish();
	PG_RETURN_VOID();
}

// concurrency_internal.distributed_purge_chunk(queue, chunk, shard_position) — on
// the node of the queue's shard at `shard_position`, for a node without shards
// whose queue calls purge a chunk: up to `chunk` finished tasks of that
// shard past their retention (Queue::purge). Returns how many; 0 where the
// shard is not on this node (any more). Needs permission work.
CONCURRENCY_FUNCTION(concurrency_distributed_purge_chunk) {
	QueueName name = queue_name(fcinfo);
	pg::require_arg(fcinfo, 1, "chunk");
	pg::require_arg(fcinfo, 2, "shard_position");
	int32 chunk = PG_GETARG_INT32(1);
	int32 position = PG_GETARG_INT32(2);
	if (chunk < 1)
		throw Error(sqlstate::invalid_parameter_value, "chunk must be at least 1");
	pg::spi_connect();
	Queue whole(name.view());
	AsRole as_owner = authorize(whole, Permission::work, "purge");
	uint64 purged = 0;
	if (is_distributed(whole.info().relid)) {
		const Shards &shards = distributed_shards(whole);
		if (position >= 0 && position < shards.count)
			if (const LocalShard *here = shards.at(position)) {
				Queue shard(whole.name(), *here);
				purged = shard.purge(clock_now(), chunk);
			}
	}
	pg::spi_finish();
	PG_RETURN_INT64(static_cast<int64>(purged));
}
