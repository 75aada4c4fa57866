#include "queue/distributed.hpp"

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
#include "queue/claim.hpp"
#include "queue/dependencies.hpp"
#include "queue/keys_sql.hpp"
#include "queue/permissions.hpp"
#include "queue/rate_sql.hpp"
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
// and where dequeue starts), started at random so that the connections of
// one node spread over its shards. (The pid alone does not do: connections
// that another node opens one per session, for calls routed here, come with
// pids a fixed distance apart, and kept starting at the same shard.)
uint32 shard_cursor = 0;
bool shard_cursor_set = false;

uint32 next_cursor() {
	if (!shard_cursor_set) {
		shard_cursor = static_cast<uint32>(std::random_device{}()) ^ static_cast<uint32>(MyProcPid);
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
	Oid keys = concurrency_relid(key_table_name(q.name()));
	Oid key_rates = concurrency_relid(key_rate_table_name(q.name()));
	static const Oid types[7] = {OIDOID, TEXTOID, OIDOID, OIDOID, OIDOID, OIDOID, OIDOID};
	Datum values[7] = {ObjectIdGetDatum(relid),     pg::text_datum(q.name()), ObjectIdGetDatum(ready),
	                   ObjectIdGetDatum(scheduled), ObjectIdGetDatum(leased), ObjectIdGetDatum(keys),
	                   ObjectIdGetDatum(key_rates)};
	SPIPlanPtr plan = pg::prepared_plan(
	    "distributed:shards",
	    "WITH s AS (SELECT shardid, (pg_catalog.row_number() OVER (ORDER BY shardid))::pg_catalog.int4"
	    "                           OPERATOR(pg_catalog.-) 1 AS pos"
	    "             FROM pg_catalog.pg_dist_shard WHERE logicalrelid OPERATOR(pg_catalog.=) $1),"
	    "      ks AS (SELECT shardid, (pg_catalog.row_number() OVER (ORDER BY shardid))::pg_catalog.int4"
	    "                             OPERATOR(pg_catalog.-) 1 AS pos"
	    "               FROM pg_catalog.pg_dist_shard WHERE logicalrelid OPERATOR(pg_catalog.=) $6),"
	    "      rs AS (SELECT shardid, (pg_catalog.row_number() OVER (ORDER BY shardid))::pg_catalog.int4"
	    "                             OPERATOR(pg_catalog.-) 1 AS pos"
	    "               FROM pg_catalog.pg_dist_shard WHERE logicalrelid OPERATOR(pg_catalog.=) $7)"
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
	    "        (SELECT groupid FROM pg_catalog.pg_dist_local_group),"
	    "        (SELECT pg_catalog.to_regclass(pg_catalog.shard_name($6::pg_catalog.regclass, ks.shardid))"
	    "                ::pg_catalog.oid FROM ks WHERE ks.pos OPERATOR(pg_catalog.=) s.pos),"
	    "        (SELECT pg_catalog.to_regclass(pg_catalog.shard_name($7::pg_catalog.regclass, rs.shardid))"
	    "                ::pg_catalog.oid FROM rs WHERE rs.pos OPERATOR(pg_catalog.=) s.pos)"
	    "   FROM s"
	    "   JOIN concurrency.distributed_queue d ON d.queue OPERATOR(pg_catalog.=) $2"
	    "  WHERE EXISTS (SELECT FROM pg_catalog.pg_dist_placement p"
	    "                 WHERE p.shardid OPERATOR(pg_catalog.=) s.shardid"
	    "                   AND p.groupid OPERATOR(pg_catalog.=) (SELECT groupid FROM "
	    "pg_catalog.pg_dist_local_group))"
	    "  ORDER BY s.pos",
	    7, types);
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
	// a relation's name, "" where there is none
	auto relation_name = [](Oid rel) {
		const char *name = OidIsValid(rel)
		                       ? pg::guard([&] { return static_cast<const char *>(get_rel_name(rel)); })
		                       : nullptr;
		return std::string(name ? name : "");
	};
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
		shard.relname = relation_name(table);
		shard.key_relname = relation_name(oid_column(r, 10));
		shard.key_rate_relname = relation_name(oid_column(r, 11));
		if (shard.key_relname.empty())
			shards.keys_everywhere = false;
		if (shard.relname.empty() || shard.group < 0 || shard.group > 1023 || shard.shard_key < 0 ||
		    !OidIsValid(shard.ready_index) || !OidIsValid(shard.scheduled_index) ||
		    !OidIsValid(shard.leased_index))
			continue;
		shards.local.push_back(std::move(shard));
	}
	// every shard's key and node, for calls routed to them
	SPIPlanPtr all = pg::prepared_plan(
	    "distributed:all_shards",
	    "WITH s AS (SELECT shardid, (pg_catalog.row_number() OVER (ORDER BY shardid))::pg_catalog.int4"
	    "                           OPERATOR(pg_catalog.-) 1 AS pos"
	    "             FROM pg_catalog.pg_dist_shard WHERE logicalrelid OPERATOR(pg_catalog.=) $1)"
	    " SELECT s.pos, d.shard_keys[s.pos OPERATOR(pg_catalog.+) 1],"
	    "        (SELECT p.groupid FROM pg_catalog.pg_dist_placement p"
	    "          WHERE p.shardid OPERATOR(pg_catalog.=) s.shardid ORDER BY p.groupid LIMIT 1),"
	    "        d.xmin OPERATOR(pg_catalog.=) pg_catalog.xid(pg_catalog.pg_current_xact_id_if_assigned())"
	    "   FROM s JOIN concurrency.distributed_queue d ON d.queue OPERATOR(pg_catalog.=) $2"
	    "  ORDER BY s.pos",
	    2, types);
	uint64 positions = pg::execute(all, values, nullptr, true);
	for (uint64 row = 0; row < positions; ++row) {
		int r = static_cast<int>(row);
		shards.keys.push_back(pg::column_as<int32>(r, 2).value_or(-1));
		shards.groups.push_back(pg::column_as<int32>(r, 3).value_or(-1));
		if (pg::column_as<bool>(r, 4).value_or(false))
			shards.written_by = GetTopTransactionIdIfAny();
	}
	if (static_cast<int32>(positions) != shards.count)
		throw Error(
		    sqlstate::object_not_in_prerequisite_state,
		    fmt::format("the shards of distributed queue \"{}\" are not as its catalog says", q.name()),
		    fmt::format("Citus has {} shards of its table, the catalog {} shard keys.", positions,
		                shards.count));
	return shard_maps->emplace(relid, std::move(shards)).first->second;
}

