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
-- a queue whose indexes and identity sequence have the names 0.3.0 gave
-- them (table first: q_hist_old_ready), beside queues named as since 0.4.0
-- (role first: ready_q_hist_a): each sampled with its table
SELECT concurrency.create_queue('hist_old');
SELECT format('ALTER %s concurrency.%I RENAME TO %I', CASE c.relkind WHEN 'S' THEN 'SEQUENCE' ELSE 'INDEX' END,
              c.relname, m[2] || '_' || m[1])
  FROM pg_class c, regexp_match(c.relname, '^([a-z_]+)_((?:q|k|s)_hist_old)$') AS m
 WHERE c.relnamespace = 'concurrency'::regnamespace AND m IS NOT NULL ORDER BY c.relname \gexec
SELECT to_regclass('concurrency.q_hist_old_ready') IS NOT NULL AS old_names,
       to_regclass('concurrency.ready_q_hist_a') IS NOT NULL AS new_names;
SELECT concurrency.enqueue('hist_old', '{"n": 4}') > 0 AS enqueued;

BEGIN;
SELECT concurrency.queue_stats_sample() AS sampled;
SELECT queue, ready, scheduled, leased, dead, done,
       relid = format('concurrency.%I', 'q_' || queue)::regclass AS relid_of_its_table,
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

-- who sees what: read on hist_a and hist_old only; nobody but the owner
-- samples. A sample of a queue that is gone, or of no queue's name, only a
-- member of concurrency_monitor sees
INSERT INTO concurrency.queue_stats_sample (sampled_at, queue, ready)
VALUES (now() - interval '1 minute', 'hist_gone', 1), (now() - interval '1 minute', 'hist bad name', 1),
       (now() - interval '1 minute', '', 1);
CREATE ROLE hist_reader;
CREATE ROLE hist_monitor IN ROLE concurrency_monitor;
SELECT concurrency.grant_queue('hist_a', 'hist_reader', '{read}');
SELECT concurrency.grant_queue('hist_old', 'hist_reader', '{read}');
SET ROLE hist_monitor;
SELECT DISTINCT queue FROM concurrency.queue_stats_history WHERE queue LIKE 'hist%' OR queue = '' ORDER BY queue;
SET ROLE hist_reader;
SELECT DISTINCT queue FROM concurrency.queue_stats_history WHERE queue LIKE 'hist%' OR queue = '' ORDER BY queue;
\set VERBOSITY sqlstate
SELECT concurrency.queue_stats_sample();
SELECT count(*) FROM concurrency.queue_stats_sample;
\set VERBOSITY default
RESET ROLE;
SELECT has_function_privilege('public', 'concurrency.queue_stats_sample(interval)', 'EXECUTE') AS public_may_sample;

-- the function and the view as declared: the sample runs as its owner,
-- for its owner only
SELECT p.proname, l.lanname, p.prosecdef, p.proconfig
  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
 WHERE p.oid = 'concurrency.queue_stats_sample(interval)'::regprocedure;

DELETE FROM concurrency.queue_stats_sample;
SELECT concurrency.drop_queue('hist_a');
SELECT concurrency.drop_queue('hist_b');
SELECT concurrency.drop_queue('hist_old');
DROP ROLE hist_reader;
DROP ROLE hist_monitor;
