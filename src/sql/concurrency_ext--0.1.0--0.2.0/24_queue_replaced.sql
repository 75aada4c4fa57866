-- ---------------------------------------------------------------------------
-- Task queue 0.1.0 -> 0.2.0: the 0.1.0 functions whose argument list grew,
-- and queue_stats, are replaced by the install parts' definitions (created
-- before this part). Their privileges go to their successors, and the old
-- objects are dropped.
-- ---------------------------------------------------------------------------

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
