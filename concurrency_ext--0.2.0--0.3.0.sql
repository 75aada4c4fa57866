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
-- Task queue 0.2.0 -> 0.3.0: rate limits (rate_limit claims in any
-- rate_period; key_rate_limit per concurrency key in any key_rate_period) and
-- fair claims (fair). The catalog gets the five settings,
-- last, as a fresh install has them (no queue of 0.2.0 has a limit or is
-- fair); create_queue and alter_queue take them: their 0.2.0 definitions step aside under other names for the new
-- ones of 21_queue_settings_api.sql, and 25_queue_wait_grants.sql gives
-- their privileges to the new ones and drops them.
-- ---------------------------------------------------------------------------

ALTER TABLE concurrency.queue
    ADD COLUMN rate_limit integer CHECK (rate_limit >= 1),
    ADD COLUMN rate_period interval CHECK (rate_period > interval '0'),
    ADD CONSTRAINT queue_rate_check CHECK ((rate_limit IS NULL) = (rate_period IS NULL)),
    ADD COLUMN fair boolean NOT NULL DEFAULT false,
    ADD COLUMN key_rate_limit integer CHECK (key_rate_limit >= 1),
    ADD COLUMN key_rate_period interval CHECK (key_rate_period > interval '0'),
    ADD CONSTRAINT queue_key_rate_check CHECK ((key_rate_limit IS NULL) = (key_rate_period IS NULL));

ALTER FUNCTION concurrency.create_queue(text, interval, integer, interval, integer, integer, boolean)
    RENAME TO create_queue_0_2_0;
ALTER FUNCTION concurrency.alter_queue(text, interval, integer, interval, integer, integer)
    RENAME TO alter_queue_0_2_0;
-- ---------------------------------------------------------------------------
-- Task queue: create_queue and alter_queue, with every setting of 0.3.0
-- (rate_limit, rate_period, fair, key_rate_limit, key_rate_period); the catalog they write and its trigger are in
-- 20_queue.sql and 21_queue_settings.sql.
-- ---------------------------------------------------------------------------

-- Creating queues is for the extension owner and superusers, unless EXECUTE
-- is granted. It runs as its owner (SECURITY DEFINER) so that such a grant is
-- all a role needs: the queue table it creates belongs to it (drop_queue, in
-- 20_queue.sql, works the same way).
CREATE FUNCTION concurrency.create_queue(queue text, lease interval DEFAULT '30 seconds',
                                         max_attempts integer DEFAULT 5, retain interval DEFAULT NULL,
                                         key_limit integer DEFAULT NULL, max_leased integer DEFAULT NULL,
                                         distributed boolean DEFAULT false, rate_limit integer DEFAULT NULL,
                                         rate_period interval DEFAULT NULL, key_rate_limit integer DEFAULT NULL,
                                         key_rate_period interval DEFAULT NULL)
    RETURNS void
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_create_queue';
COMMENT ON FUNCTION concurrency.create_queue(text, interval, integer, interval, integer, integer, boolean, integer, interval, integer, interval) IS
    'creates the task queue with its table concurrency."q_<queue>"; the same settings again is a no-op, other settings are an error (see alter_queue); distributed => true also makes it a Citus distributed queue (on a coordinator; see distribute_queue); rate_limit claims at most in any rate_period, key_rate_limit claims of each concurrency key in any key_rate_period';
REVOKE ALL ON FUNCTION concurrency.create_queue(text, interval, integer, interval, integer, integer, boolean, integer, interval, integer, interval) FROM PUBLIC;

-- Only the owner of a queue's table (or a superuser) may change its settings.
CREATE FUNCTION concurrency.alter_queue(queue text, lease interval DEFAULT NULL, max_attempts integer DEFAULT NULL,
                                        retain interval DEFAULT NULL, key_limit integer DEFAULT NULL,
                                        max_leased integer DEFAULT NULL, rate_limit integer DEFAULT NULL,
                                        rate_period interval DEFAULT NULL, fair boolean DEFAULT NULL,
                                        key_rate_limit integer DEFAULT NULL, key_rate_period interval DEFAULT NULL)
    RETURNS void
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_alter_queue';
COMMENT ON FUNCTION concurrency.alter_queue(text, interval, integer, interval, integer, integer, integer, interval, boolean, integer, interval) IS
    'changes settings of a queue in place: NULL keeps a setting; retain => ''0'', key_limit => 0, max_leased => 0, rate_limit => 0, key_rate_limit => 0 remove it; fair => true rotates claims among concurrency keys';
REVOKE ALL ON FUNCTION concurrency.alter_queue(text, interval, integer, interval, integer, integer, integer, interval, boolean, integer, interval) FROM PUBLIC;
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
-- Task queue 0.2.0 -> 0.3.0, after 24_queue_enqueue.sql and 24_queue_wait.sql (and
-- 21_queue_rate.sql: create_queue, alter_queue): the privileges of the
-- functions they replaced go to their successors as they were (EXECUTE for
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
             'concurrency.enqueue_batch(text,jsonb[],timestamptz,integer,text[],text[],bigint[])'::pg_catalog.regprocedure::pg_catalog.oid),
            ('concurrency.create_queue_0_2_0(text,interval,integer,interval,integer,integer,boolean)'::pg_catalog.regprocedure::pg_catalog.oid,
             'concurrency.create_queue(text,interval,integer,interval,integer,integer,boolean,integer,interval,integer,interval)'::pg_catalog.regprocedure::pg_catalog.oid),
            ('concurrency.alter_queue_0_2_0(text,interval,integer,interval,integer,integer)'::pg_catalog.regprocedure::pg_catalog.oid,
             'concurrency.alter_queue(text,interval,integer,interval,integer,integer,integer,interval,boolean,integer,interval)'::pg_catalog.regprocedure::pg_catalog.oid)) AS p(old, new)
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
DROP FUNCTION concurrency.create_queue_0_2_0(text, interval, integer, interval, integer, integer, boolean);
DROP FUNCTION concurrency.alter_queue_0_2_0(text, interval, integer, interval, integer, integer);

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
-- The routed functions of distributed queues move to schema
-- concurrency_internal (41_distributed_routed.sql makes them there, with
-- 0.3.0's bodies): 0.2.0's copies in schema concurrency go first, so that
-- \df concurrency.* lists the public API only. distribute_queue stays: it is
-- public.
-- ---------------------------------------------------------------------------

DO $upgrade$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN SELECT p.oid::regprocedure
               FROM pg_catalog.pg_proc p
              WHERE p.pronamespace OPERATOR(pg_catalog.=) 'concurrency'::regnamespace
                AND p.proname OPERATOR(pg_catalog.~) '^distributed_'
              ORDER BY p.oid
    LOOP
        EXECUTE pg_catalog.format('DROP FUNCTION %s', f);
    END LOOP;
END
$upgrade$;
-- ---------------------------------------------------------------------------
-- The routed functions of distributed queues (see 41_distributed_queue.sql
-- for the placement they follow): what the C++ queue functions hand on when a
-- call cannot be served by this node's shards (a queue with max_leased, whose
-- lease slots are a table on the coordinator; a queue distributed by the
-- running transaction). Internal: they live in schema concurrency_internal,
-- which PUBLIC cannot use; the owner of each distributed queue's table gets
-- USAGE on it from distribute_queue (the queue functions run these as that
-- owner), so that \df concurrency.* lists the public API only.
-- ---------------------------------------------------------------------------

CREATE SCHEMA concurrency_internal;
REVOKE ALL ON SCHEMA concurrency_internal FROM PUBLIC;
COMMENT ON SCHEMA concurrency_internal IS
    'internal functions of concurrency_ext (routed functions of distributed queues, trigger functions, the rows behind views); not an API: PUBLIC cannot use it';

-- The settings and shard keys of a distributed queue; 42704 when the queue is
-- not distributed (or does not exist).
CREATE FUNCTION concurrency_internal.distributed_queue_settings(queue text,
        OUT relation text, OUT lease interval, OUT max_attempts integer, OUT shard_keys integer[],
        OUT dedupe_holder text, OUT retain interval, OUT key_limit integer, OUT max_leased integer)
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
BEGIN
    IF queue IS NULL THEN
        RAISE EXCEPTION 'queue must not be null' USING ERRCODE = '22004';
    END IF;
    SELECT format('concurrency.%I', 'q_' || q.name), q.lease, q.max_attempts, d.shard_keys, d.dedupe_holder, q.retain,
           q.key_limit, q.max_leased
      INTO relation, lease, max_attempts, shard_keys, dedupe_holder, retain, key_limit, max_leased
      FROM concurrency.queue q JOIN concurrency.distributed_queue d ON d.queue = q.name
     WHERE q.name = distributed_queue_settings.queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'distributed queue "%" does not exist', queue USING ERRCODE = '42704',
            HINT = 'Create it with concurrency.create_queue, then concurrency.distribute_queue.';
    END IF;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_queue_settings(text) IS
    'table, lease, max_attempts and shard keys of a distributed queue (42704 if it is not one)';

