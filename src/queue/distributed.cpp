#include "queue/distributed.hpp"

#include <string>
#include <unordered_map>

#include <fmt/format.h>

#include "citus/node.hpp"
#include "pg/datum.hpp"
#include "pg/invalidation.hpp"
#include "queue/queue.hpp"

extern "C" {
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/lsyscache.h"
}

namespace concurrency::queue {

namespace {

// relid -> distributed, and relid -> its shards; entries dropped by a
// relcache invalidation of the table (distribute_queue changes it; Citus
// invalidates it when it distributes it and when its shards change), all of
// them by a full reset.
std::unordered_map<Oid, bool> *known = nullptr;
std::unordered_map<Oid, Shards> *shard_maps = nullptr;

void forget(Datum, Oid relid) {
	if (!known)
		return;
	if (relid == InvalidOid) {
		known->clear();
		shard_maps->clear();
	} else {
		known->erase(relid);
		shard_maps->erase(relid);
	}
}

void remember() {
	if (!known) {
		known = new std::unordered_map<Oid, bool>();
		shard_maps = new std::unordered_map<Oid, Shards>();
		pg::register_relcache_callback(forget, (Datum)0);
	}
}

// This backend's round-robin over its node's shards (enqueue without keys,
// and where dequeue starts), started at the backend's pid so that the
// connections of one node spread over its shards.
uint32 shard_cursor = 0;
bool shard_cursor_set = false;

uint32 next_cursor() {
	if (!shard_cursor_set) {
		shard_cursor = static_cast<uint32>(MyProcPid);
		shard_cursor_set = true;
	}
	return shard_cursor++;
}

} // namespace

bool is_distributed(Oid relid) {
	if (citus::local_role().role == citus::Role::none)
		return false;
	remember();
	if (auto it = known->find(relid); it != known->end())
		return it->second;
	static const Oid types[1] = {OIDOID};
	Datum values[1] = {ObjectIdGetDatum(relid)};
	SPIPlanPtr plan = pg::prepared_plan(
	    "distributed:is",
	    "SELECT FROM concurrency.distributed_queue d JOIN pg_catalog.pg_class c"
	    "    ON c.relname OPERATOR(pg_catalog.=) ('q_' OPERATOR(pg_catalog.||) d.queue)"
	    "   AND c.relnamespace OPERATOR(pg_catalog.=) 'concurrency'::pg_catalog.regnamespace"
	    " WHERE c.oid OPERATOR(pg_catalog.=) $1",
	    1, types);
	bool distributed = pg::execute(plan, values, nullptr, true) > 0;
	(*known)[relid] = distributed;
	return distributed;
}

const LocalShard *Shards::at(int32 position) const {
	for (const LocalShard &shard : local)
		if (shard.position == position)
			return &shard;
	return nullptr;
}

const Shards &distributed_shards(Queue &q) {
	remember();
	Oid relid = q.info().relid;
	if (auto it = shard_maps->find(relid); it != shard_maps->end())
		return it->second;
	// the indexes each shard needs for the claim, as Citus names them on a
	// shard (shard_name: the index name with the shard id, shortened with a
	// hash where it would be too long)
	Oid ready = concurrency_relid(queue_index_name(q.name(), "ready"));
	Oid scheduled = concurrency_relid(queue_index_name(q.name(), "scheduled"));
	Oid leased = concurrency_relid(queue_index_name(q.name(), "leased"));
	if (!OidIsValid(ready) || !OidIsValid(scheduled) || !OidIsValid(leased))
		throw Error(
		    sqlstate::undefined_object,
		    fmt::format("the indexes of distributed queue \"{}\" are missing on this node", q.name()));
	static const Oid types[5] = {OIDOID, TEXTOID, OIDOID, OIDOID, OIDOID};
	Datum values[5] = {ObjectIdGetDatum(relid), pg::text_datum(q.name()), ObjectIdGetDatum(ready),
	                   ObjectIdGetDatum(scheduled), ObjectIdGetDatum(leased)};
	SPIPlanPtr plan = pg::prepared_plan(
	    "distributed:shards",
	    "WITH s AS (SELECT shardid, (pg_catalog.row_number() OVER (ORDER BY shardid))::pg_catalog.int4"
	    "                           OPERATOR(pg_catalog.-) 1 AS pos"
	    "             FROM pg_catalog.pg_dist_shard WHERE logicalrelid OPERATOR(pg_catalog.=) $1)"
	    " SELECT s.shardid, s.pos, d.shard_keys[s.pos OPERATOR(pg_catalog.+) 1],"
	    "        pg_catalog.cardinality(d.shard_keys),"
	    "        pg_catalog.shard_name($1::pg_catalog.regclass, "
	    "s.shardid)::pg_catalog.regclass::pg_catalog.oid,"
	    "        pg_catalog.shard_name($3::pg_catalog.regclass, "
	    "s.shardid)::pg_catalog.regclass::pg_catalog.oid,"
	    "        pg_catalog.shard_name($4::pg_catalog.regclass, "
	    "s.shardid)::pg_catalog.regclass::pg_catalog.oid,"
	    "        pg_catalog.shard_name($5::pg_catalog.regclass, "
	    "s.shardid)::pg_catalog.regclass::pg_catalog.oid,"
	    "        (SELECT groupid FROM pg_catalog.pg_dist_local_group)"
	    "   FROM s"
	    "   JOIN concurrency.distributed_queue d ON d.queue OPERATOR(pg_catalog.=) $2"
	    "  WHERE EXISTS (SELECT FROM pg_catalog.pg_dist_placement p"
	    "                 WHERE p.shardid OPERATOR(pg_catalog.=) s.shardid"
	    "                   AND p.groupid OPERATOR(pg_catalog.=) (SELECT groupid FROM "
	    "pg_catalog.pg_dist_local_group))"
	    "  ORDER BY s.pos",
	    5, types);
	Shards shards;
	uint64 n = pg::execute(plan, values, nullptr, true);
	if (n == 0) {
		// no shard here: the count alone
		SPIPlanPtr count =
		    pg::prepared_plan("distributed:shard_count",
		                      "SELECT pg_catalog.cardinality(shard_keys) FROM concurrency.distributed_queue"
		                      " WHERE queue OPERATOR(pg_catalog.=) $1",
		                      1, &types[1]);
		if (pg::execute(count, &values[1], nullptr, true) == 1)
			shards.count = pg::column_as<int32>(0, 1).value_or(0);
	}
	auto oid_column = [](int r, int c) {
		bool isnull = false;
		Datum d = pg::column(r, c, &isnull);
		return isnull ? InvalidOid : DatumGetObjectId(d);
	};
	for (uint64 row = 0; row < n; ++row) {
		int r = static_cast<int>(row);
		LocalShard shard;
		shard.shard_id = pg::int64_column(r, 1);
		shard.position = pg::column_as<int32>(r, 2).value_or(-1);
		shard.shard_key = pg::column_as<int32>(r, 3).value_or(-1);
		shards.count = pg::column_as<int32>(r, 4).value_or(-1);
		Oid table = oid_column(r, 5);
		shard.ready_index = oid_column(r, 6);
		shard.scheduled_index = oid_column(r, 7);
		shard.leased_index = oid_column(r, 8);
		shard.group = pg::column_as<int32>(r, 9).value_or(-1);
		const char *relname = pg::guard([&] { return static_cast<const char *>(get_rel_name(table)); });
		shard.relname = relname ? relname : "";
		if (shard.relname.empty() || shard.group < 0 || shard.group > 1023 || shard.shard_key < 0 ||
		    !OidIsValid(shard.ready_index) || !OidIsValid(shard.scheduled_index) ||
		    !OidIsValid(shard.leased_index))
			continue;
		shards.local.push_back(std::move(shard));
	}
	return shard_maps->emplace(relid, std::move(shards)).first->second;
}

bool shards_served_here(Queue &q) {
	return q.info().key_limit == 0 && q.info().max_leased == 0;
}

const LocalShard *local_shard_of(Queue &q, const int64 *ids, int n) {
	if (n < 1 || !shards_served_here(q))
		return nullptr;
	const Shards &shards = distributed_shards(q);
	int32 position = task_position(ids[0]);
	for (int i = 1; i < n; ++i)
		if (task_position(ids[i]) != position)
			return nullptr;
	return position < shards.count ? shards.at(position) : nullptr;
}

void require_slots_here(Queue &q, const char *what) {
	if (q.info().max_leased > 0 && citus::local_role().role == citus::Role::worker)
		require_coordinator_for(q.name(), what, false);
}

bool route_tasks(Queue &whole, const int64 *ids, int n, std::optional<Queue> &shard, const char *what) {
	if (!is_distributed(whole.info().relid))
		return false;
	if (what)
		require_slots_here(whole, what);
	const LocalShard *here = local_shard_of(whole, ids, n);
	if (!here)
		return true;
	shard.emplace(whole.name(), *here);
	return false;
}

int32 key_position(Datum key, int32 count) {
	int32 hash = pg::guard(
	    [&] { return DatumGetInt32(DirectFunctionCall1Coll(hashtext, DEFAULT_COLLATION_OID, key)); });
	return static_cast<int32>((static_cast<int64>(hash) + 2147483648LL) % count);
}

const LocalShard *next_local_shard(const Shards &shards) {
	if (shards.local.empty())
		return nullptr;
	return &shards.local[next_cursor() % shards.local.size()];
}

namespace {

// Runs concurrency.<function> with the caller's first `max_args` arguments
// (all: -1); its rows go into `out` when given, else its one value is in
// SPI_tuptable. Returns the number of rows; *rettype is the caller's result type.
uint64 run_forwarded(FunctionCallInfo fcinfo, const char *function, const pg::ResultSet *out, int max_args,
                     Oid *rettype) {
	Oid fn = fcinfo->flinfo->fn_oid;
	Oid *argtypes = nullptr;
	int nargs = 0;
	*rettype = pg::guard([&] { return get_func_signature(fn, &argtypes, &nargs); });
	if (max_args >= 0 && nargs > max_args)
		nargs = max_args;
	std::string sql = out ? fmt::format("SELECT * FROM concurrency.{}(", function)
	                      : fmt::format("SELECT concurrency.{}(", function);
	for (int i = 0; i < nargs; ++i)
		sql += fmt::format("{}${}", i ? ", " : "", i + 1);
	sql += ")";
	Datum values[FUNC_MAX_ARGS];
	char nulls[FUNC_MAX_ARGS];
	for (int i = 0; i < nargs; ++i) {
		values[i] = fcinfo->args[i].value;
		nulls[i] = fcinfo->args[i].isnull ? 'n' : ' ';
	}
	SPIPlanPtr plan =
	    pg::prepared_plan(fmt::format("distributed:{}", function).c_str(), sql.c_str(), nargs, argtypes);
	uint64 n = pg::execute(plan, values, nulls, false);
	if (out) {
		int ncols = SPI_tuptable->tupdesc->natts;
		for (uint64 row = 0; row < n; ++row) {
			Datum cols[FUNC_MAX_ARGS];
			bool isnull[FUNC_MAX_ARGS];
			for (int c = 0; c < FUNC_MAX_ARGS; ++c) {
				cols[c] = Datum(0);
				isnull[c] = true;
			}
			for (int c = 0; c < ncols && c < FUNC_MAX_ARGS; ++c)
				cols[c] = pg::column(row, c + 1, &isnull[c]);
			pg::add_row(*out, cols, isnull);
		}
	}
	return n;
}

} // namespace

uint64 dequeue_routed(FunctionCallInfo fcinfo, const pg::ResultSet &out) {
	Oid rettype = InvalidOid;
	return run_forwarded(fcinfo, "distributed_dequeue", &out, 4, &rettype);
}

Datum forward_distributed(FunctionCallInfo fcinfo, const char *function, const pg::ResultSet *out,
                          int max_args) {
	Oid rettype = InvalidOid;
	uint64 n = run_forwarded(fcinfo, function, out, max_args, &rettype);
	Datum result = Datum(0);
	bool result_null = true;
	if (!out && n == 1) {
		result = pg::column(0, 1, &result_null);
		if (!result_null) {
			int16 len = 0;
			bool byval = false;
			pg::guard([&] { get_typlenbyval(rettype, &len, &byval); });
			result = pg::guard([&] { return SPI_datumTransfer(result, byval, len); });
		}
	}
	pg::spi_finish();
	if (out || result_null) {
		fcinfo->isnull = !out;
		return Datum(0);
	}
	return result;
}

void refuse_on_distributed(std::string_view queue, const char *what) {
	throw Error(
	    sqlstate::feature_not_supported,
	    fmt::format("{} is not supported on distributed queue \"{}\"", what, queue),
	    "The task's shard is on another node: a distributed queue hands tasks back and keeps progress "
	    "on the node that holds the task's shard only.",
	    "Call it on that node (a worker takes its tasks there when it connects to the node that holds "
	    "them), or use fail(…, retry_in => '0') to give a task back.");
}

void require_coordinator(const std::string &queue) {
	citus::Role role = citus::local_role().role;
	if (role == citus::Role::coordinator)
		return;
	throw Error(
	    sqlstate::feature_not_supported,
	    fmt::format("cannot create distributed queue \"{}\": this server is not a Citus coordinator", queue),
	    fmt::format("Its Citus node role is {}.", role == citus::Role::worker ? "worker" : "none"),
	    "Create distributed queues on the coordinator of a Citus cluster, or leave out distributed => true "
	    "for a queue on this server.");
}

void sync_catalog(const std::string &queue) {
	// Between a package update and ALTER EXTENSION … UPDATE the objects are
	// 0.2.0's, which have no copy to sync (nor nodes that serve a queue)
	SPIPlanPtr exists = pg::prepared_plan(
	    "distributed:sync_exists",
	    "SELECT pg_catalog.to_regprocedure('concurrency.distributed_sync_catalog(text)') IS NOT NULL", 0,
	    nullptr);
	if (pg::execute(exists, nullptr, nullptr, true) != 1 || !pg::column_as<bool>(0, 1).value_or(false))
		return;
	static const Oid types[1] = {TEXTOID};
	Datum values[1] = {pg::text_datum(queue)};
	SPIPlanPtr plan =
	    pg::prepared_plan("distributed:sync", "SELECT concurrency.distributed_sync_catalog($1)", 1, types);
	pg::execute(plan, values, nullptr, false);
}

void require_coordinator_for(std::string_view queue, const char *what, bool catalog) {
	if (citus::local_role().role != citus::Role::worker)
		return;
	std::string coordinator = citus::coordinator_address();
	throw Error(
	    sqlstate::feature_not_supported,
	    fmt::format("{} of distributed queue \"{}\" is not supported on a Citus worker node", what, queue),
	    catalog ? "The coordinator keeps the catalog of distributed queues and copies it to every node."
	            : "The lease slots of a queue with max_leased are a table on the coordinator.",
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

void distributed_limits(const std::string &queue, bool key_limit_changed, std::optional<int32> max_leased) {
	static const Oid types[2] = {TEXTOID, INT4OID};
	Datum values[2] = {pg::text_datum(queue), Int32GetDatum(max_leased.value_or(0))};
	if (key_limit_changed) {
		SPIPlanPtr plan = pg::prepared_plan("distributed:rebalance",
		                                    "SELECT concurrency.distributed_rebalance($1)", 1, types);
		pg::execute(plan, values, nullptr, false);
	}
	if (max_leased) {
		SPIPlanPtr plan = pg::prepared_plan("distributed:resize_slots",
		                                    "SELECT concurrency.distributed_resize_slots($1, $2)", 2, types);
		pg::execute(plan, values, nullptr, false);
	}
}

uint64 distributed_purge_chunk(const std::string &queue, int32 chunk) {
	static const Oid types[2] = {TEXTOID, INT4OID};
	Datum values[2] = {pg::text_datum(queue), Int32GetDatum(chunk)};
	SPIPlanPtr plan = pg::prepared_plan("distributed:purge_chunk",
	                                    "SELECT concurrency.distributed_purge_chunk($1, $2)", 2, types);
	pg::execute(plan, values, nullptr, false);
	bool isnull = false;
	Datum purged = pg::column(0, 1, &isnull);
	return isnull ? 0 : static_cast<uint64>(DatumGetInt64(purged));
}

void distributed_stats(const std::string &queue, TimestampTz now) {
	static const Oid types[2] = {TEXTOID, TIMESTAMPTZOID};
	Datum values[2] = {pg::text_datum(queue), TimestampTzGetDatum(now)};
	SPIPlanPtr plan = pg::prepared_plan("distributed:stats",
	                                    "SELECT * FROM concurrency.distributed_stats($1, $2)", 2, types);
	pg::execute(plan, values, nullptr, false);
}

} // namespace concurrency::queue
