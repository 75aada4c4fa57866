-- Task queue: claims go straight to the first claimable task through an
-- index, however many leased or scheduled tasks are ahead of it, and the
-- statements are prepared once per backend and queue.
SELECT concurrency.create_queue('ahead');
-- 2000 tasks claimed with a long lease (the lowest ids), then 2000 scheduled
-- tasks of a higher priority, then the one claimable task
SELECT count(*) FROM concurrency.enqueue_batch('ahead', (SELECT array_agg('{}'::jsonb) FROM generate_series(1, 2000)));
SELECT count(*) FROM concurrency.dequeue('ahead', 2000, lease => '1 hour');
SELECT count(*) FROM concurrency.enqueue_batch('ahead', (SELECT array_agg('{}'::jsonb) FROM generate_series(1, 2000)),
                                               run_at => clock_timestamp() + interval '1 hour', priority => 10);
SELECT concurrency.enqueue('ahead', '{"claimable": true}') AS claimable \gset
ANALYZE concurrency."q_ahead";
SELECT queue, ready, scheduled, leased FROM concurrency.queue_stats WHERE queue = 'ahead';

-- one dequeue: no sequential scan, and only a handful of rows fetched
BEGIN;
SELECT seq_scan AS seq0, idx_scan AS idx0, idx_tup_fetch AS fetch0
  FROM pg_stat_xact_user_tables WHERE relid = 'concurrency."q_ahead"'::regclass \gset
SELECT task_id = :claimable AS got_the_claimable_one, payload FROM concurrency.dequeue('ahead');
SELECT seq_scan - :seq0 AS seq_scans, idx_scan - :idx0 > 0 AS used_indexes, idx_tup_fetch - :fetch0 AS rows_fetched
  FROM pg_stat_xact_user_tables WHERE relid = 'concurrency."q_ahead"'::regclass;
COMMIT;

-- an empty poll of the same queue fetches no row at all
BEGIN;
SELECT seq_scan AS seq0, idx_tup_fetch AS fetch0
  FROM pg_stat_xact_user_tables WHERE relid = 'concurrency."q_ahead"'::regclass \gset
SELECT count(*) AS claimed FROM concurrency.dequeue('ahead', 10);
SELECT seq_scan - :seq0 AS seq_scans, idx_tup_fetch - :fetch0 AS rows_fetched
  FROM pg_stat_xact_user_tables WHERE relid = 'concurrency."q_ahead"'::regclass;
COMMIT;

-- the same for complete, heartbeat and enqueue: by primary key or unique index
SELECT id AS t, lease_token AS k FROM concurrency."q_ahead" WHERE state = 'leased' ORDER BY id LIMIT 1 \gset
BEGIN;
SELECT seq_scan AS seq0 FROM pg_stat_xact_user_tables WHERE relid = 'concurrency."q_ahead"'::regclass \gset
SELECT concurrency.heartbeat('ahead', :t, :k) IS NOT NULL AS heartbeat;
SELECT concurrency.complete('ahead', :t, :k);
SELECT concurrency.enqueue('ahead', '{}', dedupe_key => 'd') = concurrency.enqueue('ahead', '{}', dedupe_key => 'd') AS deduped;
SELECT seq_scan - :seq0 AS seq_scans FROM pg_stat_xact_user_tables WHERE relid = 'concurrency."q_ahead"'::regclass;
COMMIT;

-- each statement is prepared once per backend and queue and kept: the plan
-- cache holds one entry per statement, however many calls
SELECT count(*) AS kept_plans_before FROM pg_backend_memory_contexts
 WHERE name = 'CachedPlanSource' AND ident LIKE '%concurrency."q_ahead"%';
SELECT count(*) FROM (SELECT concurrency.enqueue('ahead', '{}') FROM generate_series(1, 50)) AS calls;
SELECT count(*) FROM (SELECT concurrency.dequeue('ahead') FROM generate_series(1, 50)) AS calls;
SELECT count(*) AS kept_plans_after FROM pg_backend_memory_contexts
 WHERE name = 'CachedPlanSource' AND ident LIKE '%concurrency."q_ahead"%';
