-- generated from src/sql/concurrency_ext--0.3.0--0.4.0/ by make upgrade-scripts: edit its parts and the install parts its INSTALL_PARTS names
\echo Use "ALTER EXTENSION concurrency_ext UPDATE" to load this file. \quit
-- ---------------------------------------------------------------------------
-- concurrency_ext 0.3.0 -> 0.4.0: the parts of src/sql/concurrency_ext--0.3.0--0.4.0/
-- (what turns 0.3.0's objects and data into 0.4.0's) and the install parts
-- that its INSTALL_PARTS names (objects new in 0.4.0, defined once), applied
-- in the order of their file names. Every part must keep the data of a live
-- 0.3.0 installation (local and distributed queues with leased, scheduled
-- and dead tasks, keys, permissions, schedules, dependencies, registered
-- subsystems, lock history), and the result must equal a fresh install
-- (scripts/upgrade-check.sh).
-- ---------------------------------------------------------------------------
-- ---------------------------------------------------------------------------
-- Task queue 0.3.0 -> 0.4.0: every queue's table (a distributed queue's too:
-- Citus sends the ALTER to its shards) gets the columns of durable workflows
-- (steps, awaiting) and the mark of finally-children (after_ends), last, as
-- create_queue makes them. Tasks of every state stay as they are (no task of
-- 0.3.0 is a finally-child: after_ends stays NULL); a queue created after the
-- new library was installed but before this update has them already.
-- ---------------------------------------------------------------------------

DO $upgrade$
DECLARE
    q record;
BEGIN
    FOR q IN SELECT name FROM concurrency.queue ORDER BY name LOOP
        IF pg_catalog.to_regclass(pg_catalog.format('concurrency.%I', 'q_' || q.name)) IS NOT NULL THEN
            EXECUTE pg_catalog.format('ALTER TABLE concurrency.%I ADD COLUMN IF NOT EXISTS steps jsonb, '
                                      'ADD COLUMN IF NOT EXISTS awaiting text, '
                                      'ADD COLUMN IF NOT EXISTS after_ends boolean', 'q_' || q.name);
        END IF;
    END LOOP;
END
$upgrade$;
-- ---------------------------------------------------------------------------
-- Task queue 0.3.0 -> 0.4.0: enqueue_graph's comment names its new field
-- after_ends (finally-children), as in src/sql/27_queue_dependencies.sql.
-- ---------------------------------------------------------------------------

COMMENT ON FUNCTION concurrency.enqueue_graph(text, jsonb) IS
    'adds a graph of tasks all or nothing: tasks is a JSON array of {ref, payload, after, after_ends, queue, run_at, priority, concurrency_key}, after naming refs of the graph, ids of tasks of the task''s queue or {queue, id}; a task waits until its parents are done (after) or have ended, whatever their end (after_ends); returns each task''s ref and id in order';
-- ---------------------------------------------------------------------------
-- Task queue: the outcomes of a task's parents (docs/queue.md,
-- "Dependencies"), what the worker of a finally-child (enqueue_graph's
-- after_ends: released when each of its parents has ended, whatever its end)
-- reads. parent_results keeps its columns, the results of the parents that
-- are done.
-- ---------------------------------------------------------------------------

CREATE FUNCTION concurrency.parent_outcomes(queue text, id bigint)
    RETURNS TABLE (task_id bigint, parent_queue text, state text, result jsonb, last_error text)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_parent_outcomes';
COMMENT ON FUNCTION concurrency.parent_outcomes(text, bigint) IS
    'the state, result and last error of each parent of a task, whatever its end (for its worker: permission work on the task''s queue)';
