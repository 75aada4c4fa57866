// SQL-callable functions of the lock diagnostics: the raw edges and the tree
// behind the views concurrency.lock_waits and concurrency.lock_tree (which add
// pg_stat_activity's columns, with its visibility rules), and
// concurrency.locked_object(pg_locks).
#include <cstdint>
#include <string>
#include <vector>

#include "diagnostics/wait_graph.hpp"
#include "diagnostics/lock_describe.hpp"
#include "diagnostics/lock_snapshot.hpp"
#include "pg/datum.hpp"
#include "pg/srf.hpp"

extern "C" {
#include "access/htup_details.h"
#include "access/tupdesc.h"
#include "catalog/pg_type.h"
#include "executor/executor.h"
#include "storage/lmgr.h"
#include "utils/array.h"
#include "utils/timestamp.h"
}

namespace concurrency::diagnostics {

namespace {

const char *mode_name(const LOCKTAG &tag, int mode) {
	return pg::guard([&] { return GetLockmodeName(tag.locktag_lockmethodid, mode); });
}

const char *locktype_name(const LOCKTAG &tag) {
	return lock_type_name(tag.locktag_type);
}

Datum int4_array(const std::vector<Datum> &elements) {
	return pg::guard([&] {
		return PointerGetDatum(construct_array(const_cast<Datum *>(elements.data()), static_cast<int>(elements.size()),
		                                       INT4OID, sizeof(int32), true, TYPALIGN_INT));
	});
}

} // namespace

} // namespace concurrency::diagnostics

using namespace concurrency;
using namespace concurrency::diagnostics;

// concurrency.lock_wait_edges() — one row per edge "waiting session -> session
// in its way", from one snapshot of the lock manager.
CONCURRENCY_FUNCTION(concurrency_lock_wait_edges) {
	pg::ResultSet out = pg::materialize(fcinfo);
	WaitPicture picture = take_wait_picture();

	LockDescriber describer;
	std::vector<std::string> objects(picture.locks.size());
	std::vector<bool> described(picture.locks.size(), false);
	for (const auto &e : picture.edges)
		if (!described[e.lock]) {
			objects[e.lock] = describer.describe(picture.locks[e.lock]);
			described[e.lock] = true;
		}

	int32 ord = 0;
	for (const auto &e : picture.edges) {
		const Session &waiter = picture.sessions[e.waiter];
		const Session &blocker = picture.sessions[e.blocker];
		const LOCKTAG &tag = picture.locks[e.lock];
		const char *waiting_mode = mode_name(tag, e.waiting_mode);
		const char *blocking_mode = mode_name(tag, e.hard ? strongest_mode(e.conflicting_held)
		                                                  : e.blocker_wait_mode);
		const char *lock_type = locktype_name(tag);
		++ord;
		Datum values[12];
		bool nulls[12] = {};
		values[0] = TimestampTzGetDatum(picture.taken_at);
		values[1] = Int32GetDatum(ord);
		values[2] = Int32GetDatum(waiter.pid);
		values[3] = pg::text_datum(waiting_mode);
		values[4] = pg::text_datum(lock_type);
		values[5] = pg::text_datum(objects[e.lock]);
		values[6] = TimestampTzGetDatum(waiter.waiting_since);
		nulls[6] = waiter.waiting_since == 0;
		values[7] = Int32GetDatum(blocker.pid);
		values[8] = TransactionIdGetDatum(blocker.xid);
		nulls[8] = !blocker.prepared();
		values[9] = pg::text_datum(blocking_mode);
		values[10] = BoolGetDatum(e.hard);
		values[11] = BoolGetDatum(blocker.waiting);
		pg::add_row(out, values, nulls);
	}
	return (Datum)0;
}

