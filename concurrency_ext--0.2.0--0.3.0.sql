-- generated from src/sql/concurrency_ext--0.2.0--0.3.0/ by make upgrade-scripts: edit its parts and the install parts its INSTALL_PARTS names
\echo Use "ALTER EXTENSION concurrency_ext UPDATE" to load this file. \quit
-- ---------------------------------------------------------------------------
-- concurrency_ext 0.2.0 -> 0.3.0: the parts of src/sql/concurrency_ext--0.2.0--0.3.0/
-- (what turns 0.2.0's objects and data into 0.3.0's) and the install parts
-- that its INSTALL_PARTS names (objects new in 0.3.0, defined once), applied
-- in the order of their file names. Every part must keep the data of a live
-- 0.2.0 installation (queues with leased, scheduled and dead tasks, keys,
-- permissions, registered subsystems, lock history), and the result must
-- equal a fresh install (scripts/upgrade-check.sh).
-- ---------------------------------------------------------------------------
-- ---------------------------------------------------------------------------
-- Task queue 0.2.0 -> 0.3.0: the catalog's paused flag (pause_queue, in
-- 25_queue_pause.sql), last, as a fresh install has it; every queue of 0.2.0
-- runs. queue_stats shows it as its last column (CREATE OR REPLACE VIEW may
-- add columns at the end: privileges on the view are kept).
-- ---------------------------------------------------------------------------

ALTER TABLE concurrency.queue ADD COLUMN paused boolean NOT NULL DEFAULT false;

CREATE OR REPLACE VIEW concurrency.queue_stats AS
    SELECT s.queue, s.ready, s.scheduled, s.leased, s.expired, s.dead, s.done, s.cancelled, s.blocked,
           s.oldest_ready_age, q.paused
      FROM concurrency.queue_stats_rows() s
      LEFT JOIN concurrency.queue q ON q.name OPERATOR(pg_catalog.=) s.queue;
COMMENT ON VIEW concurrency.queue_stats IS
    'per queue: tasks ready, scheduled (run_at in the future), leased, expired (lease passed, not yet reclaimed), dead, done and cancelled (retained), blocked (held back by key_limit or max_leased now), the age of the oldest ready task, and whether the queue is paused (pause_queue); counts are NULL for queues on which you lack permission read';
-- ---------------------------------------------------------------------------
-- Task queue 0.2.0 -> 0.3.0, before 24_queue_wait.sql defines dequeue,
-- heartbeat, heartbeat_batch and task_status anew (with wait and progress),
-- and 24_queue_enqueue.sql enqueue (with on_conflict, after) and enqueue_batch
-- (with after):
-- their 0.2.0 definitions step aside under other names, so that the new ones
-- can be created (task_status keeps its argument types but returns one more
-- column, which CREATE OR REPLACE cannot do). 25_queue_wait_grants.sql gives
-- their privileges to the new ones and drops them.
-- ---------------------------------------------------------------------------

ALTER FUNCTION concurrency.dequeue(text, integer, interval, text) RENAME TO dequeue_0_2_0;
ALTER FUNCTION concurrency.heartbeat(text, bigint, bigint, interval) RENAME TO heartbeat_0_2_0;
ALTER FUNCTION concurrency.heartbeat_batch(text, bigint[], bigint[], interval) RENAME TO heartbeat_batch_0_2_0;
ALTER FUNCTION concurrency.task_status(text, bigint) RENAME TO task_status_0_2_0;
ALTER FUNCTION concurrency.enqueue(text, jsonb, timestamptz, integer, text, text) RENAME TO enqueue_0_2_0;
ALTER FUNCTION concurrency.enqueue_batch(text, jsonb[], timestamptz, integer, text[], text[]) RENAME TO enqueue_batch_0_2_0;
-- ---------------------------------------------------------------------------
-- Task queue: enqueue and enqueue_batch (docs/queue.md, "Deduplication"). With a dedupe_key
-- whose holder exists, on_conflict says what happens: 'ignore' (the default)
-- returns the holder's id and changes nothing; 'replace' gives the holder
-- the new payload, run_at and priority if it has not started (ready,
-- scheduled, blocked by its key or waiting for its parents), and returns its
-- id (a debounce). With after, a new task waits for those tasks
-- (27_queue_dependencies.sql). Like the other task functions, SECURITY
-- INVOKER without SET search_path.
-- ---------------------------------------------------------------------------

CREATE FUNCTION concurrency.enqueue(queue text, payload jsonb DEFAULT '{}', run_at timestamptz DEFAULT NULL,
                                    priority integer DEFAULT 0, dedupe_key text DEFAULT NULL,
                                    concurrency_key text DEFAULT NULL, on_conflict text DEFAULT 'ignore',
                                    after bigint[] DEFAULT NULL)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_enqueue';
COMMENT ON FUNCTION concurrency.enqueue(text, jsonb, timestamptz, integer, text, text, text, bigint[]) IS
    'adds a task and returns its id (the id of the task holding dedupe_key, live or retained as done, if any; with on_conflict => ''replace'', a holder not yet started takes the new payload, run_at and priority); a new task with after waits until those tasks of the queue are done; notifies channel concurrency_<queue> at commit';

CREATE FUNCTION concurrency.enqueue_batch(queue text, payloads jsonb[], run_at timestamptz DEFAULT NULL,
                                          priority integer DEFAULT 0, dedupe_keys text[] DEFAULT NULL,
                                          concurrency_keys text[] DEFAULT NULL, after bigint[] DEFAULT NULL)
    RETURNS SETOF bigint
    LANGUAGE c VOLATILE ROWS 100
    AS 'MODULE_PATHNAME', 'concurrency_enqueue_batch';
COMMENT ON FUNCTION concurrency.enqueue_batch(text, jsonb[], timestamptz, integer, text[], text[], bigint[]) IS
    'adds one task per payload in one statement and returns their ids in payload order (per-element dedupe and concurrency keys; the new tasks wait for the tasks of the queue in after)';
-- ---------------------------------------------------------------------------
-- concurrency_monitor: a role whose members hold permission read on every
-- queue of every database where the extension is installed, present and
-- future — for metrics exporters and dashboards, as pg_monitor is for the
-- server's own statistics: GRANT concurrency_monitor TO postgres_exporter.
-- It gives read through the functions (queue_stats, queue_keys, task_status),
-- not SELECT on the queues' tables.
--
-- Roles belong to the cluster, not to a database: the first CREATE EXTENSION
-- (or ALTER EXTENSION ... UPDATE) creates it, later ones find it; DROP
-- EXTENSION leaves it (DROP ROLE it when no database uses the extension).
-- pg_dump does not dump roles: pg_dumpall --roles-only keeps it and its
-- members, and a restore into a cluster without it creates it again with the
-- extension.
-- ---------------------------------------------------------------------------
DO $monitor$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) 'concurrency_monitor') THEN
        CREATE ROLE concurrency_monitor NOLOGIN;
        COMMENT ON ROLE concurrency_monitor IS
            'members hold permission read on every concurrency_ext queue (counts, keys, task status), present and future';
    END IF;
