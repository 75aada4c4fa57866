// An open queue (queue.hpp: Queue): its statements, prepared once per
// backend and run as its owner or the caller, the probes of its indexes
// without the executor (due tasks, purgeable ones), purge, and what it
// tells waiters and listeners. What a backend remembers about each queue
// between calls is queue_cache.cpp's.
#include <optional>
#include <string>

#include <fmt/format.h>

#include "citus/node.hpp"
#include "common/sql_text.hpp"
#include "pg/relation.hpp"
#include "queue/distribution.hpp"
#include "queue/queue.hpp"

extern "C" {
#include "access/genam.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "executor/tuptable.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "utils/acl.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
}

namespace concurrency::queue {

namespace {

// The OID of index `role` of the queue's table (42704 when it is missing: the
// table was changed by hand).
Oid index_relid(const QueueInfo &info, Role role) {
	Oid relid = derived_relid(info.relid, QueueTable::tasks, info.name, role);
	if (!OidIsValid(relid)) {
		std::string index = derived_name(QueueTable::tasks, info.name, role);
		throw Error(sqlstate::undefined_object,
		            fmt::format("index concurrency.{} does not exist", quote_ident(index)),
		            fmt::format("Queue \"{}\" needs it to find due tasks.", info.name),
		            "Drop the queue and create it again, or re-create the index as create_queue does.");
	}
	return relid;
}

// Whether `index` (on one timestamptz column: run_at, lease_expires_at,
// finished_at) has an entry between `floor` (if any) and `now` whose row
// `snapshot` sees. Runs inside pg::guard.
bool due_entry(Relation heap, Oid index, Snapshot snapshot, std::optional<TimestampTz> floor,
               TimestampTz now) {
	Relation irel = index_open(index, AccessShareLock);
	ScanKeyData keys[2];
	int nkeys = 0;
	if (floor)
		ScanKeyInit(&keys[nkeys++], 1, BTGreaterEqualStrategyNumber, F_TIMESTAMPTZ_GE,
		            TimestampTzGetDatum(*floor));
	ScanKeyInit(&keys[nkeys++], 1, BTLessEqualStrategyNumber, F_TIMESTAMPTZ_LE, TimestampTzGetDatum(now));
	IndexScanDesc scan = pg::begin_index_scan(heap, irel, snapshot, nkeys);
	index_rescan(scan, keys, nkeys, nullptr, 0);
	TupleTableSlot *slot = table_slot_create(heap, nullptr);
	bool found = index_getnext_slot(scan, ForwardScanDirection, slot);
	ExecDropSingleTupleTableSlot(slot);
	index_endscan(scan);
	index_close(irel, NoLock);
	return found;
}

// Whether the queue may hold a task for purge to remove: its finished index
// has an entry at or before `cutoff` whose row this statement's snapshot
// sees. Where it cannot tell (a shard, whose index is not looked up; the
// index missing; the queue changed meanwhile), the purge statement decides.
// A queue without retention deletes its tasks as they finish, and one with
// retention keeps them for hours or days: most purges would find nothing,
// and the probe spares them the statement (in a new session, its planning).
bool may_purge(QueueInfo &info, TimestampTz cutoff) {
	// a shard's index comes with the shard (queue/distributed/shards.cpp)
	if (info.shard_id != 0 && !OidIsValid(info.finished_index))
		return true;
	if (!OidIsValid(info.finished_index)) {
		info.finished_index = derived_relid(info.relid, QueueTable::tasks, info.name, Role::finished);
		if (!OidIsValid(info.finished_index))
			return true;
	}
	return pg::guard([&] {
		Relation heap = try_table_open(info.relid, AccessShareLock);
		if (!heap)
			return true; // dropped since: the statement says so
		bool found = true;
		if (info.valid) { // (else changed meanwhile: the index OID may be stale)
			Snapshot snapshot =
			    RegisterSnapshot(ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot());
			found = due_entry(heap, info.finished_index, snapshot, std::nullopt, cutoff);
			UnregisterSnapshot(snapshot);
		}
		table_close(heap, NoLock);
		return found;
	});
}

} // namespace

TimestampTz clock_now() {
	return pg::guard([] { return GetCurrentTimestamp(); });
}

const QueueSql &Queue::sql() const {
	if (!sql_) {
		if (on_shard())
			sql_.emplace(name(), placement());
		else
			sql_.emplace(name());
		sql_->set_links(info_->links);
	}
	return *sql_;
}

ShardPlacement Queue::placement() const {
	return ShardPlacement{info_->shard_relname, info_->shard_key,   info_->shard_position,
	                      info_->shard_group,   info_->key_relname, info_->key_rate_relname};
}

ShardPlacement Queue::side_table_placement(const char *relname, std::string_view what) const {
	if (relname[0] == '\0')
		throw Error(
		    sqlstate::undefined_object,
		    fmt::format("{} of shard {} of queue \"{}\" is not on this node", what, info_->shard_id, name()));
	return placement();
}

uint64 Queue::execute(SPIPlanPtr plan, const Datum *values, const char *nulls) {
	try {
		return pg::execute(plan, values, nulls, false);
	} catch (const pg::PgException &e) {
		// the queue was dropped after we looked it up (its table is gone; a
		// missing table that a trigger of the user's names is their error)
		if (e.sqlerrcode() == ERRCODE_UNDEFINED_TABLE && !on_shard() && !OidIsValid(queue_relid(name())))
			throw Error(sqlstate::undefined_object, fmt::format("queue \"{}\" does not exist", name()),
			            "It was dropped while this call was running.");
		throw;
	}
}

uint64 Queue::run(QueueStatement s, int nargs, const Oid *types, const Datum *values, const char *nulls) {
	SPIPlanPtr &plan = info_->plans[static_cast<int>(s)];
	if (!plan) {
		// One generic plan per statement, planned once: the statements are
		// written so that it is the right one (index scans whatever the values).
		std::string text = sql().text(s);
		SPIPlanPtr fresh = pg::guard([&] {
			return SPI_prepare_cursor(text.c_str(), nargs, const_cast<Oid *>(types), CURSOR_OPT_GENERIC_PLAN);
		});
		if (!fresh)
			throw Error(sqlstate::internal_error,
			            fmt::format("SPI_prepare failed: {}", SPI_result_code_string(SPI_result)), text);
		pg::guard([&] { SPI_keepplan(fresh); });
		plan = fresh;
	}
	return execute(plan, values, nulls);
}

uint64 Queue::run(const char *op, const std::string &sql, int nargs, const Oid *types, const Datum *values,
                  const char *nulls) {
	return run_internal(op, sql, nargs, types, values, nulls, Access::caller);
}

uint64 Queue::run_internal(const char *op, const std::string &sql, int nargs, const Oid *types,
                           const Datum *values, const char *nulls, Access access) {
	std::string key = plan_prefix(info_->key) + op;
	SPIPlanPtr plan = pg::prepared_plan(key.c_str(), sql.c_str(), nargs, types, CURSOR_OPT_GENERIC_PLAN);
	bool latest = access == Access::latest || access == Access::owner_latest;
	bool as_owner = access == Access::owner || access == Access::owner_latest;
	if (!latest && !as_owner)
		return execute(plan, values, nulls);
	// the side tables are the queue's internals: reached as its owner; the
	// caller's privileges were checked on the queue's table already
	return run_plan_as(plan, values, nulls, as_owner ? info_->owner : InvalidOid, latest);
}

uint64 run_plan_as(SPIPlanPtr plan, const Datum *values, const char *nulls, Oid role, bool latest) {
	Oid saved_user = InvalidOid;
	int saved_context = 0;
	if (OidIsValid(role)) {
		// with SECURITY_LOCAL_USERID_CHANGE: no SET ROLE meanwhile
		GetUserIdAndSecContext(&saved_user, &saved_context);
		SetUserIdAndSecContext(role, saved_context | SECURITY_LOCAL_USERID_CHANGE);
	}
	try {
		uint64 n = 0;
		if (latest) {
			int rc = pg::guard([&] {
				return SPI_execute_snapshot(plan, const_cast<Datum *>(values), nulls, GetLatestSnapshot(),
				                            InvalidSnapshot, false, true, 0);
			});
			if (rc < 0)
				throw Error(sqlstate::internal_error,
				            fmt::format("SPI_execute_snapshot failed: {}", SPI_result_code_string(rc)));
			n = SPI_processed;
		} else {
			n = pg::execute(plan, values, nulls, false);
		}
		if (OidIsValid(role))
			SetUserIdAndSecContext(saved_user, saved_context);
		return n;
	} catch (...) {
		if (OidIsValid(role))
			SetUserIdAndSecContext(saved_user, saved_context);
		throw;
	}
}

namespace {
const char *const lease_lost_hint = "Roll back the work done under this lease: the task is no longer yours.";
}

void task_gone(std::string_view queue, int64 task_id) {
	throw Error(sqlstate::lease_lost, fmt::format("task {} of queue \"{}\" does not exist", task_id, queue),
	            "It was completed already, or it never existed.", lease_lost_hint);
}

void Queue::lease_lost(int64 task_id) {
	static const Oid types[1] = {INT8OID};
	Datum values[1] = {Int64GetDatum(task_id)};
	const char *hint = lease_lost_hint;
	if (run(QueueStatement::inspect, 1, types, values) == 0)
		task_gone(name(), task_id);
	bool isnull = false;
	std::string state = pg::guard([&] { return TextDatumGetCString(column(0, 1, &isnull)); });
	int32 attempt = DatumGetInt32(column(0, 2, &isnull));
	Datum worker_datum = column(0, 3, &isnull);
	std::string worker = isnull ? "" : pg::guard([&] { return TextDatumGetCString(worker_datum); });
	bool held = DatumGetBool(column(0, 4, &isnull));
	Datum finished_datum = column(0, 5, &isnull);
	std::string finished = isnull ? "" : pg::guard([&] { return TextDatumGetCString(finished_datum); });
	std::string detail;
	if (state == "cancelled")
		detail = fmt::format("The task was cancelled at {}.", finished);
	else if (state == "done")
		detail = fmt::format("The task was completed at {}.", finished);
	// The token given may be of an earlier lease of this task, of another task,
	// or never issued at all: say only what is known.
	else if (held)
		detail =
		    fmt::format("The lease token does not match the task's current lease: it is {} at attempt {}{}.",
		                state, attempt, worker.empty() ? "" : fmt::format(", worker \"{}\"", worker));
	else
		detail = fmt::format("The task has no lease now: it is {} at attempt {}.", state, attempt);
	throw Error(sqlstate::lease_lost,
	            fmt::format("lease on task {} of queue \"{}\" was lost", task_id, name()), detail, hint);
}

bool Queue::tasks_wait(TimestampTz now, TimestampTz floor) {
	QueueInfo &info = *info_;
	if (!OidIsValid(info.scheduled_index) || !OidIsValid(info.leased_index)) {
		if (info.shard_id != 0)
			throw Error(
			    sqlstate::undefined_object,
			    fmt::format("the indexes of shard {} of queue \"{}\" are missing", info.shard_id, name()));
		if (!OidIsValid(queue_relid(info.name)))
			throw Error(sqlstate::undefined_object, fmt::format("queue \"{}\" does not exist", name()),
			            "It was dropped while this call was running.");
		info.scheduled_index = index_relid(info, Role::scheduled);
		info.leased_index = index_relid(info, Role::leased);
	}
	enum class Due { none, waiting, gone };
	Due due = pg::guard([&] {
		Relation heap = try_table_open(info.relid, AccessShareLock);
		if (!heap)
			return Due::gone; // dropped since this call looked the queue up
		if (!info.valid) {
			// changed meanwhile (the lock let its invalidation in): the index
			// OIDs may be stale; the claim's own statements see the change
			table_close(heap, NoLock);
			return Due::waiting;
		}
		Snapshot snapshot =
		    RegisterSnapshot(ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot());
		bool found = due_entry(heap, info.scheduled_index, snapshot, floor, now) ||
		             due_entry(heap, info.leased_index, snapshot, floor, now);
		UnregisterSnapshot(snapshot);
		table_close(heap, NoLock);
		return found ? Due::waiting : Due::none;
	});
	if (due == Due::gone)
		throw Error(sqlstate::undefined_object, fmt::format("queue \"{}\" does not exist", name()),
		            "It was dropped while this call was running.");
	return due == Due::waiting;
}

uint64 Queue::purge(TimestampTz now, int32 chunk, bool asked) {
	// finished before the cutoff: purge; without retention, every finished
	// task kept at all (completed with a result, cancelled, a parent done)
	// once concurrency.result_retention has passed, or every one when asked
	TimestampTz cutoff = asked ? now : now - static_cast<TimestampTz>(result_retention_s) * USECS_PER_SEC;
	if (info_->has_retain) {
		Interval retain = info_->retain;
		// cannot overflow: create_queue and alter_queue refuse more than 100 years
		cutoff = pg::guard([&] {
			return DatumGetTimestampTz(DirectFunctionCall2(timestamptz_mi_interval, TimestampTzGetDatum(now),
			                                               IntervalPGetDatum(&retain)));
		});
	}
	if (!may_purge(*info_, cutoff))
		return 0;
	static const Oid types[3] = {TIMESTAMPTZOID, TIMESTAMPTZOID, INT4OID};
	Datum values[3] = {TimestampTzGetDatum(cutoff), TimestampTzGetDatum(now), Int32GetDatum(chunk)};
	return run(QueueStatement::purge, 3, types, values);
}

} // namespace concurrency::queue
