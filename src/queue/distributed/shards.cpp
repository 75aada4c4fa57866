// Distributed queues on Citus: which queues are distributed, and their shards
// as this node sees them (see queue/distributed/distributed.hpp).
#include "queue/distributed/distributed.hpp"
#include "queue/distributed/internal.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "citus/node.hpp"
#include "common/sql_text.hpp"
#include "pg/datum.hpp"
#include "pg/invalidation.hpp"
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

} // namespace

uint32 next_cursor() {
	if (!shard_cursor_set) {
		shard_cursor = static_cast<uint32>(std::random_device{}()) ^ static_cast<uint32>(MyProcPid);
		shard_cursor_set = true;
	}
	return shard_cursor++;
}
bool is_distributed(Oid relid) {
	if (citus::local_role().role == citus::Role::none)
		return false;
	remember();
	if (auto it = known->find(relid); it != known->end())
		return it->second;
	// the queue whose table it is (relation_names.hpp), if any
	std::optional<std::string> queue;
	const char *relname = pg::guard([&]() -> const char * {
		Oid nsp = get_namespace_oid("concurrency", true);
		return OidIsValid(nsp) && get_rel_namespace(relid) == nsp ? get_rel_name(relid) : nullptr;
	});
	if (relname && std::string_view(relname).substr(0, 2) == table_prefix(QueueTable::tasks))
		queue = queue_of_table(relname);
	bool distributed = false;
	if (queue) {
		static const Oid types[1] = {TEXTOID};
		Datum values[1] = {pg::text_datum(*queue)};
		SPIPlanPtr plan = pg::prepared_plan(
		    "distributed:is",
		    "SELECT FROM concurrency.distributed_queue WHERE queue OPERATOR(pg_catalog.=) $1", 1, types);
		distributed = pg::execute(plan, values, nullptr, true) > 0;
	}
	(*known)[relid] = distributed;
	return distributed;
}

const Shards &distributed_shards(Queue &q) {
	remember();
	Oid relid = q.info().relid;
	if (auto it = shard_maps->find(relid); it != shard_maps->end())
		return it->second;
	// the indexes each shard needs for the claim, as Citus names them on a
	// shard (shard_name: the index name with the shard id, shortened with a
	// hash where it would be too long)
	Oid ready = derived_relid(relid, QueueTable::tasks, q.name(), Role::ready);
	Oid scheduled = derived_relid(relid, QueueTable::tasks, q.name(), Role::scheduled);
	Oid leased = derived_relid(relid, QueueTable::tasks, q.name(), Role::leased);
	Oid finished = derived_relid(relid, QueueTable::tasks, q.name(), Role::finished);
	if (!OidIsValid(ready) || !OidIsValid(scheduled) || !OidIsValid(leased))
		throw Error(
		    sqlstate::undefined_object,
		    fmt::format("the indexes of distributed queue \"{}\" are missing on this node", q.name()));
	Oid keys = concurrency_relid(key_table_name(q.name()));
	Oid key_rates = concurrency_relid(key_rate_table_name(q.name()));
	static const Oid types[8] = {OIDOID, TEXTOID, OIDOID, OIDOID, OIDOID, OIDOID, OIDOID, OIDOID};
	Datum values[8] = {ObjectIdGetDatum(relid),     pg::text_datum(q.name()),  ObjectIdGetDatum(ready),
	                   ObjectIdGetDatum(scheduled), ObjectIdGetDatum(leased),  ObjectIdGetDatum(keys),
	                   ObjectIdGetDatum(key_rates), ObjectIdGetDatum(finished)};
	char shard_nulls[8] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', OidIsValid(finished) ? ' ' : 'n'};
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
	    "                ::pg_catalog.oid FROM rs WHERE rs.pos OPERATOR(pg_catalog.=) s.pos),"
	    "        pg_catalog.to_regclass(pg_catalog.shard_name($8::pg_catalog.regclass, s.shardid))"
	    "                ::pg_catalog.oid"
	    "   FROM s"
	    "   JOIN concurrency.distributed_queue d ON d.queue OPERATOR(pg_catalog.=) $2"
	    "  WHERE EXISTS (SELECT FROM pg_catalog.pg_dist_placement p"
	    "                 WHERE p.shardid OPERATOR(pg_catalog.=) s.shardid"
	    "                   AND p.groupid OPERATOR(pg_catalog.=) (SELECT groupid FROM "
	    "pg_catalog.pg_dist_local_group))"
	    "  ORDER BY s.pos",
	    8, types);
	Shards shards;
	uint64 n = pg::execute(plan, values, shard_nulls, true);
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
		shard.finished_index = oid_column(r, 12);
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

// Whether the objects installed are 0.3.0's (schema concurrency_internal):
// not 0.2.0's, between a package update and ALTER EXTENSION … UPDATE (looked
// up at each call, a syscache probe, so that an update made while this
// backend lives is seen at once).
bool objects_current() {
	return pg::guard([] { return OidIsValid(get_namespace_oid("concurrency_internal", true)); });
}
namespace {

// Whether distribute_queue made the shards of a queue in this transaction
// on several connections per node (40_citus.sql sets
// concurrency_ext.distributed_in_parallel for the transaction).
bool distributed_in_parallel() {
	const char *value =
	    pg::guard([] { return GetConfigOption("concurrency_ext.distributed_in_parallel", true, false); });
	return value && std::string_view(value) == "on";
}
} // namespace

bool shards_served_here(Queue &q, bool slots) {
	// (a call routed here was let through by the node that keeps the slots)
	if (slots && q.info().max_leased != 0 && !citus::in_routed_call() && !SlotsDecided::any())
		return false;
	if (q.info().key_limit != 0 && !distributed_shards(q).keys_everywhere)
		return false;
	// The objects installed copy the catalog of distributed queues to every
	// node: not 0.2.0's, whose worker nodes know no queue
	if (!objects_current())
		return false;
	// A queue distributed by the running transaction is served too: its
	// shards, Citus's metadata and the catalog copy are on the connection
	// this transaction uses for each node (40_citus.sql). Not
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

// Where this backend's claims of a queue start (claim_start): per queue
// table, the shard position whose tasks filled the last claim and until
// when claims stay there.
struct ClaimHome {
	int32 position;
	TimestampTz until;
};
std::unordered_map<Oid, ClaimHome> *claim_homes = nullptr;

// How long a backend's claims stay on one shard while it fills them, at most:
// then they move on to the next, so that every shard is a first one now and
// then (its purges) and a shard that producers keep filling holds no
// backend for good.
constexpr TimestampTz claim_stay_us = 1'000'000;

} // namespace

const LocalShard *claim_start(Queue &whole, const Shards &shards, TimestampTz now) {
	if (!claim_homes)
		claim_homes = new std::unordered_map<Oid, ClaimHome>();
	if (!citus::in_routed_call())
		if (auto it = claim_homes->find(whole.info().relid); it != claim_homes->end()) {
			if (now < it->second.until)
				if (const LocalShard *home = shards.at(it->second.position))
					return home;
			claim_homes->erase(it);
		}
	return next_local_shard(shards);
}

void claim_ended(Queue &whole, int32 position, bool full, TimestampTz now) {
	if (!claim_homes || citus::in_routed_call())
		return;
	Oid relid = whole.info().relid;
	auto it = claim_homes->find(relid);
	if (!full) {
		if (it != claim_homes->end())
			claim_homes->erase(it);
	} else if (it == claim_homes->end() || it->second.position != position) {
		(*claim_homes)[relid] = ClaimHome{position, now + claim_stay_us};
	}
}

} // namespace concurrency::queue