END
$monitor$;
-- ---------------------------------------------------------------------------
-- Task queue: waiting for work, handing it back, reporting progress
-- (docs/queue.md, "Waiting for work"; src/queue/wait.hpp). Like the other
-- task functions these are SECURITY INVOKER and check the caller's queue
-- permission themselves (work, or read for task_status).
-- ---------------------------------------------------------------------------

CREATE FUNCTION concurrency.dequeue(queue text, batch integer DEFAULT 1, lease interval DEFAULT NULL,
                                    worker text DEFAULT NULL, wait interval DEFAULT NULL)
    RETURNS TABLE (task_id bigint, lease_token bigint, attempt integer, payload jsonb,
                   enqueued_at timestamptz, lease_expires_at timestamptz)
    LANGUAGE c VOLATILE ROWS 1
    AS 'MODULE_PATHNAME', 'concurrency_dequeue';
COMMENT ON FUNCTION concurrency.dequeue(text, integer, interval, text, interval) IS
    'claims up to batch ready tasks (or tasks whose lease expired) without waiting for other workers; each claim gets a new lease token; with wait, a call that finds nothing sleeps until a commit, a due task or an expired lease makes one claimable, for at most wait';

CREATE FUNCTION concurrency.heartbeat(queue text, task_id bigint, lease_token bigint,
                                      extend interval DEFAULT NULL, progress jsonb DEFAULT NULL)
    RETURNS timestamptz
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_heartbeat';
COMMENT ON FUNCTION concurrency.heartbeat(text, bigint, bigint, interval, jsonb) IS
    'extends the lease of a task held with lease_token (by the queue''s lease when extend is NULL) and stores progress when given (shown by task_status); returns the new deadline; SQLSTATE CE001 if the lease was lost';

CREATE FUNCTION concurrency.heartbeat_batch(queue text, task_ids bigint[], lease_tokens bigint[],
                                            extend interval DEFAULT NULL, progress jsonb[] DEFAULT NULL)
    RETURNS timestamptz
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_heartbeat_many';
COMMENT ON FUNCTION concurrency.heartbeat_batch(text, bigint[], bigint[], interval, jsonb[]) IS
    'extends the leases of the tasks held with the lease tokens at the same positions, all or none (SQLSTATE CE001 naming a lost lease), and stores the progress at the same positions when given; returns the new deadline';

CREATE FUNCTION concurrency.release(queue text, task_id bigint, lease_token bigint, run_at timestamptz DEFAULT NULL)
    RETURNS boolean
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_release';
COMMENT ON FUNCTION concurrency.release(text, bigint, bigint, timestamptz) IS
    'hands a task held with lease_token back unstarted: ready again in its place (or scheduled at run_at), the attempt not counted, the token fenced off; returns true; SQLSTATE CE001 if the lease was lost';

CREATE FUNCTION concurrency.release_batch(queue text, task_ids bigint[], lease_tokens bigint[],
                                          run_at timestamptz DEFAULT NULL)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_release_many';
COMMENT ON FUNCTION concurrency.release_batch(text, bigint[], bigint[], timestamptz) IS
    'hands the tasks held with the lease tokens at the same positions back unstarted, all or none (SQLSTATE CE001 naming a lost lease); returns how many';

CREATE FUNCTION concurrency.task_status(queue text, id bigint)
    RETURNS TABLE (task_id bigint, state text, attempt integer, priority integer, run_at timestamptz,
                   enqueued_at timestamptz, lease_expires_at timestamptz, worker text, last_error text,
                   finished_at timestamptz, result jsonb, dedupe_key text, concurrency_key text,
                   progress jsonb, parents_open integer)
    LANGUAGE c VOLATILE ROWS 1
    AS 'MODULE_PATHNAME', 'concurrency_task_status';
COMMENT ON FUNCTION concurrency.task_status(text, bigint) IS
    'what became of a task: one row (state, attempt, times, worker, last error, result, keys, the progress of a task not finished yet, and how many parents a waiting task waits for), or none if it does not exist (any more)';
-- ---------------------------------------------------------------------------
-- Task queue: pausing a queue (docs/queue.md, "Pausing a queue"). While
-- concurrency.queue.paused is set, dequeue claims nothing (a waiting call
-- keeps waiting and is woken by the resume); enqueue works, and leased tasks
-- may still be heartbeated, completed, failed, released and cancelled. The
-- flag is a column of the catalog, so a pause survives restarts, pg_dump and
-- pg_restore. Like alter_queue these are SECURITY DEFINER (they change the
-- catalog) and check that the caller holds permission manage on the queue.
-- ---------------------------------------------------------------------------

CREATE FUNCTION concurrency.pause_queue(queue text)
    RETURNS boolean
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_pause_queue';
COMMENT ON FUNCTION concurrency.pause_queue(text) IS
    'stops claims from the queue until resume_queue (enqueue, heartbeat, complete, fail and release go on); returns false if it was paused already';

CREATE FUNCTION concurrency.resume_queue(queue text)
    RETURNS boolean
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_resume_queue';
COMMENT ON FUNCTION concurrency.resume_queue(text) IS
    'lets workers claim from a paused queue again, waking its waiting dequeue calls at commit; returns false if it was not paused';
