-- queue_stats reads each count from the partial index of its state
-- (src/queue/stats_sql.hpp): the same counts as reading the whole table, for
-- tasks in every state at once, and no sequential scan of the queue's table,
-- so that retained tasks are read only to count them.
SELECT concurrency.create_queue('stats', retain => '1 day', key_limit => 1);
SELECT concurrency.enqueue('stats', '{}') FROM generate_series(1, 3);        -- 1-3 ready
SELECT concurrency.enqueue('stats', '{}', run_at => now() + interval '1 day'); -- 4 scheduled
SELECT concurrency.enqueue('stats', '{}', run_at => now() + interval '1 day'); -- 5 scheduled, then due
SELECT concurrency.enqueue('stats', '{}', concurrency_key => 'k') FROM generate_series(1, 3); -- 6 ready, 7-8 blocked
SELECT count(*) FROM concurrency.dequeue('stats', 4);  -- 1-3 and 6 leased
-- the tasks by their place in enqueue order (their ids on one server)
SELECT max(id) FILTER (WHERE n = 1) AS t1, max(id) FILTER (WHERE n = 2) AS t2, max(id) FILTER (WHERE n = 3) AS t3,
       max(id) FILTER (WHERE n = 4) AS t4, max(id) FILTER (WHERE n = 5) AS t5
  FROM (SELECT id, row_number() OVER (ORDER BY id) AS n FROM concurrency."q_stats") t \gset
UPDATE concurrency."q_stats" SET run_at = now() - interval '1 hour' WHERE id = :t5;
UPDATE concurrency."q_stats" SET lease_expires_at = now() - interval '1 second' WHERE id = :t2;
SELECT lease_token AS token1 FROM concurrency."q_stats" WHERE id = :t1 \gset
SELECT concurrency.complete('stats', :t1, :token1, '{"ok": 1}');
SELECT concurrency.cancel('stats', ARRAY[:t4]::bigint[]);
UPDATE concurrency."q_stats" SET state = 'dead', lease_token = NULL, lease_expires_at = NULL WHERE id = :t3;
SELECT concurrency.enqueue('stats', '{}');                                    -- 9 ready
SELECT id, state FROM concurrency."q_stats" ORDER BY id;

-- the same counts as the whole table gives
SELECT s.ready, s.scheduled, s.leased, s.expired, s.dead, s.done, s.cancelled, s.blocked,
       (s.ready, s.scheduled, s.leased, s.expired, s.dead, s.done, s.cancelled, s.blocked)
         = (t.ready, t.scheduled, t.leased, t.expired, t.dead, t.done, t.cancelled, t.blocked) AS as_the_table,
       s.oldest_ready_age >= now() - t.oldest AS oldest_is_the_due_one
  FROM concurrency.queue_stats s,
       (SELECT count(*) FILTER (WHERE state = 'ready' OR (state = 'scheduled' AND run_at <= now())) AS ready,
               count(*) FILTER (WHERE state = 'scheduled' AND run_at > now()) AS scheduled,
               count(*) FILTER (WHERE state = 'leased' AND coalesce(lease_extended_to, lease_expires_at) > now()) AS leased,
               count(*) FILTER (WHERE state = 'leased' AND coalesce(lease_extended_to, lease_expires_at) <= now()) AS expired,
               count(*) FILTER (WHERE state = 'dead') AS dead, count(*) FILTER (WHERE state = 'done') AS done,
               count(*) FILTER (WHERE state = 'cancelled') AS cancelled,
               count(*) FILTER (WHERE state = 'blocked') AS blocked,
               min(run_at) FILTER (WHERE state = 'ready' OR (state = 'scheduled' AND run_at <= now())) AS oldest
          FROM concurrency."q_stats") AS t
 WHERE s.queue = 'stats';

-- no sequential scan of the queue's table: in a new session (its plan is
-- made afresh) with sequential scans priced out, every count has an index
-- to read (a count without one would still scan the table)
\c -
SET enable_seqscan = off;
SELECT pg_stat_force_next_flush();
SELECT seq_scan AS seq_before, idx_scan AS idx_before FROM pg_stat_user_tables
 WHERE relid = 'concurrency."q_stats"'::regclass \gset
SELECT ready, scheduled, leased, expired, dead, done, cancelled, blocked
  FROM concurrency.queue_stats WHERE queue = 'stats';
SELECT pg_stat_force_next_flush();
SELECT seq_scan - :seq_before AS seq_scans, idx_scan > :idx_before AS index_scans FROM pg_stat_user_tables
 WHERE relid = 'concurrency."q_stats"'::regclass;
RESET enable_seqscan;

SELECT concurrency.drop_queue('stats');
