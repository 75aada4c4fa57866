-- ---------------------------------------------------------------------------
-- Task queue 0.1.0 -> 0.2.0: queue settings (retain, key_limit, max_leased),
-- alter_queue, finished tasks (done, cancelled) with finished_at and result,
-- concurrency keys, per-element keys of enqueue_batch.
--
-- Every queue's table gets the new columns and states in place: no row is
-- rewritten or lost, lease tokens stay as they are (a worker holding a 0.1.0
-- lease completes it as before). The dedupe index is rebuilt because a
-- cancelled task releases its key. Each queue table is locked (ACCESS
-- EXCLUSIVE) until the update commits; the update must be run by a role that
-- owns every queue table (a superuser).
--
-- Functions whose argument list grew are created anew and the old ones
-- dropped; the new ones get the old ones' privileges (GRANT EXECUTE to a
-- role survives the update).
-- ---------------------------------------------------------------------------

ALTER TABLE concurrency.queue
    ADD COLUMN retain     interval CHECK (retain > interval '0'),
    ADD COLUMN key_limit  integer  CHECK (key_limit >= 1),
    ADD COLUMN max_leased integer  CHECK (max_leased >= 1);

-- The same columns, constraint and indexes as a 0.2.0 create_queue makes
-- (src/queue/queue_sql.cpp, QueueSql::create_table).
DO $upgrade$
DECLARE
    q record;
    t text;
BEGIN
    FOR q IN SELECT name FROM concurrency.queue ORDER BY name LOOP
        IF pg_catalog.to_regclass(pg_catalog.format('concurrency.%I', 'q_' || q.name)) IS NULL THEN
            CONTINUE;  -- its table was dropped by hand: create_queue makes it again
        END IF;
        t := pg_catalog.format('concurrency.%I', 'q_' || q.name);
        EXECUTE pg_catalog.format(
            'ALTER TABLE %s ADD COLUMN finished_at timestamptz, ADD COLUMN concurrency_key text, '
            'ADD COLUMN result jsonb, DROP CONSTRAINT %I, '
            'ADD CONSTRAINT %I CHECK (state IN (''ready'', ''scheduled'', ''leased'', ''dead'', ''done'', ''cancelled''))',
            t, 'q_' || q.name || '_state_check', 'q_' || q.name || '_state_check');
        EXECUTE pg_catalog.format(
            'CREATE UNIQUE INDEX %I ON %s (dedupe_key) '
            'WHERE dedupe_key IS NOT NULL AND state OPERATOR(pg_catalog.<>) ''dead'' '
            'AND state OPERATOR(pg_catalog.<>) ''cancelled''',
            'q_' || q.name || '_dedupe_new', t);
        EXECUTE pg_catalog.format('DROP INDEX concurrency.%I', 'q_' || q.name || '_dedupe');
        EXECUTE pg_catalog.format('ALTER INDEX concurrency.%I RENAME TO %I',
                                  'q_' || q.name || '_dedupe_new', 'q_' || q.name || '_dedupe');
        EXECUTE pg_catalog.format(
            'CREATE INDEX %I ON %s (finished_at) '
            'WHERE state OPERATOR(pg_catalog.=) ANY (''{done,cancelled}''::pg_catalog.text[])',
            'q_' || q.name || '_finished', t);
    END LOOP;
END
$upgrade$;

-- Out of the way of the new definitions (same names), dropped at the end.
ALTER FUNCTION concurrency.queue_stats_rows() RENAME TO queue_stats_rows_0_1_0;
ALTER VIEW concurrency.queue_stats RENAME TO queue_stats_0_1_0;

CREATE FUNCTION concurrency.create_queue(queue text, lease interval DEFAULT '30 seconds',
                                         max_attempts integer DEFAULT 5, retain interval DEFAULT NULL,
                                         key_limit integer DEFAULT NULL, max_leased integer DEFAULT NULL,
                                         distributed boolean DEFAULT false)
    RETURNS void
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_create_queue';
COMMENT ON FUNCTION concurrency.create_queue(text, interval, integer, interval, integer, integer, boolean) IS
    'creates the task queue with its table concurrency."q_<queue>"; the same settings again is a no-op, other settings are an error (see alter_queue); distributed => true also makes it a Citus distributed queue (on a coordinator; see distribute_queue)';

CREATE FUNCTION concurrency.alter_queue(queue text, lease interval DEFAULT NULL, max_attempts integer DEFAULT NULL,
                                        retain interval DEFAULT NULL, key_limit integer DEFAULT NULL,
                                        max_leased integer DEFAULT NULL)
    RETURNS void
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_alter_queue';
COMMENT ON FUNCTION concurrency.alter_queue(text, interval, integer, interval, integer, integer) IS
    'changes settings of a queue in place: NULL keeps a setting; retain => ''0'', key_limit => 0, max_leased => 0 remove it';
REVOKE ALL ON FUNCTION concurrency.alter_queue(text, interval, integer, interval, integer, integer) FROM PUBLIC;