-- ---------------------------------------------------------------------------
-- Task queue 0.2.0 -> 0.3.0, after 24_queue_enqueue.sql and 24_queue_wait.sql: the privileges of the
-- functions it replaced go to their successors as they were (EXECUTE for
-- PUBLIC by default, or whatever the database's administrators made of it),
-- the old definitions are dropped, and every queue's table gets the progress
-- column that heartbeat(…, progress) writes (a new queue's table has it from
-- create_queue). Tasks of every state stay as they are.
-- ---------------------------------------------------------------------------

DO $upgrade$
DECLARE
    pair record;
    g record;
BEGIN
    FOR pair IN
        SELECT * FROM (VALUES
            ('concurrency.dequeue_0_2_0(text,integer,interval,text)'::pg_catalog.regprocedure::pg_catalog.oid,
             'concurrency.dequeue(text,integer,interval,text,interval)'::pg_catalog.regprocedure::pg_catalog.oid),
            ('concurrency.heartbeat_0_2_0(text,bigint,bigint,interval)'::pg_catalog.regprocedure::pg_catalog.oid,
             'concurrency.heartbeat(text,bigint,bigint,interval,jsonb)'::pg_catalog.regprocedure::pg_catalog.oid),
            ('concurrency.heartbeat_batch_0_2_0(text,bigint[],bigint[],interval)'::pg_catalog.regprocedure::pg_catalog.oid,
             'concurrency.heartbeat_batch(text,bigint[],bigint[],interval,jsonb[])'::pg_catalog.regprocedure::pg_catalog.oid),
            ('concurrency.task_status_0_2_0(text,bigint)'::pg_catalog.regprocedure::pg_catalog.oid,
             'concurrency.task_status(text,bigint)'::pg_catalog.regprocedure::pg_catalog.oid),
            ('concurrency.enqueue_0_2_0(text,jsonb,timestamptz,integer,text,text)'::pg_catalog.regprocedure::pg_catalog.oid,
             'concurrency.enqueue(text,jsonb,timestamptz,integer,text,text,text,bigint[])'::pg_catalog.regprocedure::pg_catalog.oid),
            ('concurrency.enqueue_batch_0_2_0(text,jsonb[],timestamptz,integer,text[],text[])'::pg_catalog.regprocedure::pg_catalog.oid,
             'concurrency.enqueue_batch(text,jsonb[],timestamptz,integer,text[],text[],bigint[])'::pg_catalog.regprocedure::pg_catalog.oid)) AS p(old, new)
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', pair.new::pg_catalog.regprocedure);
        FOR g IN
            SELECT a.grantee, a.privilege_type, a.is_grantable
              FROM pg_catalog.pg_proc p,
                   pg_catalog.aclexplode(COALESCE(p.proacl, pg_catalog.acldefault('f', p.proowner))) a
             WHERE p.oid OPERATOR(pg_catalog.=) pair.old
        LOOP
            EXECUTE pg_catalog.format('GRANT %s ON FUNCTION %s TO %s%s', g.privilege_type,
                pair.new::pg_catalog.regprocedure::pg_catalog.text,
                CASE WHEN g.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                     ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(g.grantee)) END,
                CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
    END LOOP;
END
$upgrade$;

DROP FUNCTION concurrency.dequeue_0_2_0(text, integer, interval, text);
DROP FUNCTION concurrency.heartbeat_0_2_0(text, bigint, bigint, interval);
DROP FUNCTION concurrency.heartbeat_batch_0_2_0(text, bigint[], bigint[], interval);
DROP FUNCTION concurrency.task_status_0_2_0(text, bigint);
DROP FUNCTION concurrency.enqueue_0_2_0(text, jsonb, timestamptz, integer, text, text);
DROP FUNCTION concurrency.enqueue_batch_0_2_0(text, jsonb[], timestamptz, integer, text[], text[]);

-- Every queue's table (a distributed queue's too: Citus sends the ALTER to
-- its shards) gets the progress column, last, as create_queue makes it. A
-- queue created after the new library was installed but before this update
-- has it already.
DO $upgrade$
DECLARE
    q record;
BEGIN
    FOR q IN SELECT name FROM concurrency.queue ORDER BY name LOOP
        IF pg_catalog.to_regclass(pg_catalog.format('concurrency.%I', 'q_' || q.name)) IS NOT NULL THEN
            EXECUTE pg_catalog.format('ALTER TABLE concurrency.%I ADD COLUMN IF NOT EXISTS progress jsonb', 'q_' || q.name);
        END IF;
    END LOOP;
END
$upgrade$;
-- ---------------------------------------------------------------------------
-- Task queue: schedules (docs/queue.md, "Schedules"). A schedule enqueues one
-- task per due time of a cron expression or an interval. There is no
-- scheduler process: dequeue on the schedule's queue turns the due times
-- that have passed into tasks (src/queue/schedule.cpp), under the schedule
-- row's lock and in the same transaction that advances last_due, so each
-- due time becomes exactly one task however many workers look at once.
-- ---------------------------------------------------------------------------

-- One row per schedule. last_due: every due time up to it was enqueued or
-- skipped (catch_up); next_run_at: the first due time after it. Extension
-- configuration (pg_dump keeps the rows, and with them last_due, so that a
-- restored database enqueues no due time again); its queue's drop drops it.
CREATE TABLE concurrency.schedule (
    name            text        PRIMARY KEY CHECK (octet_length(name) BETWEEN 1 AND 200),
    queue           text        NOT NULL REFERENCES concurrency.queue (name) ON DELETE CASCADE,
    cron            text,
    every           interval,
    payload         jsonb       NOT NULL DEFAULT '{}',
    time_zone       text        NOT NULL DEFAULT 'UTC',
    priority        integer     NOT NULL DEFAULT 0,
    concurrency_key text,
    catch_up        integer     NOT NULL DEFAULT 1 CHECK (catch_up BETWEEN 1 AND 1000),
    last_due        timestamptz NOT NULL,
    next_run_at     timestamptz,
    last_run_at     timestamptz,
    last_task_id    bigint,
    skipped         bigint      NOT NULL DEFAULT 0,
    enabled         boolean     NOT NULL DEFAULT true,
    CHECK ((cron IS NULL) <> (every IS NULL))
);
COMMENT ON TABLE concurrency.schedule IS
    'catalog of concurrency_ext schedules (schedule, unschedule; the view concurrency.schedules shows them)';
CREATE INDEX schedule_queue_next ON concurrency.schedule (queue, next_run_at);
SELECT pg_catalog.pg_extension_config_dump('concurrency.schedule', '');

-- Each backend caches the earliest next_run_at of a queue's schedules, so that
-- a dequeue with nothing due reads no table: this statement trigger (the
-- catalog's own function: it invalidates the relcache entry of the table it
-- fires on) tells every backend to read it again.
CREATE TRIGGER schedule_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON concurrency.schedule
    FOR EACH STATEMENT EXECUTE FUNCTION concurrency.queue_changed();

-- SECURITY DEFINER (they write the catalog); the caller needs permission
-- manage on the schedule's queue.
CREATE FUNCTION concurrency.schedule(name text, queue text, cron text DEFAULT NULL, every interval DEFAULT NULL,
                                     payload jsonb DEFAULT '{}', time_zone text DEFAULT 'UTC',
                                     priority integer DEFAULT 0, concurrency_key text DEFAULT NULL,
                                     catch_up integer DEFAULT 1)
    RETURNS void
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_schedule';
COMMENT ON FUNCTION concurrency.schedule(text, text, text, interval, jsonb, text, integer, text, integer) IS
    'enqueues a task into the queue at each due time of cron (in time_zone) or every interval, its payload with "scheduled_for"; the same settings again is a no-op, other settings replace the schedule; needs manage on the queue';

CREATE FUNCTION concurrency.unschedule(name text)
    RETURNS boolean
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_unschedule';
COMMENT ON FUNCTION concurrency.unschedule(text) IS
    'removes the schedule (its tasks already enqueued stay); false if there is none; needs manage on its queue';

CREATE FUNCTION concurrency.schedule_rows()
    RETURNS TABLE (name text, queue text, spec text, time_zone text, next_run_at timestamptz,
                   last_run_at timestamptz, last_task_id bigint, enabled boolean, skipped bigint)
    LANGUAGE c STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_schedule_rows';
