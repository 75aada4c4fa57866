// Durable workflows (docs/workflows.md, src/sql/80_queue_workflows.sql): steps kept
// in the task's row under its lease (record_step, step_result, task_steps),
// a task parked until an event (await_event) and the event that wakes it
// (emit_event), and a caller waiting for a task's end (await_task). Durable
// sleep is release(…, run_at) under another name (sleep.cpp).
//
// Everything a workflow keeps is in the task's row (steps, awaiting) or in
// the extension's event tables: it survives crashes and restarts as the task
// does, goes when the task goes, and pg_dump keeps it.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "pg/srf.hpp"
#include "queue/distribution.hpp"
#include "queue/permissions.hpp"
#include "queue/queue.hpp"
#include "citus/node.hpp"
#include "queue/time/wait.hpp"
#include "queue/workflows/event_tasks.hpp"
#include "queue/workflows/workflow_sql.hpp"
#include "queue/workflows/workflows.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
}

using namespace concurrency;
using namespace concurrency::queue;

namespace concurrency::queue {

int event_retention_s = 7 * 86400;

void workflows_init() {
	DefineCustomIntVariable("concurrency.event_retention",
	                        "How long an emitted event is kept for later awaits.",
	                        "await_event takes an event emitted at most this long ago; older ones are "
	                        "forgotten by later emits.",
	                        &event_retention_s, 7 * 86400, 1, 10 * 365 * 86400, PGC_SIGHUP, GUC_UNIT_S,
	                        nullptr, nullptr, nullptr);
}

} // namespace concurrency::queue

namespace {

constexpr std::size_t max_name_bytes = 1000;

// A step or event name from argument n: 22004 for NULL, 22023 for '' or
// longer than max_name_bytes.
std::string name_arg(FunctionCallInfo fcinfo, int n, const char *what,
                     SourceLocation at = SourceLocation::current()) {
	std::string name = pg::text_arg(fcinfo, n, what, at);
	if (name.empty())
		throw Error(sqlstate::invalid_parameter_value, fmt::format("{} must not be empty", what), {}, {}, at);
	if (name.size() > max_name_bytes)
		throw Error(sqlstate::invalid_parameter_value, fmt::format("{} is too long", what),
		            fmt::format("It has {} bytes; at most {} are allowed.", name.size(), max_name_bytes), {},
		            at);
	return name;
}

// A read of task `task_id` (task_steps, await_task: `what`) that must be
// made on the node of the task's shard: its rows into `out` from there, or
// none for an id that names no shard (no such task). Nothing where the call
// is served here, with `shard` opened on this node's shard of the task.
std::optional<Datum> read_elsewhere(FunctionCallInfo fcinfo, Queue &whole, int64 task_id, const char *what,
                                    const pg::ResultSet &out, std::optional<Queue> &shard) {
	int32 position = 0;
	if (!task_elsewhere(whole, task_id, what, false, shard, position))
		return std::nullopt;
	if (position >= 0)
		return distribution().route_call(fcinfo, whole, position, &out, -1, false);
	pg::spi_finish();
	return Datum(0);
}

// Whether the event tables are Citus distributed tables (once a queue was
// distributed: src/sql/80_queue_workflows.sql).
bool events_distributed() {
	if (citus::local_role().role == citus::Role::none)
		return false;
	SPIPlanPtr plan = pg::prepared_plan(
	    "workflow:events_distributed",
	    "SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition WHERE logicalrelid OPERATOR(pg_catalog.=) "
	    "'concurrency.event'::pg_catalog.regclass)",
	    0, nullptr);
	pg::execute(plan, nullptr, nullptr, true);
	return pg::column_as<bool>(0, 1).value_or(false);
}

// A datum of the last SPI result, copied out of SPI's memory (to outlive
// SPI_finish).
Datum transferred(Datum d, bool isnull) {
	if (isnull)
		return Datum(0);
	return pg::guard([&] { return SPI_datumTransfer(d, false, -1); });
}

// The owner of the event tables (the extension's owner), who runs their
// statements.
Oid event_owner() {
	Oid relid = concurrency_relid("event");
	if (!OidIsValid(relid))
		throw Error(sqlstate::object_not_in_prerequisite_state,
		            "workflows need concurrency_ext 0.4.0's objects",
		            "The table concurrency.event does not exist in this database.",
		            "ALTER EXTENSION concurrency_ext UPDATE");
	return relation_owner(relid);
}

// Runs one statement on the event tables as their owner.
uint64 run_event_sql(const char *key, const char *sql, int nargs, const Oid *types, const Datum *values,
                     const char *nulls = nullptr) {
	SPIPlanPtr plan = pg::prepared_plan(key, sql, nargs, types);
	return run_plan_as(plan, values, nulls, event_owner(), false);
}

TimestampTz minus_seconds(TimestampTz t, int seconds) {
	return t - static_cast<TimestampTz>(seconds) * USECS_PER_SEC;
}

// The event's row locked (made when missing): whether it was emitted within
// the retention, and its payload then (copied out of SPI).
std::optional<Datum> locked_event(const std::string &event, TimestampTz now) {
	static const Oid types[2] = {TEXTOID, TIMESTAMPTZOID};
	Datum values[2] = {pg::text_datum(event), TimestampTzGetDatum(now)};
	run_event_sql("workflow:lock_event", workflow_sql::lock_event, 2, types, values);
	bool emitted_null = false, payload_null = false;
	Datum emitted = column(0, 2, &emitted_null);
	if (emitted_null || DatumGetTimestampTz(emitted) < minus_seconds(now, event_retention_s))
		return std::nullopt;
	Datum payload = column(0, 1, &payload_null);
	return payload_null ? pg::guard([] { return DirectFunctionCall1(jsonb_in, CStringGetDatum("null")); })
	                    : transferred(payload, false);
}

void add_two(pg::ResultSet &out, Datum a, bool a_null, Datum b, bool b_null) {
	Datum cols[2] = {a, b};
	bool nulls[2] = {a_null, b_null};
	pg::add_row(out, cols, nulls);
}

} // namespace

