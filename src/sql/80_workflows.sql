-- ---------------------------------------------------------------------------
-- Durable workflows (src/queue/workflows, docs/workflows.md): a task keeps
-- the results of its steps in its own row (column steps), under its lease;
-- it can sleep without a worker (sleep_task), park until an event
-- (await_event / emit_event), and a producer can wait for its end
-- (await_task). The functions are SECURITY INVOKER and check the caller's
-- permission on the queue as the other task functions do.
--
-- Events live in two extension tables, kept by pg_dump: concurrency.event
-- (one row per event name: its payload once emitted) and
-- concurrency.event_wait (the tasks parked for an event). Nobody but the
-- extension's owner touches them directly: emit_event is for the roles
-- granted EXECUTE on it.
-- ---------------------------------------------------------------------------
CREATE TABLE concurrency.event (
    name       text        PRIMARY KEY CHECK (name <> '' AND pg_catalog.octet_length(name) <= 1000),
    payload    jsonb,
    emitted_at timestamptz,
    touched_at timestamptz NOT NULL
);
CREATE INDEX event_touched ON concurrency.event (touched_at);
COMMENT ON TABLE concurrency.event IS
    'events of durable workflows (emit_event): the payload an await_event takes, kept for concurrency.event_retention; emitted_at NULL: awaited, not emitted yet';
SELECT pg_catalog.pg_extension_config_dump('concurrency.event', '');

CREATE TABLE concurrency.event_wait (
    event   text        NOT NULL,
    queue   text        NOT NULL,
    task_id bigint      NOT NULL,
    since   timestamptz NOT NULL,
    PRIMARY KEY (event, queue, task_id)
);
COMMENT ON TABLE concurrency.event_wait IS
    'tasks parked by await_event until their event is emitted (emit_event wakes them)';
SELECT pg_catalog.pg_extension_config_dump('concurrency.event_wait', '');

CREATE FUNCTION concurrency.record_step(queue text, task_id bigint, lease_token bigint, step text,
                                        result jsonb DEFAULT NULL)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_record_step';
COMMENT ON FUNCTION concurrency.record_step(text, bigint, bigint, text, jsonb) IS
    'keeps the result of a step of a task held with lease_token (SQLSTATE CE001 if the lease was lost); recorded again, the step''s result is replaced';

CREATE FUNCTION concurrency.step_result(queue text, task_id bigint, lease_token bigint, step text)
    RETURNS jsonb
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_step_result';
COMMENT ON FUNCTION concurrency.step_result(text, bigint, bigint, text) IS
    'the result recorded for a step of a task held with lease_token (jsonb null for a step recorded without one), or NULL when not recorded';

CREATE FUNCTION concurrency.task_steps(queue text, task_id bigint)
    RETURNS TABLE(step text, result jsonb, recorded_at timestamptz)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_task_steps';
COMMENT ON FUNCTION concurrency.task_steps(text, bigint) IS
    'the steps a task has recorded, in the order recorded (permission read)';

CREATE FUNCTION concurrency.sleep_task(queue text, task_id bigint, lease_token bigint, until timestamptz)
    RETURNS timestamptz
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_sleep_task';
COMMENT ON FUNCTION concurrency.sleep_task(text, bigint, bigint, timestamptz) IS
    'a durable sleep: the task held with lease_token leaves its worker (no attempt spent, the token fenced off, its steps kept) and is claimable again at until; returns when';

CREATE FUNCTION concurrency.sleep_task_for(queue text, task_id bigint, lease_token bigint, duration interval)
    RETURNS timestamptz
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_sleep_task_for';
COMMENT ON FUNCTION concurrency.sleep_task_for(text, bigint, bigint, interval) IS
    'sleep_task for a duration from now (a negative one: claimable now)';

CREATE FUNCTION concurrency.await_event(queue text, task_id bigint, lease_token bigint, event text,
                                        timeout interval DEFAULT NULL)
    RETURNS TABLE(status text, payload jsonb)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_await_event';
COMMENT ON FUNCTION concurrency.await_event(text, bigint, bigint, text, interval) IS
    'for a task held with lease_token: ''received'' and the payload of event (emitted before, or while the task waited), or ''waiting'' (the task is parked, without a lease, until the event is emitted or timeout passes), or ''timed_out'' (claimed again after the timeout)';

CREATE FUNCTION concurrency.emit_event(event text, payload jsonb DEFAULT NULL)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_emit_event';
COMMENT ON FUNCTION concurrency.emit_event(text, jsonb) IS
    'emits event with payload: the tasks parked for it become claimable with it (returns how many), and later awaits take it for concurrency.event_retention';
REVOKE ALL ON FUNCTION concurrency.emit_event(text, jsonb) FROM PUBLIC;

CREATE FUNCTION concurrency.await_task(queue text, task_id bigint, wait interval DEFAULT NULL)
    RETURNS TABLE(state text, result jsonb, last_error text)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_await_task';
COMMENT ON FUNCTION concurrency.await_task(text, bigint, interval) IS
    'the end of a task (done, dead or cancelled, with its result or last error) as soon as it ends, or its state when wait has passed; no row when there is no such task (permission read)';