namespace {
int slots_decided = 0; // SlotsDecided alive in this backend

// Whether the objects installed are 0.3.0's (schema concurrency_internal):
// not 0.2.0's, between a package update and ALTER EXTENSION … UPDATE (looked
// up at each call, a syscache probe, so that an update made while this
// backend lives is seen at once).
bool objects_current() {
	return pg::guard([] { return OidIsValid(get_namespace_oid("concurrency_internal", true)); });
}

// Whether distribute_queue made the shards of a queue in this transaction
// on several connections per node (42_distributed_nodes.sql sets
// concurrency_ext.distributed_in_parallel for the transaction).
bool distributed_in_parallel() {
	const char *value =
	    pg::guard([] { return GetConfigOption("concurrency_ext.distributed_in_parallel", true, false); });
	return value && std::string_view(value) == "on";
}
} // namespace

SlotsDecided::SlotsDecided() {
	++slots_decided;
}

SlotsDecided::~SlotsDecided() {
	--slots_decided;
}

bool shards_served_here(Queue &q, bool slots) {
	// (a call routed here was let through by the node that keeps the slots)
	if (slots && q.info().max_leased != 0 && !citus::in_routed_call() && slots_decided == 0)
		return false;
	if (q.info().key_limit != 0 && !distributed_shards(q).keys_everywhere)
		return false;
	// The objects installed copy the catalog of distributed queues to every
	// node: not 0.2.0's, whose worker nodes know no queue
	if (!objects_current())
		return false;
	// A queue distributed by the running transaction is served too: its
	// shards, Citus's metadata and the catalog copy are on the connection
	// this transaction uses for each node (42_distributed_nodes.sql). Not
	// where Citus could not make them on one connection per node (a parallel
	// query ran before in the transaction): the other nodes see the queue
	// once the transaction commits.
	TransactionId written_by = distributed_shards(q).written_by;
	return !TransactionIdIsValid(written_by) || written_by != GetTopTransactionIdIfAny() ||
	       !distributed_in_parallel();
}