CREATE FUNCTION concurrency.enqueue(queue text, payload jsonb DEFAULT '{}', run_at timestamptz DEFAULT NULL,
                                    priority integer DEFAULT 0, dedupe_key text DEFAULT NULL,
                                    concurrency_key text DEFAULT NULL)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_enqueue';
COMMENT ON FUNCTION concurrency.enqueue(text, jsonb, timestamptz, integer, text, text) IS
    'adds a task and returns its id (the id of the task holding dedupe_key, live or retained as done, if any); notifies channel concurrency_<queue> at commit';

CREATE FUNCTION concurrency.enqueue_batch(queue text, payloads jsonb[], run_at timestamptz DEFAULT NULL,
                                          priority integer DEFAULT 0, dedupe_keys text[] DEFAULT NULL,
                                          concurrency_keys text[] DEFAULT NULL)
    RETURNS SETOF bigint
    LANGUAGE c VOLATILE ROWS 100
    AS 'MODULE_PATHNAME', 'concurrency_enqueue_batch';
COMMENT ON FUNCTION concurrency.enqueue_batch(text, jsonb[], timestamptz, integer, text[], text[]) IS
    'adds one task per payload in one statement and returns their ids in payload order (per-element dedupe and concurrency keys)';

CREATE FUNCTION concurrency.complete(queue text, task_id bigint, lease_token bigint, result jsonb DEFAULT NULL)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_complete';
COMMENT ON FUNCTION concurrency.complete(text, bigint, bigint, jsonb) IS
    'finishes a task held with lease_token: kept as done with its result when the queue retains tasks, removed otherwise; SQLSTATE CE001 if the lease was lost or the task is gone';

CREATE FUNCTION concurrency.queue_stats_rows()
    RETURNS TABLE (queue text, ready bigint, scheduled bigint, leased bigint, expired bigint, dead bigint,
                   oldest_ready_age interval, done bigint, cancelled bigint)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_queue_stats';
COMMENT ON FUNCTION concurrency.queue_stats_rows() IS
    'rows of the view concurrency.queue_stats';

CREATE VIEW concurrency.queue_stats AS
    SELECT queue, ready, scheduled, leased, expired, dead, done, cancelled, oldest_ready_age
      FROM concurrency.queue_stats_rows();
COMMENT ON VIEW concurrency.queue_stats IS
    'per queue: tasks ready, scheduled (run_at in the future), leased, expired (lease passed, not yet reclaimed), dead, done and cancelled (retained), and the age of the oldest ready task; counts are NULL for queues on which you lack permission read';

-- Batch forms of complete, heartbeat and fail: all or nothing (one lease
-- lost: CE001 naming that task, and the call changes nothing). Their own
-- names, not overloads of complete, heartbeat and fail: an overload taking
-- bigint[] where the 0.1.0 function takes bigint would make every call with
-- untyped parameters ambiguous (42725) - the way pgx, asyncpg and
-- node-postgres send them - and so break the workers written for 0.1.0.
CREATE FUNCTION concurrency.complete_batch(queue text, task_ids bigint[], lease_tokens bigint[])
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_complete_many';
COMMENT ON FUNCTION concurrency.complete_batch(text, bigint[], bigint[]) IS
    'finishes the tasks held with the lease tokens at the same positions, all or none (SQLSTATE CE001 naming a lost lease); returns how many';

CREATE FUNCTION concurrency.heartbeat_batch(queue text, task_ids bigint[], lease_tokens bigint[],
                                            extend interval DEFAULT NULL)
    RETURNS timestamptz
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_heartbeat_many';
COMMENT ON FUNCTION concurrency.heartbeat_batch(text, bigint[], bigint[], interval) IS
    'extends the leases of the tasks held with the lease tokens at the same positions, all or none (SQLSTATE CE001 naming a lost lease); returns the new deadline';

CREATE FUNCTION concurrency.fail_batch(queue text, task_ids bigint[], lease_tokens bigint[], error text DEFAULT NULL,
                                       retry_in interval DEFAULT NULL)
    RETURNS TABLE (task_id bigint, state text)
    LANGUAGE c VOLATILE ROWS 10
    AS 'MODULE_PATHNAME', 'concurrency_fail_many';
COMMENT ON FUNCTION concurrency.fail_batch(text, bigint[], bigint[], text, interval) IS
    'records a failed attempt of each task held with the lease tokens at the same positions, all or none (SQLSTATE CE001 naming a lost lease); returns each task''s new state, ''ready'' or ''dead''';

CREATE FUNCTION concurrency.cancel(queue text, task_ids bigint[])
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_cancel';
COMMENT ON FUNCTION concurrency.cancel(text, bigint[]) IS
    'cancels tasks in any state but done: a holder of a cancelled lease gets SQLSTATE CE001 at its next heartbeat, complete or fail; returns how many were cancelled';

