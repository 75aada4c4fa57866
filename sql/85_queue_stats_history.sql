-- Queue counts over time: concurrency.queue_stats_sample(retain) adds one
-- row per readable queue, drops the samples older than retain, refuses a
-- retain that is not positive; the view concurrency.queue_stats_history
-- shows a role only the queues it may read. A preloaded server's runner may
-- sample this database meanwhile: the checks read this transaction's own
-- sample (sampled_at = now()) and rows the test wrote.

SELECT concurrency.create_queue('hist_a');
SELECT concurrency.create_queue('hist_b');
SELECT concurrency.enqueue('hist_a', '{"n": 1}') > 0 AS enqueued;
SELECT concurrency.enqueue('hist_a', '{"n": 2}') > 0 AS enqueued;
SELECT concurrency.enqueue('hist_b', '{"n": 3}', run_at => now() + interval '1 hour') > 0 AS enqueued;

BEGIN;
SELECT concurrency.queue_stats_sample() AS sampled;
SELECT queue, ready, scheduled, leased, dead, done, relid = 'concurrency.q_hist_a'::regclass AS relid_a,
       inserted IS NOT NULL AS has_inserted
  FROM concurrency.queue_stats_sample
 WHERE sampled_at = now() AND queue LIKE 'hist%' ORDER BY queue;
COMMIT;

-- retention: samples older than retain go, younger ones stay
INSERT INTO concurrency.queue_stats_sample (sampled_at, queue, ready)
VALUES (now() - interval '3 hours', 'hist_a', 7), (now() - interval '30 minutes', 'hist_a', 8);
SELECT concurrency.queue_stats_sample(interval '1 hour') > 0 AS sampled;
SELECT ready FROM concurrency.queue_stats_sample
 WHERE queue = 'hist_a' AND sampled_at < now() - interval '10 minutes' ORDER BY sampled_at;
SELECT count(*) AS older_than_an_hour FROM concurrency.queue_stats_sample
 WHERE sampled_at < now() - interval '1 hour';

-- a retain that is not positive: 22023, nothing deleted
\set VERBOSITY sqlstate
SELECT concurrency.queue_stats_sample(interval '0');
SELECT concurrency.queue_stats_sample(interval '-1 day');
SELECT concurrency.queue_stats_sample(NULL);
\set VERBOSITY default
SELECT count(*) AS kept FROM concurrency.queue_stats_sample
 WHERE queue = 'hist_a' AND sampled_at < now() - interval '10 minutes';

-- who sees what: read on hist_a only; nobody but the owner samples
CREATE ROLE hist_reader;
SELECT concurrency.grant_queue('hist_a', 'hist_reader', '{read}');
SET ROLE hist_reader;
SELECT DISTINCT queue FROM concurrency.queue_stats_history WHERE queue LIKE 'hist%' ORDER BY queue;
\set VERBOSITY sqlstate
SELECT concurrency.queue_stats_sample();
SELECT count(*) FROM concurrency.queue_stats_sample;
\set VERBOSITY default
RESET ROLE;
SELECT has_function_privilege('public', 'concurrency.queue_stats_sample(interval)', 'EXECUTE') AS public_may_sample;

DELETE FROM concurrency.queue_stats_sample;
SELECT concurrency.drop_queue('hist_a');
SELECT concurrency.drop_queue('hist_b');
DROP ROLE hist_reader;
