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
-- Task queue 0.2.0 -> 0.3.0, before 24_queue_wait.sql defines dequeue,
-- heartbeat, heartbeat_batch and task_status anew (with wait and progress):
-- their 0.2.0 definitions step aside under other names, so that the new ones
-- can be created (task_status keeps its argument types but returns one more
-- column, which CREATE OR REPLACE cannot do). 25_queue_wait_grants.sql gives
-- their privileges to the new ones and drops them.
-- ---------------------------------------------------------------------------

ALTER FUNCTION concurrency.dequeue(text, integer, interval, text) RENAME TO dequeue_0_2_0;
ALTER FUNCTION concurrency.heartbeat(text, bigint, bigint, interval) RENAME TO heartbeat_0_2_0;
ALTER FUNCTION concurrency.heartbeat_batch(text, bigint[], bigint[], interval) RENAME TO heartbeat_batch_0_2_0;
ALTER FUNCTION concurrency.task_status(text, bigint) RENAME TO task_status_0_2_0;
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
                   progress jsonb)
    LANGUAGE c VOLATILE ROWS 1
    AS 'MODULE_PATHNAME', 'concurrency_task_status';
COMMENT ON FUNCTION concurrency.task_status(text, bigint) IS
    'what became of a task: one row (state, attempt, times, worker, last error, result, keys, and the progress of a task not finished yet), or none if it does not exist (any more)';
-- ---------------------------------------------------------------------------
-- Task queue 0.2.0 -> 0.3.0, after 24_queue_wait.sql: the privileges of the
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
             'concurrency.task_status(text,bigint)'::pg_catalog.regprocedure::pg_catalog.oid)) AS p(old, new)
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
