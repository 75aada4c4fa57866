-- ---------------------------------------------------------------------------
-- Task queue: counts per queue (the view concurrency.queue_stats) and per
-- concurrency key (queue_keys).
-- ---------------------------------------------------------------------------

CREATE FUNCTION concurrency.queue_stats_rows()
    RETURNS TABLE (queue text, ready bigint, scheduled bigint, leased bigint, expired bigint, dead bigint,
                   oldest_ready_age interval, done bigint, cancelled bigint, blocked bigint, waiting bigint)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_queue_stats';
COMMENT ON FUNCTION concurrency.queue_stats_rows() IS
    'rows of the view concurrency.queue_stats';

-- paused (pause_queue) comes from the catalog, which every role may read;
-- 0.3.0's columns come last, where an update adds them
CREATE VIEW concurrency.queue_stats AS
    SELECT s.queue, s.ready, s.scheduled, s.leased, s.expired, s.dead, s.done, s.cancelled, s.blocked,
           s.oldest_ready_age, q.paused, s.waiting
      FROM concurrency.queue_stats_rows() s
      LEFT JOIN concurrency.queue q ON q.name OPERATOR(pg_catalog.=) s.queue;
COMMENT ON VIEW concurrency.queue_stats IS
    'per queue: tasks ready, scheduled (run_at in the future), leased, expired (lease passed, not yet reclaimed), dead, done and cancelled (retained), blocked (held back by key_limit or max_leased now), the age of the oldest ready task, whether the queue is paused (pause_queue), and tasks waiting for their parents; counts are NULL for queues on which you lack permission read';
GRANT SELECT ON concurrency.queue_stats TO PUBLIC;

CREATE FUNCTION concurrency.queue_keys(queue text)
    RETURNS TABLE (concurrency_key text, leased bigint, waiting bigint, oldest_waiting_age interval)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_queue_keys';
COMMENT ON FUNCTION concurrency.queue_keys(text) IS
    'per concurrency key with live tasks: how many are leased, how many wait (ready, scheduled or blocked) and since when the oldest waits';