-- ---------------------------------------------------------------------------
-- concurrency.lock_tree (0.4.0: an install part of its own, CREATE OR REPLACE,
-- so that the update from 0.3.0 takes it as it is).
--
-- The action: for a root, what ends its transaction or statement; for a
-- session that holds others up only by its place in the lock queue (a DDL
-- waiting behind an idle or prepared transaction, with readers queued behind
-- it), cancelling its statement — but only where that frees someone: a
-- session waits for it and for nobody else. The readers then go on at once
-- and the root keeps its transaction (a DDL's xid says nothing here: ALTER
-- TABLE has one while it waits). A waiting UPDATE queued behind another on
-- the same row gets no action: the sessions behind it also wait for the
-- first, and cancelling it would lose its write and free nobody. Only for
-- sessions whose state you may see. The root's own action stays.
-- ---------------------------------------------------------------------------
CREATE OR REPLACE VIEW concurrency.lock_tree AS
WITH nodes AS MATERIALIZED (
    SELECT * FROM concurrency.lock_tree_nodes()
), activity AS MATERIALIZED (
    SELECT s.pid, s.usesysid, s.application_name, s.client_addr, s.state, s.query, s.xact_start
      FROM pg_catalog.pg_stat_get_activity(NULL) s
)
SELECT t.pid,
       pg_catalog.pg_get_userbyid(COALESCE(a.usesysid, p.ownerid)) AS usename,
       a.application_name,
       a.client_addr,
       t.root_pid,
       t.depth,
       t.path,
       t.blocked_by,
       t.blocks_direct,
       t.blocks_total,
       t.in_cycle,
       CASE WHEN t.xid IS NOT NULL THEN 'prepared' ELSE a.state END AS state,
       a.query,
       t.snapshot_at - t.waiting_since AS waited,
       t.snapshot_at - COALESCE(a.xact_start, p.prepared) AS xact_age,
       CASE WHEN t.depth = 0 THEN
           CASE WHEN t.xid IS NOT NULL THEN pg_catalog.format('ROLLBACK PREPARED %L', p.gid)
                WHEN a.state IN ('active', 'fastpath function call')
                    THEN pg_catalog.format('SELECT pg_cancel_backend(%s)', t.pid)
                WHEN a.state IN ('idle in transaction', 'idle in transaction (aborted)', 'idle')
                    THEN pg_catalog.format('SELECT pg_terminate_backend(%s)', t.pid)
           END
            WHEN t.blocks_only_by_queue AND t.xid IS NULL AND a.state IS NOT NULL
                 AND (t.root_pid OPERATOR(pg_catalog.=) 0
                      OR r.state IN ('idle in transaction', 'idle in transaction (aborted)'))
                 AND EXISTS (SELECT FROM nodes w WHERE w.blocked_by OPERATOR(pg_catalog.=) ARRAY[t.pid])
                THEN pg_catalog.format('SELECT pg_cancel_backend(%s)', t.pid)
       END AS action,
       p.gid,
       t.snapshot_at
  FROM nodes t
  LEFT JOIN activity a ON a.pid OPERATOR(pg_catalog.=) t.pid AND t.xid IS NULL
  LEFT JOIN activity r ON r.pid OPERATOR(pg_catalog.=) t.root_pid
  LEFT JOIN pg_catalog.pg_prepared_xact() p ON p.transaction OPERATOR(pg_catalog.=) t.xid
 ORDER BY t.ord;
COMMENT ON VIEW concurrency.lock_tree IS
    'every session in a wait chain with its user, application and client, its root blocker, depth, path and transitive blocked count, and the statement that frees the chain (never executed): for roots, and for a DDL that holds readers up behind an idle or prepared root only by its place in the lock queue, where cancelling it frees them';
GRANT SELECT ON concurrency.lock_tree TO PUBLIC;
-- ---------------------------------------------------------------------------
-- The names of a queue's relations (src/queue/relation_names.hpp), for the
-- SQL that needs them, so that they are built in one place: its tables
-- q_<queue>, k_, s_, r_, rk_<queue>, and their indexes and identity
-- sequence, named role first since 0.4.0 (ready_q_jobs, pkey_k_jobs,
-- id_seq_q_jobs: no such name is another queue's relation's) and table first
-- before (q_jobs_ready, kept by the queues made then).
-- ---------------------------------------------------------------------------

-- The name (unquoted) of table tbl (tasks, keys, slots, rate, key_rate) of a
-- queue, or with role, of that table's index or identity sequence of that
-- role (pkey, ready, scheduled, leased, dedupe, finished, waiting, dead,
-- keyed, fair, id_seq): the name it has, or, where the table has none
-- (yet), the name it gets. 22023 for a word it does not know.
CREATE FUNCTION concurrency_internal.queue_relation_name(queue text, tbl text, role text DEFAULT NULL)
    RETURNS text
    LANGUAGE c STABLE PARALLEL SAFE
    AS 'MODULE_PATHNAME', 'concurrency_queue_relation_name';