// concurrency.record_step(queue, task_id, lease_token, step, result): the
// step's result kept with the task, under its lease (CE001 when lost)
CONCURRENCY_FUNCTION(concurrency_record_step) {
	QueueName name = queue_name(fcinfo);
	int64 task_id = int64_arg(fcinfo, 1, "task_id");
	int64 token = int64_arg(fcinfo, 2, "lease_token");
	std::string step = name_arg(fcinfo, 3, "step");
	Datum result = arg_null(fcinfo, 4)
	                   ? pg::guard([] { return DirectFunctionCall1(jsonb_in, CStringGetDatum("null")); })
	                   : PG_GETARG_DATUM(4);
	check_payload_size(result, "result");
	TimestampTz now = clock_now();

	pg::spi_connect();
	Queue whole(name.view());
	AsRole as_owner = authorize(whole, Permission::work, "record_step");
	std::optional<SlotsDecided> decided; // Citus, max_leased: as heartbeat
	distribution().decide_lease_slots(whole, &task_id, 1, false, "record_step", decided);
	std::optional<Queue> shard; // Citus: the task's shard where it is on this node
	int32 position = 0;
	if (task_elsewhere(whole, task_id, "record_step", true, shard, position))
		return distribution().route_call(fcinfo, whole, position);
	Queue &q = shard ? *shard : whole;
	static const Oid types[5] = {INT8OID, INT8OID, TEXTOID, JSONBOID, TIMESTAMPTZOID};
	Datum values[5] = {Int64GetDatum(task_id), Int64GetDatum(token), pg::text_datum(step), result,
	                   TimestampTzGetDatum(now)};
	if (q.run("record_step", workflow_sql::record_step(q.sql()), 5, types, values) == 0)
		q.lease_lost(task_id);
	pg::spi_finish();
	PG_RETURN_VOID();
}

