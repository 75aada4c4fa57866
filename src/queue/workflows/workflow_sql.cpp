// The SQL of durable workflows (declared in queue/workflows/workflow_sql.hpp).
#include <fmt/format.h>

#include "queue/sql_operators.hpp"
#include "queue/workflows/workflow_sql.hpp"

#include "common/pure.hpp" // last: checks that no PostgreSQL header came before

namespace concurrency::queue::workflow_sql {

#define CONCAT "OPERATOR(pg_catalog.||)"

std::string event_step(const std::string &event) {
	return "event:" + event;
}

// a step's entry in the steps object: its result and when it was recorded
static constexpr const char *step_entry = "pg_catalog.jsonb_build_object($3::pg_catalog.text, "
                                          "pg_catalog.jsonb_build_object('result', $4::pg_catalog.jsonb, "
                                          "'at', $5::pg_catalog.timestamptz))";

std::string record_step(const QueueSql &q) {
	return fmt::format(
	    R"(UPDATE {t}
   SET steps = COALESCE(steps, '{{}}'::pg_catalog.jsonb) )" CONCAT R"( {entry}
 WHERE {k}id )" EQ R"( $1 AND lease_token )" EQ R"( $2
RETURNING id)",
	    fmt::arg("t", q.table()), fmt::arg("k", q.shard_filter(false)), fmt::arg("entry", step_entry));
}

std::string step_result(const QueueSql &q) {
	return fmt::format("SELECT (steps OPERATOR(pg_catalog.->) $3::pg_catalog.text) OPERATOR(pg_catalog.->) "
	                   "'result', awaiting FROM {} WHERE {}id " EQ " $1 AND lease_token " EQ " $2",
	                   q.table(), q.shard_filter(false));
}

std::string event_taken(const QueueSql &q) {
	return fmt::format(
	    "SELECT (steps OPERATOR(pg_catalog.->) $3::pg_catalog.text) OPERATOR(pg_catalog.->) 'result', "
	    "COALESCE((steps OPERATOR(pg_catalog.->) $3::pg_catalog.text) OPERATOR(pg_catalog.?) 'timed_out', "
	    "false), "
	    "awaiting FROM {} WHERE {}id " EQ " $1 AND lease_token " EQ " $2",
	    q.table(), q.shard_filter(false));
}

std::string record_timeout(const QueueSql &q) {
	return fmt::format(
	    R"(UPDATE {t}
   SET steps = COALESCE(steps, '{{}}'::pg_catalog.jsonb) )" CONCAT
	    R"( pg_catalog.jsonb_build_object($3::pg_catalog.text, pg_catalog.jsonb_build_object('result', 'null'::pg_catalog.jsonb, 'at', $4::pg_catalog.timestamptz, 'timed_out', true)),
       awaiting = NULL
 WHERE {k}id )" EQ R"( $1 AND lease_token )" EQ R"( $2
RETURNING id)",
	    fmt::arg("t", q.table()), fmt::arg("k", q.shard_filter(false)));
}

std::string task_steps(const QueueSql &q) {
	return fmt::format(
	    R"(SELECT s.key, s.value OPERATOR(pg_catalog.->) 'result',
       (s.value OPERATOR(pg_catalog.->>) 'at')::pg_catalog.timestamptz AS recorded_at
  FROM {t} AS t, pg_catalog.jsonb_each(t.steps) AS s(key, value)
 WHERE {tk}t.id )" EQ R"( $1
 ORDER BY recorded_at, s.key)",
	    fmt::arg("t", q.table()), fmt::arg("tk", q.shard_filter(true)));
}

std::string park(const QueueSql &q) {
	return fmt::format(
	    R"(UPDATE {t}
   SET state = 'scheduled',
       run_at = $4,
       awaiting = $3,
       attempt = GREATEST(attempt )" MINUS R"( 1, 0),
       lease_token = NULL,
       lease_expires_at = NULL,
       lease_extended_to = NULL,
       worker = NULL
 WHERE {k}id )" EQ R"( $1 AND lease_token )" EQ R"( $2
   AND state )" EQ R"( ANY ('{{leased,ready}}'::pg_catalog.text[])
RETURNING id)",
	    fmt::arg("t", q.table()), fmt::arg("k", q.shard_filter(false)));
}

std::string clear_awaiting(const QueueSql &q) {
	return fmt::format("UPDATE {} SET awaiting = NULL WHERE {}id " EQ " $1 AND lease_token " EQ
	                   " $2 AND awaiting " EQ " $3 RETURNING id",
	                   q.table(), q.shard_filter(false));
}

std::string deliver(const QueueSql &q) {
	return fmt::format(
	    R"(UPDATE {t}
   SET steps = COALESCE(steps, '{{}}'::pg_catalog.jsonb) )" CONCAT
	    R"( pg_catalog.jsonb_build_object($3::pg_catalog.text, pg_catalog.jsonb_build_object('result', $4::pg_catalog.jsonb, 'at', $5::pg_catalog.timestamptz)),
       awaiting = NULL,
       run_at = CASE WHEN state )" EQ R"( 'scheduled' THEN $5 ELSE run_at END,
       state = CASE WHEN state )" EQ R"( 'scheduled' THEN 'ready' ELSE state END
 WHERE {k}id )" EQ R"( $1 AND awaiting )" EQ R"( $2
RETURNING id)",
	    fmt::arg("t", q.table()), fmt::arg("k", q.shard_filter(false)));
}

std::string task_end(const QueueSql &q) {
	return fmt::format("SELECT state, result, last_error FROM {} WHERE {}id " EQ " $1", q.table(),
	                   q.shard_filter(false));
}

const char *const lock_event =
    R"(INSERT INTO concurrency.event AS e (name, touched_at) VALUES ($1, $2)
ON CONFLICT (name) DO UPDATE SET touched_at = GREATEST(e.touched_at, EXCLUDED.touched_at)
RETURNING e.payload, e.emitted_at)";

const char *const emit =
    R"(UPDATE concurrency.event SET payload = $2, emitted_at = $3, touched_at = $3 WHERE name )" EQ R"( $1)";

const char *const waiting_tasks =
    "SELECT queue, task_id FROM concurrency.event_wait WHERE event " EQ " $1 ORDER BY queue, task_id";

const char *const forget_waits = "DELETE FROM concurrency.event_wait WHERE event " EQ " $1";

const char *const add_wait = R"(INSERT INTO concurrency.event_wait (event, queue, task_id, since)
VALUES ($1, $2, $3, $4) ON CONFLICT (event, queue, task_id) DO UPDATE SET since = EXCLUDED.since)";

const char *const drop_wait =
    "DELETE FROM concurrency.event_wait WHERE event " EQ " $1 AND queue " EQ " $2 AND task_id " EQ " $3";

const char *const forget_old_events = R"(DELETE FROM concurrency.event WHERE name )" EQ R"( ANY (ARRAY(
    SELECT e.name FROM concurrency.event AS e
     WHERE e.touched_at )" LT R"( $1
       AND NOT EXISTS (SELECT FROM concurrency.event_wait AS w WHERE w.event )" EQ R"( e.name)
     ORDER BY e.touched_at LIMIT 100 FOR UPDATE SKIP LOCKED)))";

const char *const forget_events_on_shard =
    "SELECT concurrency_internal.forget_events_on_shard($1, $2) FROM concurrency.event"
    " WHERE name " EQ " $1 AND touched_at IS NULL HAVING true";

} // namespace concurrency::queue::workflow_sql