COMMENT ON FUNCTION concurrency_internal.queue_relation_name(text, text, text) IS
    'the name of a table of a queue (tasks, keys, slots, rate, key_rate), or of its index or identity sequence of a role (pkey, ready, …, id_seq), as it is or will be (internal)';
-- ---------------------------------------------------------------------------
-- The SQL that makes a queue distributed (docs/scaling-out.md) and keeps
-- its catalog and lease slots on every node: distribute_queue,
-- distribute_key_rate_slots, distributed_sync_catalog,
-- distributed_queue_settings, distributed_leased and
-- distributed_resize_slots (see 41_distributed_queue.sql for the placement
-- and 42_distributed_nodes.sql for the nodes). Their C++ is
-- src/queue/distributed/ddl.cpp, which names a queue's relations as the
-- local queue's statements do (src/queue/relation_names.hpp; a queue made
-- before 0.4.0 keeps its index names of the older rule). CREATE OR REPLACE:
-- the update from 0.3.0 replaces that version's PL/pgSQL functions in
-- place, with their privileges.
-- ---------------------------------------------------------------------------

-- The settings and shard keys of a distributed queue; 42704 when the queue is
-- not distributed (or does not exist).
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_queue_settings(queue text,
        OUT relation text, OUT lease interval, OUT max_attempts integer, OUT shard_keys integer[],
        OUT dedupe_holder text, OUT retain interval, OUT key_limit integer, OUT max_leased integer)
    LANGUAGE c STABLE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_distributed_queue_settings';
COMMENT ON FUNCTION concurrency_internal.distributed_queue_settings(text) IS
    'table, lease, max_attempts and shard keys of a distributed queue (42704 if it is not one)';

-- The leased tasks of a distributed queue (a query over every shard).
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_leased(queue text)
    RETURNS TABLE (id bigint, lease_token bigint, lease_expires_at timestamptz)
    LANGUAGE c VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_distributed_leased';
COMMENT ON FUNCTION concurrency_internal.distributed_leased(text) IS
    'the leased tasks of a distributed queue (id, lease token, lease end)';

-- After alter_queue set max_leased (0: none): slots 1..max_leased, the leases
-- running now written into the empty ones.
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_resize_slots(queue text, max_leased integer) RETURNS void
    LANGUAGE c VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_distributed_resize_slots';
COMMENT ON FUNCTION concurrency_internal.distributed_resize_slots(text, integer) IS
    'gives a distributed queue max_leased lease slots, the running leases written into them (0: none)';

-- Copies what the coordinator knows of a queue (its row of concurrency.queue,
-- of concurrency.distributed_queue and its permissions) to every other node,
-- replacing what they had, in this transaction; a queue that is gone is
-- removed there. Nothing on a server that is not a Citus coordinator. Runs
-- as the owner of the catalog (Citus sends the command as that user).
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_sync_catalog(queue text) RETURNS void
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_distributed_sync_catalog';
COMMENT ON FUNCTION concurrency_internal.distributed_sync_catalog(text) IS
    'copies a distributed queue''s settings, shard keys and permissions to every other Citus node, in this transaction (internal)';
REVOKE ALL ON FUNCTION concurrency_internal.distributed_sync_catalog(text) FROM PUBLIC;

