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
CREATE TABLE IF NOT EXISTS concurrency.event (
    name       text        PRIMARY KEY CHECK (name <> '' AND pg_catalog.octet_length(name) <= 1000),
    payload    jsonb,
    emitted_at timestamptz,
    touched_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS event_touched ON concurrency.event (touched_at);
COMMENT ON TABLE concurrency.event IS
    'events of durable workflows (emit_event): the payload an await_event takes, kept for concurrency.event_retention; emitted_at NULL: awaited, not emitted yet';
SELECT pg_catalog.pg_extension_config_dump('concurrency.event', '');

CREATE TABLE IF NOT EXISTS concurrency.event_wait (
    event   text        NOT NULL,
    queue   text        NOT NULL,
    task_id bigint      NOT NULL,
    since   timestamptz NOT NULL,
    PRIMARY KEY (event, queue, task_id)
);
COMMENT ON TABLE concurrency.event_wait IS
    'tasks parked by await_event until their event is emitted (emit_event wakes them)';
SELECT pg_catalog.pg_extension_config_dump('concurrency.event_wait', '');

CREATE OR REPLACE FUNCTION concurrency.record_step(queue text, task_id bigint, lease_token bigint, step text,
                                        result jsonb DEFAULT NULL)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_record_step';
COMMENT ON FUNCTION concurrency.record_step(text, bigint, bigint, text, jsonb) IS
    'keeps the result of a step of a task held with lease_token (SQLSTATE CE001 if the lease was lost); recorded again, the step''s result is replaced';

CREATE OR REPLACE FUNCTION concurrency.step_result(queue text, task_id bigint, lease_token bigint, step text)
    RETURNS jsonb
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_step_result';
COMMENT ON FUNCTION concurrency.step_result(text, bigint, bigint, text) IS
    'the result recorded for a step of a task held with lease_token (jsonb null for a step recorded without one), or NULL when not recorded';

CREATE OR REPLACE FUNCTION concurrency.task_steps(queue text, task_id bigint)
    RETURNS TABLE(step text, result jsonb, recorded_at timestamptz)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_task_steps';
COMMENT ON FUNCTION concurrency.task_steps(text, bigint) IS
    'the steps a task has recorded, in the order recorded (permission read)';

CREATE OR REPLACE FUNCTION concurrency.sleep_task(queue text, task_id bigint, lease_token bigint, until timestamptz)
    RETURNS timestamptz
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_sleep_task';
COMMENT ON FUNCTION concurrency.sleep_task(text, bigint, bigint, timestamptz) IS
    'a durable sleep: the task held with lease_token leaves its worker (no attempt spent, the token fenced off, its steps kept) and is claimable again at until; returns when';

CREATE OR REPLACE FUNCTION concurrency.sleep_task_for(queue text, task_id bigint, lease_token bigint, duration interval)
    RETURNS timestamptz
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_sleep_task_for';
COMMENT ON FUNCTION concurrency.sleep_task_for(text, bigint, bigint, interval) IS
    'sleep_task for a duration from now (a negative one: claimable now)';

CREATE OR REPLACE FUNCTION concurrency.await_event(queue text, task_id bigint, lease_token bigint, event text,
                                        timeout interval DEFAULT NULL)
    RETURNS TABLE(status text, payload jsonb)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_await_event';
COMMENT ON FUNCTION concurrency.await_event(text, bigint, bigint, text, interval) IS
    'for a task held with lease_token: ''received'' and the payload of event (emitted before, or while the task waited), or ''waiting'' (the task is parked, without a lease, until the event is emitted or timeout passes), or ''timed_out'' (claimed again after the timeout)';

CREATE OR REPLACE FUNCTION concurrency.emit_event(event text, payload jsonb DEFAULT NULL)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_emit_event';
COMMENT ON FUNCTION concurrency.emit_event(text, jsonb) IS
    'emits event with payload: the tasks parked for it become claimable with it (returns how many), and later awaits take it for concurrency.event_retention';
REVOKE ALL ON FUNCTION concurrency.emit_event(text, jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION concurrency.await_task(queue text, task_id bigint, wait interval DEFAULT NULL)
    RETURNS TABLE(state text, result jsonb, last_error text)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_await_task';
COMMENT ON FUNCTION concurrency.await_task(text, bigint, interval) IS
    'the end of a task (done, dead or cancelled, with its result or last error) as soon as it ends, or its state when wait has passed; no row when there is no such task (permission read)';

-- ---------------------------------------------------------------------------
-- Durable workflows on distributed queues (docs/workflows.md, "Distributed
-- queues"; src/queue/workflows). A task's steps and the mark of the event it
-- awaits are in its own row, so in its shard. The events are reached from
-- every node: once a queue is distributed, concurrency.event and
-- concurrency.event_wait become Citus distributed tables, distributed by the
-- event's name and co-located, so that an emit or an await of one event is a
-- router statement on one shard (the event's), whichever node makes it, and
-- no node (the coordinator included) sees the events of every emit.
-- await_event runs on the node it is called on: the task's part (its steps,
-- parking it) on the task's shard through the routed function
-- await_event_task, the event's part on the event's shard; emit_event hands
-- each task parked for the event to its shard's node (deliver_event), where
-- the task becomes claimable and that node's waiting claims are woken.
-- ---------------------------------------------------------------------------

-- Makes the event tables distributed (a no-op where they are already).
-- Runs as the extension's owner, who owns them; on the coordinator.
CREATE OR REPLACE FUNCTION concurrency_internal.distribute_events() RETURNS void
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_distribute_events';
COMMENT ON FUNCTION concurrency_internal.distribute_events() IS
    'makes the event tables of durable workflows Citus distributed tables, by event name (internal)';
REVOKE ALL ON FUNCTION concurrency_internal.distribute_events() FROM PUBLIC;

-- The first queue distributed distributes the event tables, when the
-- transaction that distributed it commits (distribute_queue writes the
-- queue's row of concurrency.distributed_queue on the coordinator). At
-- commit, not at once: in the update from 0.3.0 (below), Citus runs the
-- update on the other nodes after this one, and the tables must exist there
-- before they are distributed.
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_queue_added() RETURNS trigger
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_distributed_queue_added';
COMMENT ON FUNCTION concurrency_internal.distributed_queue_added() IS
    'after a queue is distributed: the event tables too (internal)';
DROP TRIGGER IF EXISTS distribute_events ON concurrency.distributed_queue;
CREATE CONSTRAINT TRIGGER distribute_events AFTER INSERT OR UPDATE ON concurrency.distributed_queue
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION concurrency_internal.distributed_queue_added();

-- The task's part of await_event, on the node of its shard.
-- op: 'look' (the event's step and the task's awaiting), 'receive' (the
-- payload recorded as the event's step, the wait ended), 'time_out' (the
-- await's timeout recorded), 'park' (parked until `at`).
CREATE OR REPLACE FUNCTION concurrency_internal.await_event_task(queue text, task_id bigint, lease_token bigint, event text,
                                                      op text, payload jsonb, at timestamptz)
    RETURNS TABLE(taken jsonb, timed_out boolean, awaiting text)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_await_event_task';
COMMENT ON FUNCTION concurrency_internal.await_event_task(text, bigint, bigint, text, text, jsonb, timestamptz) IS
    'the part of await_event on the task''s shard (internal)';

-- An emitted event handed to a task parked for it, on the node of its shard.
CREATE OR REPLACE FUNCTION concurrency_internal.deliver_event(queue text, task_id bigint, event text, payload jsonb)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_deliver_event';
COMMENT ON FUNCTION concurrency_internal.deliver_event(text, bigint, text, jsonb) IS
    'the part of emit_event on a parked task''s shard: the task claimable with the payload as its step (internal)';

-- Up to 100 events of the shard of event `event` last touched before
-- `cutoff` and awaited by no task, forgotten: on the node of that shard, on
-- its tables (a statement of emit_event sends it there). The events of
-- other shards are left to the emits of their names.
-- One of the two functions of the install script still in PL/pgSQL (the
-- other: concurrency_internal.cluster_lock_wait_rows, 40_citus.sql): Citus runs it on
-- the node of the event's shard, where it names that node's shard tables
-- with Citus's own shard_name; it builds no name of a queue's relation, and
-- reads Citus's catalog, which exists only where Citus does.
CREATE OR REPLACE FUNCTION concurrency_internal.forget_events_on_shard(event text, cutoff timestamptz)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    distributed boolean := false;
    events text;
    waits text;
    n bigint;
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition
                                 WHERE logicalrelid OPERATOR(pg_catalog.=) $1)'
           INTO distributed USING 'concurrency.event'::regclass;
    END IF;
    IF NOT distributed THEN
        RAISE EXCEPTION 'the event tables are not distributed'
            USING ERRCODE = '55000', HINT = 'forget_events_on_shard serves distributed queues on a Citus cluster.';
    END IF;
    events := shard_name('concurrency.event'::regclass,
                         get_shard_id_for_distribution_column('concurrency.event', event));
    waits := shard_name('concurrency.event_wait'::regclass,
                        get_shard_id_for_distribution_column('concurrency.event_wait', event));
    EXECUTE format($sql$DELETE FROM %1$s WHERE name OPERATOR(pg_catalog.=) ANY (ARRAY(
                            SELECT e.name FROM %1$s AS e
                             WHERE e.touched_at OPERATOR(pg_catalog.<) $1
                               AND NOT EXISTS (SELECT FROM %2$s AS w WHERE w.event OPERATOR(pg_catalog.=) e.name)
                             ORDER BY e.touched_at LIMIT 100 FOR UPDATE SKIP LOCKED))$sql$,
                   events, waits) USING cutoff;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.forget_events_on_shard(text, timestamptz) IS
    'forgets old events of the shard of an event, on its node (internal)';
REVOKE ALL ON FUNCTION concurrency_internal.forget_events_on_shard(text, timestamptz) FROM PUBLIC;