const LocalShard *local_shard_of(Queue &q, const int64 *ids, int n, bool slots) {
	if (n < 1 || !shards_served_here(q, slots))
		return nullptr;
	const Shards &shards = distributed_shards(q);
	int32 position = task_position(ids[0]);
	for (int i = 1; i < n; ++i)
		if (task_position(ids[i]) != position)
			return nullptr;
	return position < shards.count ? shards.at(position) : nullptr;
}

void require_slots_here(Queue &q, const char *what, bool claim) {
	if ((q.info().max_leased > 0 || (claim && q.info().rate_limit > 0)) &&
	    citus::local_role().role == citus::Role::worker && !citus::in_routed_call())
		require_coordinator_for(q.name(), what, false);
}

bool route_tasks(Queue &whole, const int64 *ids, int n, std::optional<Queue> &shard, const char *what,
                 bool slots) {
	if (!is_distributed(whole.info().relid))
		return false;
	if (what)
		require_slots_here(whole, what);
	const LocalShard *here = local_shard_of(whole, ids, n, slots);
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

int32 next_position(const Shards &shards) {
	return shards.count > 0 ? static_cast<int32>(next_cursor() % static_cast<uint32>(shards.count)) : 0;
}

const LocalShard *next_local_shard(const Shards &shards) {
	if (shards.local.empty())
		return nullptr;
	return &shards.local[next_cursor() % shards.local.size()];
}

namespace {

// 55000 for a call that another node routed here for `what` (a shard),
// which is not on this node (any more).
[[noreturn]] void shard_moved(const std::string &what) {
	throw Error(sqlstate::object_not_in_prerequisite_state, fmt::format("{} is not on this node", what),
	            "The call was routed here by another node, whose picture of the shards is older.",
	            "Retry the transaction.");
}

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

// Runs `send`, which sends a queue call to another node, as the caller's
// own call. Citus sends the arguments as text written here: they are
// written in UTC and ISO style for that while (a time in a zone's local mean
// time, as America/Los_Angeles has before 1883, is written with the
// abbreviation LMT, which the other node does not read back: 22007). An
// error of the call is the callee's error as a local call raises it: without
// Citus's context (the node and the statement that carried the call).
uint64 on_other_node(const std::function<uint64()> &send) {
	try {
		return with_settings({{"TimeZone", "UTC"}, {"DateStyle", "ISO"}}, send);
	} catch (const pg::PgException &e) {
		if (ErrorData *edata = e.data())
			edata->context = nullptr;
		throw;
	}
}

} // namespace

std::optional<int32> routed_position(Queue &whole, const int64 *ids, int n, bool slots) {
	if (!shards_served_here(whole, slots))
		return std::nullopt;
	if (citus::in_routed_call())
		shard_moved(fmt::format("the tasks' shard of distributed queue \"{}\"", whole.name()));
	if (n < 1)
		return std::nullopt;
	int32 position = task_position(ids[0]);
	for (int i = 1; i < n; ++i)
		if (task_position(ids[i]) != position)
			return std::nullopt;
	if (position >= distributed_shards(whole).count)
		return std::nullopt;
	return position;
}

namespace {
// The transaction whose writes on this node's shards Citus was told of
// (note_local_writes).
TransactionId local_marked = InvalidTransactionId;

// A write on the shard of distributed queue `whole` whose shard_key is $1
// that changes nothing (no task has id 0), through Citus: it marks that
// shard's node as written in this transaction.
SPIPlanPtr mark_plan(Queue &whole) {
	std::string key = fmt::format("queue:{}\x1froute\x1fmark", whole.name());
	std::string mark = fmt::format("DELETE FROM concurrency.{} WHERE shard_key OPERATOR(pg_catalog.=) $1"
	                               " AND id OPERATOR(pg_catalog.=) 0",
	                               quote_ident(queue_table_name(whole.name())));
	static const Oid types[1] = {INT4OID};
	return pg::prepared_plan(key.c_str(), mark.c_str(), 1, types);
}
} // namespace

void note_local_writes(Queue &whole) {
	TransactionId xid = GetTopTransactionIdIfAny();
	if (!TransactionIdIsValid(xid) || xid == local_marked)
		return;
	const Shards &shards = distributed_shards(whole);
	if (shards.local.empty())
		return;
	Datum local_key = Int32GetDatum(shards.local.front().shard_key);
	pg::execute(mark_plan(whole), &local_key, nullptr, false);
	local_marked = xid;
}

uint64 call_on_shard(Queue &whole, int32 position, const char *function, int nargs, const Oid *types,
                     const Datum *values, const char *nulls, bool set_returning, bool writes,
                     const char *schema) {
	const Shards &shards = distributed_shards(whole);
	if (position < 0 || position >= shards.count)
		throw Error(sqlstate::internal_error,
		            fmt::format("queue \"{}\" has no shard at position {}", whole.name(), position));
	bool here = shards.at(position) != nullptr;
	if (!here && citus::in_routed_call())
		shard_moved(fmt::format("shard {} of distributed queue \"{}\"", position, whole.name()));
	// "queue:<name>\x1f…": forgotten with the queue's other plans
	std::string key = fmt::format("queue:{}\x1froute\x1f{}.{}\x1f{}{}{}", whole.name(), schema, function,
	                              here ? 'l' : 'r', set_returning ? 's' : 'v', writes ? 'w' : 'n');
	std::string call = fmt::format("{}.{}(", quote_ident(schema), quote_ident(function));
	for (int i = 0; i < nargs; ++i)
		call += fmt::format("{}${}", i ? ", " : "", i + 1);
	call += ")";
	// a call elsewhere that writes returns the dependency messages it posted
	// there (dependencies.hpp) in a last column, evaluated after the call;
	// a set-returning one also a column `present` before it, NULL in the one
	// row that stands for no rows
	const bool outbox = !here && writes;
	std::string sql;
	if (here)
		sql = set_returning ? fmt::format("SELECT * FROM {}", call) : fmt::format("SELECT {}", call);
	else {
		// One row from the shard whatever it holds (a grouped query without
		// rows has one group), found by an index probe that matches no task
		// (ids are positive): Citus sends the whole statement, the call
		// included, to the shard's node (it evaluates no function of a
		// SELECT itself).
		std::string one = fmt::format("FROM concurrency.{} WHERE shard_key OPERATOR(pg_catalog.=) ${}"
		                              " AND id OPERATOR(pg_catalog.=) 0 HAVING true",
		                              quote_ident(queue_table_name(whole.name())), nargs + 1);
		const char *taken = ", concurrency_internal.dependency_outbox()";
		if (!set_returning)
			sql = fmt::format("SELECT {}{} {}", call, outbox ? taken : "", one);
		else if (outbox)
			sql = fmt::format(
			    "SELECT r.*{} FROM (SELECT {}) AS one LEFT JOIN LATERAL (SELECT x.*, true AS present "
			    "FROM {} AS x) AS r ON true",
			    taken, one, call);
		else
			sql = fmt::format("SELECT r.* FROM (SELECT {}) AS one CROSS JOIN LATERAL {} AS r", one, call);
	}
	std::vector<Oid> all_types(types, types + nargs);
	std::vector<Datum> all_values(values, values + nargs);
	std::vector<char> all_nulls(static_cast<std::size_t>(nargs), ' ');
	if (nulls)
		std::copy(nulls, nulls + nargs, all_nulls.begin());
	if (!here) {
		all_types.push_back(INT4OID);
		all_values.push_back(Int32GetDatum(shards.keys[static_cast<std::size_t>(position)]));
		all_nulls.push_back(' ');
	}
	if (!here && writes) {
		// First a write on the shard that changes nothing (no task has id 0),
		// so that Citus sees this transaction modify the shard: it opens a
		// transaction block on the shard's node, keeps the call below on that
		// connection, and commits it with the rest of this transaction by
		// two-phase commit wherever another node is written too. A SELECT
		// alone would be sent as a read, outside any transaction block where
		// the caller has none, and committed there on its own.
		pg::execute(mark_plan(whole), &all_values.back(), nullptr, false);
		note_local_writes(whole);
	}
	SPIPlanPtr plan =
	    pg::prepared_plan(key.c_str(), sql.c_str(), static_cast<int>(all_types.size()), all_types.data());
	if (here) {
		uint64 n = pg::execute(plan, all_values.data(), all_nulls.data(), false);
		if (writes) {
			SPITupleTable *rows = SPI_tuptable;
			uint64 processed = SPI_processed;
			note_local_writes(whole);
			SPI_tuptable = rows;
			SPI_processed = processed;
		}
		return n;
	}
	uint64 n = on_other_node([&] { return pg::execute(plan, all_values.data(), all_nulls.data(), false); });
	if (!outbox)
		return n;
	int last = SPI_tuptable->tupdesc->natts;
	for (uint64 row = 0; row < n; ++row) {
		bool isnull = true;
		Datum taken = pg::column(row, last, &isnull);
		receive_messages(whole.name(), taken, isnull);
	}
	if (set_returning && n == 1) {
		bool isnull = false;
		pg::column(0, last - 1, &isnull);
		if (isnull)
			n = 0;
	}
	// delivered now, the rows kept for the caller (SPI keeps a result until
	// SPI_finish)
	SPITupleTable *rows = SPI_tuptable;
	uint64 processed = SPI_processed;
	deliver_messages();
	SPI_tuptable = rows;
	SPI_processed = processed;
	return n;
}

void add_rows(const pg::ResultSet &out, uint64 n) {
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
		pg::add_row(out, cols, isnull);
	}
}