-- The slots of key_rate_limit of distributed queue `queue` (rk_<queue>)
-- distributed beside its tasks: a key's slots on the shard of its tasks,
-- where the claims of that shard take them. By distribute_queue, and by
-- alter_queue where it adds the limit to a distributed queue (as the owner of
-- the queue's table). Slots still there are forgotten: a key's first claims
-- make them again. Nothing where they are distributed already; 55000 for a
-- queue that is not distributed or has no such slots.
CREATE OR REPLACE FUNCTION concurrency_internal.distribute_key_rate_slots(queue text) RETURNS void
    LANGUAGE c VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_distribute_key_rate_slots';
COMMENT ON FUNCTION concurrency_internal.distribute_key_rate_slots(text) IS
    'distributes the slot table of key_rate_limit of a distributed queue beside its tasks'' shards (internal)';

-- Makes an empty queue distributed. The caller must own the queue's table
-- (ALTER TABLE) and run it on the coordinator.
CREATE OR REPLACE FUNCTION concurrency.distribute_queue(queue text, shard_count integer DEFAULT NULL)
    RETURNS void
    LANGUAGE c VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_distribute_queue';
COMMENT ON FUNCTION concurrency.distribute_queue(text, integer) IS
    'makes an empty queue a Citus distributed table (shard_count shards, default citus.shard_count); run on the coordinator';
REVOKE ALL ON FUNCTION concurrency.distribute_queue(text, integer) FROM PUBLIC;
-- ---------------------------------------------------------------------------
-- Counters (src/counters, docs/counters.md): one value that many transactions
-- change at once, split into slot rows so that writers take different rows
-- (SKIP LOCKED) instead of queueing on one. The value is the sum of the
-- slots. Optional bounds are never crossed (the escrow method): each slot
-- has a floor and a ceiling of its own, the floors sum to min_value and the
-- ceilings to max_value, and no slot ever leaves its range.
--
-- All three tables are extension configuration: pg_dump / pg_restore keep
-- them. Nobody but the extension's owner touches them directly; the
-- functions (SECURITY INVOKER, C) check the caller's permission and run
-- their statements as the tables' owner.
-- ---------------------------------------------------------------------------
CREATE TABLE concurrency.counter (
    name      text    PRIMARY KEY CHECK (name <> '' AND pg_catalog.length(name) <= 200),
    slots     integer NOT NULL CHECK (slots BETWEEN 1 AND 1024),
    min_value numeric,
    max_value numeric,
    owner     regrole NOT NULL,
    CHECK (min_value <= max_value)
);
COMMENT ON TABLE concurrency.counter IS
    'counters of concurrency_ext (create_counter, alter_counter, drop_counter); their values are in counter_slot';
SELECT pg_catalog.pg_extension_config_dump('concurrency.counter', '');

-- One row per slot. floor / ceiling: the slot's share of min_value /
-- max_value (NULL: no bound on that side); value stays between them.
CREATE TABLE concurrency.counter_slot (
    counter text    NOT NULL REFERENCES concurrency.counter (name) ON DELETE CASCADE,
    slot    integer NOT NULL CHECK (slot >= 0),
    value   numeric NOT NULL DEFAULT 0,
    floor   numeric,
    ceiling numeric,
    PRIMARY KEY (counter, slot),
    CHECK (value >= floor AND value <= ceiling)
);
COMMENT ON TABLE concurrency.counter_slot IS
    'the slots of each counter: its value is their sum; each slot stays between its floor and ceiling';
SELECT pg_catalog.pg_extension_config_dump('concurrency.counter_slot', '');

-- Who may use or read a counter besides its owner (and superusers): 'use'
-- adds and reads, 'read' reads. Grantee 0 (shown as '-') is PUBLIC.
CREATE TABLE concurrency.counter_permission (
    counter    text    NOT NULL REFERENCES concurrency.counter (name) ON DELETE CASCADE,
    grantee    regrole NOT NULL,
    permission text    NOT NULL CHECK (permission IN ('use', 'read')),
    PRIMARY KEY (counter, grantee, permission)
);
COMMENT ON TABLE concurrency.counter_permission IS
    'permissions on concurrency_ext counters (grantee - is PUBLIC); change them with grant_counter and revoke_counter';
SELECT pg_catalog.pg_extension_config_dump('concurrency.counter_permission',
    'WHERE grantee OPERATOR(pg_catalog.=) 0 OR EXISTS (SELECT FROM pg_catalog.pg_roles AS r '
    'WHERE r.oid OPERATOR(pg_catalog.=) grantee::pg_catalog.oid)');
-- Who holds what is no secret (as for queues); changing it goes through the functions.
GRANT SELECT ON concurrency.counter_permission TO PUBLIC;

CREATE FUNCTION concurrency.create_counter(name text, slots integer DEFAULT 16,
                                           min_value numeric DEFAULT NULL, max_value numeric DEFAULT NULL)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_create_counter';
COMMENT ON FUNCTION concurrency.create_counter(text, integer, numeric, numeric) IS
    'creates a counter of value 0 split into slots rows, optionally bounded (min_value <= 0 <= max_value); the caller owns it';
-- Creating counters is for roles an administrator chose.
REVOKE EXECUTE ON FUNCTION concurrency.create_counter(text, integer, numeric, numeric) FROM PUBLIC;

CREATE FUNCTION concurrency.drop_counter(name text)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_drop_counter';
COMMENT ON FUNCTION concurrency.drop_counter(text) IS
    'drops a counter with its value and permissions; for its owner';

CREATE FUNCTION concurrency.alter_counter(name text, slots integer)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_alter_counter';
COMMENT ON FUNCTION concurrency.alter_counter(text, integer) IS
    'changes the number of slots of a counter, keeping its value exactly; for its owner';

CREATE FUNCTION concurrency.compact_counter(name text)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_compact_counter';
COMMENT ON FUNCTION concurrency.compact_counter(text) IS
    'folds a counter''s slots back (into slot 0, or spread evenly within its bounds), keeping its value exactly; for its owner';

CREATE FUNCTION concurrency.counter_add(name text, delta numeric)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_counter_add';
COMMENT ON FUNCTION concurrency.counter_add(text, numeric) IS
    'adds delta to a counter in the caller''s transaction, on a slot nobody holds; a bound it would cross raises 23514 and changes nothing; needs use';

CREATE FUNCTION concurrency.counter_value(name text)
    RETURNS numeric
    LANGUAGE c STABLE
    AS 'MODULE_PATHNAME', 'concurrency_counter_value';
COMMENT ON FUNCTION concurrency.counter_value(text) IS
    'the value of a counter as of the caller''s snapshot (the sum of its slots); needs read or use';

CREATE FUNCTION concurrency.grant_counter(counter text, role name, permission text)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_grant_counter';
COMMENT ON FUNCTION concurrency.grant_counter(text, name, text) IS
    'grants use (add and read) or read on a counter to a role (''public'': everyone); for its owner';

CREATE FUNCTION concurrency.revoke_counter(counter text, role name, permission text)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_revoke_counter';
COMMENT ON FUNCTION concurrency.revoke_counter(text, name, text) IS
    'revokes use or read on a counter from a role (''public'': everyone); for its owner';

-- The counters the current user may read, with their values as of the
-- statement's snapshot. The view runs as its owner (the extension's), and
-- shows only rows whose counter the caller holds read or use on.
CREATE VIEW concurrency.counters WITH (security_barrier) AS
SELECT c.name,
       (SELECT pg_catalog.sum(s.value) FROM concurrency.counter_slot AS s
         WHERE s.counter OPERATOR(pg_catalog.=) c.name) AS value,
       c.slots, c.min_value, c.max_value
  FROM concurrency.counter AS c
 WHERE pg_catalog.pg_has_role(CURRENT_USER, c.owner::pg_catalog.oid, 'USAGE')
    OR EXISTS (SELECT FROM concurrency.counter_permission AS p
                WHERE p.counter OPERATOR(pg_catalog.=) c.name
                  AND (p.grantee::pg_catalog.oid OPERATOR(pg_catalog.=) 0
                       OR pg_catalog.pg_has_role(CURRENT_USER, p.grantee::pg_catalog.oid, 'USAGE')));
