-- ---------------------------------------------------------------------------
-- Task queue 0.1.0 -> 0.2.0: keyed concurrency and queue-wide limits.
--
-- Every queue gets what a 0.2.0 create_queue makes (src/queue/keys_sql.cpp,
-- KeySql::create_tables): the state 'blocked', the keyed index, the key
-- table k_<queue> and the slot table s_<queue>, owned by the owner of the
-- queue's table. No 0.1.0 task has a key or a limit: nothing is blocked.
-- queue_stats gains the column blocked; concurrency.queue_keys is new.
-- ---------------------------------------------------------------------------

DO $upgrade$
DECLARE
    q record;
    t text;
BEGIN
    FOR q IN SELECT c.name, r.relowner::pg_catalog.regrole AS owner
               FROM concurrency.queue AS c
               JOIN pg_catalog.pg_class AS r
                 ON r.relname OPERATOR(pg_catalog.=) ('q_' OPERATOR(pg_catalog.||) c.name)
                AND r.relnamespace OPERATOR(pg_catalog.=) 'concurrency'::pg_catalog.regnamespace
              ORDER BY c.name LOOP
        t := pg_catalog.format('concurrency.%I', 'q_' || q.name);
        EXECUTE pg_catalog.format(
            'CREATE INDEX %I ON %s (concurrency_key, state, id) WHERE concurrency_key IS NOT NULL',
            'q_' || q.name || '_keyed', t);
        EXECUTE pg_catalog.format(
            'CREATE TABLE concurrency.%I (concurrency_key text NOT NULL, CONSTRAINT %I PRIMARY KEY (concurrency_key)) '
            'WITH (fillfactor = 90)', 'k_' || q.name, 'k_' || q.name || '_pkey');
        EXECUTE pg_catalog.format('COMMENT ON TABLE concurrency.%I IS %L', 'k_' || q.name,
            'concurrency keys of the concurrency_ext queue ' || q.name || ' (internal: locked to admit tasks)');
        EXECUTE pg_catalog.format(
            'CREATE TABLE concurrency.%I (slot integer NOT NULL, task_id bigint, lease_token bigint, '
            'CONSTRAINT %I PRIMARY KEY (slot)) WITH (fillfactor = 50)', 's_' || q.name, 's_' || q.name || '_pkey');
        EXECUTE pg_catalog.format('COMMENT ON TABLE concurrency.%I IS %L', 's_' || q.name,
            'lease slots of the concurrency_ext queue ' || q.name || ' (internal: one per max_leased)');
        EXECUTE pg_catalog.format('ALTER TABLE concurrency.%I OWNER TO %I', 'k_' || q.name, q.owner);
        EXECUTE pg_catalog.format('ALTER TABLE concurrency.%I OWNER TO %I', 's_' || q.name, q.owner);
        -- like the queue's table, not a member of the extension: pg_dump
        -- dumps them, DROP EXTENSION does not silently drop them
        EXECUTE pg_catalog.format('ALTER EXTENSION concurrency_ext DROP TABLE concurrency.%I', 'k_' || q.name);
        EXECUTE pg_catalog.format('ALTER EXTENSION concurrency_ext DROP TABLE concurrency.%I', 's_' || q.name);
    END LOOP;
END
$upgrade$;