namespace {

// The SQL signature of the caller: its name, argument types (the first
// `max_args` when not -1) and result type.
struct Signature {
	const char *function;
	Oid *types;
	int nargs;
	Oid rettype;
};

Signature caller_signature(FunctionCallInfo fcinfo, int max_args) {
	Signature sig{};
	Oid fn = fcinfo->flinfo->fn_oid;
	sig.rettype = pg::guard([&] { return get_func_signature(fn, &sig.types, &sig.nargs); });
	sig.function = pg::guard([&] { return static_cast<const char *>(get_func_name(fn)); });
	if (max_args >= 0 && sig.nargs > max_args)
		sig.nargs = max_args;
	return sig;
}

// The caller's own call: its signature and its arguments as SPI takes them.
struct CallerCall {
	Signature sig;
	Datum values[FUNC_MAX_ARGS];
	char nulls[FUNC_MAX_ARGS];
};

CallerCall caller_call(FunctionCallInfo fcinfo, int max_args) {
	CallerCall call;
	call.sig = caller_signature(fcinfo, max_args);
	for (int i = 0; i < call.sig.nargs; ++i) {
		call.values[i] = fcinfo->args[i].value;
		call.nulls[i] = fcinfo->args[i].isnull ? 'n' : ' ';
	}
	return call;
}

} // namespace