// concurrency.step_result(queue, task_id, lease_token, step) -> the recorded
// result (jsonb 'null' for a step recorded with none), or NULL
CONCURRENCY_FUNCTION(concurrency_step_result) {
	QueueName name = queue_name(fcinfo);
	int64 task_id = int64_arg(fcinfo, 1, "task_id");
	int64 token = int64_arg(fcinfo, 2, "lease_token");
	std::string step = name_arg(fcinfo, 3, "step");

	pg::spi_connect();
	Queue whole(name.view());
	AsRole as_owner = authorize(whole, Permission::work, "step_result");
	std::optional<SlotsDecided> decided; // Citus, max_leased: as heartbeat
	distribution().decide_lease_slots(whole, &task_id, 1, false, "step_result", decided);
	std::optional<Queue> shard; // Citus: the task's shard where it is on this node
	int32 position = 0;
	if (task_elsewhere(whole, task_id, "step_result", true, shard, position))
		return distribution().route_call(fcinfo, whole, position, nullptr, -1, false);
	Queue &q = shard ? *shard : whole;
	static const Oid types[3] = {INT8OID, INT8OID, TEXTOID};
	Datum values[3] = {Int64GetDatum(task_id), Int64GetDatum(token), pg::text_datum(step)};
	if (q.run("step_result", workflow_sql::step_result(q.sql()), 3, types, values) == 0)
		q.lease_lost(task_id);
	bool isnull = false;
	Datum d = column(0, 1, &isnull);
	Datum result = transferred(d, isnull);
	pg::spi_finish();
	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(result);
}

// concurrency.task_steps(queue, task_id) -> (step, result, recorded_at), in
// the order recorded
CONCURRENCY_FUNCTION(concurrency_task_steps) {
	QueueName name = queue_name(fcinfo);
	int64 task_id = int64_arg(fcinfo, 1, "task_id");
	pg::ResultSet out = pg::materialize(fcinfo);
	pg::spi_connect();
	Queue whole(name.view());
	AsRole as_owner = authorize(whole, Permission::read, "task_steps");
	std::optional<Queue> shard; // Citus: the task's shard where it is on this node
	if (std::optional<Datum> routed = read_elsewhere(fcinfo, whole, task_id, "task_steps", out, shard))
		return *routed;
	Queue &q = shard ? *shard : whole;
	static const Oid types[1] = {INT8OID};
	Datum values[1] = {Int64GetDatum(task_id)};
	uint64 n = q.run("task_steps", workflow_sql::task_steps(q.sql()), 1, types, values);
	for (uint64 i = 0; i < n; ++i) {
		Datum cols[3];
		bool nulls[3];
		for (int c = 0; c < 3; ++c)
			cols[c] = column(i, c + 1, &nulls[c]);
		pg::add_row(out, cols, nulls);
	}
	pg::spi_finish();
	return Datum(0);
}

