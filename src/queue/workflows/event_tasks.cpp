// Durable workflows: the task's side of await_event and emit_event (see
// queue/workflows/event_tasks.hpp), here or on the node of a distributed
// queue's shard.
#include "queue/workflows/event_tasks.hpp"

#include <optional>
#include <string>

#include <fmt/format.h>

#include "pg/srf.hpp"
#include "queue/distribution.hpp"
#include "queue/permissions.hpp"
#include "queue/queue.hpp"
#include "queue/time/wait.hpp"
#include "queue/workflows/workflow_sql.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
}

namespace concurrency::queue {
namespace {

const char *op_name(EventTaskOp op) {
	switch (op) {
	case EventTaskOp::look:
		return "look";
	case EventTaskOp::receive:
		return "receive";
	case EventTaskOp::time_out:
		return "time_out";
	case EventTaskOp::park:
		return "park";
	}
	return "look";
}

EventTaskOp op_of(const std::string &name) {
	for (EventTaskOp op : {EventTaskOp::look, EventTaskOp::receive, EventTaskOp::time_out, EventTaskOp::park})
		if (name == op_name(op))
			return op;
	throw Error(sqlstate::invalid_parameter_value, fmt::format("unknown await_event_task op \"{}\"", name));
}

// `op` on the task's row in `q` (the queue's table, or the task's shard here).
EventTaskState event_task_here(Queue &q, int64 task_id, int64 token, const std::string &event, EventTaskOp op,
                               Datum payload, TimestampTz at) {
	std::string step = workflow_sql::event_step(event);
	EventTaskState state;
	switch (op) {
	case EventTaskOp::look: {
		static const Oid types[3] = {INT8OID, INT8OID, TEXTOID};
		Datum values[3] = {Int64GetDatum(task_id), Int64GetDatum(token), pg::text_datum(step)};
		if (q.run("event_taken", workflow_sql::event_taken(q.sql()), 3, types, values) == 0)
			q.lease_lost(task_id);
		bool taken_null = false;
		Datum taken = column(0, 1, &taken_null);
		if (!taken_null)
			state.taken = taken;
		state.timed_out = pg::column_as<bool>(0, 2).value_or(false);
		state.awaiting = pg::text_column(0, 3);
		return state;
	}
	case EventTaskOp::receive: {
		static const Oid types[5] = {INT8OID, INT8OID, TEXTOID, JSONBOID, TIMESTAMPTZOID};
		Datum values[5] = {Int64GetDatum(task_id), Int64GetDatum(token), pg::text_datum(step), payload,
		                   TimestampTzGetDatum(at)};
		if (q.run("record_step", workflow_sql::record_step(q.sql()), 5, types, values) == 0)
			q.lease_lost(task_id);
		static const Oid clear_types[3] = {INT8OID, INT8OID, TEXTOID};
		Datum clear[3] = {values[0], values[1], pg::text_datum(event)};
		q.run("clear_awaiting_event", workflow_sql::clear_awaiting(q.sql()), 3, clear_types, clear);
		return state;
	}
	case EventTaskOp::time_out:
	case EventTaskOp::park: {
		// the timeout kept as the event's step; or the task parked until `at`
		const bool park = op == EventTaskOp::park;
		static const Oid types[4] = {INT8OID, INT8OID, TEXTOID, TIMESTAMPTZOID};
		Datum values[4] = {Int64GetDatum(task_id), Int64GetDatum(token), pg::text_datum(park ? event : step),
		                   TimestampTzGetDatum(at)};
		if (q.run(park ? "park" : "record_timeout",
		          park ? workflow_sql::park(q.sql()) : workflow_sql::record_timeout(q.sql()), 4, types,
		          values) == 0)
			q.lease_lost(task_id);
		// a waiting dequeue learns of the new due time (and of a lease slot freed)
		if (park)
			note_claimable(q.name(), 1);
		return state;
	}
	}
	return state;
}

} // namespace

bool task_elsewhere(Queue &whole, int64 task_id, const char *what, bool held, std::optional<Queue> &shard,
                    int32 &position) {
	if (!distribution().route_tasks(whole, &task_id, 1, shard, held ? what : nullptr, held))
		return false;
	if (auto p = distribution().routed_position(whole, &task_id, 1, held)) {
		position = *p;
		return true;
	}
	if (!distribution().shards_served_here(whole, held))
		refuse_not_served_here(whole.name(), what);
	if (held)
		task_gone(whole.name(), task_id); // its id names no shard of the queue
	position = -1;
	return true;
}

EventTaskState event_task(Queue &whole, int64 task_id, int64 token, const std::string &event, EventTaskOp op,
                          Datum payload, TimestampTz at) {
	std::optional<Queue> shard;
	int32 position = 0;
	if (!task_elsewhere(whole, task_id, "await_event", true, shard, position))
		return event_task_here(shard ? *shard : whole, task_id, token, event, op, payload, at);
	static const Oid types[7] = {TEXTOID, INT8OID, INT8OID, TEXTOID, TEXTOID, JSONBOID, TIMESTAMPTZOID};
	Datum values[7] = {pg::text_datum(whole.name()), Int64GetDatum(task_id),      Int64GetDatum(token),
	                   pg::text_datum(event),        pg::text_datum(op_name(op)), payload,
	                   TimestampTzGetDatum(at)};
	char nulls[7] = {' ', ' ', ' ', ' ', ' ', op == EventTaskOp::receive ? ' ' : 'n', ' '};
	uint64 n = distribution().call_on_shard(whole, position, "await_event_task", 7, types, values, nulls,
	                                        true, true, "concurrency_internal");
	EventTaskState state;
	if (n < 1)
		return state;
	bool taken_null = true;
	Datum taken = column(0, 1, &taken_null);
	if (!taken_null)
		state.taken = taken;
	state.timed_out = pg::column_as<bool>(0, 2).value_or(false);
	state.awaiting = pg::text_column(0, 3);
	return state;
}

bool deliver_event(const std::string &queue, int64 task_id, const std::string &event, Datum payload,
                   TimestampTz now, bool *known) {
	*known = OidIsValid(queue_relid(queue));
	if (!*known)
		return false;
	Queue whole(queue);
	std::optional<Queue> shard;
	if (distribution().route_tasks(whole, &task_id, 1, shard, nullptr, false)) {
		std::optional<int32> position = distribution().routed_position(whole, &task_id, 1, false);
		if (!position)
			return false; // its id names no shard of the queue: no such task
		// as the queue's owner, who may use the routed functions
		AsRole as_owner(queue_owner(whole));
		static const Oid types[4] = {TEXTOID, INT8OID, TEXTOID, JSONBOID};
		Datum values[4] = {pg::text_datum(queue), Int64GetDatum(task_id), pg::text_datum(event), payload};
		uint64 n = distribution().call_on_shard(whole, *position, "deliver_event", 4, types, values, nullptr,
		                                        false, true, "concurrency_internal");
		return n == 1 && pg::column_as<std::int64_t>(0, 1).value_or(0) > 0;
	}
	Queue &q = shard ? *shard : whole;
	static const Oid types[5] = {INT8OID, TEXTOID, TEXTOID, JSONBOID, TIMESTAMPTZOID};
	Datum values[5] = {Int64GetDatum(task_id), pg::text_datum(event),
	                   pg::text_datum(workflow_sql::event_step(event)), payload, TimestampTzGetDatum(now)};
	uint64 d =
	    q.run_internal("deliver", workflow_sql::deliver(q.sql()), 5, types, values, nullptr, Access::owner);
	if (d > 0)
		queue::notify(q.name(), d);
	return d > 0;
}

} // namespace concurrency::queue

