-- ---------------------------------------------------------------------------
-- Task queue 0.3.0 -> 0.4.0: every queue's table (a distributed queue's too:
-- Citus sends the ALTER to its shards) gets the columns of durable workflows
-- (steps, awaiting), last, as create_queue makes them. Tasks of every state
-- stay as they are; a queue created after the new library was installed but
-- before this update has them already.
-- ---------------------------------------------------------------------------

DO $upgrade$
DECLARE
    q record;
BEGIN
    FOR q IN SELECT name FROM concurrency.queue ORDER BY name LOOP
        IF pg_catalog.to_regclass(pg_catalog.format('concurrency.%I', 'q_' || q.name)) IS NOT NULL THEN
            EXECUTE pg_catalog.format('ALTER TABLE concurrency.%I ADD COLUMN IF NOT EXISTS steps jsonb, '
                                      'ADD COLUMN IF NOT EXISTS awaiting text', 'q_' || q.name);
        END IF;
    END LOOP;
END
$upgrade$;
