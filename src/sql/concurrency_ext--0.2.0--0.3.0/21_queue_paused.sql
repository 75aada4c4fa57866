-- ---------------------------------------------------------------------------
-- Task queue 0.2.0 -> 0.3.0: the catalog's paused flag (pause_queue, in
-- 25_queue_pause.sql), last, as a fresh install has it; every queue of 0.2.0
-- runs. queue_stats shows it as its last column (CREATE OR REPLACE VIEW may
-- add columns at the end: privileges on the view are kept).
-- ---------------------------------------------------------------------------

ALTER TABLE concurrency.queue ADD COLUMN paused boolean NOT NULL DEFAULT false;

CREATE OR REPLACE VIEW concurrency.queue_stats AS
    SELECT s.queue, s.ready, s.scheduled, s.leased, s.expired, s.dead, s.done, s.cancelled, s.blocked,
           s.oldest_ready_age, q.paused
      FROM concurrency.queue_stats_rows() s
      LEFT JOIN concurrency.queue q ON q.name OPERATOR(pg_catalog.=) s.queue;
COMMENT ON VIEW concurrency.queue_stats IS
    'per queue: tasks ready, scheduled (run_at in the future), leased, expired (lease passed, not yet reclaimed), dead, done and cancelled (retained), blocked (held back by key_limit or max_leased now), the age of the oldest ready task, and whether the queue is paused (pause_queue); counts are NULL for queues on which you lack permission read';