SELECT concurrency.drop_queue('ahead');
SELECT count(*) AS kept_plans_after_drop FROM pg_backend_memory_contexts
 WHERE name = 'CachedPlanSource' AND ident LIKE '%concurrency."q_ahead"%';

-- dequeue probes the scheduled and leased indexes itself: a queue whose index
-- was dropped by hand gets a clear error (42704) from dequeue, the one function
-- that needs them (enqueue and the others go on), and works again once the
-- index is re-created as create_queue makes it (the cache sees both changes)
SELECT concurrency.create_queue('probed');
SELECT concurrency.enqueue('probed', '{}') IS NOT NULL AS enqueued;
SELECT count(*) AS claimed FROM concurrency.dequeue('probed');
DROP INDEX concurrency."leased_q_probed";
SELECT concurrency.enqueue('probed', '{}') IS NOT NULL AS enqueued_without_index;
SELECT state FROM concurrency.task_status('probed',
    (SELECT max(id) FROM concurrency."q_probed"));
SELECT task_id FROM concurrency.dequeue('probed');
CREATE INDEX "leased_q_probed" ON concurrency."q_probed" (lease_expires_at) WHERE state = 'leased';
SELECT count(*) AS claimed FROM concurrency.dequeue('probed');
SELECT concurrency.drop_queue('probed');

-- a look that finds nothing, with nothing due, runs no wake-up step (an
-- UPDATE of the queue table): in a new session its statement is not even
-- prepared; a lease that has expired is woken up and claimed again
\c
SELECT concurrency.create_queue('idle_look');
SELECT count(*) AS claimed FROM concurrency.dequeue('idle_look');
SELECT count(*) AS claimed FROM concurrency.dequeue('idle_look', wait => '1 millisecond');
SELECT count(*) AS wake_plans FROM pg_backend_memory_contexts
 WHERE name = 'CachedPlanSource' AND ident LIKE '%concurrency."q_idle_look"%' AND ident LIKE '%lease expired%';
SELECT concurrency.enqueue('idle_look', '{}') > 0 AS enqueued;
SELECT attempt FROM concurrency.dequeue('idle_look', lease => '10 milliseconds');
SELECT pg_sleep(0.05);
SELECT attempt FROM concurrency.dequeue('idle_look');
SELECT count(*) AS wake_plans FROM pg_backend_memory_contexts
 WHERE name = 'CachedPlanSource' AND ident LIKE '%concurrency."q_idle_look"%' AND ident LIKE '%lease expired%';
SELECT concurrency.drop_queue('idle_look');

-- a purge probes the finished index first: with nothing finished before the
-- retention's cutoff it runs no DELETE, and in a new session its statement is
-- not even prepared; a task finished past the retention is purged by the next
-- session's first call (the purge statement prepared then)
\c
SELECT concurrency.create_queue('purge_look', retain => '1 hour');
SELECT concurrency.enqueue('purge_look', '{}') > 0 AS enqueued;
SELECT concurrency.complete('purge_look', task_id, lease_token) FROM concurrency.dequeue('purge_look');
SELECT count(*) AS claimed FROM concurrency.dequeue('purge_look');
SELECT concurrency.purge('purge_look') AS purged;
SELECT count(*) AS purge_plans FROM pg_backend_memory_contexts
 WHERE name = 'CachedPlanSource' AND ident LIKE '%concurrency."q_purge_look"%' AND ident LIKE '%ORDER BY finished_at%';
UPDATE concurrency."q_purge_look" SET finished_at = finished_at - interval '2 hours';
\c
SELECT count(*) AS claimed FROM concurrency.dequeue('purge_look');
SELECT count(*) AS purge_plans FROM pg_backend_memory_contexts
 WHERE name = 'CachedPlanSource' AND ident LIKE '%concurrency."q_purge_look"%' AND ident LIKE '%ORDER BY finished_at%';
SELECT count(*) AS tasks_left FROM concurrency."q_purge_look";
SELECT concurrency.drop_queue('purge_look');
