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
-- Functions whose argument list grew are created anew (by the install parts
-- 21_queue_settings.sql, 22_queue_tasks.sql and 23_queue_stats.sql, see
-- INSTALL_PARTS) and the old ones dropped; the new ones get the old ones'
-- privileges (GRANT EXECUTE to a role survives the update):
-- 24_queue_replaced.sql.
-- ---------------------------------------------------------------------------

ALTER TABLE concurrency.queue
    ADD COLUMN retain     interval CHECK (retain > interval '0'),
    ADD COLUMN key_limit  integer  CHECK (key_limit >= 1),
    ADD COLUMN max_leased integer  CHECK (max_leased >= 1);

-- The same columns and indexes as a 0.2.0 create_queue makes
-- (src/queue/queue_sql.cpp, QueueSql::create_table), and no CHECK on state:
-- only the queue functions write it, and the check was re-read from the
-- catalog on every claim (about a tenth of a claim's cost).
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
            'ADD COLUMN result jsonb, DROP CONSTRAINT %I',
            t, 'q_' || q.name || '_state_check');
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

-- Out of the way of the new definitions (same names), dropped by
-- 24_queue_replaced.sql.
ALTER FUNCTION concurrency.queue_stats_rows() RENAME TO queue_stats_rows_0_1_0;
ALTER VIEW concurrency.queue_stats RENAME TO queue_stats_0_1_0;
