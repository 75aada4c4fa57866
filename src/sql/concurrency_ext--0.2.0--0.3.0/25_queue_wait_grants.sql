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