using namespace concurrency;
using namespace concurrency::queue;

// concurrency_internal.await_event_task(queue, task_id, lease_token, event,
// op, payload, at) -> (taken, timed_out, awaiting): the part of await_event
// on the task's shard, made on its node by the node the call was made on.
// Needs permission work.
CONCURRENCY_FUNCTION(concurrency_await_event_task) {
	QueueName name = queue_name(fcinfo);
	int64 task_id = int64_arg(fcinfo, 1, "task_id");
	int64 token = int64_arg(fcinfo, 2, "lease_token");
	std::string event = pg::text_arg(fcinfo, 3, "event");
	EventTaskOp op = op_of(pg::text_arg(fcinfo, 4, "op"));
	if (op == EventTaskOp::receive)
		pg::require_arg(fcinfo, 5, "payload");
	pg::require_arg(fcinfo, 6, "at");
	Datum payload = arg_null(fcinfo, 5) ? Datum(0) : PG_GETARG_DATUM(5);
	TimestampTz at = PG_GETARG_TIMESTAMPTZ(6);

	pg::ResultSet out = pg::materialize(fcinfo);
	pg::spi_connect();
	Queue whole(name.view());
	AsRole as_owner = authorize(whole, Permission::work, "await_event");
	EventTaskState state = event_task(whole, task_id, token, event, op, payload, at);
	Datum cols[3] = {state.taken.value_or(Datum(0)), BoolGetDatum(state.timed_out),
	                 state.awaiting ? pg::text_datum(*state.awaiting) : Datum(0)};
	bool nulls[3] = {!state.taken, false, !state.awaiting};
	pg::add_row(out, cols, nulls);
	pg::spi_finish();
	return Datum(0);
}

// concurrency_internal.deliver_event(queue, task_id, event, payload) -> 1
// when the task was parked for the event (now claimable with it), else 0:
// the part of emit_event on the task's shard, made on its node. Needs
// permission work.
CONCURRENCY_FUNCTION(concurrency_deliver_event) {
	QueueName name = queue_name(fcinfo);
	int64 task_id = int64_arg(fcinfo, 1, "task_id");
	std::string event = pg::text_arg(fcinfo, 2, "event");
	pg::require_arg(fcinfo, 3, "payload");
	Datum payload = PG_GETARG_DATUM(3);
	TimestampTz now = clock_now();
	pg::spi_connect();
	bool delivered = false;
	{
		Queue whole(name.view());
		AsRole as_owner = authorize(whole, Permission::work, "emit_event");
		bool known = false;
		delivered = deliver_event(std::string(name.view()), task_id, event, payload, now, &known);
	}
	pg::spi_finish();
	PG_RETURN_INT64(delivered ? 1 : 0);
}