COMMENT ON VIEW concurrency.counters IS
    'counters the current user may read: name, value (as of the statement''s snapshot), slots, bounds';
GRANT SELECT ON concurrency.counters TO PUBLIC;
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
CREATE FUNCTION concurrency_internal.distribute_events() RETURNS void
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
CREATE FUNCTION concurrency_internal.distributed_queue_added() RETURNS trigger
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_distributed_queue_added';
COMMENT ON FUNCTION concurrency_internal.distributed_queue_added() IS
    'after a queue is distributed: the event tables too (internal)';
CREATE CONSTRAINT TRIGGER distribute_events AFTER INSERT OR UPDATE ON concurrency.distributed_queue
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION concurrency_internal.distributed_queue_added();

-- The task's part of await_event, on the node of its shard.
-- op: 'look' (the event's step and the task's awaiting), 'receive' (the
-- payload recorded as the event's step, the wait ended), 'time_out' (the
-- await's timeout recorded), 'park' (parked until `at`).
CREATE FUNCTION concurrency_internal.await_event_task(queue text, task_id bigint, lease_token bigint, event text,
                                                      op text, payload jsonb, at timestamptz)
    RETURNS TABLE(taken jsonb, timed_out boolean, awaiting text)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_await_event_task';
COMMENT ON FUNCTION concurrency_internal.await_event_task(text, bigint, bigint, text, text, jsonb, timestamptz) IS
    'the part of await_event on the task''s shard (internal)';

-- An emitted event handed to a task parked for it, on the node of its shard.
CREATE FUNCTION concurrency_internal.deliver_event(queue text, task_id bigint, event text, payload jsonb)
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
-- other: concurrency.cluster_lock_wait_rows, 40_citus.sql): Citus runs it on
-- the node of the event's shard, where it names that node's shard tables
-- with Citus's own shard_name; it builds no name of a queue's relation, and
-- reads Citus's catalog, which exists only where Citus does.
CREATE FUNCTION concurrency_internal.forget_events_on_shard(event text, cutoff timestamptz)
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