// concurrency.await_event(queue, task_id, lease_token, event, timeout) ->
// (status, payload): 'received' with the event's payload (emitted before, or
// while the task waited: recorded as step 'event:<event>'), 'waiting' (the
// task is parked: no lease, no attempt spent, claimable again when the event
// is emitted or the timeout passes), or 'timed_out' (the task was claimed
// again after its timeout, without the event).
CONCURRENCY_FUNCTION(concurrency_await_event) {
	QueueName name = queue_name(fcinfo);
	int64 task_id = int64_arg(fcinfo, 1, "task_id");
	int64 token = int64_arg(fcinfo, 2, "lease_token");
	std::string event = name_arg(fcinfo, 3, "event");
	std::optional<Interval> timeout;
	if (!arg_null(fcinfo, 4))
		timeout = positive_interval_arg(fcinfo, 4, "timeout");
	TimestampTz now = clock_now();
	std::string step = workflow_sql::event_step(event);

	pg::ResultSet out = pg::materialize(fcinfo);
	pg::spi_connect();
	Queue q(name.view());
	AsRole as_owner = authorize(q, Permission::work, "await_event");
	std::optional<SlotsDecided> decided; // Citus, max_leased: as heartbeat
	distribution().decide_lease_slots(q, &task_id, 1, false, "await_event", decided);
	// The task's part is on its row (on a distributed queue, on its shard's
	// node: event_tasks.hpp), the event's on the event tables (distributed
	// by the event's name on Citus), both in this transaction.
	// Taken already, or timed out (an earlier await of this run or of an
	// earlier one): the same answer again.
	EventTaskState task = event_task(q, task_id, token, event, EventTaskOp::look, Datum(0), now);
	if (task.timed_out) {
		add_two(out, pg::text_datum("timed_out"), false, Datum(0), true);
		pg::spi_finish();
		return Datum(0);
	}
	if (task.taken) {
		Datum payload = transferred(*task.taken, false);
		add_two(out, pg::text_datum("received"), false, payload, false);
		pg::spi_finish();
		return Datum(0);
	}
	// the event's row locked: an emit of it waits for this transaction, or
	// this call for the emit's
	std::optional<Datum> emitted = locked_event(event, now);
	static const Oid wait_types[3] = {TEXTOID, TEXTOID, INT8OID};
	Datum wait_args[3] = {pg::text_datum(event), pg::text_datum(q.name()), Int64GetDatum(task_id)};
	bool was_parked = task.awaiting == event;
	if (emitted) {
		(void)event_task(q, task_id, token, event, EventTaskOp::receive, *emitted, now);
		if (was_parked)
			run_event_sql("workflow:drop_wait", workflow_sql::drop_wait, 3, wait_types, wait_args);
		add_two(out, pg::text_datum("received"), false, *emitted, false);
		pg::spi_finish();
		return Datum(0);
	}
	if (was_parked) {
		// parked for it before, and claimed again after the timeout: kept
		// as the event's step, so that later runs time out at once
		(void)event_task(q, task_id, token, event, EventTaskOp::time_out, Datum(0), now);
		run_event_sql("workflow:drop_wait", workflow_sql::drop_wait, 3, wait_types, wait_args);
		add_two(out, pg::text_datum("timed_out"), false, Datum(0), true);
		pg::spi_finish();
		return Datum(0);
	}
	TimestampTz until = DT_NOEND;
	if (timeout) {
		Interval t = *timeout;
		until = pg::guard([&] {
			return DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval, TimestampTzGetDatum(now),
			                                               IntervalPGetDatum(&t)));
		});
	}
	(void)event_task(q, task_id, token, event, EventTaskOp::park, Datum(0), until);
	static const Oid add_types[4] = {TEXTOID, TEXTOID, INT8OID, TIMESTAMPTZOID};
	Datum add_args[4] = {wait_args[0], wait_args[1], wait_args[2], TimestampTzGetDatum(now)};
	run_event_sql("workflow:add_wait", workflow_sql::add_wait, 4, add_types, add_args);
	add_two(out, pg::text_datum("waiting"), false, Datum(0), true);
	pg::spi_finish();
	return Datum(0);
}

// concurrency.emit_event(event, payload) -> how many parked tasks it woke.
// The event is kept (concurrency.event_retention) for later awaits; emitting
// it again replaces its payload for them.
CONCURRENCY_FUNCTION(concurrency_emit_event) {
	std::string event = name_arg(fcinfo, 0, "event");
	Datum payload = arg_null(fcinfo, 1)
	                    ? pg::guard([] { return DirectFunctionCall1(jsonb_in, CStringGetDatum("null")); })
	                    : PG_GETARG_DATUM(1);
	check_payload_size(payload, "payload");
	TimestampTz now = clock_now();

	pg::spi_connect();
	(void)locked_event(event, now); // an await of it in progress finishes first
	{
		static const Oid types[3] = {TEXTOID, JSONBOID, TIMESTAMPTZOID};
		Datum values[3] = {pg::text_datum(event), payload, TimestampTzGetDatum(now)};
		run_event_sql("workflow:emit", workflow_sql::emit, 3, types, values);
	}
	static const Oid one_text[1] = {TEXTOID};
	Datum event_arg[1] = {pg::text_datum(event)};
	uint64 n = run_event_sql("workflow:waiting_tasks", workflow_sql::waiting_tasks, 1, one_text, event_arg);
	std::vector<std::pair<std::string, int64>> tasks;
	for (uint64 i = 0; i < n; ++i)
		tasks.emplace_back(pg::text_column(i, 1).value_or(""), int64_column(i, 2));
	// each task on its queue's table, or on its shard's node; a wait stays
	// where this node does not know the queue (on Citus, a queue of another
	// node alone: an emit made there delivers it)
	int64 woken = 0;
	std::vector<std::pair<std::string, int64>> kept;
	for (const auto &[queue_name, task_id] : tasks) {
		bool known = false;
		if (deliver_event(queue_name, task_id, event, payload, now, &known))
			++woken;
		if (!known && citus::local_role().role != citus::Role::none)
			kept.emplace_back(queue_name, task_id);
	}
	if (!tasks.empty())
		run_event_sql("workflow:forget_waits", workflow_sql::forget_waits, 1, one_text, event_arg);
	for (const auto &[queue_name, task_id] : kept) {
		static const Oid add_types[4] = {TEXTOID, TEXTOID, INT8OID, TIMESTAMPTZOID};
		Datum add_args[4] = {event_arg[0], pg::text_datum(queue_name), Int64GetDatum(task_id),
		                     TimestampTzGetDatum(now)};
		run_event_sql("workflow:add_wait", workflow_sql::add_wait, 4, add_types, add_args);
	}
	if (events_distributed()) {
		// on the node of the event's shard, that shard's old events
		static const Oid types[2] = {TEXTOID, TIMESTAMPTZOID};
		Datum values[2] = {event_arg[0], TimestampTzGetDatum(minus_seconds(now, event_retention_s))};
		run_event_sql("workflow:forget_events_on_shard", workflow_sql::forget_events_on_shard, 2, types,
		              values);
	} else {
		static const Oid types[1] = {TIMESTAMPTZOID};
		Datum values[1] = {TimestampTzGetDatum(minus_seconds(now, event_retention_s))};
		run_event_sql("workflow:forget_old_events", workflow_sql::forget_old_events, 1, types, values);
	}
	pg::spi_finish();
	PG_RETURN_INT64(woken);
}