COMMENT ON FUNCTION concurrency.schedule_rows() IS
    'rows of the view concurrency.schedules';

CREATE VIEW concurrency.schedules AS
    SELECT s.name, s.queue, s.spec, s.time_zone, s.next_run_at, s.last_run_at, s.last_task_id, s.enabled,
           s.skipped
      FROM concurrency.schedule_rows() s;
COMMENT ON VIEW concurrency.schedules IS
    'schedules on the queues you may read: the cron expression or interval, the next due time, the due time and id of the latest task enqueued, and how many due times were skipped (catch_up)';
GRANT SELECT ON concurrency.schedules TO PUBLIC;
-- ---------------------------------------------------------------------------
-- Task queue: dependencies between tasks (docs/queue.md, "Dependencies").
-- A task enqueued with parents (enqueue(…, after), enqueue_graph) waits in
-- state 'waiting', its row counting the parents not done yet
-- (parents_open), until the last of them completes; a parent that ends dead
-- or cancelled cancels its waiting descendants. An edge between two tasks of
-- one queue that one enqueue_graph made is kept in their rows (the columns
-- children and parents of the queue's table); every other edge is a row of
-- concurrency.task_dependency, which the queue functions read and write as
-- its owner (src/queue/dependencies.hpp): a role needs no privilege on it.
-- An edge lives until its child has finished, and keeps its parent (done,
-- with its result) from being purged until then, whatever the retention.
-- ---------------------------------------------------------------------------

-- Queue names compare bytewise ("C"): an edge is inserted into two indexes.
CREATE TABLE concurrency.task_dependency (
    parent_queue text COLLATE "C" NOT NULL,
    parent_id    bigint           NOT NULL,
    child_queue  text COLLATE "C" NOT NULL,
    child_id     bigint           NOT NULL,
    CONSTRAINT task_dependency_pkey PRIMARY KEY (parent_queue, parent_id, child_queue, child_id)
);
CREATE INDEX task_dependency_child ON concurrency.task_dependency (child_queue, child_id);
COMMENT ON TABLE concurrency.task_dependency IS
    'edges between concurrency_ext tasks: the child waits for the parent (internal: written by the queue functions)';
SELECT pg_catalog.pg_extension_config_dump('concurrency.task_dependency', '');
-- purge, run as a queue's owner, keeps the parents that a child still needs
GRANT SELECT ON concurrency.task_dependency TO PUBLIC;

CREATE FUNCTION concurrency.enqueue_graph(queue text, tasks jsonb)
    RETURNS TABLE (ref text, task_id bigint)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_enqueue_graph';
COMMENT ON FUNCTION concurrency.enqueue_graph(text, jsonb) IS
    'adds a graph of tasks all or nothing: tasks is a JSON array of {ref, payload, after, queue, run_at, priority, concurrency_key}, after naming refs of the graph, ids of tasks of the task''s queue or {queue, id}; a task waits until its parents are done; returns each task''s ref and id in order';

CREATE FUNCTION concurrency.parent_results(queue text, id bigint)
    RETURNS TABLE (task_id bigint, parent_queue text, result jsonb)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_parent_results';
COMMENT ON FUNCTION concurrency.parent_results(text, bigint) IS
    'the results the parents of a task completed with (for its worker: permission work on the task''s queue)';
-- ---------------------------------------------------------------------------
-- Task queue 0.2.0 -> 0.3.0, after 27_queue_dependencies.sql: every queue's
-- table (a distributed queue's too: Citus sends the ALTER and the index to
-- its shards) gets the columns of dependencies (parents_open, has_children,
-- children, parents), last, and the index of
-- waiting tasks, as create_queue makes them; a queue created by the new
-- library before this update has them already. queue_stats counts the
-- waiting tasks in a last column: queue_stats_rows returns one more column,
-- which CREATE OR REPLACE cannot do, so the 0.2.0 definition steps aside
-- while the view is redefined on the new one, and is dropped. Tasks of every
-- state stay as they are.
-- ---------------------------------------------------------------------------

DO $upgrade$
DECLARE
    q record;
BEGIN
    FOR q IN SELECT name FROM concurrency.queue ORDER BY name LOOP
        IF pg_catalog.to_regclass(pg_catalog.format('concurrency.%I', 'q_' || q.name)) IS NOT NULL THEN
            EXECUTE pg_catalog.format('ALTER TABLE concurrency.%I ADD COLUMN IF NOT EXISTS parents_open integer, '
                                      'ADD COLUMN IF NOT EXISTS has_children boolean, '
                                      'ADD COLUMN IF NOT EXISTS children bigint[], '
                                      'ADD COLUMN IF NOT EXISTS parents bigint[]', 'q_' || q.name);
            EXECUTE pg_catalog.format('CREATE INDEX IF NOT EXISTS %I ON concurrency.%I (id) WHERE state = ''waiting''',
                                      'q_' || q.name || '_waiting', 'q_' || q.name);
        END IF;
    END LOOP;
END
$upgrade$;

ALTER FUNCTION concurrency.queue_stats_rows() RENAME TO queue_stats_rows_0_2_0;

CREATE FUNCTION concurrency.queue_stats_rows()
    RETURNS TABLE (queue text, ready bigint, scheduled bigint, leased bigint, expired bigint, dead bigint,
                   oldest_ready_age interval, done bigint, cancelled bigint, blocked bigint, waiting bigint)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_queue_stats';
COMMENT ON FUNCTION concurrency.queue_stats_rows() IS
    'rows of the view concurrency.queue_stats';

CREATE OR REPLACE VIEW concurrency.queue_stats AS
    SELECT s.queue, s.ready, s.scheduled, s.leased, s.expired, s.dead, s.done, s.cancelled, s.blocked,
           s.oldest_ready_age, q.paused, s.waiting
      FROM concurrency.queue_stats_rows() s
      LEFT JOIN concurrency.queue q ON q.name OPERATOR(pg_catalog.=) s.queue;
COMMENT ON VIEW concurrency.queue_stats IS
    'per queue: tasks ready, scheduled (run_at in the future), leased, expired (lease passed, not yet reclaimed), dead, done and cancelled (retained), blocked (held back by key_limit or max_leased now), the age of the oldest ready task, whether the queue is paused (pause_queue), and tasks waiting for their parents; counts are NULL for queues on which you lack permission read';

DROP FUNCTION concurrency.queue_stats_rows_0_2_0();
-- The lock diagnostics of 0.2.0 give way to 0.3.0's, which src/sql/30_diagnostics.sql
-- (in INSTALL_PARTS) creates again, defined once: lock_tree gains usename,
-- application_name and client_addr beside each pid and a cancel action for a
-- DDL that holds readers up only by its place in the lock queue (from the new
-- column blocks_only_by_queue of lock_tree_nodes); lock_waits gains the
-- client address of both sides. Result columns cannot change in place, so the
-- views and functions are dropped first. They hold no data; GRANTs or
-- REVOKEs made on them by hand must be made again after the update.
DROP VIEW concurrency.lock_tree;
DROP VIEW concurrency.lock_waits;
DROP FUNCTION concurrency.lock_tree_nodes();
DROP FUNCTION concurrency.lock_wait_edges();
DROP FUNCTION concurrency.locked_object(pg_catalog.pg_locks);
-- ---------------------------------------------------------------------------
-- Lock diagnostics: who waits for whom, from one consistent snapshot of the
-- heavyweight lock manager (not LWLocks, not buffer pins).
-- ---------------------------------------------------------------------------

-- The raw edges, with pg_blocking_pids() semantics, from one snapshot.
CREATE FUNCTION concurrency.lock_wait_edges(
    OUT snapshot_at timestamptz, OUT ord integer,
    OUT waiting_pid integer, OUT waiting_mode text, OUT lock_type text, OUT locked_object text,
    OUT waiting_since timestamptz,
    OUT blocking_pid integer, OUT blocking_xid xid, OUT blocking_mode text,
    OUT blocking_holds boolean, OUT blocking_waiting boolean)
    RETURNS SETOF record
    LANGUAGE c VOLATILE PARALLEL RESTRICTED
    AS 'MODULE_PATHNAME', 'concurrency_lock_wait_edges';
COMMENT ON FUNCTION concurrency.lock_wait_edges() IS
    'edges "waiting session -> session in its way" (pg_blocking_pids semantics) from one snapshot of the lock manager, without pg_stat_activity details';

-- The wait tree, from one snapshot.
CREATE FUNCTION concurrency.lock_tree_nodes(
    OUT snapshot_at timestamptz, OUT ord integer,
    OUT pid integer, OUT xid xid, OUT root_pid integer, OUT depth integer,
    OUT path integer[], OUT blocked_by integer[],
    OUT blocks_direct integer, OUT blocks_total integer, OUT in_cycle boolean,
    OUT waiting_since timestamptz, OUT blocks_only_by_queue boolean)
    RETURNS SETOF record
    LANGUAGE c VOLATILE PARALLEL RESTRICTED
    AS 'MODULE_PATHNAME', 'concurrency_lock_tree_nodes';
COMMENT ON FUNCTION concurrency.lock_tree_nodes() IS
    'every session in a wait chain, placed under the blocker on its longest chain from a root, from one snapshot of the lock manager; blocks_only_by_queue: others wait for it only because its own request is queued ahead of theirs';

-- What a pg_locks row locks, in words: SELECT concurrency.locked_object(l) FROM pg_locks l.
CREATE FUNCTION concurrency.locked_object(lock pg_catalog.pg_locks) RETURNS text
    LANGUAGE c STABLE STRICT PARALLEL RESTRICTED
    AS 'MODULE_PATHNAME', 'concurrency_locked_object';
COMMENT ON FUNCTION concurrency.locked_object(pg_catalog.pg_locks) IS
    'what a pg_locks row locks, readable: qualified relation name, tuple, transaction, or advisory lock by subsystem name and resource';

-- Session details come from pg_stat_get_activity(), the function behind
-- pg_stat_activity, read once per query and as the current user: other roles'
-- query text, state and transaction start show only to members of
-- pg_read_all_stats (or of the session's role), exactly as in pg_stat_activity.
-- (The function rather than the view: the view's joins cost as much again;
-- lock_waits reads it once for both sides of the edges.)
CREATE VIEW concurrency.lock_waits AS
WITH activity AS MATERIALIZED (
    SELECT s.pid, s.usesysid, s.application_name, s.client_addr, s.state, s.query, s.xact_start
      FROM pg_catalog.pg_stat_get_activity(NULL) s
), prepared AS MATERIALIZED (
    SELECT p.transaction, p.gid, p.prepared, p.ownerid
      FROM pg_catalog.pg_prepared_xact() p
)
SELECT e.waiting_pid,
       pg_catalog.pg_get_userbyid(w.usesysid) AS waiting_user,
       w.application_name AS waiting_application,
       w.client_addr AS waiting_client_addr,
       w.query AS waiting_query,
       e.waiting_mode,
       e.lock_type,
       e.locked_object,
       e.waiting_since,
       e.snapshot_at - e.waiting_since AS waited,
       e.blocking_pid,
       pg_catalog.pg_get_userbyid(COALESCE(b.usesysid, p.ownerid)) AS blocking_user,
       b.application_name AS blocking_application,
       b.client_addr AS blocking_client_addr,
       CASE WHEN e.blocking_xid IS NOT NULL THEN 'prepared' ELSE b.state END AS blocking_state,
       b.query AS blocking_query,
       e.snapshot_at - COALESCE(b.xact_start, p.prepared) AS blocking_xact_age,
       e.blocking_mode,
       e.blocking_holds,
       e.blocking_waiting,
       p.gid AS blocking_gid,
       e.snapshot_at
  FROM concurrency.lock_wait_edges() e
  LEFT JOIN activity w ON w.pid = e.waiting_pid
  LEFT JOIN activity b ON b.pid = e.blocking_pid AND e.blocking_xid IS NULL
  LEFT JOIN prepared p ON p.transaction OPERATOR(pg_catalog.=) e.blocking_xid
 ORDER BY e.ord;
COMMENT ON VIEW concurrency.lock_waits IS
    'one row per edge "waiting session -> session it waits for" (pg_blocking_pids semantics), from one snapshot of the lock manager';
GRANT SELECT ON concurrency.lock_waits TO PUBLIC;

-- The action: for a root, what ends its transaction or statement; for a
-- session that holds others up only by its place in the lock queue (a DDL
-- waiting behind an idle or prepared transaction, with readers queued behind
-- it), cancelling its statement: the readers go on at once and the root
-- keeps its transaction (a DDL's xid says nothing here: ALTER TABLE has one
-- while it waits). Only for sessions whose state you may see. The root's own
-- action stays.
CREATE VIEW concurrency.lock_tree AS
WITH activity AS MATERIALIZED (
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
                THEN pg_catalog.format('SELECT pg_cancel_backend(%s)', t.pid)
       END AS action,
       p.gid,
       t.snapshot_at
  FROM concurrency.lock_tree_nodes() t
  LEFT JOIN activity a ON a.pid OPERATOR(pg_catalog.=) t.pid AND t.xid IS NULL
  LEFT JOIN activity r ON r.pid OPERATOR(pg_catalog.=) t.root_pid
  LEFT JOIN pg_catalog.pg_prepared_xact() p ON p.transaction OPERATOR(pg_catalog.=) t.xid
 ORDER BY t.ord;
COMMENT ON VIEW concurrency.lock_tree IS
    'every session in a wait chain with its user, application and client, its root blocker, depth, path and transitive blocked count, and the statement that frees the chain (never executed): for roots, and for a DDL that holds readers up behind an idle or prepared root only by its place in the lock queue';
GRANT SELECT ON concurrency.lock_tree TO PUBLIC;
-- ---------------------------------------------------------------------------
-- Distributed queues served by every node (docs/scaling-out.md).
--
-- Every node of the cluster serves a distributed queue: a call on a node that
-- holds shards of the queue runs the queue's C++ code on those shards' tables
-- (src/queue/distributed.hpp), and hands the rest to the routed functions of
-- 41_distributed_queue.sql. For that, every node knows the queue: its row of
-- concurrency.queue, of concurrency.distributed_queue and its permissions are
-- copied to every other node in the transaction that changes them on the
-- coordinator (distributed_sync_catalog). And every node makes task ids and
-- lease tokens of its own without asking another: a number from its own
-- lease_token sequence with its Citus group in the low 10 bits
-- (distributed_new_number; the C++ makes the same, QueueSql::new_id).
-- ---------------------------------------------------------------------------

-- Runs a command on every other node of the Citus cluster, as the current
-- user, inside this transaction (Citus commits it with two-phase commit).
CREATE FUNCTION concurrency.distributed_send(command text) RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_distributed_send';
COMMENT ON FUNCTION concurrency.distributed_send(text) IS
    'runs a command on every other node of the Citus cluster, in this transaction (internal)';
REVOKE ALL ON FUNCTION concurrency.distributed_send(text) FROM PUBLIC;

-- A number no other node makes: this node's next lease_token number with its
-- Citus group in the low 10 bits. A lease token of a distributed queue; times
-- 1024 plus a shard position, a task id.
CREATE FUNCTION concurrency.distributed_new_number() RETURNS bigint
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
BEGIN
    IF concurrency.citus_node_role() = 'none' THEN
        RAISE EXCEPTION 'distributed_new_number needs a Citus node' USING ERRCODE = '0A000';
    END IF;
    RETURN nextval('concurrency.lease_token') * 1024 + (SELECT groupid FROM pg_dist_local_group);
END
$fn$;
COMMENT ON FUNCTION concurrency.distributed_new_number() IS
    'a number unique across the Citus cluster, for task ids and lease tokens of distributed queues (internal)';

-- Copies what the coordinator knows of a queue (its row of concurrency.queue,
-- of concurrency.distributed_queue and its permissions) to every other node,
-- replacing what they had, in this transaction; a queue that is gone is
-- removed there. Nothing on a server that is not a Citus coordinator. Runs
-- as the owner of the catalog (Citus sends the command as that user).
CREATE FUNCTION concurrency.distributed_sync_catalog(queue text) RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    command text;
BEGIN
    IF queue IS NULL THEN
        RAISE EXCEPTION 'queue must not be null' USING ERRCODE = '22004';
    END IF;
    -- (two IFs: Citus's catalog exists only where the first one fails)
    IF concurrency.citus_node_role() <> 'coordinator' THEN
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_dist_node WHERE groupid <> 0) THEN
        RETURN;
    END IF;
    command := format('DELETE FROM concurrency.queue WHERE name = %L;', queue)
        || coalesce((SELECT string_agg(format('INSERT INTO concurrency.queue SELECT * FROM '
                                              'jsonb_populate_record(NULL::concurrency.queue, %L);', to_jsonb(q)), '')
                       FROM concurrency.queue q WHERE q.name = distributed_sync_catalog.queue), '')
        || coalesce((SELECT string_agg(format('INSERT INTO concurrency.distributed_queue SELECT * FROM '
                                              'jsonb_populate_record(NULL::concurrency.distributed_queue, %L);',
                                              to_jsonb(d)), '')
                       FROM concurrency.distributed_queue d WHERE d.queue = distributed_sync_catalog.queue), '')
        || coalesce((SELECT string_agg(format('INSERT INTO concurrency.queue_permission VALUES (%L, %L::regrole, %L);',
                                              p.queue, p.grantee::text, p.permission), '')
                       FROM concurrency.queue_permission p
                      WHERE p.queue = distributed_sync_catalog.queue
                        AND (p.grantee::oid = 0 OR EXISTS (SELECT FROM pg_roles r WHERE r.oid = p.grantee::oid))), '');
    PERFORM concurrency.distributed_send(command);
END
$fn$;
COMMENT ON FUNCTION concurrency.distributed_sync_catalog(text) IS
    'copies a distributed queue''s settings, shard keys and permissions to every other Citus node, in this transaction (internal)';
REVOKE ALL ON FUNCTION concurrency.distributed_sync_catalog(text) FROM PUBLIC;

-- Makes an empty queue distributed. The caller must own the queue's table
-- (ALTER TABLE) and run it on the coordinator.
CREATE OR REPLACE FUNCTION concurrency.distribute_queue(queue text, shard_count integer DEFAULT NULL)
    RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    rel text;
    n integer;
    nonempty boolean;
    keys integer[];
    shards bigint[];
    holder text;
    filled integer := 0;
    v integer := 0;
    idx integer;
    krel text;
BEGIN
    IF queue IS NULL THEN
        RAISE EXCEPTION 'queue must not be null' USING ERRCODE = '22004';
    END IF;
    IF NOT EXISTS (SELECT FROM concurrency.queue q WHERE q.name = distribute_queue.queue) THEN
        RAISE EXCEPTION 'queue "%" does not exist', queue USING ERRCODE = '42704';
    END IF;
    IF concurrency.citus_node_role() <> 'coordinator' THEN
        RAISE EXCEPTION 'cannot distribute queue "%": this server is not a Citus coordinator', queue
            USING ERRCODE = '0A000',
                  DETAIL = format('Its Citus node role is %s.', concurrency.citus_node_role()),
                  HINT = 'Run distribute_queue on the coordinator of a Citus cluster.';
    END IF;
    IF EXISTS (SELECT FROM concurrency.distributed_queue d WHERE d.queue = distribute_queue.queue) THEN
        RETURN; -- already distributed
    END IF;
    n := coalesce(shard_count, current_setting('citus.shard_count')::integer);
    IF n < 1 OR n > 1024 THEN
        RAISE EXCEPTION 'shard_count must be between 1 and 1024' USING ERRCODE = '22023';
    END IF;
    rel := format('concurrency.%I', 'q_' || queue);
    krel := format('concurrency.%I', 'k_' || queue);
    EXECUTE format('LOCK TABLE %s, %s IN ACCESS EXCLUSIVE MODE', rel, krel);
    EXECUTE format('SELECT EXISTS (SELECT FROM %s)', rel) INTO nonempty;
    IF nonempty THEN
        RAISE EXCEPTION 'cannot distribute queue "%": it has tasks', queue USING ERRCODE = '55000',
            DETAIL = 'A task id names its shard, and the ids of existing tasks do not.',
            HINT = 'Distribute a queue right after create_queue, or drain it first.';
    END IF;
    -- every index and constraint includes the distribution column shard_key:
    -- the primary key becomes (shard_key, id), the dedupe index (shard_key,
    -- dedupe_key); ids are set by enqueue (they carry the shard position)
    EXECUTE format('ALTER TABLE %1$s ADD COLUMN shard_key integer NOT NULL DEFAULT 0,
                        ALTER COLUMN id DROP IDENTITY,
                        DROP CONSTRAINT %2$I,
                        ADD CONSTRAINT %2$I PRIMARY KEY (shard_key, id)',
                   rel, 'q_' || queue || '_pkey');
    SELECT pg_get_expr(i.indpred, i.indrelid) INTO holder
      FROM pg_index i WHERE i.indexrelid = format('concurrency.%I', 'q_' || queue || '_dedupe')::regclass;
    EXECUTE format('DROP INDEX concurrency.%1$I', 'q_' || queue || '_dedupe');
    EXECUTE format('CREATE UNIQUE INDEX %1$I ON %2$s (shard_key, dedupe_key) WHERE %3$s',
                   'q_' || queue || '_dedupe', rel, holder);
    PERFORM create_distributed_table(rel, 'shard_key', shard_count => n, colocate_with => 'none');
    -- the key table (key_limit) beside it: a key's row on the shard of its
    -- tasks, primary key (shard_key, concurrency_key); a key row is only
    -- there while the key has live tasks, and the queue has none
    EXECUTE format('DELETE FROM %s', krel);
    EXECUTE format('ALTER TABLE %1$s ADD COLUMN shard_key integer NOT NULL DEFAULT 0,
                        DROP CONSTRAINT %2$I,
                        ADD CONSTRAINT %2$I PRIMARY KEY (shard_key, concurrency_key)',
                   krel, 'k_' || queue || '_pkey');
    PERFORM create_distributed_table(krel, 'shard_key', colocate_with => rel);
    -- the lease slots (max_leased) stay a table on the coordinator, where
    -- every claim runs; a slot also keeps when the lease written in it ends
    EXECUTE format('ALTER TABLE concurrency.%I ADD COLUMN lease_expires_at timestamptz', 's_' || queue);
    -- one shard_key value per shard, in shard order: the smallest value
    -- that hashes into each shard
    SELECT array_agg(shardid ORDER BY shardid) INTO shards
      FROM pg_dist_shard WHERE logicalrelid = rel::regclass;
    keys := array_fill(NULL::integer, ARRAY[n]);
    WHILE filled < n AND v < 100000000 LOOP
        idx := array_position(shards, get_shard_id_for_distribution_column(rel::regclass, v));
        IF keys[idx] IS NULL THEN
            keys[idx] := v;
            filled := filled + 1;
        END IF;
        v := v + 1;
    END LOOP;
    IF filled < n OR cardinality(shards) IS DISTINCT FROM n THEN
        RAISE EXCEPTION 'could not find a shard key value for each of the % shards of queue "%"', n, queue
            USING ERRCODE = 'XX000';
    END IF;
    INSERT INTO concurrency.distributed_queue (queue, shard_keys, dedupe_holder)
    VALUES (distribute_queue.queue, keys, holder);
    -- every node serves the queue: its settings, shard keys and permissions
    -- on every node, in this transaction
    PERFORM concurrency.distributed_sync_catalog(distribute_queue.queue);
END
$fn$;
COMMENT ON FUNCTION concurrency.distribute_queue(text, integer) IS
    'makes an empty queue a Citus distributed table (shard_count shards, default citus.shard_count); run on the coordinator';
REVOKE ALL ON FUNCTION concurrency.distribute_queue(text, integer) FROM PUBLIC;

CREATE OR REPLACE FUNCTION concurrency.distributed_enqueue(queue text, payload jsonb DEFAULT '{}', run_at timestamptz DEFAULT NULL,
                                                priority integer DEFAULT 0, dedupe_key text DEFAULT NULL,
                                                concurrency_key text DEFAULT NULL)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency.distributed_queue_settings(queue);
    n integer := cardinality(s.shard_keys);
    pos integer;
    now timestamptz := clock_timestamp();
    new_id bigint;
    held_back boolean := false;
    key_limit integer;
BEGIN
    IF payload IS NULL THEN
        RAISE EXCEPTION 'payload must not be null' USING ERRCODE = '22004';
    ELSIF priority IS NULL THEN
        RAISE EXCEPTION 'priority must not be null' USING ERRCODE = '22004';
    ELSIF NOT isfinite(run_at) THEN
        RAISE EXCEPTION 'run_at must be a finite time' USING ERRCODE = '22023', HINT = 'Use NULL to run the task now.';
    END IF;
    -- a key's tasks on one shard: the concurrency_key's shard, else the
    -- dedupe_key's, else the next shard of this backend
    pos := CASE WHEN coalesce(concurrency_key, dedupe_key) IS NULL THEN concurrency.distributed_next_position(n)
                ELSE concurrency.distributed_key_position(n, coalesce(concurrency_key, dedupe_key)) END;
    -- on a queue with key_limit a task of a key is blocked when its key is
    -- full or already has blocked tasks, decided under the key's lock
    IF concurrency_key IS NOT NULL AND s.key_limit IS NOT NULL THEN
        PERFORM concurrency.distributed_lock_key(queue, s.shard_keys, concurrency_key);
        key_limit := concurrency.distributed_key_limit(queue);
        IF key_limit IS NOT NULL THEN
            EXECUTE format($q$SELECT count(*) FILTER (WHERE state = 'blocked') > 0
                                     OR count(*) FILTER (WHERE state <> 'blocked') >= $3
                                FROM %s
                               WHERE shard_key = $1 AND concurrency_key = $2
                                 AND state IN ('ready', 'scheduled', 'leased', 'blocked')$q$, s.relation)
              INTO held_back USING s.shard_keys[pos + 1], concurrency_key, key_limit;
        END IF;
    END IF;
    FOR attempt IN 1..5 LOOP
        new_id := concurrency.distributed_new_number() * 1024 + pos;
        EXECUTE format($q$INSERT INTO %s (id, shard_key, state, priority, run_at, payload, dedupe_key,
                                          concurrency_key, enqueued_at)
                          VALUES ($1, $2, CASE WHEN $9 THEN 'blocked' WHEN $3 > $4 THEN 'scheduled' ELSE 'ready' END,
                                  $5, coalesce($3, $4), $6, $7, $8, $4)
                          ON CONFLICT (shard_key, dedupe_key) WHERE %s
                          DO NOTHING RETURNING id$q$, s.relation, s.dedupe_holder)
          INTO new_id USING new_id, s.shard_keys[pos + 1], run_at, now, priority, payload, dedupe_key, concurrency_key,
                            held_back;
        IF new_id IS NULL THEN -- the task holding dedupe_key
            EXECUTE format($q$SELECT id FROM %s WHERE shard_key = $1 AND dedupe_key = $2 AND %s$q$,
                           s.relation, s.dedupe_holder)
              INTO new_id USING s.shard_keys[pos + 1], dedupe_key;
        END IF;
        IF new_id IS NOT NULL THEN
            PERFORM pg_notify('concurrency_' || queue, '');
            RETURN new_id;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'the task holding dedupe_key "%" kept disappearing', dedupe_key USING ERRCODE = '40001',
        HINT = 'Retry the transaction.';
END
$fn$;
COMMENT ON FUNCTION concurrency.distributed_enqueue(text, jsonb, timestamptz, integer, text, text) IS
    'enqueue on a distributed queue (called by concurrency.enqueue)';

-- A claim visits one shard at a time (a router query each), starting after
-- the shard this backend visited last, until it gets tasks or has visited
-- every shard once. A visit wakes the shard's expired leases and due tasks
-- first on every 16th call of the backend, and whenever the claim found
-- fewer tasks than asked for.
CREATE OR REPLACE FUNCTION concurrency.distributed_dequeue(queue text, batch integer DEFAULT 1, lease interval DEFAULT NULL,
                                                worker text DEFAULT NULL)
    RETURNS TABLE (task_id bigint, lease_token bigint, attempt integer, payload jsonb,
                   enqueued_at timestamptz, lease_expires_at timestamptz)
    LANGUAGE plpgsql VOLATILE ROWS 1
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency.distributed_queue_settings(queue);
    n integer := cardinality(s.shard_keys);
    start integer := concurrency.distributed_next_position(n);
    pos integer;
    key integer;
    now timestamptz;
    token bigint;
    got integer := 0;
    claim text;
    t record;
    slots integer[];
    ids bigint[] := '{}';
    ends timestamptz[] := '{}';
BEGIN
    IF batch IS NULL THEN
        RAISE EXCEPTION 'batch must not be null' USING ERRCODE = '22004';
    ELSIF batch < 1 THEN
        RAISE EXCEPTION 'batch must be at least 1' USING ERRCODE = '22023';
    ELSIF lease <= interval '0' THEN
        RAISE EXCEPTION 'lease must be positive' USING ERRCODE = '22023';
    END IF;
    -- max_leased: at most as many tasks as this claim holds free slots (a
    -- claim never checks a key: tasks that key_limit holds back wait
    -- blocked, and a claim takes only ready ones)
    IF s.max_leased IS NOT NULL THEN
        slots := concurrency.distributed_take_slots(queue, batch, clock_timestamp());
        batch := cardinality(slots);
        IF batch = 0 THEN
            RETURN;
        END IF;
    END IF;
    claim := format($q$UPDATE %1$s AS t
                          SET state = 'leased', attempt = t.attempt + 1, lease_token = $3,
                              lease_expires_at = $4 + $5, lease_extended_to = NULL, worker = $6
                        WHERE t.shard_key = $1 AND t.id = ANY (ARRAY(
                              SELECT id FROM %1$s
                               WHERE shard_key = $1 AND state = 'ready'
                               ORDER BY (-(priority::int8)), run_at, id
                               LIMIT $2 FOR UPDATE SKIP LOCKED))
                    RETURNING t.id, t.lease_token, t.attempt, t.payload, t.enqueued_at, t.lease_expires_at$q$,
                    s.relation);
    FOR k IN 0 .. n - 1 LOOP
        pos := (start + k) % n;
        key := s.shard_keys[pos + 1];
        now := clock_timestamp();
        IF k = 0 AND start % 16 = 0 THEN
            PERFORM concurrency.distributed_wake(queue, key, now);
        END IF;
        token := concurrency.distributed_new_number();
        FOR round IN 1 .. 2 LOOP
            -- the second round only after a wake-up made tasks ready
            EXIT WHEN round = 2 AND (got >= batch OR concurrency.distributed_wake(queue, key, now) = 0);
            FOR t IN EXECUTE claim USING key, batch - got, token, now, coalesce(lease, s.lease), worker LOOP
                task_id := t.id;
                lease_token := t.lease_token;
                attempt := t.attempt;
                payload := t.payload;
                enqueued_at := t.enqueued_at;
                lease_expires_at := t.lease_expires_at;
                RETURN NEXT;
                got := got + 1;
                ids := ids || t.id;
                ends := ends || t.lease_expires_at;
            END LOOP;
        END LOOP;
        EXIT WHEN got > 0;
    END LOOP;
    IF s.max_leased IS NOT NULL AND got > 0 THEN
        EXECUTE format($q$UPDATE %s AS sl SET task_id = u.id, lease_token = $4, lease_expires_at = u.ends
                            FROM unnest($1, $2, $3) AS u(slot, id, ends)
                           WHERE sl.slot = u.slot$q$, format('concurrency.%I', 's_' || queue))
          USING slots[1:got], ids, ends, token;
    END IF;
END
$fn$;
COMMENT ON FUNCTION concurrency.distributed_dequeue(text, integer, interval, text) IS
    'dequeue on a distributed queue (called by concurrency.dequeue): one shard at a time, round-robin per backend';
-- ---------------------------------------------------------------------------
-- Distributed queues 0.2.0 -> 0.3.0: every node serves them now
-- (42_distributed_nodes.sql), so every node must know them. On the
-- coordinator, each distributed queue's catalog rows are copied to the other
-- nodes in this transaction; elsewhere (a worker node, where Citus runs this
-- update too, or a server without Citus) there is none to copy.
-- ---------------------------------------------------------------------------

SELECT concurrency.distributed_sync_catalog(d.queue) FROM concurrency.distributed_queue d ORDER BY d.queue;

-- Task ids and lease tokens of 0.2.0 were the coordinator's lease_token
-- numbers (ids n * 1024 + position); those of 0.3.0 carry the node's group
-- (ids (n * 1024 + group) * 1024 + position, tokens n * 1024 + group). So that
-- no new id or token can equal an old one, every other node's lease_token is
-- moved past the coordinator's.
DO $upgrade$
BEGIN
    -- (two IFs: Citus's catalog exists only where the first one holds)
    IF concurrency.citus_node_role() = 'coordinator' THEN
        IF EXISTS (SELECT FROM pg_catalog.pg_dist_node WHERE groupid OPERATOR(pg_catalog.<>) 0) THEN
            PERFORM concurrency.distributed_send(pg_catalog.format(
                'SELECT pg_catalog.setval(''concurrency.lease_token'', '
                'GREATEST((SELECT last_value FROM concurrency.lease_token), %s))',
                (SELECT last_value FROM concurrency.lease_token)));
        END IF;
    END IF;
END
$upgrade$;