CREATE FUNCTION concurrency.purge(queue text)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_purge';
COMMENT ON FUNCTION concurrency.purge(text) IS
    'deletes the done and cancelled tasks whose retention has passed (queue calls do it too, in bounded chunks); returns how many';

CREATE FUNCTION concurrency.task_status(queue text, id bigint)
    RETURNS TABLE (task_id bigint, state text, attempt integer, priority integer, run_at timestamptz,
                   enqueued_at timestamptz, lease_expires_at timestamptz, worker text, last_error text,
                   finished_at timestamptz, result jsonb, dedupe_key text, concurrency_key text)
    LANGUAGE c VOLATILE ROWS 1
    AS 'MODULE_PATHNAME', 'concurrency_task_status';
COMMENT ON FUNCTION concurrency.task_status(text, bigint) IS
    'what became of a task: one row (state, attempt, times, worker, last error, result, keys), or none if it does not exist (any more)';

-- The replaced objects' privileges go to their successors, as they are
-- (0.1.0's defaults included: create_queue revoked from PUBLIC, the view
-- readable by PUBLIC).
DO $upgrade$
DECLARE
    pair record;
    g record;
BEGIN
    FOR pair IN
        SELECT * FROM (VALUES
            ('FUNCTION', 'concurrency.create_queue(text,interval,integer)'::pg_catalog.regprocedure::pg_catalog.oid,
             'concurrency.create_queue(text,interval,integer,interval,integer,integer,boolean)'::pg_catalog.regprocedure::pg_catalog.oid),
            ('FUNCTION', 'concurrency.enqueue(text,jsonb,timestamptz,integer,text)'::pg_catalog.regprocedure::pg_catalog.oid,
             'concurrency.enqueue(text,jsonb,timestamptz,integer,text,text)'::pg_catalog.regprocedure::pg_catalog.oid),
            ('FUNCTION', 'concurrency.enqueue_batch(text,jsonb[],timestamptz,integer)'::pg_catalog.regprocedure::pg_catalog.oid,
             'concurrency.enqueue_batch(text,jsonb[],timestamptz,integer,text[],text[])'::pg_catalog.regprocedure::pg_catalog.oid),
            ('FUNCTION', 'concurrency.complete(text,bigint,bigint)'::pg_catalog.regprocedure::pg_catalog.oid,
             'concurrency.complete(text,bigint,bigint,jsonb)'::pg_catalog.regprocedure::pg_catalog.oid),
            ('FUNCTION', 'concurrency.queue_stats_rows_0_1_0()'::pg_catalog.regprocedure::pg_catalog.oid,
             'concurrency.queue_stats_rows()'::pg_catalog.regprocedure::pg_catalog.oid),
            ('TABLE', 'concurrency.queue_stats_0_1_0'::pg_catalog.regclass::pg_catalog.oid,
             'concurrency.queue_stats'::pg_catalog.regclass::pg_catalog.oid)) AS p(kind, old, new)
    LOOP
        IF pair.kind = 'FUNCTION' THEN
            EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', pair.new::pg_catalog.regprocedure);
        ELSE
            EXECUTE pg_catalog.format('REVOKE ALL ON TABLE %s FROM PUBLIC', pair.new::pg_catalog.regclass);
        END IF;
        FOR g IN
            SELECT a.grantee, a.privilege_type, a.is_grantable
              FROM pg_catalog.pg_proc p,
                   pg_catalog.aclexplode(COALESCE(p.proacl, pg_catalog.acldefault('f', p.proowner))) a
             WHERE pair.kind = 'FUNCTION' AND p.oid OPERATOR(pg_catalog.=) pair.old
            UNION ALL
            SELECT a.grantee, a.privilege_type, a.is_grantable
              FROM pg_catalog.pg_class c,
                   pg_catalog.aclexplode(COALESCE(c.relacl, pg_catalog.acldefault('r', c.relowner))) a
             WHERE pair.kind = 'TABLE' AND c.oid OPERATOR(pg_catalog.=) pair.old
        LOOP
            EXECUTE pg_catalog.format('GRANT %s ON %s %s TO %s%s', g.privilege_type, pair.kind,
                CASE pair.kind WHEN 'FUNCTION' THEN pair.new::pg_catalog.regprocedure::pg_catalog.text
                               ELSE pair.new::pg_catalog.regclass::pg_catalog.text END,
                CASE WHEN g.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                     ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(g.grantee)) END,
                CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
        END LOOP;
    END LOOP;
END
$upgrade$;

DROP VIEW concurrency.queue_stats_0_1_0;
DROP FUNCTION concurrency.queue_stats_rows_0_1_0();
DROP FUNCTION concurrency.create_queue(text, interval, integer);
DROP FUNCTION concurrency.enqueue(text, jsonb, timestamptz, integer, text);
DROP FUNCTION concurrency.enqueue_batch(text, jsonb[], timestamptz, integer);
DROP FUNCTION concurrency.complete(text, bigint, bigint);