uint64 call_subset(FunctionCallInfo fcinfo, Queue &whole, int32 position, const std::vector<int> &members,
                   std::initializer_list<int> split, bool set_returning, int max_args) {
	CallerCall call = caller_call(fcinfo, max_args);
	const Signature &sig = call.sig;
	Datum *values = call.values;
	char *nulls = call.nulls;
	for (int arg : split) {
		if (arg >= sig.nargs || fcinfo->args[arg].isnull)
			continue;
		Datum array = fcinfo->args[arg].value;
		std::size_t count = members.size();
		values[arg] = pg::guard([&] {
			ArrayType *at = DatumGetArrayTypeP(array);
			Oid elemtype = ARR_ELEMTYPE(at);
			int16 len = 0;
			bool byval = false;
			char align = 0;
			get_typlenbyvalalign(elemtype, &len, &byval, &align);
			Datum *elems = nullptr;
			bool *elem_nulls = nullptr;
			int n = 0;
			deconstruct_array(at, elemtype, len, byval, align, &elems, &elem_nulls, &n);
			Datum *picked = static_cast<Datum *>(palloc(sizeof(Datum) * (count + 1)));
			bool *picked_nulls = static_cast<bool *>(palloc(sizeof(bool) * (count + 1)));
			for (std::size_t i = 0; i < count; ++i) {
				int from = members[i];
				if (from < 0 || from >= n)
					elog(ERROR, "array argument %d has no element %d", arg + 1, from + 1);
				picked[i] = elems[from];
				picked_nulls[i] = elem_nulls[from];
			}
			int dims[1] = {static_cast<int>(count)};
			int lbs[1] = {1};
			return PointerGetDatum(
			    construct_md_array(picked, picked_nulls, 1, dims, lbs, elemtype, len, byval, align));
		});
	}
	return call_on_shard(whole, position, sig.function, sig.nargs, sig.types, values, nulls, set_returning,
	                     true);
}

