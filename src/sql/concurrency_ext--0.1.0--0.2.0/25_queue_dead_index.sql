-- ---------------------------------------------------------------------------
-- Task queue 0.1.0 -> 0.2.0: the partial index of dead tasks that a 0.2.0
-- create_queue makes (src/queue/stats_sql.cpp, StatsSql::create_index), so
-- that queue_stats counts them without reading the whole table.
-- ---------------------------------------------------------------------------

DO $upgrade$
DECLARE
    q record;
BEGIN
    FOR q IN SELECT name FROM concurrency.queue ORDER BY name LOOP
        IF pg_catalog.to_regclass(pg_catalog.format('concurrency.%I', 'q_' || q.name)) IS NOT NULL THEN
            EXECUTE pg_catalog.format('CREATE INDEX %I ON concurrency.%I (id) WHERE state = ''dead''',
                                      'q_' || q.name || '_dead', 'q_' || q.name);
        END IF;
    END LOOP;
END
$upgrade$;
