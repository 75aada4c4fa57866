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
