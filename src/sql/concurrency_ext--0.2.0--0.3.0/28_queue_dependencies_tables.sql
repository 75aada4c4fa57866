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
