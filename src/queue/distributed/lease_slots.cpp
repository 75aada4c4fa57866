// Distributed queues on Citus: the lease slots of max_leased, taken and freed
// on the coordinator (see queue/distributed/distributed.hpp).
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
#include "queue/args.hpp"
#include "queue/distribution.hpp"
#include "queue/lifecycle/claim.hpp"
#include "queue/graphs/dependencies.hpp"
#include "queue/flow/keys_sql.hpp"
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
namespace {

// The lease slots of distributed queue `queue`, a table on the coordinator.
std::string slots_relation(std::string_view queue) {
	return qualified_table_name(QueueTable::slots, queue);
}

} // namespace

void free_lease_slots(Queue &whole, const std::vector<int64> &ids) {
	static const Oid types[1] = {INT8ARRAYOID};
	Datum values[1] = {int8_array(ids)};
	std::string sql = fmt::format("UPDATE {} SET task_id = NULL, lease_token = NULL, lease_expires_at = NULL "
	                              "WHERE task_id OPERATOR(pg_catalog.=) ANY ($1)",
	                              slots_relation(whole.name()));
	whole.run_internal("distributed_slots_free", sql, 1, types, values, nullptr, Access::owner);
}

void decide_lease_slots(Queue &whole, const int64 *ids, int n, bool free, const char *what,
                        std::optional<SlotsDecided> &decided) {
	if (whole.info().max_leased == 0 || citus::in_routed_call() || !is_distributed(whole.info().relid))
		return;
	require_slots_here(whole, what);
	if (!shards_served_here(whole, false)) // 0.2.0's routed SQL functions keep them
		return;
	if (free)
		free_lease_slots(whole, std::vector<int64>(ids, ids + n));
	decided.emplace();
}

std::vector<int32> take_lease_slots(Queue &whole, int32 wanted, TimestampTz now) {
	// First the empty slots (one prepared statement: the common case)
	static const Oid empty_types[1] = {INT4OID};
	Datum empty_values[1] = {Int32GetDatum(wanted)};
	std::string sql = fmt::format("SELECT slot FROM {} WHERE task_id IS NULL ORDER BY slot LIMIT $1 "
	                              "FOR UPDATE SKIP LOCKED",
	                              slots_relation(whole.name()));
	uint64 empty = whole.run_internal("distributed_slots_take", sql, 1, empty_types, empty_values, nullptr,
	                                  Access::owner);
	if (empty > 0) {
		std::vector<int32> slots;
		for (uint64 i = 0; i < empty; ++i) {
			bool isnull = false;
			slots.push_back(DatumGetInt32(pg::column(static_cast<int>(i), 1, &isnull)));
		}
		return slots;
	}
	// None: the slots whose lease end has passed, each one's task looked at
	// on its shard — woken there as a claim wakes it (an expired lease
	// reclaimed: ready again, or dead), on this node or on the shard's node
	// (lease_end_on_shard) — and taken where its lease is no longer held; a
	// lease extended by a heartbeat keeps its slot, which records the new end
	Datum ended_values[2] = {TimestampTzGetDatum(now), Int32GetDatum(wanted)};
	static const Oid ended_types[2] = {TIMESTAMPTZOID, INT4OID};
	std::string ended_sql =
	    fmt::format("SELECT slot, task_id, lease_token FROM {} WHERE task_id IS NOT NULL AND "
	                "(lease_expires_at IS NULL OR lease_expires_at OPERATOR(pg_catalog.<=) $1) ORDER BY slot "
	                "LIMIT $2 FOR UPDATE SKIP LOCKED",
	                slots_relation(whole.name()));
	uint64 ended = whole.run_internal("distributed_slots_ended", ended_sql, 2, ended_types, ended_values,
	                                  nullptr, Access::owner);
	struct Held {
		int32 slot;
		int64 task_id;
		int64 lease_token;
	};
	std::vector<Held> held;
	for (uint64 i = 0; i < ended; ++i) {
		int row = static_cast<int>(i);
		bool isnull = false;
		held.push_back(Held{DatumGetInt32(pg::column(row, 1, &isnull)), pg::int64_column(row, 2),
		                    pg::int64_column(row, 3)});
	}
	std::vector<int32> slots;
	for (const Held &h : held) {
		std::optional<TimestampTz> end;
		int32 position = task_position(h.task_id);
		const Shards &shards = distributed_shards(whole);
		if (position < shards.count) {
			if (const LocalShard *here = shards.at(position)) {
				Queue shard(whole.name(), *here);
				end = lease_end_on_shard(shard, h.task_id, h.lease_token, now);
			} else {
				static const Oid types[4] = {TEXTOID, INT8OID, INT8OID, TIMESTAMPTZOID};
				Datum values[4] = {pg::text_datum(whole.name()), Int64GetDatum(h.task_id),
				                   Int64GetDatum(h.lease_token), TimestampTzGetDatum(now)};
				uint64 n = call_on_shard(whole, position, "distributed_lease_end", 4, types, values, nullptr,
				                         false, true, "concurrency_internal");
				bool isnull = true;
				Datum d = n == 1 ? pg::column(0, 1, &isnull) : Datum(0);
				if (!isnull)
					end = DatumGetTimestampTz(d);
			}
		}
		if (!end) {
			slots.push_back(h.slot);
			continue;
		}
		static const Oid keep_types[2] = {INT4OID, TIMESTAMPTZOID};
		Datum keep_values[2] = {Int32GetDatum(h.slot), TimestampTzGetDatum(*end)};
		std::string keep =
		    fmt::format("UPDATE {} SET lease_expires_at = $2 WHERE slot OPERATOR(pg_catalog.=) $1",
		                slots_relation(whole.name()));
		whole.run_internal("distributed_slots_keep", keep, 2, keep_types, keep_values, nullptr,
		                   Access::owner);
	}
	if (!slots.empty()) { // emptied: a slot this claim does not fill records no old task
		static const Oid cleared_types[1] = {INT4ARRAYOID};
		Datum cleared_values[1] = {Datum(0)};
		std::vector<Datum> numbers;
		for (int32 slot : slots)
			numbers.push_back(Int32GetDatum(slot));
		pg::guard([&] {
			cleared_values[0] = PointerGetDatum(construct_array(
			    numbers.data(), static_cast<int>(numbers.size()), INT4OID, 4, true, TYPALIGN_INT));
		});
		std::string cleared =
		    fmt::format("UPDATE {} SET task_id = NULL, lease_token = NULL, "
		                "lease_expires_at = NULL WHERE slot OPERATOR(pg_catalog.=) ANY ($1)",
		                slots_relation(whole.name()));
		whole.run_internal("distributed_slots_clear", cleared, 1, cleared_types, cleared_values, nullptr,
		                   Access::owner);
	}
	return slots;
}