void route_batch(FunctionCallInfo fcinfo, Queue &whole, const std::vector<int64> &ids,
                 std::initializer_list<int> split, bool set_returning, bool acks,
                 const std::function<void(uint64)> &each, int max_args) {
	const Shards &shards = distributed_shards(whole);
	std::map<int32, std::vector<int>> by_position; // shard order
	for (std::size_t i = 0; i < ids.size(); ++i) {
		int32 position = task_position(ids[i]);
		if (position >= shards.count) {
			if (acks)
				task_gone(whole.name(), ids[i]);
			continue;
		}
		by_position[position].push_back(static_cast<int>(i));
	}
	for (const auto &[position, members] : by_position)
		each(call_subset(fcinfo, whole, position, members, split, set_returning, max_args));
}

int64 route_batch_count(FunctionCallInfo fcinfo, Queue &whole, const std::vector<int64> &ids,
                        std::initializer_list<int> split, bool acks) {
	int64 total = 0;
	route_batch(fcinfo, whole, ids, split, false, acks, [&](uint64 n) {
		bool isnull = true;
		Datum count = n == 1 ? pg::column(0, 1, &isnull) : Datum(0);
		total += isnull ? 0 : DatumGetInt64(count);
	});
	return total;
}

namespace {

// The caller's scalar result from SPI_tuptable's first row, copied out of
// SPI's memory, after `n` rows; ends the caller's SPI connection.
Datum caller_result(FunctionCallInfo fcinfo, Oid rettype, uint64 n, bool set) {
	Datum result = Datum(0);
	bool result_null = true;
	if (!set && n == 1) {
		result = pg::column(0, 1, &result_null);
		if (!result_null) {
			int16 len = 0;
			bool byval = false;
			pg::guard([&] { get_typlenbyval(rettype, &len, &byval); });
			result = pg::guard([&] { return SPI_datumTransfer(result, byval, len); });
		}
	}
	pg::spi_finish();
	if (set || result_null) {
		fcinfo->isnull = !set;
		return Datum(0);
	}
	return result;
}

} // namespace

Datum route_call(FunctionCallInfo fcinfo, Queue &whole, int32 position, const pg::ResultSet *out,
                 int max_args, bool writes) {
	CallerCall call = caller_call(fcinfo, max_args);
	const Signature &sig = call.sig;
	Datum *values = call.values;
	char *nulls = call.nulls;
	uint64 n = call_on_shard(whole, position, sig.function, sig.nargs, sig.types, values, nulls,
	                         out != nullptr, writes);
	if (out)
		add_rows(*out, n);
	return caller_result(fcinfo, sig.rettype, n, out != nullptr);
}