-- The next shard position of this backend, round-robin over n shards; the
-- position is kept in a session setting (start: the backend's pid).
CREATE FUNCTION concurrency_internal.distributed_next_position(n integer) RETURNS integer
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    cursor bigint := coalesce(nullif(current_setting('concurrency_ext.shard_cursor', true), '')::bigint,
                              pg_backend_pid());
BEGIN
    IF n IS NULL OR n < 1 THEN
        RAISE EXCEPTION 'n must be at least 1' USING ERRCODE = '22023';
    END IF;
    cursor := (cursor + 1) % 1073741824;
    PERFORM set_config('concurrency_ext.shard_cursor', cursor::text, false);
    RETURN (cursor % n)::integer;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_next_position(integer) IS
    'round-robin shard position of this backend for distributed queues';



-- The shard key of the shard a task id names: the id's low 10 bits are the
-- shard's position. NULL when the id names no shard of these (no task of the
-- queue). The one place that reads a shard from an id: distributed_task_route
-- and the batch routing below use it.
CREATE FUNCTION concurrency_internal.distributed_task_shard(shard_keys integer[], task_id bigint) RETURNS integer
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, pg_temp
    AS $fn$ SELECT shard_keys[(task_id % 1024) + 1] $fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_task_shard(integer[], bigint) IS
    'the shard key of the shard a task id of a distributed queue names (NULL if it names none of shard_keys)';

-- CE001 for a task after a statement under its lease token found nothing,
-- with the DETAIL a local queue gives.
CREATE FUNCTION concurrency_internal.distributed_lease_lost(queue text, shard_key integer, task_id bigint)
    RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    relation text := (concurrency_internal.distributed_queue_settings(queue)).relation;
    t record;
    hint text := 'Roll back the work done under this lease: the task is no longer yours.';