// concurrency.await_task(queue, task_id, wait) -> (state, result, last_error)
// as soon as the task has ended, or its state when `wait` has passed; no row
// for a task that does not exist (any more).
CONCURRENCY_FUNCTION(concurrency_await_task) {
	QueueName name = queue_name(fcinfo);
	int64 task_id = int64_arg(fcinfo, 1, "task_id");
	// as dequeue's: NULL or zero, no wait; else positive
	std::optional<Interval> wait;
	if (!arg_null(fcinfo, 2)) {
		const Interval *w = PG_GETARG_INTERVAL_P(2);
		if (w->month != 0 || w->day != 0 || w->time != 0)
			wait = positive_interval_arg(fcinfo, 2, "wait");
	}
	TimestampTz now = clock_now();
	TimestampTz until = now;
	if (wait) {
		Interval w = *wait;
		until = pg::guard([&] {
			return DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval, TimestampTzGetDatum(now),
			                                               IntervalPGetDatum(&w)));
		});
	}

	pg::ResultSet out = pg::materialize(fcinfo);
	pg::spi_connect();
	Queue whole(name.view());
	AsRole as_owner = authorize(whole, Permission::read, "await_task");
	// Citus: the task's end is waited for on its shard's node, whose commits
	// wake the wait
	std::optional<Queue> shard;
	if (std::optional<Datum> routed = read_elsewhere(fcinfo, whole, task_id, "await_task", out, shard))
		return *routed;
	Queue &q = shard ? *shard : whole;
	std::string sql = workflow_sql::task_end(q.sql());
	static const Oid types[1] = {INT8OID};
	Datum values[1] = {Int64GetDatum(task_id)};
	std::optional<TaskEndWait> waiter;
	if (until > now)
		waiter.emplace(q.name()); // on the list before the first look
	for (;;) {
		// none: never was, or gone (completed without a result or cancelled
		// on a queue that retains nothing, purged): nothing says which
		if (q.run_internal("task_end", sql, 1, types, values, nullptr, Access::latest) == 0)
			break;
		std::string state = pg::text_column(0, 1).value_or("");
		bool ended = state == "done" || state == "dead" || state == "cancelled";
		if (ended || clock_now() >= until) {
			Datum cols[3];
			bool nulls[3];
			for (int c = 0; c < 3; ++c)
				cols[c] = column(0, c + 1, &nulls[c]);
			pg::add_row(out, cols, nulls);
			break;
		}
		waiter->sleep(clock_now(), until);
	}
	pg::spi_finish();
	return Datum(0);
}