// concurrency.lock_tree_nodes() — every session in a wait chain, placed in the
// tree of its root blocker, from one snapshot of the lock manager.
CONCURRENCY_FUNCTION(concurrency_lock_tree_nodes) {
	pg::ResultSet out = pg::materialize(fcinfo);
	WaitPicture picture = take_wait_picture();

	// graph nodes: the sessions that have an edge, in session (pid) order
	std::vector<uint32_t> node_of(picture.sessions.size(), none);
	for (const auto &e : picture.edges)
		node_of[e.waiter] = node_of[e.blocker] = 0;
	std::vector<uint32_t> session_of;
	for (uint32_t s = 0; s < picture.sessions.size(); ++s)
		if (node_of[s] != none) {
			node_of[s] = static_cast<uint32_t>(session_of.size());
			session_of.push_back(s);
		}
	std::vector<std::pair<uint32_t, uint32_t>> pairs;
	pairs.reserve(picture.edges.size());
	for (const auto &e : picture.edges)
		pairs.emplace_back(node_of[e.waiter], node_of[e.blocker]);
	WaitGraph graph(session_of.size(), pairs);
	std::vector<bool> queue_only = blocks_only_by_queue(picture.sessions.size(), picture.edges);

	auto pid_of = [&](uint32_t node) { return picture.sessions[session_of[node]].pid; };
	std::vector<Datum> path, blocked_by;
	int32 ord = 0;
	for (uint32_t v : graph.tree_order()) {
		const Session &session = picture.sessions[session_of[v]];
		const auto &node = graph.node(v);
		path.clear();
		for (uint32_t u : graph.path(v))
			path.push_back(Int32GetDatum(pid_of(u)));
		blocked_by.clear();
		for (uint32_t u : graph.blocked_by(v))
			blocked_by.push_back(Int32GetDatum(pid_of(u)));
		Datum path_array = int4_array(path);
		Datum blocked_by_array = int4_array(blocked_by);
		++ord;
		Datum values[13];
		bool nulls[13] = {};
		values[0] = TimestampTzGetDatum(picture.taken_at);
		values[1] = Int32GetDatum(ord);
		values[2] = Int32GetDatum(session.pid);
		values[3] = TransactionIdGetDatum(session.xid);
		nulls[3] = !session.prepared();
		values[4] = Int32GetDatum(pid_of(node.root));
		values[5] = Int32GetDatum(static_cast<int32>(node.depth));
		values[6] = path_array;
		values[7] = blocked_by_array;
		values[8] = Int32GetDatum(static_cast<int32>(node.blocks_direct));
		values[9] = Int32GetDatum(static_cast<int32>(node.blocks_total));
		values[10] = BoolGetDatum(node.in_cycle);
		values[11] = TimestampTzGetDatum(session.waiting_since);
		nulls[11] = !session.waiting || session.waiting_since == 0;
		values[12] = BoolGetDatum(queue_only[session_of[v]]);
		pg::add_row(out, values, nulls);
	}
	return (Datum)0;
}

// concurrency.locked_object(pg_locks) — what a pg_locks row locks, in words.
CONCURRENCY_FUNCTION(concurrency_locked_object) {
	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	PgLocksRow row = pg::guard([&] {
		HeapTupleHeader tuple = PG_GETARG_HEAPTUPLEHEADER(0);
		PgLocksRow r;
		bool isnull = false;
		auto get = [&](const char *column) { return GetAttributeByName(tuple, column, &isnull); };
		Datum d = get("locktype");
		r.locktype = isnull ? nullptr : TextDatumGetCString(d);
		r.database = DatumGetObjectId(get("database"));
		r.relation = DatumGetObjectId(get("relation"));
		r.page = static_cast<uint32>(DatumGetInt32(get("page")));
		r.tuple = static_cast<uint16>(DatumGetInt16(get("tuple")));
		d = get("virtualxid");
		r.virtualxid = isnull ? nullptr : TextDatumGetCString(d);
		r.transactionid = DatumGetTransactionId(get("transactionid"));
		r.classid = DatumGetObjectId(get("classid"));
		r.objid = DatumGetObjectId(get("objid"));
		r.objsubid = static_cast<uint16>(DatumGetInt16(get("objsubid")));
		return r;
	});
	LOCKTAG tag;
	if (!locktag_from_pg_locks(row, &tag))
		PG_RETURN_NULL();
	LockDescriber describer;
	return pg::text_datum(describer.describe(tag));
}