BEGIN
    IF shard_key IS NOT NULL THEN
        EXECUTE format('SELECT state, attempt, worker, lease_token IS NOT NULL AS held, finished_at FROM %s
                         WHERE shard_key = $1 AND id = $2', relation)
          INTO t USING shard_key, task_id;
    END IF;
    IF t IS NULL OR t.state IS NULL THEN
        RAISE EXCEPTION 'task % of queue "%" does not exist', task_id, queue USING ERRCODE = 'CE001',
            DETAIL = 'It was completed already, or it never existed.', HINT = hint;
    ELSIF t.state IN ('cancelled', 'done') THEN
        RAISE EXCEPTION 'lease on task % of queue "%" was lost', task_id, queue USING ERRCODE = 'CE001',
            DETAIL = format('The task was %s at %s.', CASE t.state WHEN 'done' THEN 'completed' ELSE t.state END,
                            to_char(t.finished_at, 'YYYY-MM-DD HH24:MI:SS.USOF')),
            HINT = hint;
    ELSIF t.held THEN
        RAISE EXCEPTION 'lease on task % of queue "%" was lost', task_id, queue USING ERRCODE = 'CE001',
            DETAIL = format('The lease token does not match the task''s current lease: it is %s at attempt %s%s.',
                            t.state, t.attempt, coalesce(format(', worker "%s"', t.worker), '')),
            HINT = hint;
    ELSE
        RAISE EXCEPTION 'lease on task % of queue "%" was lost', task_id, queue USING ERRCODE = 'CE001',
            DETAIL = format('The task has no lease now: it is %s at attempt %s.', t.state, t.attempt),
            HINT = hint;
    END IF;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_lease_lost(text, integer, bigint) IS
    'raises CE001 for a task of a distributed queue whose lease was lost';

-- Where a statement about one leased task goes: the queue's table and
-- settings, and the shard key of the shard its id names (the id's low 10
-- bits are the shard's position), for heartbeat, complete and fail. An id
-- that names no shard of the queue is no task of it: CE001.
CREATE FUNCTION concurrency_internal.distributed_task_route(queue text, task_id bigint, lease_token bigint,
        OUT relation text, OUT shard_key integer, OUT lease interval, OUT max_attempts integer, OUT retain interval,
        OUT max_leased integer)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
BEGIN
    IF task_id IS NULL OR lease_token IS NULL THEN
        RAISE EXCEPTION 'task_id and lease_token must not be null' USING ERRCODE = '22004';
    END IF;
    shard_key := concurrency_internal.distributed_task_shard(s.shard_keys, task_id);
    IF shard_key IS NULL THEN
        PERFORM concurrency_internal.distributed_lease_lost(queue, NULL, task_id);
    END IF;
    relation := s.relation;
    lease := s.lease;
    max_attempts := s.max_attempts;
    retain := s.retain;
    max_leased := s.max_leased;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_task_route(text, bigint, bigint) IS
    'table, shard key and settings for a statement about one task of a distributed queue (CE001 if its id names no shard)';

-- ---------------------------------------------------------------------------
-- key_limit on a distributed queue, kept as on a local queue (the design:
-- src/queue/keys_sql.hpp; for users: docs/queue.md, "Keys and limits"): at
-- most key_limit tasks of a key are admitted (ready, scheduled or leased),
-- the others wait in state 'blocked', which a claim never takes, and a task
-- enters or leaves the admitted set only with its key's row locked (enqueue,
-- complete, fail for good, a lease expiring for good, cancel, retry_dead);
-- blocked tasks are admitted in enqueue (id) order. The key table k_<queue>
-- is distributed co-located with the queue's table: a key's row and all its
-- tasks are on the shard the hash of the key names, so that every statement
-- about a key is a router query to that shard.
--
-- The lock is an UPDATE of the key's row, not a FOR UPDATE: under REPEATABLE
-- READ a call whose snapshot misses another call's change of the key then
-- fails with 40001 instead of deciding on an old picture. The key_limit is
-- read from the catalog after the key's lock is granted: alter_queue locks
-- the whole key table (distributed_rebalance), so a call either ran before it
-- (and the rebalance sees its tasks) or waits for it and reads the new limit.
-- ---------------------------------------------------------------------------

-- The shard position of a concurrency_key (or a dedupe_key) among n shards
-- (NULL for n below 1).
CREATE FUNCTION concurrency_internal.distributed_key_position(n integer, key text) RETURNS integer
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, pg_temp
    AS $fn$ SELECT ((hashtext(key)::bigint + 2147483648) % CASE WHEN n >= 1 THEN n END)::integer $fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_key_position(integer, text) IS
    'the shard position (0 .. n-1) of the tasks of a concurrency_key (or dedupe_key) on a distributed queue';

-- The queue's key_limit as the catalog has it now (NULL: none).
CREATE FUNCTION concurrency_internal.distributed_key_limit(queue text) RETURNS integer
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$ SELECT q.key_limit FROM concurrency.queue q WHERE q.name = distributed_key_limit.queue $fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_key_limit(text) IS
    'the key_limit of a queue read from the catalog at the time of the call (NULL: none)';

-- Locks the row of a key in the key table (adding it first if missing) on
-- the key's shard; returns that shard's shard_key.
CREATE FUNCTION concurrency_internal.distributed_lock_key(queue text, shard_keys integer[], key text) RETURNS integer
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    keys_relation text := format('concurrency.%I', 'k_' || queue);
    shard integer := shard_keys[concurrency_internal.distributed_key_position(cardinality(shard_keys), key) + 1];
    locked integer;
BEGIN
    IF key IS NULL THEN
        RAISE EXCEPTION 'key must not be null' USING ERRCODE = '22004';
    ELSIF NOT EXISTS (SELECT FROM concurrency.distributed_queue d WHERE d.queue = distributed_lock_key.queue) THEN
        RAISE EXCEPTION 'distributed queue "%" does not exist', queue USING ERRCODE = '42704';
    ELSIF shard IS NULL THEN
        RAISE EXCEPTION 'shard_keys must name at least one shard' USING ERRCODE = '22023';
    END IF;
    FOR round IN 1 .. 3 LOOP
        EXECUTE format('UPDATE %s SET concurrency_key = concurrency_key WHERE shard_key = $1 AND concurrency_key = $2',
                       keys_relation)
          USING shard, key;
        GET DIAGNOSTICS locked = ROW_COUNT;
        IF locked = 1 THEN
            RETURN shard;
        END IF;
        EXECUTE format('INSERT INTO %s (shard_key, concurrency_key) VALUES ($1, $2) ON CONFLICT DO NOTHING',
                       keys_relation)
          USING shard, key;
    END LOOP;
    RAISE EXCEPTION 'could not lock concurrency key "%"', key USING ERRCODE = 'XX000';
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_lock_key(text, integer[], text) IS
    'locks the row of a concurrency key of a distributed queue on its shard (adding it if missing)';

-- Keys whose tasks left the admitted set: for each key once, in sorted order
-- (so that two callers cannot deadlock on them), admits its next blocked
-- tasks while it has room; a key with nothing left to admit loses its row
-- when no live task has it any more. Nothing on a queue without key_limit.
CREATE FUNCTION concurrency_internal.distributed_release_keys(queue text, keys text[]) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record;
    key text;
    shard integer;
    admitted integer;
BEGIN
    IF NOT EXISTS (SELECT FROM unnest(keys) AS k WHERE k IS NOT NULL) THEN
        RETURN;
    END IF;
    s := concurrency_internal.distributed_queue_settings(queue);
    IF s.key_limit IS NULL THEN
        RETURN;
    END IF;
    FOR key IN SELECT DISTINCT k FROM unnest(keys) AS k WHERE k IS NOT NULL ORDER BY 1 LOOP
        shard := concurrency_internal.distributed_lock_key(queue, s.shard_keys, key);
        EXECUTE format($q$UPDATE %1$s AS t
                             SET state = CASE WHEN t.run_at > $4 THEN 'scheduled' ELSE 'ready' END
                           WHERE t.shard_key = $1 AND t.state = 'blocked' AND t.id = ANY (ARRAY(
                                 SELECT id FROM %1$s
                                  WHERE shard_key = $1 AND concurrency_key = $2 AND state = 'blocked'
                                  ORDER BY id
                                  LIMIT greatest(0, $3 - (SELECT count(*) FROM %1$s
                                                           WHERE shard_key = $1 AND concurrency_key = $2
                                                             AND state IN ('ready', 'scheduled', 'leased')))))$q$,
                       s.relation)
          USING shard, key, coalesce(concurrency_internal.distributed_key_limit(queue), 2147483647), clock_timestamp();
        GET DIAGNOSTICS admitted = ROW_COUNT;
        IF admitted = 0 THEN
            EXECUTE format($q$DELETE FROM %1$s AS k
                               WHERE k.shard_key = $1 AND k.concurrency_key = $2
                                 AND NOT EXISTS (SELECT FROM %2$s AS t
                                                  WHERE t.shard_key = $1 AND t.concurrency_key = $2
                                                    AND t.state IN ('ready', 'scheduled', 'leased', 'blocked'))$q$,
                           format('concurrency.%I', 'k_' || queue), s.relation)
              USING shard, key;
        END IF;
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_release_keys(text, text[]) IS
    'admits the next blocked tasks of keys of a distributed queue whose tasks left the admitted set';

-- After alter_queue changed key_limit: every key at once (the key table
-- locked: no enqueue or release of a key runs meanwhile), shard by shard,
-- per key its tasks not leased in enqueue order, the first ones up to the
-- room the leased ones leave admitted, the rest blocked.
CREATE FUNCTION concurrency_internal.distributed_rebalance(queue text) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    key integer;
BEGIN
    EXECUTE format('LOCK TABLE %s IN EXCLUSIVE MODE', format('concurrency.%I', 'k_' || queue));
    FOREACH key IN ARRAY s.shard_keys LOOP
        EXECUTE format($q$UPDATE %1$s AS t
                             SET state = CASE WHEN r.place <= r.room
                                              THEN (CASE WHEN t.state = 'blocked'
                                                         THEN (CASE WHEN t.run_at > $3 THEN 'scheduled' ELSE 'ready' END)
                                                         ELSE t.state END)
                                              ELSE 'blocked' END
                            FROM (SELECT w.id,
                                         row_number() OVER (PARTITION BY w.concurrency_key ORDER BY w.id) AS place,
                                         $2 - (SELECT count(*) FROM %1$s AS l
                                                WHERE l.shard_key = $1 AND l.concurrency_key = w.concurrency_key
                                                  AND l.state = 'leased') AS room
                                    FROM %1$s AS w
                                   WHERE w.shard_key = $1 AND w.concurrency_key IS NOT NULL
                                     AND w.state IN ('ready', 'scheduled', 'blocked')) AS r
                           WHERE t.shard_key = $1 AND t.id = r.id AND t.state IN ('ready', 'scheduled', 'blocked')$q$,
                       s.relation)
          USING key, coalesce(concurrency_internal.distributed_key_limit(queue), 2147483647), clock_timestamp();
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_rebalance(text) IS
    'after key_limit changed: admits and holds back the tasks of every key of a distributed queue, shard by shard';


CREATE FUNCTION concurrency_internal.distributed_enqueue_batch(queue text, payloads jsonb[], run_at timestamptz DEFAULT NULL,
                                                      priority integer DEFAULT 0, dedupe_keys text[] DEFAULT NULL,
                                                      concurrency_keys text[] DEFAULT NULL)
    RETURNS SETOF bigint
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    key text;
BEGIN
    IF payloads IS NULL THEN
        RAISE EXCEPTION 'payloads must not be null' USING ERRCODE = '22004';
    ELSIF array_position(payloads, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'payloads must not contain null' USING ERRCODE = '22004';
    ELSIF cardinality(dedupe_keys) <> cardinality(payloads) OR cardinality(concurrency_keys) <> cardinality(payloads) THEN
        RAISE EXCEPTION 'dedupe_keys and concurrency_keys must have one element per payload' USING ERRCODE = '22023';
    END IF;
    -- the keys of the batch locked in sorted order first (two batches
    -- cannot deadlock on them); each enqueue below finds its key locked
    IF s.key_limit IS NOT NULL THEN
        FOR key IN SELECT DISTINCT k FROM unnest(concurrency_keys) AS k WHERE k IS NOT NULL ORDER BY 1 LOOP
            PERFORM concurrency_internal.distributed_lock_key(queue, s.shard_keys, key);
        END LOOP;
    END IF;
    FOR i IN 1 .. coalesce(array_length(payloads, 1), 0) LOOP
        RETURN NEXT concurrency_internal.distributed_enqueue(queue, payloads[i], run_at, priority, dedupe_keys[i],
                                                    concurrency_keys[i]);
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_enqueue_batch(text, jsonb[], timestamptz, integer, text[], text[]) IS
    'enqueue_batch on a distributed queue (called by concurrency.enqueue_batch)';

-- Expired leases and due scheduled tasks of one shard back to ready (or
-- dead after max_attempts), at most 100 per call; returns how many. A task
-- that died gives its key's place to the key's next task.
CREATE FUNCTION concurrency_internal.distributed_wake(queue text, shard_key integer, now timestamptz)
    RETURNS integer
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    woken integer := 0;
    t record;
    released text[] := '{}';
BEGIN
    FOR t IN EXECUTE format($q$UPDATE %1$s AS t
                         SET state = CASE WHEN t.state = 'scheduled' OR t.attempt < $3 THEN 'ready' ELSE 'dead' END,
                             last_error = CASE WHEN t.state = 'leased' THEN 'lease expired' ELSE t.last_error END
                       WHERE t.shard_key = $1 AND t.id = ANY (ARRAY(
                             SELECT id FROM %1$s
                              WHERE shard_key = $1
                                AND ((state = 'scheduled' AND run_at <= $2) OR (state = 'leased' AND lease_expires_at <= $2))
                              LIMIT 100 FOR UPDATE SKIP LOCKED))
                   RETURNING CASE WHEN t.state = 'dead' THEN t.concurrency_key END AS released$q$, s.relation)
      USING shard_key, now, s.max_attempts LOOP
        woken := woken + 1;
        IF t.released IS NOT NULL THEN
            released := released || t.released;
        END IF;
    END LOOP;
    IF cardinality(released) > 0 THEN
        PERFORM concurrency_internal.distributed_release_keys(queue, released);
    END IF;
    RETURN woken;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_wake(text, integer, timestamptz) IS
    'moves expired leases and due scheduled tasks of one shard of a distributed queue back to ready (or dead)';

-- ---------------------------------------------------------------------------
-- max_leased on a distributed queue: the queue's max_leased slot rows
-- s_<queue> are a table on the coordinator, where every claim runs. A claim
-- locks free slots (FOR UPDATE SKIP LOCKED: it never waits for another
-- claim), claims at most as many tasks as it holds slots, and writes each
-- task's id, lease token and lease end into its slot, in its transaction.
-- complete, fail and cancel empty the slots of their tasks first (before
-- they touch a shard, so that they never hold a task's row while waiting
-- for a slot). A slot whose lease end has passed is free once the task is no
-- longer leased under it: the claim that finds it reclaims the task on its
-- shard if its lease is still there and expired (ready again, or dead), and
-- takes the slot; a task heartbeated meanwhile keeps it (its new lease end,
-- which a heartbeat may have left in lease_extended_to, is written into the
-- slot). The claim itself and the acknowledgements are the queue's C++
-- (src/queue/claim.cpp, src/queue/distributed.hpp: decide_lease_slots);
-- these functions keep the slots.
-- ---------------------------------------------------------------------------

-- Locks up to `wanted` free slots of a distributed queue -> their numbers.
CREATE FUNCTION concurrency_internal.distributed_take_slots(queue text, wanted integer, now timestamptz) RETURNS integer[]
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    slots_relation text := format('concurrency.%I', 's_' || queue);
    sl record;
    free integer[] := '{}';
    shard integer;
    dead_key text;
    held_until timestamptz;
BEGIN
    FOR sl IN EXECUTE format($q$SELECT slot, task_id, lease_token FROM %s
                                 WHERE task_id IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= $1
                                 ORDER BY slot LIMIT $2 FOR UPDATE SKIP LOCKED$q$, slots_relation)
              USING now, greatest(wanted, 0) LOOP
        IF sl.task_id IS NULL THEN
            free := free || sl.slot;
            CONTINUE;
        END IF;
        shard := concurrency_internal.distributed_task_shard(s.shard_keys, sl.task_id);
        dead_key := NULL;
        EXECUTE format($q$UPDATE %1$s AS t
                             SET state = CASE WHEN t.attempt < $5 THEN 'ready' ELSE 'dead' END,
                                 last_error = 'lease expired', lease_extended_to = NULL
                           WHERE t.shard_key = $1 AND t.id = ANY (ARRAY(
                                 SELECT id FROM %1$s
                                  WHERE shard_key = $1 AND id = $2 AND lease_token = $3 AND state = 'leased'
                                    AND lease_expires_at <= $4 AND NOT coalesce(lease_extended_to > $4, false)
                                  FOR UPDATE SKIP LOCKED))
                       RETURNING CASE WHEN t.state = 'dead' THEN t.concurrency_key END$q$, s.relation)
          INTO dead_key USING shard, sl.task_id, sl.lease_token, now, s.max_attempts;
        IF dead_key IS NOT NULL THEN
            PERFORM concurrency_internal.distributed_release_keys(queue, ARRAY[dead_key]);
        END IF;
        EXECUTE format($q$SELECT greatest(lease_expires_at, lease_extended_to) FROM %s
                           WHERE shard_key = $1 AND id = $2 AND lease_token = $3 AND state = 'leased'$q$, s.relation)
          INTO held_until USING shard, sl.task_id, sl.lease_token;
        IF held_until IS NULL THEN
            free := free || sl.slot;
        ELSE -- heartbeated (or being acknowledged): still held
            EXECUTE format('UPDATE %s SET lease_expires_at = $2 WHERE slot = $1', slots_relation)
              USING sl.slot, held_until;
        END IF;
    END LOOP;
    RETURN free;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_take_slots(text, integer, timestamptz) IS
    'locks up to wanted free lease slots of a distributed queue with max_leased (reclaiming expired leases found in them)';

-- Empties the slots of the given tasks (complete, fail, cancel); nothing on
-- a queue without max_leased.
CREATE FUNCTION concurrency_internal.distributed_free_slots(queue text, task_ids bigint[]) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
BEGIN
    IF (concurrency_internal.distributed_queue_settings(queue)).max_leased IS NOT NULL THEN
        EXECUTE format($q$UPDATE %s SET task_id = NULL, lease_token = NULL, lease_expires_at = NULL
                           WHERE task_id = ANY ($1)$q$, format('concurrency.%I', 's_' || queue))
          USING task_ids;
    END IF;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_free_slots(text, bigint[]) IS
    'empties the lease slots of tasks of a distributed queue that are acknowledged or cancelled';

-- After alter_queue set max_leased (0: none): slots 1..max_leased, the leases
-- running now written into the empty ones.
CREATE FUNCTION concurrency_internal.distributed_resize_slots(queue text, max_leased integer) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    slots_relation text := format('concurrency.%I', 's_' || queue);
BEGIN
    IF max_leased IS NULL OR max_leased < 0 THEN
        RAISE EXCEPTION 'max_leased must not be negative' USING ERRCODE = '22023';
    END IF;
    EXECUTE format('DELETE FROM %s WHERE slot > $1', slots_relation) USING max_leased;
    EXECUTE format('INSERT INTO %s (slot) SELECT g FROM generate_series(1, $1) AS g ON CONFLICT (slot) DO NOTHING',
                   slots_relation) USING max_leased;
    EXECUTE format($q$WITH running AS (SELECT r.id, r.lease_token, r.lease_expires_at,
                                              row_number() OVER (ORDER BY r.id) AS n
                                         FROM unnest($1, $2, $3) AS r(id, lease_token, lease_expires_at)
                                        WHERE r.id NOT IN (SELECT task_id FROM %1$s WHERE task_id IS NOT NULL)),
                           empty AS (SELECT slot, row_number() OVER (ORDER BY slot) AS n
                                       FROM %1$s WHERE task_id IS NULL)
                       UPDATE %1$s AS sl SET task_id = running.id, lease_token = running.lease_token,
                                             lease_expires_at = running.lease_expires_at
                         FROM running JOIN empty USING (n)
                        WHERE sl.slot = empty.slot$q$, slots_relation)
      USING ARRAY(SELECT l.id FROM concurrency_internal.distributed_leased(queue) l ORDER BY l.id),
            ARRAY(SELECT l.lease_token FROM concurrency_internal.distributed_leased(queue) l ORDER BY l.id),
            ARRAY(SELECT l.lease_expires_at FROM concurrency_internal.distributed_leased(queue) l ORDER BY l.id);
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_resize_slots(text, integer) IS
    'gives a distributed queue max_leased lease slots, the running leases written into them (0: none)';

-- The leased tasks of a distributed queue (a query over every shard).
CREATE FUNCTION concurrency_internal.distributed_leased(queue text)
    RETURNS TABLE (id bigint, lease_token bigint, lease_expires_at timestamptz)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
BEGIN
    RETURN QUERY EXECUTE format($q$SELECT id, lease_token, lease_expires_at FROM %s WHERE state = 'leased'$q$,
                                (concurrency_internal.distributed_queue_settings(queue)).relation);
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_leased(text) IS
    'the leased tasks of a distributed queue (id, lease token, lease end)';


CREATE FUNCTION concurrency_internal.distributed_heartbeat(queue text, task_id bigint, lease_token bigint,
                                                  extend interval DEFAULT NULL)
    RETURNS timestamptz
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    r record := concurrency_internal.distributed_task_route(queue, task_id, lease_token);
    deadline timestamptz;
BEGIN
    IF extend <= interval '0' THEN
        RAISE EXCEPTION 'extend must be positive' USING ERRCODE = '22023';
    END IF;
    EXECUTE format($q$UPDATE %s SET state = 'leased', lease_expires_at = $3, lease_extended_to = NULL
                       WHERE shard_key = $1 AND id = $2 AND lease_token = $4
                      RETURNING lease_expires_at$q$, r.relation)
      INTO deadline USING r.shard_key, task_id, clock_timestamp() + coalesce(extend, r.lease), lease_token;
    IF deadline IS NULL THEN
        PERFORM concurrency_internal.distributed_lease_lost(queue, r.shard_key, task_id);
    END IF;
    RETURN deadline;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_heartbeat(text, bigint, bigint, interval) IS
    'heartbeat on a distributed queue (called by concurrency.heartbeat)';

CREATE FUNCTION concurrency_internal.distributed_complete(queue text, task_id bigint, lease_token bigint, result jsonb DEFAULT NULL)
    RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    r record := concurrency_internal.distributed_task_route(queue, task_id, lease_token);
    done integer;
    key text;
BEGIN
    IF r.max_leased IS NOT NULL THEN -- its slot first (a lost lease rolls it back)
        PERFORM concurrency_internal.distributed_free_slots(queue, ARRAY[task_id]);
    END IF;
    IF r.retain IS NULL THEN
        EXECUTE format('DELETE FROM %s WHERE shard_key = $1 AND id = $2 AND lease_token = $3 RETURNING concurrency_key',
                       r.relation)
          INTO key USING r.shard_key, task_id, lease_token;
    ELSE -- kept as done, with its result, until purged
        EXECUTE format($q$UPDATE %s SET state = 'done', finished_at = $4, result = $5, lease_token = NULL,
                                        lease_expires_at = NULL, lease_extended_to = NULL
                           WHERE shard_key = $1 AND id = $2 AND lease_token = $3
                       RETURNING concurrency_key$q$, r.relation)
          INTO key USING r.shard_key, task_id, lease_token, clock_timestamp(), result;
    END IF;
    GET DIAGNOSTICS done = ROW_COUNT;
    IF done = 0 THEN
        PERFORM concurrency_internal.distributed_lease_lost(queue, r.shard_key, task_id);
    ELSIF key IS NOT NULL THEN
        PERFORM concurrency_internal.distributed_release_keys(queue, ARRAY[key]);
    END IF;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_complete(text, bigint, bigint, jsonb) IS
    'complete on a distributed queue (called by concurrency.complete)';

-- What a failed attempt makes of a task: dead once its attempts are used up,
-- else ready or scheduled at now + retry_in, or the queue's backoff:
-- min(1 hour, 2^(attempt-1) s), less up to half at random.
CREATE FUNCTION concurrency_internal.distributed_after_failure(attempt integer, max_attempts integer, retry_in interval,
        now timestamptz, OUT state text, OUT run_at timestamptz)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
BEGIN
    run_at := now;
    state := 'dead';
    IF attempt < max_attempts THEN
        run_at := now + coalesce(retry_in, (least(3600.0, 2.0 ^ (attempt - 1))::float8 * (1 - 0.5 * random()))
                                          * interval '1 second');
        state := CASE WHEN run_at > now THEN 'scheduled' ELSE 'ready' END;
    END IF;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_after_failure(integer, integer, interval, timestamptz) IS
    'the state and run_at a failed attempt gives a task of a distributed queue (dead, or a retry with backoff)';

CREATE FUNCTION concurrency_internal.distributed_fail(queue text, task_id bigint, lease_token bigint, error text DEFAULT NULL,
                                             retry_in interval DEFAULT NULL)
    RETURNS text
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    r record := concurrency_internal.distributed_task_route(queue, task_id, lease_token);
    tries integer;
    now timestamptz := clock_timestamp();
    next_run timestamptz;
    new_state text;
    key text;
BEGIN
    IF retry_in < interval '0' THEN
        RAISE EXCEPTION 'retry_in must not be negative' USING ERRCODE = '22023';
    END IF;
    IF r.max_leased IS NOT NULL THEN -- its slot first (a lost lease rolls it back)
        PERFORM concurrency_internal.distributed_free_slots(queue, ARRAY[task_id]);
    END IF;
    EXECUTE format('SELECT attempt, concurrency_key FROM %s WHERE shard_key = $1 AND id = $2 AND lease_token = $3 FOR UPDATE',
                   r.relation)
      INTO tries, key USING r.shard_key, task_id, lease_token;
    IF tries IS NULL THEN
        PERFORM concurrency_internal.distributed_lease_lost(queue, r.shard_key, task_id);
    END IF;
    SELECT a.state, a.run_at INTO new_state, next_run
      FROM concurrency_internal.distributed_after_failure(tries, r.max_attempts, retry_in, now) a;
    EXECUTE format($q$UPDATE %s SET state = $3, run_at = CASE WHEN $3 = 'dead' THEN run_at ELSE $4 END,
                                    lease_token = NULL, lease_expires_at = NULL, lease_extended_to = NULL,
                                    last_error = $5
                       WHERE shard_key = $1 AND id = $2$q$, r.relation)
      USING r.shard_key, task_id, new_state, next_run, error;
    -- a retry keeps its key's place; a dead task gives it to the next one
    IF new_state = 'dead' AND key IS NOT NULL THEN
        PERFORM concurrency_internal.distributed_release_keys(queue, ARRAY[key]);
    END IF;
    RETURN CASE WHEN new_state = 'dead' THEN 'dead' ELSE 'ready' END;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_fail(text, bigint, bigint, text, interval) IS
    'fail on a distributed queue (called by concurrency.fail)';

CREATE FUNCTION concurrency_internal.distributed_retry_dead(queue text, task_ids bigint[] DEFAULT NULL)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    revived bigint := 0;
    t record;
    keys text[] := '{}';
BEGIN
    -- on a queue with key_limit a revived task of a key comes back blocked,
    -- behind its key's tasks, and is admitted under its key's lock
    FOR t IN EXECUTE format($q$UPDATE %1$s AS t
                         SET state = CASE WHEN $3 AND t.concurrency_key IS NOT NULL THEN 'blocked' ELSE 'ready' END,
                             attempt = 0, run_at = $1,
                             lease_token = NULL, lease_expires_at = NULL, lease_extended_to = NULL
                       WHERE t.state = 'dead' AND ($2 IS NULL OR t.id = ANY ($2))
                         AND (t.dedupe_key IS NULL
                              OR NOT EXISTS (SELECT FROM %1$s AS o
                                              WHERE o.shard_key = t.shard_key AND o.dedupe_key = t.dedupe_key
                                                AND o.state NOT IN ('dead', 'cancelled')))
                   RETURNING t.concurrency_key$q$, s.relation)
      USING clock_timestamp(), task_ids, s.key_limit IS NOT NULL LOOP
        revived := revived + 1;
        IF t.concurrency_key IS NOT NULL THEN
            keys := keys || t.concurrency_key;
        END IF;
    END LOOP;
    IF s.key_limit IS NOT NULL AND cardinality(keys) > 0 THEN
        PERFORM concurrency_internal.distributed_release_keys(queue, keys);
    END IF;
    IF revived > 0 THEN
        PERFORM pg_notify('concurrency_' || queue, '');
    END IF;
    RETURN revived;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_retry_dead(text, bigint[]) IS
    'retry_dead on a distributed queue (called by concurrency.retry_dead)';

-- queue_stats' counts for a distributed queue (a query over every shard).
CREATE FUNCTION concurrency_internal.distributed_stats(queue text, now timestamptz,
        OUT ready bigint, OUT scheduled bigint, OUT leased bigint, OUT expired bigint, OUT dead bigint,
        OUT oldest_ready_age interval, OUT done bigint, OUT cancelled bigint, OUT blocked bigint)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
BEGIN
    EXECUTE format($q$SELECT count(*) FILTER (WHERE state = 'ready' OR (state = 'scheduled' AND run_at <= $1)),
                             count(*) FILTER (WHERE state = 'scheduled' AND run_at > $1),
                             count(*) FILTER (WHERE state = 'leased' AND coalesce(lease_extended_to, lease_expires_at) > $1),
                             count(*) FILTER (WHERE state = 'leased' AND coalesce(lease_extended_to, lease_expires_at) <= $1),
                             count(*) FILTER (WHERE state = 'dead'),
                             $1 - min(run_at) FILTER (WHERE state = 'ready' OR (state = 'scheduled' AND run_at <= $1)),
                             count(*) FILTER (WHERE state = 'done'),
                             count(*) FILTER (WHERE state = 'cancelled'),
                             count(*) FILTER (WHERE state = 'blocked')
                        FROM %s$q$, s.relation)
      INTO ready, scheduled, leased, expired, dead, oldest_ready_age, done, cancelled, blocked USING now;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_stats(text, timestamptz) IS
    'the counts of concurrency.queue_stats for a distributed queue';

-- queue_keys for a distributed queue (a query over every shard).
CREATE FUNCTION concurrency_internal.distributed_queue_keys(queue text)
    RETURNS TABLE (concurrency_key text, leased bigint, waiting bigint, oldest_waiting_age interval)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
BEGIN
    RETURN QUERY EXECUTE format(
        $q$SELECT concurrency_key, count(*) FILTER (WHERE state = 'leased'), count(*) FILTER (WHERE state <> 'leased'),
                  $1 - min(enqueued_at) FILTER (WHERE state <> 'leased')
             FROM %s
            WHERE concurrency_key IS NOT NULL AND state IN ('ready', 'scheduled', 'leased', 'blocked')
            GROUP BY concurrency_key
            ORDER BY concurrency_key$q$, (concurrency_internal.distributed_queue_settings(queue)).relation)
      USING clock_timestamp();
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_queue_keys(text) IS
    'queue_keys on a distributed queue (called by concurrency.queue_keys)';

-- ---------------------------------------------------------------------------
-- task_status, cancel, purge and the batch acknowledgements on a distributed
-- queue: each statement goes to one shard (a router query), a batch's tasks
-- grouped by the shard their ids name, the shards in shard order (one lock
-- order for every call). Argument checks are done by the C++ entry points
-- before they hand the call here, as for a local queue.
-- ---------------------------------------------------------------------------

-- The tasks of a batch (with the lease token at each one's position) grouped
-- by the shard their ids name, in shard order, each group's ids ascending;
-- the ids that name no shard of the queue last, with shard_key NULL.
CREATE FUNCTION concurrency_internal.distributed_batch_route(queue text, task_ids bigint[], lease_tokens bigint[] DEFAULT NULL,
        OUT shard_key integer, OUT ids bigint[], OUT tokens bigint[])
    RETURNS SETOF record
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
SELECT g.shard_key, g.ids, g.tokens
  FROM concurrency_internal.distributed_queue_settings(queue) AS s,
       LATERAL (SELECT concurrency_internal.distributed_task_shard(s.shard_keys, u.id) AS shard_key,
                       array_agg(u.id ORDER BY u.id) AS ids, array_agg(u.token ORDER BY u.id) AS tokens
                  FROM unnest(task_ids, lease_tokens) AS u(id, token)
                 GROUP BY 1) AS g
 ORDER BY array_position(s.shard_keys, g.shard_key)
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_batch_route(text, bigint[], bigint[]) IS
    'the tasks of a batch on a distributed queue grouped by shard, in shard order';

-- After the statements of a batch found the leases of the tasks `held`: CE001 for the
-- first task of task_ids (in argument order) that is not among them.
CREATE FUNCTION concurrency_internal.distributed_batch_lost(queue text, task_ids bigint[], held bigint[])
    RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    keys integer[] := (concurrency_internal.distributed_queue_settings(queue)).shard_keys;
BEGIN
    FOR i IN 1 .. coalesce(cardinality(task_ids), 0) LOOP
        IF array_position(held, task_ids[i]) IS NULL THEN
            PERFORM concurrency_internal.distributed_lease_lost(queue, concurrency_internal.distributed_task_shard(keys, task_ids[i]),
                                                       task_ids[i]);
        END IF;
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_batch_lost(text, bigint[], bigint[]) IS
    'raises CE001 for the first task of a batch on a distributed queue whose lease was not found';

CREATE FUNCTION concurrency_internal.distributed_task_status(queue text, id bigint)
    RETURNS TABLE (task_id bigint, state text, attempt integer, priority integer, run_at timestamptz,
                   enqueued_at timestamptz, lease_expires_at timestamptz, worker text, last_error text,
                   finished_at timestamptz, result jsonb, dedupe_key text, concurrency_key text)
    LANGUAGE plpgsql VOLATILE ROWS 1
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    key integer := concurrency_internal.distributed_task_shard(s.shard_keys, id);
BEGIN
    IF key IS NULL THEN -- the id names no shard: no task of this queue
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format(
        $q$SELECT id, CASE WHEN state = 'scheduled' AND run_at <= $3 THEN 'ready' ELSE state END,
                  attempt, priority, run_at, enqueued_at,
                  CASE WHEN state = 'leased' THEN coalesce(lease_extended_to, lease_expires_at) END,
                  worker, last_error, finished_at, result, dedupe_key, concurrency_key
             FROM %s WHERE shard_key = $1 AND id = $2$q$, s.relation)
      USING key, id, clock_timestamp();
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_task_status(text, bigint) IS
    'task_status on a distributed queue (called by concurrency.task_status)';

-- As on a local queue: a cancelled task keeps its holder's deadline, so that
-- the holder learns at its next call that it was cancelled; on a queue that
-- retains nothing the cancelled tasks no holder needs to learn about go at once.
-- Blocked tasks first: they hold no place of their key, so cancelling them
-- locks no key row (as on a local queue, so that a cancel cannot deadlock
-- with a complete of the key's head); then the others, whose key's place
-- goes to the key's next task.
CREATE FUNCTION concurrency_internal.distributed_cancel(queue text, task_ids bigint[])
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    now timestamptz := clock_timestamp();
    g record;
    t record;
    n bigint := 0;
    k bigint;
    keys text[] := '{}';
    cancel constant text := $q$UPDATE %s
                                 SET state = 'cancelled', finished_at = $3, lease_token = NULL,
                                     lease_expires_at = CASE WHEN state = 'leased'
                                                             THEN coalesce(lease_extended_to, lease_expires_at) END,
                                     lease_extended_to = NULL
                               WHERE shard_key = $1 AND id = ANY ($2) AND %s
                              RETURNING concurrency_key$q$;
BEGIN
    IF s.max_leased IS NOT NULL THEN -- their slots first
        PERFORM concurrency_internal.distributed_free_slots(queue, task_ids);
    END IF;
    FOR g IN SELECT * FROM concurrency_internal.distributed_batch_route(queue, task_ids) r WHERE r.shard_key IS NOT NULL LOOP
        EXECUTE format(cancel, s.relation, $q$state = 'blocked'$q$) USING g.shard_key, g.ids, now;
        GET DIAGNOSTICS k = ROW_COUNT;
        n := n + k;
    END LOOP;
    FOR g IN SELECT * FROM concurrency_internal.distributed_batch_route(queue, task_ids) r WHERE r.shard_key IS NOT NULL LOOP
        FOR t IN EXECUTE format(cancel, s.relation, $q$state NOT IN ('done', 'cancelled', 'blocked')$q$)
                 USING g.shard_key, g.ids, now LOOP
            n := n + 1;
            IF t.concurrency_key IS NOT NULL THEN
                keys := keys || t.concurrency_key;
            END IF;
        END LOOP;
    END LOOP;
    IF s.key_limit IS NOT NULL AND cardinality(keys) > 0 THEN
        PERFORM concurrency_internal.distributed_release_keys(queue, keys);
    END IF;
    IF s.retain IS NULL AND n > 0 THEN
        FOR g IN SELECT * FROM concurrency_internal.distributed_batch_route(queue, task_ids) r WHERE r.shard_key IS NOT NULL LOOP
            EXECUTE format($q$DELETE FROM %s
                               WHERE shard_key = $1 AND id = ANY ($2) AND state = 'cancelled'
                                 AND (lease_expires_at IS NULL OR lease_expires_at <= $3)$q$, s.relation)
              USING g.shard_key, g.ids, now;
        END LOOP;
    END IF;
    RETURN n;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_cancel(text, bigint[]) IS
    'cancel on a distributed queue (called by concurrency.cancel)';

-- The statement of a batch acknowledgement, once per shard of the batch
-- (in shard order): op 'complete' (removes the tasks, or keeps them done
-- without a result on a queue that retains tasks), 'heartbeat' (the leases
-- run until `at`) or 'lock' (FOR UPDATE, by id). Each statement names the
-- leases pairwise: the token at the task's position in its shard's group,
-- ($3)[array_position($2, id)]. Returns (task_id, attempt) of every task it
-- found under its lease; CE001 for the first task in argument order it did
-- not find (the error takes the statements' changes with it). The keys of
-- completed tasks give their places to their keys' next tasks.
CREATE FUNCTION concurrency_internal.distributed_batch_leases(queue text, task_ids bigint[], lease_tokens bigint[], op text,
                                                     at timestamptz)
    RETURNS TABLE (task_id bigint, attempt integer)
    LANGUAGE plpgsql VOLATILE ROWS 10
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    leases constant text := 'shard_key = $1 AND id = ANY ($2) AND lease_token = ($3)[array_position($2, id)]';
    statement text;
    g record;
    t record;
    held bigint[] := '{}';
    attempts integer[] := '{}';
    keys text[] := '{}';
BEGIN
    IF op IN ('complete', 'lock') AND s.max_leased IS NOT NULL THEN -- their slots first
        PERFORM concurrency_internal.distributed_free_slots(queue, task_ids);
    END IF;
    IF op = 'complete' AND s.retain IS NULL THEN
        statement := format('DELETE FROM %s WHERE %s RETURNING id, attempt, concurrency_key', s.relation, leases);
    ELSIF op = 'complete' THEN
        statement := format($q$UPDATE %s SET state = 'done', finished_at = $4, result = NULL, lease_token = NULL,
                                             lease_expires_at = NULL, lease_extended_to = NULL
                                WHERE %s RETURNING id, attempt, concurrency_key$q$, s.relation, leases);
    ELSIF op = 'heartbeat' THEN
        statement := format($q$UPDATE %s SET state = 'leased', lease_expires_at = $4, lease_extended_to = NULL
                                WHERE %s RETURNING id, attempt, concurrency_key$q$, s.relation, leases);
    ELSIF op = 'lock' THEN
        statement := format('SELECT id, attempt, concurrency_key FROM %s WHERE %s ORDER BY id FOR UPDATE',
                            s.relation, leases);
    ELSE
        RAISE EXCEPTION 'op must be complete, heartbeat or lock' USING ERRCODE = '22023';
    END IF;
    FOR g IN SELECT * FROM concurrency_internal.distributed_batch_route(queue, task_ids, lease_tokens) r
              WHERE r.shard_key IS NOT NULL LOOP
        FOR t IN EXECUTE statement USING g.shard_key, g.ids, g.tokens, at LOOP
            held := held || t.id;
            attempts := attempts || t.attempt;
            IF op = 'complete' AND t.concurrency_key IS NOT NULL THEN
                keys := keys || t.concurrency_key;
            END IF;
        END LOOP;
    END LOOP;
    IF cardinality(held) < coalesce(cardinality(task_ids), 0) THEN
        PERFORM concurrency_internal.distributed_batch_lost(queue, task_ids, held);
    END IF;
    IF s.key_limit IS NOT NULL AND cardinality(keys) > 0 THEN
        PERFORM concurrency_internal.distributed_release_keys(queue, keys);
    END IF;
    RETURN QUERY SELECT * FROM unnest(held, attempts);
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_batch_leases(text, bigint[], bigint[], text, timestamptz) IS
    'runs a batch acknowledgement on a distributed queue shard by shard; CE001 naming the first lost lease';

CREATE FUNCTION concurrency_internal.distributed_complete_batch(queue text, task_ids bigint[], lease_tokens bigint[])
    RETURNS bigint
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
SELECT count(*) FROM concurrency_internal.distributed_batch_leases(queue, task_ids, lease_tokens, 'complete', clock_timestamp())
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_complete_batch(text, bigint[], bigint[]) IS
    'complete_batch on a distributed queue (called by concurrency.complete_batch)';

CREATE FUNCTION concurrency_internal.distributed_heartbeat_batch(queue text, task_ids bigint[], lease_tokens bigint[],
                                                        extend interval DEFAULT NULL)
    RETURNS timestamptz
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    deadline timestamptz := clock_timestamp() + coalesce(extend, s.lease);
BEGIN
    IF extend <= interval '0' THEN
        RAISE EXCEPTION 'extend must be positive' USING ERRCODE = '22023';
    ELSIF coalesce(cardinality(task_ids), 0) = 0 THEN
        RETURN NULL;
    END IF;
    PERFORM concurrency_internal.distributed_batch_leases(queue, task_ids, lease_tokens, 'heartbeat', deadline);
    RETURN deadline;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_heartbeat_batch(text, bigint[], bigint[], interval) IS
    'heartbeat_batch on a distributed queue (called by concurrency.heartbeat_batch)';

-- Every task is locked (distributed_batch_leases: shard by shard, by id
-- within a shard, one order for every batch, so that two batches cannot
-- deadlock) and a lost lease raises CE001 before anything is written.
CREATE FUNCTION concurrency_internal.distributed_fail_batch(queue text, task_ids bigint[], lease_tokens bigint[],
                                                   error text DEFAULT NULL, retry_in interval DEFAULT NULL)
    RETURNS TABLE (task_id bigint, state text)
    LANGUAGE plpgsql VOLATILE ROWS 10
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    now timestamptz := clock_timestamp();
    a record;
    held bigint[];
    attempts integer[];
    states text[] := '{}';
    key text;
    released text[] := '{}';
BEGIN
    IF retry_in < interval '0' THEN
        RAISE EXCEPTION 'retry_in must not be negative' USING ERRCODE = '22023';
    END IF;
    SELECT array_agg(l.task_id), array_agg(l.attempt) INTO held, attempts
      FROM concurrency_internal.distributed_batch_leases(queue, task_ids, lease_tokens, 'lock', now) AS l;
    -- each task's next state in argument order, each backoff with its own
    -- jitter; one router statement per task (an UPDATE per shard that takes
    -- each row's values from array parameters by position crashes Citus 14)
    FOR i IN 1 .. coalesce(cardinality(task_ids), 0) LOOP
        a := concurrency_internal.distributed_after_failure(attempts[array_position(held, task_ids[i])], s.max_attempts,
                                                   retry_in, now);
        states := states || a.state;
        EXECUTE format($q$UPDATE %s
                             SET state = $3, run_at = CASE WHEN $3 = 'dead' THEN run_at ELSE $4 END,
                                 lease_token = NULL, lease_expires_at = NULL, lease_extended_to = NULL,
                                 last_error = $5
                           WHERE shard_key = $1 AND id = $2
                          RETURNING concurrency_key$q$, s.relation)
          INTO key
          USING concurrency_internal.distributed_task_shard(s.shard_keys, task_ids[i]), task_ids[i], a.state, a.run_at, error;
        IF a.state = 'dead' AND key IS NOT NULL THEN -- a retry keeps its key's place
            released := released || key;
        END IF;
    END LOOP;
    IF s.key_limit IS NOT NULL AND cardinality(released) > 0 THEN
        PERFORM concurrency_internal.distributed_release_keys(queue, released);
    END IF;
    -- a retry waiting for its run_at is 'ready' to the caller, as with fail
    RETURN QUERY SELECT u.id, CASE WHEN u.next_state = 'dead' THEN 'dead' ELSE 'ready' END
                   FROM unnest(task_ids, states) WITH ORDINALITY AS u(id, next_state, n)
                  ORDER BY u.n;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_fail_batch(text, bigint[], bigint[], text, interval) IS
    'fail_batch on a distributed queue (called by concurrency.fail_batch)';

-- One chunk of purge on one shard (a router statement): up to `chunk` done
-- and cancelled tasks whose retention has passed (every finished one when the
-- queue retains nothing), but not a cancelled task whose holder's lease still
-- runs. The shard: shard_key, or one at random when it is NULL (the purge
-- that queue calls do a chunk at a time). Returns how many were deleted.
CREATE FUNCTION concurrency_internal.distributed_purge_chunk(queue text, chunk integer, shard_key integer DEFAULT NULL)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    now timestamptz := clock_timestamp();
    key integer := coalesce(shard_key, s.shard_keys[1 + floor(random() * cardinality(s.shard_keys))::integer]);
    purged bigint;
BEGIN
    IF chunk IS NULL OR chunk < 1 THEN
        RAISE EXCEPTION 'chunk must be at least 1' USING ERRCODE = '22023';
    END IF;
    EXECUTE format($q$DELETE FROM %1$s
                       WHERE shard_key = $1 AND id = ANY (ARRAY(
                             SELECT id FROM %1$s
                              WHERE shard_key = $1 AND state IN ('done', 'cancelled') AND finished_at <= $2
                                AND (state = 'done' OR lease_expires_at IS NULL OR lease_expires_at <= $3)
                              ORDER BY finished_at
                              LIMIT $4 FOR UPDATE SKIP LOCKED))$q$, s.relation)
      USING key, now - coalesce(s.retain, interval '0'), now, chunk;
    GET DIAGNOSTICS purged = ROW_COUNT;
    RETURN purged;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_purge_chunk(text, integer, integer) IS
    'deletes up to chunk finished tasks past their retention from one shard of a distributed queue (at random if shard_key is NULL)';

-- purge: every shard, in chunks of 10,000.
CREATE FUNCTION concurrency_internal.distributed_purge(queue text)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    chunk constant integer := 10000;
    key integer;
    total bigint := 0;
    k bigint;
BEGIN
    FOREACH key IN ARRAY (concurrency_internal.distributed_queue_settings(queue)).shard_keys LOOP
        LOOP
            k := concurrency_internal.distributed_purge_chunk(queue, chunk, key);
            total := total + k;
            EXIT WHEN k < chunk;
        END LOOP;
    END LOOP;
    RETURN total;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_purge(text) IS
    'purge on a distributed queue (called by concurrency.purge)';
-- ---------------------------------------------------------------------------
-- Distributed queues served by every node (docs/scaling-out.md).
--
-- Every node of the cluster serves a distributed queue: a call on a node that
-- holds shards of the queue runs the queue's C++ code on those shards' tables
-- (src/queue/distributed.hpp), and hands the rest to the routed functions of
-- 41_distributed_routed.sql. For that, every node knows the queue: its row of
-- concurrency.queue, of concurrency.distributed_queue and its permissions are
-- copied to every other node in the transaction that changes them on the
-- coordinator (distributed_sync_catalog). And every node makes task ids and
-- lease tokens of its own without asking another: a number from its own
-- lease_token sequence with its Citus group in the low 10 bits
-- (distributed_new_number; the C++ makes the same, QueueSql::new_id).
-- ---------------------------------------------------------------------------

-- Runs a command on every other node of the Citus cluster, as the current
-- user, inside this transaction (Citus commits it with two-phase commit).
CREATE FUNCTION concurrency_internal.distributed_send(command text) RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_distributed_send';
COMMENT ON FUNCTION concurrency_internal.distributed_send(text) IS
    'runs a command on every other node of the Citus cluster, in this transaction (internal)';
REVOKE ALL ON FUNCTION concurrency_internal.distributed_send(text) FROM PUBLIC;

-- A number no other node makes: this node's next lease_token number with its
-- Citus group in the low 10 bits. A lease token of a distributed queue; times
-- 1024 plus a shard position, a task id.
CREATE FUNCTION concurrency_internal.distributed_new_number() RETURNS bigint
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
COMMENT ON FUNCTION concurrency_internal.distributed_new_number() IS
    'a number unique across the Citus cluster, for task ids and lease tokens of distributed queues (internal)';

-- Copies what the coordinator knows of a queue (its row of concurrency.queue,
-- of concurrency.distributed_queue and its permissions) to every other node,
-- replacing what they had, in this transaction; a queue that is gone is
-- removed there. Nothing on a server that is not a Citus coordinator. Runs
-- as the owner of the catalog (Citus sends the command as that user).
CREATE FUNCTION concurrency_internal.distributed_sync_catalog(queue text) RETURNS void
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
    PERFORM concurrency_internal.distributed_send(command);
END
$fn$;
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
CREATE FUNCTION concurrency_internal.distribute_key_rate_slots(queue text) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    rkrel text := format('concurrency.%I', 'rk_' || queue);
BEGIN
    IF queue IS NULL THEN
        RAISE EXCEPTION 'queue must not be null' USING ERRCODE = '22004';
    END IF;
    IF NOT EXISTS (SELECT FROM concurrency.distributed_queue d WHERE d.queue = distribute_key_rate_slots.queue) THEN
        RAISE EXCEPTION 'queue "%" is not a distributed queue', queue USING ERRCODE = '55000';
    END IF;
    IF to_regclass(rkrel) IS NULL THEN
        RAISE EXCEPTION 'queue "%" has no slots of key_rate_limit', queue USING ERRCODE = '55000',
            HINT = 'alter_queue(queue, key_rate_limit => …, key_rate_period => …) makes them.';
    END IF;
    IF EXISTS (SELECT FROM pg_attribute a
                WHERE a.attrelid = to_regclass(rkrel) AND a.attname = 'shard_key' AND NOT a.attisdropped) THEN
        RETURN;
    END IF;
    EXECUTE format('DELETE FROM %s', rkrel);
    EXECUTE format('ALTER TABLE %1$s ADD COLUMN shard_key integer NOT NULL DEFAULT 0,
                        DROP CONSTRAINT %2$I,
                        ADD CONSTRAINT %2$I PRIMARY KEY (shard_key, concurrency_key, slot)',
                   rkrel, 'rk_' || queue || '_pkey');
    PERFORM create_distributed_table(rkrel, 'shard_key', colocate_with => format('concurrency.%I', 'q_' || queue));
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distribute_key_rate_slots(text) IS
    'distributes the slot table of key_rate_limit of a distributed queue beside its tasks'' shards (internal)';

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
    IF EXISTS (SELECT FROM concurrency.queue q
                WHERE q.name = distribute_queue.queue AND q.key_rate_limit IS NOT NULL
                  AND q.rate_limit IS NOT NULL) THEN
        RAISE EXCEPTION 'key_rate_limit with rate_limit is not supported on distributed queue "%"', queue
            USING ERRCODE = '0A000',
                  DETAIL = 'The claims of a distributed queue with rate_limit are made on the coordinator, those under key_rate_limit on each key''s shard.',
                  HINT = 'Remove one of them first (alter_queue(queue, rate_limit => 0) or key_rate_limit => 0).';
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
    -- (the rate slots of rate_limit, r_<queue>, stay there as they are)
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
    -- the slots of key_rate_limit (where the queue has the limit) beside the
    -- tasks too
    IF to_regclass(format('concurrency.%I', 'rk_' || queue)) IS NOT NULL THEN
        PERFORM concurrency_internal.distribute_key_rate_slots(queue);
    END IF;
    -- the queue functions hand what this node cannot serve to the routed
    -- functions of schema concurrency_internal, as the owner of the queue's table
    EXECUTE format('GRANT USAGE ON SCHEMA concurrency_internal TO %s',
                   (SELECT c.relowner::regrole FROM pg_class c WHERE c.oid = rel::regclass));
    -- every node serves the queue: its settings, shard keys and permissions
    -- on every node, in this transaction
    PERFORM concurrency_internal.distributed_sync_catalog(distribute_queue.queue);
END
$fn$;
COMMENT ON FUNCTION concurrency.distribute_queue(text, integer) IS
    'makes an empty queue a Citus distributed table (shard_count shards, default citus.shard_count); run on the coordinator';
REVOKE ALL ON FUNCTION concurrency.distribute_queue(text, integer) FROM PUBLIC;

CREATE OR REPLACE FUNCTION concurrency_internal.distributed_enqueue(queue text, payload jsonb DEFAULT '{}', run_at timestamptz DEFAULT NULL,
                                                priority integer DEFAULT 0, dedupe_key text DEFAULT NULL,
                                                concurrency_key text DEFAULT NULL)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
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
    pos := CASE WHEN coalesce(concurrency_key, dedupe_key) IS NULL THEN concurrency_internal.distributed_next_position(n)
                ELSE concurrency_internal.distributed_key_position(n, coalesce(concurrency_key, dedupe_key)) END;
    -- on a queue with key_limit a task of a key is blocked when its key is
    -- full or already has blocked tasks, decided under the key's lock
    IF concurrency_key IS NOT NULL AND s.key_limit IS NOT NULL THEN
        PERFORM concurrency_internal.distributed_lock_key(queue, s.shard_keys, concurrency_key);
        key_limit := concurrency_internal.distributed_key_limit(queue);
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
        new_id := concurrency_internal.distributed_new_number() * 1024 + pos;
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
COMMENT ON FUNCTION concurrency_internal.distributed_enqueue(text, jsonb, timestamptz, integer, text, text) IS
    'enqueue on a distributed queue (called by concurrency.enqueue)';

-- A claim visits one shard at a time (a router query each), starting after
-- the shard this backend visited last, until it has its batch or has visited
-- every shard once. A visit wakes the shard's expired leases and due tasks
-- first on every 16th call of the backend, and whenever the claim found
-- fewer tasks than asked for.
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_dequeue(queue text, batch integer DEFAULT 1, lease interval DEFAULT NULL,
                                                worker text DEFAULT NULL)
    RETURNS TABLE (task_id bigint, lease_token bigint, attempt integer, payload jsonb,
                   enqueued_at timestamptz, lease_expires_at timestamptz)
    LANGUAGE plpgsql VOLATILE ROWS 1
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    n integer := cardinality(s.shard_keys);
    start integer := concurrency_internal.distributed_next_position(n);
    pos integer;
    key integer;
    now timestamptz;
    token bigint;
    got integer := 0;
    claim text;
    t record;
    slots integer[];
    rate record;
    rate_slots integer[];
    rate_before timestamptz[];
    rate_table text := format('concurrency.%I', 'r_' || queue);
    ids bigint[] := '{}';
    tokens bigint[] := '{}';
    ends timestamptz[] := '{}';
BEGIN
    IF batch IS NULL THEN
        RAISE EXCEPTION 'batch must not be null' USING ERRCODE = '22004';
    ELSIF batch < 1 THEN
        RAISE EXCEPTION 'batch must be at least 1' USING ERRCODE = '22023';
    ELSIF lease <= interval '0' THEN
        RAISE EXCEPTION 'lease must be positive' USING ERRCODE = '22023';
    END IF;
    -- rate_limit: at most as many tasks as this claim takes free rate slots
    -- (as a claim on one server takes them, src/queue/rate_sql.hpp: a slot
    -- serves one claim in any window of rate_period), those it does not use
    -- given back at the end with the time of their use before (never "free":
    -- a claim whose clock is behind may see them still in use, and must); the
    -- coordinator is their one place of decision
    SELECT q.rate_limit, q.rate_period INTO rate FROM concurrency.queue q WHERE q.name = distributed_dequeue.queue;
    IF rate.rate_limit IS NOT NULL THEN
        now := clock_timestamp();
        EXECUTE format($q$WITH free AS (
                              SELECT slot, used_at FROM %1$s WHERE used_at <= $1
                               LIMIT $2 FOR UPDATE SKIP LOCKED),
                          taken AS (
                              UPDATE %1$s AS r SET used_at = $3 FROM free WHERE r.slot = free.slot
                              RETURNING r.slot, free.used_at AS before)
                          SELECT coalesce(array_agg(slot), '{}'), coalesce(array_agg(before), '{}')
                            FROM taken$q$, rate_table)
          INTO rate_slots, rate_before USING now - rate.rate_period, least(batch, rate.rate_limit), now;
        batch := cardinality(rate_slots);
        IF batch = 0 THEN
            RETURN;
        END IF;
    END IF;
    -- max_leased: at most as many tasks as this claim holds free slots (a
    -- claim never checks a key: tasks that key_limit holds back wait
    -- blocked, and a claim takes only ready ones)
    IF s.max_leased IS NOT NULL THEN
        slots := concurrency_internal.distributed_take_slots(queue, batch, clock_timestamp());
        batch := cardinality(slots);
    END IF;
    IF batch = 0 THEN
        IF rate_slots IS NOT NULL THEN
            EXECUTE format($q$UPDATE %s AS r SET used_at = b.before FROM unnest($1, $2) AS b(slot, before)
                               WHERE r.slot = b.slot$q$, rate_table)
              USING rate_slots, rate_before;
        END IF;
        RETURN;
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
            PERFORM concurrency_internal.distributed_wake(queue, key, now);
        END IF;
        token := concurrency_internal.distributed_new_number();
        FOR round IN 1 .. 2 LOOP
            -- the second round only after a wake-up made tasks ready
            EXIT WHEN round = 2 AND (got >= batch OR concurrency_internal.distributed_wake(queue, key, now) = 0);
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
                tokens := tokens || t.lease_token;
                ends := ends || t.lease_expires_at;
            END LOOP;
        END LOOP;
        EXIT WHEN got >= batch;
    END LOOP;
    IF s.max_leased IS NOT NULL AND got > 0 THEN
        -- (each shard's tasks have a lease token of their own)
        EXECUTE format($q$UPDATE %s AS sl SET task_id = u.id, lease_token = u.token, lease_expires_at = u.ends
                            FROM unnest($1, $2, $3, $4) AS u(slot, id, ends, token)
                           WHERE sl.slot = u.slot$q$, format('concurrency.%I', 's_' || queue))
          USING slots[1:got], ids, ends, tokens;
    END IF;
    IF got < cardinality(rate_slots) THEN -- rate slots not used: given back
        EXECUTE format($q$UPDATE %s AS r SET used_at = b.before FROM unnest($1, $2) AS b(slot, before)
                           WHERE r.slot = b.slot$q$, rate_table)
          USING rate_slots[got + 1:], rate_before[got + 1:];
    END IF;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_dequeue(text, integer, interval, text) IS
    'dequeue on a distributed queue (called by concurrency.dequeue): one shard at a time, round-robin per backend';
-- ---------------------------------------------------------------------------
-- Distributed queues 0.2.0 -> 0.3.0: every node serves them now
-- (42_distributed_nodes.sql), so every node must know them. On the
-- coordinator, each distributed queue's catalog rows are copied to the other
-- nodes in this transaction; elsewhere (a worker node, where Citus runs this
-- update too, or a server without Citus) there is none to copy.
-- ---------------------------------------------------------------------------

SELECT concurrency_internal.distributed_sync_catalog(d.queue) FROM concurrency.distributed_queue d ORDER BY d.queue;

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
            PERFORM concurrency_internal.distributed_send(pg_catalog.format(
                'SELECT pg_catalog.setval(''concurrency.lease_token'', '
                'GREATEST((SELECT last_value FROM concurrency.lease_token), %s))',
                (SELECT last_value FROM concurrency.lease_token)));
        END IF;
    END IF;
END
$upgrade$;

-- The queue functions run the routed functions of a distributed queue as the
-- owner of its table, and those now live in schema concurrency_internal
-- (41_distributed_routed.sql): each such owner gets USAGE on it, as
-- distribute_queue gives it to the owners of queues distributed from now on.
DO $upgrade$
DECLARE
    owner regrole;
BEGIN
    FOR owner IN SELECT DISTINCT c.relowner::regrole
                   FROM concurrency.distributed_queue d
                   JOIN pg_catalog.pg_class c
                     ON c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(pg_catalog.format('concurrency.%I', 'q_' OPERATOR(pg_catalog.||) d.queue))
                  ORDER BY 1
    LOOP
        EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA concurrency_internal TO %s', owner);
    END LOOP;
END
$upgrade$;
-- ---------------------------------------------------------------------------
-- What is no API goes to schema concurrency_internal (made in
-- 41_distributed_routed.sql), so that \df concurrency.* lists the public API
-- only: the trigger functions behind the catalogs' caches, and the functions
-- that views return the rows of (the views call them by OID: PUBLIC keeps
-- EXECUTE on them, and the schema's USAGE is not needed for that). Last, in a
-- fresh install as in the update, so that both end alike.
-- ---------------------------------------------------------------------------

ALTER FUNCTION concurrency.subsystem_changed() SET SCHEMA concurrency_internal;
ALTER FUNCTION concurrency.queue_changed() SET SCHEMA concurrency_internal;
ALTER FUNCTION concurrency.queue_permission_changed() SET SCHEMA concurrency_internal;
ALTER FUNCTION concurrency.my_named_locks() SET SCHEMA concurrency_internal;
ALTER FUNCTION concurrency.queue_stats_rows() SET SCHEMA concurrency_internal;
ALTER FUNCTION concurrency.schedule_rows() SET SCHEMA concurrency_internal;
ALTER FUNCTION concurrency.cluster_lock_wait_rows() SET SCHEMA concurrency_internal;