namespace {

// The routed function `function` (its name without schema), qualified: in
// schema concurrency_internal, or in schema concurrency where the objects
// installed are still 0.2.0's (between a package update and ALTER EXTENSION
// … UPDATE). Looked up at each call (a syscache probe), so that an update
// made while this backend lives is seen at once.
std::string routed_function(const char *function) {
	Oid internal = pg::guard([] { return get_namespace_oid("concurrency_internal", true); });
	return fmt::format("{}.{}", OidIsValid(internal) ? "concurrency_internal" : "concurrency", function);
}

// Runs a routed statement `sql` (whose first "{}" stands for the qualified
// routed function `function`) with `nargs` arguments, prepared once per
// backend and schema. Returns the number of rows (in SPI_tuptable).
uint64 run_routed(const char *function, const char *sql, int nargs, const Oid *types, const Datum *values,
                  const char *nulls = nullptr) {
	std::string qualified = routed_function(function);
	std::string text = sql;
	text.replace(text.find("{}"), 2, qualified);
	SPIPlanPtr plan =
	    pg::prepared_plan(fmt::format("routed:{}", qualified).c_str(), text.c_str(), nargs, types);
	return pg::execute(plan, values, nulls, false);
}

// Runs the routed function `function` with the caller's first `max_args`
// arguments (all: -1); its rows go into `out` when given, else its one value
// is in SPI_tuptable. Returns the number of rows; *rettype is the caller's
// result type.
uint64 run_forwarded(FunctionCallInfo fcinfo, const char *function, const pg::ResultSet *out, int max_args,
                     Oid *rettype) {
	Oid fn = fcinfo->flinfo->fn_oid;
	if (routed_function(function).rfind("concurrency.", 0) != 0) {
		// 0.3.0's objects have no such function: the C++ serves every call
		// where it sees the queue's tables
		const char *caller = pg::guard([&] { return static_cast<const char *>(get_func_name(fn)); });
		const char *queue = fcinfo->args[0].isnull ? "" : pg::guard([&] {
			return static_cast<const char *>(TextDatumGetCString(fcinfo->args[0].value));
		});
		refuse_not_served_here(queue, caller ? caller : function);
	}
	Oid *argtypes = nullptr;
	int nargs = 0;
	*rettype = pg::guard([&] { return get_func_signature(fn, &argtypes, &nargs); });
	if (max_args >= 0 && nargs > max_args)
		nargs = max_args;
	std::string sql = out ? "SELECT * FROM {}(" : "SELECT {}(";
	for (int i = 0; i < nargs; ++i)
		sql += fmt::format("{}${}", i ? ", " : "", i + 1);
	sql += ")";
	Datum values[FUNC_MAX_ARGS];
	char nulls[FUNC_MAX_ARGS];
	for (int i = 0; i < nargs; ++i) {
		values[i] = fcinfo->args[i].value;
		nulls[i] = fcinfo->args[i].isnull ? 'n' : ' ';
	}
	uint64 n = run_routed(function, sql.c_str(), nargs, argtypes, values, nulls);
	if (out)
		add_rows(*out, n);
	return n;
}

} // namespace

namespace {

// One shard position on each other node that holds shards of the queue, in
// position order: where a call is made to reach that node.
std::vector<int32> other_nodes(const Shards &shards) {
	int32 here = citus::local_role().group;
	std::vector<int32> nodes;
	std::vector<int32> groups;
	for (int32 p = 0; p < shards.count; ++p) {
		int32 group = shards.groups[static_cast<std::size_t>(p)];
		if (group == here || shards.at(p) || std::find(groups.begin(), groups.end(), group) != groups.end())
			continue;
		groups.push_back(group);
		nodes.push_back(p);
	}
	return nodes;
}

} // namespace

int64 on_every_node(FunctionCallInfo fcinfo, Queue &whole, const std::function<int64(Queue &)> &local) {
	// a copy: an invalidation while a shard is opened may drop the cached list
	const Shards shards = distributed_shards(whole);
	int64 total = 0;
	for (const LocalShard &s : shards.local) {
		Queue shard(whole.name(), s);
		total += local(shard);
	}
	if (citus::in_routed_call())
		return total;
	CallerCall call = caller_call(fcinfo, -1);
	for (int32 position : other_nodes(shards)) {
		uint64 n = call_on_shard(whole, position, call.sig.function, call.sig.nargs, call.sig.types,
		                         call.values, call.nulls, false, true);
		bool isnull = true;
		Datum count = n == 1 ? pg::column(0, 1, &isnull) : Datum(0);
		total += isnull ? 0 : DatumGetInt64(count);
	}
	return total;
}

uint64 dequeue_elsewhere(FunctionCallInfo fcinfo, Queue &q, int32 batch, const pg::ResultSet &out) {
	std::vector<int32> nodes = other_nodes(distributed_shards(q));
	if (nodes.empty())
		return 0;
	// dequeue(queue, batch, lease, worker) there: it claims from that node's
	// shards and does not wait
	CallerCall call = caller_call(fcinfo, 4);
	const Signature &sig = call.sig;
	Datum *values = call.values;
	char *nulls = call.nulls;
	values[1] = Int32GetDatum(batch);
	uint32 start = next_cursor();
	for (std::size_t i = 0; i < nodes.size(); ++i) {
		int32 position = nodes[(start + i) % nodes.size()];
		uint64 n = call_on_shard(q, position, sig.function, sig.nargs, sig.types, values, nulls, true, true);
		if (n > 0) {
			add_rows(out, n);
			return n;
		}
	}
	return 0;
}