-- An installation whose queues were distributed before (the update from
-- 0.3.0): its event tables, new and empty, distributed when the update
-- commits (the trigger above, on the coordinator).
DO $distribute$
BEGIN
    IF concurrency.citus_node_role() = 'coordinator' THEN
        UPDATE concurrency.distributed_queue SET queue = queue;
    END IF;
END
$distribute$;
-- ---------------------------------------------------------------------------
-- Queue counts over time: samples of concurrency.queue_stats kept in a table,
-- so that a chart of the last hours survives a page reload and a restart of
-- whatever draws it. Where the module is preloaded, the schedule runner of
-- each database (src/queue/time/stats_history.hpp) calls queue_stats_sample
-- every concurrency.stats_history_interval and drops the samples older than
-- concurrency.stats_history_retention. New in 0.4.0: the update from 0.3.0
-- takes this part as it is (src/sql/concurrency_ext--0.3.0--0.4.0/INSTALL_PARTS).
-- ---------------------------------------------------------------------------

-- One row per queue and sample. inserted: the rows inserted into the queue's
-- table since the server's statistics were reset (pg_stat_user_tables
-- .n_tup_ins), from which enqueued and finished per interval follow.
-- relid tells a re-created queue's series from the one before.
CREATE TABLE concurrency.queue_stats_sample (
    sampled_at timestamptz NOT NULL,
    queue      text        NOT NULL,
    relid      oid,
    ready      bigint, scheduled bigint, leased bigint, expired bigint, dead bigint,
    done       bigint, cancelled bigint, blocked bigint, waiting bigint,
    inserted   bigint,
    PRIMARY KEY (sampled_at, queue)
);
COMMENT ON TABLE concurrency.queue_stats_sample IS
    'samples of concurrency.queue_stats (queue_stats_sample); read them through the view concurrency.queue_stats_history';

-- Takes one sample of every queue (as the function's owner, who may read
-- every queue's counts) and deletes the samples older than `retain`.
-- Returns the rows inserted. (src/queue/time/stats_history.cpp: relid is the
-- queue's table, by the name src/queue/relation_names.hpp gives it.)
CREATE FUNCTION concurrency.queue_stats_sample(retain interval DEFAULT '1 day')
    RETURNS bigint
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_queue_stats_sample';
COMMENT ON FUNCTION concurrency.queue_stats_sample(interval) IS
    'adds a sample of every queue''s counts to concurrency.queue_stats_sample and deletes the samples older than retain; the schedule runner calls it every concurrency.stats_history_interval';
REVOKE ALL ON FUNCTION concurrency.queue_stats_sample(interval) FROM PUBLIC;

-- The samples of the queues whose counts the reader may see now: a holder
-- of read on the queue (mirrored as SELECT on its table, whose name
-- concurrency_internal.queue_relation_name gives) or a member of
-- concurrency_monitor, as concurrency.queue_stats decides. A sample of a
-- queue that is gone (no such name in the catalog) only to the members.
CREATE VIEW concurrency.queue_stats_history WITH (security_barrier) AS
    SELECT h.sampled_at, h.queue, h.relid, h.ready, h.scheduled, h.leased, h.expired, h.dead, h.done,
           h.cancelled, h.blocked, h.waiting, h.inserted
      FROM concurrency.queue_stats_sample h
     WHERE pg_catalog.pg_has_role('concurrency_monitor', 'USAGE')
        OR EXISTS (SELECT FROM concurrency.queue q
                    WHERE q.name OPERATOR(pg_catalog.=) h.queue
                      AND pg_catalog.has_table_privilege(
                              pg_catalog.to_regclass(pg_catalog.format('concurrency.%I',
                                  concurrency_internal.queue_relation_name(q.name, 'tasks')))::pg_catalog.oid,
                              'SELECT'));
COMMENT ON VIEW concurrency.queue_stats_history IS
    'samples of the counts of the queues you may read (queue_stats_sample), oldest first by sampled_at';
GRANT SELECT ON concurrency.queue_stats_history TO PUBLIC;
