-- run_at must be NULL (now) or a finite time: an infinite run_at would be a
-- task that never runs and would break every age computed from it
-- (queue_stats.oldest_ready_age).
SELECT concurrency.create_queue('run_at_q');
SELECT concurrency.enqueue('run_at_q', '{}', run_at => 'infinity');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.enqueue('run_at_q', '{}', run_at => '-infinity');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM concurrency.enqueue_batch('run_at_q', ARRAY['{}']::jsonb[], run_at => 'infinity');
\echo :LAST_ERROR_SQLSTATE
-- nothing was added by the refused calls
SELECT count(*) AS tasks FROM concurrency."q_run_at_q";
-- far past and far future finite times are fine, and the stats stay computable
SELECT concurrency.enqueue('run_at_q', '{}', run_at => '4713-01-01 00:00:00+00 BC') > 0 AS far_past;
SELECT concurrency.enqueue('run_at_q', '{}', run_at => '294276-12-31 00:00:00+00') > 0 AS far_future;
SELECT ready, scheduled, oldest_ready_age > interval '6000 years' AS very_old
  FROM concurrency.queue_stats WHERE queue = 'run_at_q';
SELECT concurrency.drop_queue('run_at_q');