uint64 dequeue_routed(FunctionCallInfo fcinfo, const pg::ResultSet &out) {
	Oid rettype = InvalidOid;
	return run_forwarded(fcinfo, "distributed_dequeue", &out, 4, &rettype);
}

Datum forward_distributed(FunctionCallInfo fcinfo, const char *function, const pg::ResultSet *out,
                          int max_args) {
	Oid rettype = InvalidOid;
	uint64 n = run_forwarded(fcinfo, function, out, max_args, &rettype);
	return caller_result(fcinfo, rettype, n, out != nullptr);
}

void refuse_not_served_here(std::string_view queue, const char *what) {
	throw Error(sqlstate::feature_not_supported,
	            fmt::format("{} is not supported on distributed queue \"{}\" here", what, queue),
	            "The extension's objects are older than its module, or the other nodes do not see "
	            "every table of the queue yet (it was distributed in this transaction after a parallel "
	            "query on a distributed table, which leaves its shards on several connections per node).",
	            "Run ALTER EXTENSION concurrency_ext UPDATE, or use the queue once the transaction that "
	            "distributed it has committed.");
}

int32 parents_position(Queue &q, const std::vector<int64> &after) {
	const Shards &shards = distributed_shards(q);
	for (int64 id : after) {
		int32 p = task_position(id);
		if (id <= 0 || p >= shards.count)
			throw Error(
			    sqlstate::invalid_parameter_value,
			    fmt::format("parent task {} of queue \"{}\" does not exist", id, q.name()),
			    fmt::format("Its id names no shard of the distributed queue ({} shards).", shards.count));
	}
	return after.empty() ? 0 : task_position(after.front());
}

void refuse_graph_distributed(std::string_view queue) {
	throw Error(sqlstate::feature_not_supported,
	            fmt::format("a graph with tasks in distributed queue \"{}\" must have all its tasks and "
	                        "parents in that queue",
	                        queue),
	            "The edges of a distributed queue's tasks are kept in their rows, in its shards; an edge to "
	            "another queue would be a row of another table.",
	            "Enqueue the tasks of each queue with a graph of their own.");
}

void refuse_graph_shards(std::string_view queue) {
	throw Error(sqlstate::feature_not_supported,
	            fmt::format("the tasks of a graph on distributed queue \"{}\" must be in one shard", queue),
	            "A graph's tasks go to one shard (that of their keys, else of their first parent enqueued "
	            "before), and a key's tasks are all in the key's shard: the graph's concurrency keys are in "
	            "several shards.",
	            "Give the graph's tasks keys of one shard, or enqueue it as several graphs.");
}

void refuse_key_rate_distributed(std::string_view queue) {
	throw Error(
	    sqlstate::feature_not_supported,
	    fmt::format("key_rate_limit with rate_limit is not supported on distributed queue \"{}\"", queue),
	    "The claims of a distributed queue with rate_limit are made on the coordinator, those under "
	    "key_rate_limit on each key's shard.",
	    "Keep one of the two limits.");
}

void distribute_key_rate_slots(const std::string &queue) {
	static const Oid types[1] = {TEXTOID};
	Datum values[1] = {pg::text_datum(queue)};
	run_routed("distribute_key_rate_slots", "SELECT {}($1)", 1, types, values);
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

namespace {

// The lease slots of distributed queue `queue`, a table on the coordinator.
std::string slots_relation(std::string_view queue) {
	return "concurrency." + quote_ident(slot_table_name(queue));
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
			return shard.run_internal("keys_lock_all", shard.keys().lock_keys(), 0, nullptr, nullptr, nullptr,
			                          Access::owner);
		});
		shard.run_internal("keys_rebalance_to", shard.keys().rebalance(true), 2, types, values, nullptr,
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
