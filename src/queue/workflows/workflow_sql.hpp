// The SQL of durable workflows (docs/workflows.md) on one queue's table (or
// one shard's): steps kept in the task's row (column steps, a jsonb object
// {step: {"result": …, "at": …}}), a task parked for an event (column
// awaiting), and the statements on the extension's event tables. Pure C++,
// every identifier quoted and every operator schema-qualified, as in
// queue_sql.hpp.
#pragma once

#include <string>

#include "queue/queue_sql.hpp"

namespace concurrency::queue::workflow_sql {

// The step key under which an awaited event's payload is recorded.
std::string event_step(const std::string &event);

// $1 bigint id, $2 bigint lease_token, $3 text step, $4 jsonb result
// ('null' for NULL), $5 timestamptz now -> one row (id) when the lease holds.
std::string record_step(const QueueSql &q);
// $1 id, $2 lease_token, $3 step -> one row (the step's result, NULL when
// not recorded; the task's awaiting) when the lease holds.
std::string step_result(const QueueSql &q);
// $1 id, $2 lease_token, $3 text the event's step -> one row (the payload
// taken, NULL when none; whether the await timed out; the task's awaiting)
// when the lease holds.
std::string event_taken(const QueueSql &q);
// An await ended by its timeout, kept as the event's step (result null,
// "timed_out": true) so that later runs time out at once: $1 id,
// $2 lease_token, $3 text step, $4 timestamptz now.
std::string record_timeout(const QueueSql &q);
// $1 id -> the task's steps in the order they were recorded:
// (step, result, recorded_at).
std::string task_steps(const QueueSql &q);
// Parks a held task until an event: $1 id, $2 lease_token, $3 text event,
// $4 timestamptz claimable again at (the timeout; 'infinity' for none)
// -> one row (id) when the lease held. As release: no
// attempt spent, the token fenced off.
std::string park(const QueueSql &q);
// The await of a held task for event $3 (text) ended: $1 id, $2 lease_token.
std::string clear_awaiting(const QueueSql &q);
// An event delivered to a task parked for it (or claimed again after its
// timeout, still marked): $1 id, $2 text event, $3 text step key, $4 jsonb
// payload, $5 timestamptz now -> one row (id) when the task waited.
std::string deliver(const QueueSql &q);
// $1 id -> (state, result, last_error) of the task.
std::string task_end(const QueueSql &q);

// The extension's event tables (src/sql/80_queue_workflows.sql).
// $1 text event, $2 timestamptz now -> (payload, emitted_at): locks the
// event's row, made (not emitted) when missing, so that an emit and an
// await of one event take turns.
extern const char *const lock_event;
// $1 text event, $2 jsonb payload, $3 timestamptz now: the event emitted.
extern const char *const emit;
// $1 text event -> (queue, task_id) of the tasks parked for it.
extern const char *const waiting_tasks;
// $1 text event: its waits, all delivered.
extern const char *const forget_waits;
// $1 text event, $2 text queue, $3 bigint task_id, $4 timestamptz now.
extern const char *const add_wait;
// $1 text event, $2 text queue, $3 bigint task_id.
extern const char *const drop_wait;
// $1 timestamptz cutoff: up to 100 events last touched before it, gone.
extern const char *const forget_old_events;
// On Citus, the event tables distributed: $1 text event, $2 timestamptz
// cutoff; one router statement on the event's shard (a grouped query has one
// row whatever its shard holds) that forgets the old events of that shard
// on its node (concurrency_internal.forget_events_on_shard).
extern const char *const forget_events_on_shard;

} // namespace concurrency::queue::workflow_sql