void fill_lease_slots(Queue &whole, const std::vector<int32> &slots,
                      const std::vector<ClaimedLease> &leases) {
	std::size_t n = std::min(slots.size(), leases.size());
	if (n == 0)
		return;
	std::vector<Datum> s, ends;
	std::vector<int64> ids, tokens;
	for (std::size_t i = 0; i < n; ++i) {
		s.push_back(Int32GetDatum(slots[i]));
		ids.push_back(leases[i].task_id);
		tokens.push_back(leases[i].lease_token);
		ends.push_back(TimestampTzGetDatum(leases[i].lease_expires_at));
	}
	int count = static_cast<int>(n);
	Datum values[4] = {Datum(0), int8_array(ids), int8_array(tokens), Datum(0)};
	pg::guard([&] {
		values[0] = PointerGetDatum(construct_array(s.data(), count, INT4OID, 4, true, TYPALIGN_INT));
		values[3] = PointerGetDatum(
		    construct_array(ends.data(), count, TIMESTAMPTZOID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	});
	static const Oid types[4] = {INT4ARRAYOID, INT8ARRAYOID, INT8ARRAYOID, TIMESTAMPTZARRAYOID};
	std::string sql =
	    fmt::format("UPDATE {} AS s SET task_id = u.task_id, lease_token = u.lease_token, "
	                "lease_expires_at = u.ends FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), "
	                "pg_catalog.unnest($3), pg_catalog.unnest($4)) AS u(slot, task_id, lease_token, ends) "
	                "WHERE s.slot OPERATOR(pg_catalog.=) u.slot",
	                slots_relation(whole.name()));
	whole.run_internal("distributed_slots_fill", sql, 4, types, values, nullptr, Access::owner);
}

} // namespace concurrency::queue

using namespace concurrency;
using namespace concurrency::queue;

// concurrency_internal.distributed_lease_end(queue, task_id, lease_token,
// now) — on the node of the task's shard, for the coordinator of a queue
// with max_leased: lease_end_on_shard (claim.hpp) on that shard, as the
// queue's owner. The caller needs permission work; 55000 for a queue that
// is not distributed, or where the shard is not on this node (any more).
CONCURRENCY_FUNCTION(concurrency_distributed_lease_end) {
	queue::QueueName name = queue::queue_name(fcinfo);
	int64 task_id = queue::int64_arg(fcinfo, 1, "task_id");
	int64 token = queue::int64_arg(fcinfo, 2, "lease_token");
	pg::require_arg(fcinfo, 3, "now");
	TimestampTz now = PG_GETARG_TIMESTAMPTZ(3);
	pg::spi_connect();
	Queue whole(name.view());
	AsRole as_owner = authorize(whole, Permission::work, "distributed_lease_end");
	if (!distribution().is_distributed(whole.info().relid))
		throw Error(sqlstate::object_not_in_prerequisite_state,
		            fmt::format("queue \"{}\" is not a distributed queue", whole.name()));
	const queue::LocalShard *here = distribution().local_shard_of(whole, &task_id, 1, false);
	if (!here)
		throw Error(
		    sqlstate::object_not_in_prerequisite_state,
		    fmt::format("the shard of task {} of queue \"{}\" is not on this node", task_id, whole.name()),
		    "The call was made by a node whose picture of the shards is older.", "Retry the transaction.");
	Queue shard(whole.name(), *here);
	std::optional<TimestampTz> end = queue::lease_end_on_shard(shard, task_id, token, now);
	pg::spi_finish();
	if (!end)
		PG_RETURN_NULL();
	PG_RETURN_TIMESTAMPTZ(*end);
}
