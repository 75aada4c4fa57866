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
-- The SQL helpers of distributed queues (see 41_distributed_queue.sql for
-- the placement they follow). Every queue function is served by the C++ on
-- each node (42_distributed_nodes.sql); what is left here in SQL is the
-- resizing of the lease slots of max_leased (run by alter_queue on the
-- coordinator, with its helpers), and the declarations of the C++ functions
-- that one node calls on another's shards: distributed_lease_end (a lease
-- slot whose lease end passed), distributed_rebalance (key_limit changed)
-- and distributed_purge_chunk (from a node without shards). Internal: they
-- live in schema concurrency_internal, which PUBLIC cannot use; the owner of
-- each distributed queue's table gets USAGE on it from distribute_queue (the
-- queue functions run these as that owner), so that \df concurrency.* lists
-- the public API only.
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

-- For a lease slot of a queue with max_leased whose lease end has passed
-- (the coordinator's claim, when no slot is empty): on the node of the
-- task's shard, wakes that shard as a claim does (an expired lease
-- reclaimed: ready again, or dead with its key's next task admitted and its
-- waiting descendants cancelled), then returns when the lease `lease_token`
-- on the task ends, NULL when it is no longer held. Needs permission work;
-- 55000 where the shard is not on this node.
CREATE FUNCTION concurrency_internal.distributed_lease_end(queue text, task_id bigint, lease_token bigint,
                                                           now timestamptz)
    RETURNS timestamptz
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_distributed_lease_end';
COMMENT ON FUNCTION concurrency_internal.distributed_lease_end(text, bigint, bigint, timestamptz) IS
    'wakes the shard of a task of a distributed queue and returns when its lease ends (NULL: not held); for the lease slots of max_leased';

-- After alter_queue changed key_limit, on each node that holds shards of the
-- queue (called by the coordinator): admits and holds back the tasks of
-- every key on this node's shards, each with its key table's shard locked,
-- as a local queue's alter_queue does. The limit travels with the call (0:
-- none). Needs permission manage.
CREATE FUNCTION concurrency_internal.distributed_rebalance(queue text, key_limit integer, now timestamptz)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_distributed_rebalance';
COMMENT ON FUNCTION concurrency_internal.distributed_rebalance(text, integer, timestamptz) IS
    'after key_limit changed: admits and holds back the tasks of every key of a distributed queue on this node''s shards';

-- One chunk of the purge that queue calls do, for a node without shards of
-- the queue, on the node of the shard at `shard_position`: up to `chunk`
-- finished tasks of that shard past their retention. Returns how many were deleted
-- (0 where the shard is not on this node). Needs permission work.
CREATE FUNCTION concurrency_internal.distributed_purge_chunk(queue text, chunk integer, shard_position integer)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_distributed_purge_chunk';
COMMENT ON FUNCTION concurrency_internal.distributed_purge_chunk(text, integer, integer) IS
    'deletes up to chunk finished tasks past their retention from the shard at shard_position of a distributed queue, on its node';

-- Dependencies between shards (the design: src/queue/dependencies.hpp): the
-- messages about tasks of one shard, delivered on its node by the node that
-- made the top-level call (an int8[] of (kind, a, b) triples), and the
-- messages that a call routed to this node posted, taken by the last column
-- of the routed statement. For the owner of the queue's table.
CREATE FUNCTION concurrency_internal.dependency_messages(queue text, messages bigint[])
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_dependency_messages';
COMMENT ON FUNCTION concurrency_internal.dependency_messages(text, bigint[]) IS
    'delivers messages between tasks of a distributed queue in different shards (a parent done, dead or cancelled; a child enqueued or ended) to their shard on this node';
CREATE FUNCTION concurrency_internal.dependency_outbox()
    RETURNS bigint[]
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_dependency_outbox';
COMMENT ON FUNCTION concurrency_internal.dependency_outbox() IS
    'the messages between shards of a distributed queue that this backend''s calls posted and did not deliver (taken)';
-- ---------------------------------------------------------------------------
-- Distributed queues served by every node (docs/scaling-out.md).
--
-- Every node of the cluster serves a distributed queue: a call on a node that
-- holds shards of the queue runs the queue's C++ code on those shards' tables
-- (src/queue/distributed.hpp), and sends the rest to the node of the shard
-- it concerns, where the same C++ serves it. For that, every node knows the
-- queue: its row of concurrency.queue, of concurrency.distributed_queue and
-- its permissions are copied to every other node in the transaction that
-- changes them on the coordinator (distributed_sync_catalog). And every node
-- makes task ids and lease tokens of its own without asking another: a
-- number from its own lease_token sequence with its Citus group in the low
-- 10 bits (QueueSql::new_id).
--
-- The transaction that distributes a queue may use it at once: its shards
-- are made with citus.multi_shard_modify_mode = 'sequential', so that each
-- node's shards, Citus's metadata and the catalog copy are written on one
-- connection per node, the one that the calls of the rest of the
-- transaction use for those shards.
-- ---------------------------------------------------------------------------

-- Runs a command on every other node of the Citus cluster, as the current
-- user, inside this transaction (Citus commits it with two-phase commit).
CREATE FUNCTION concurrency_internal.distributed_send(command text) RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_distributed_send';
COMMENT ON FUNCTION concurrency_internal.distributed_send(text) IS
    'runs a command on every other node of the Citus cluster, in this transaction (internal)';
REVOKE ALL ON FUNCTION concurrency_internal.distributed_send(text) FROM PUBLIC;

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
                        AND (p.grantee::oid = 0 OR EXISTS (SELECT FROM pg_roles r WHERE r.oid = p.grantee::oid))), '')
        -- the owner of the queue's table makes the routed calls on every node
        -- (schema concurrency_internal), as distribute_queue let it here
        || coalesce((SELECT format('GRANT USAGE ON SCHEMA concurrency_internal TO %I;', r.rolname)
                       FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner
                      WHERE c.oid = to_regclass(format('concurrency.%I', 'q_' || distributed_sync_catalog.queue))
                        AND NOT r.rolsuper
                        AND EXISTS (SELECT FROM concurrency.distributed_queue d
                                     WHERE d.queue = distributed_sync_catalog.queue)), '');
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
    mode text;
    citus_error text;
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
    -- one connection per node for the shards, metadata and catalog copy
    -- that the rest of this transaction may use (see the top of this file);
    -- after a parallel query in this transaction Citus cannot, and the
    -- queue functions leave the queue alone until the transaction commits
    mode := current_setting('citus.multi_shard_modify_mode');
    BEGIN
        PERFORM set_config('citus.multi_shard_modify_mode', 'sequential', true);
        PERFORM create_distributed_table(rel, 'shard_key', shard_count => n, colocate_with => 'none');
    EXCEPTION WHEN internal_error THEN
        GET STACKED DIAGNOSTICS citus_error = MESSAGE_TEXT;
        IF citus_error NOT LIKE '%in sequential mode because a parallel query was executed%' THEN
            RAISE;
        END IF;
        PERFORM set_config('concurrency_ext.distributed_in_parallel', 'on', true);
        PERFORM create_distributed_table(rel, 'shard_key', shard_count => n, colocate_with => 'none');
    END;
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
    PERFORM set_config('citus.multi_shard_modify_mode', mode, true);
END
$fn$;
COMMENT ON FUNCTION concurrency.distribute_queue(text, integer) IS
    'makes an empty queue a Citus distributed table (shard_count shards, default citus.shard_count); run on the coordinator';
REVOKE ALL ON FUNCTION concurrency.distribute_queue(text, integer) FROM PUBLIC;
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
