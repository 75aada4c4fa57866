-- A queue's relations are named after it (q_<queue>, q_<queue>_<suffix>,
-- k_/s_/r_/rk_<queue>), so one queue's name can be another's derived name.
-- create_queue says which queue has the name (42P07 with DETAIL and HINT)
-- and creates nothing; names that clash with nobody are unaffected.
SELECT concurrency.create_queue('jobs');
-- the index q_jobs_keyed of queue jobs is the table a queue jobs_keyed needs
SELECT concurrency.create_queue('jobs_keyed');
DO $$ BEGIN PERFORM concurrency.create_queue('jobs_keyed');
EXCEPTION WHEN duplicate_table THEN RAISE NOTICE 'duplicate_table (42P07)'; END $$;
SELECT count(*) AS created FROM concurrency.queue WHERE name = 'jobs_keyed';
-- the other way round: the table of queue x_ready is the ready index that a
-- queue x needs
SELECT concurrency.create_queue('x_ready');
SELECT concurrency.create_queue('x');
SELECT count(*) AS created FROM concurrency.queue WHERE name = 'x';
-- a side table's index: the key table k_jobs of queue jobs has the primary
-- key k_jobs_pkey, which a queue jobs_pkey would give its own key table
SELECT concurrency.create_queue('jobs_pkey');
-- names that clash with nobody: created, and create_queue stays idempotent
SELECT concurrency.create_queue('jobs2');
SELECT concurrency.create_queue('jobs');
SELECT name FROM concurrency.queue WHERE name IN ('jobs', 'jobs2', 'x_ready', 'jobs_keyed', 'x', 'jobs_pkey') ORDER BY name;
SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name IN ('jobs', 'jobs2', 'x_ready');
-- once jobs is gone, jobs_keyed can be created
SELECT concurrency.create_queue('jobs_keyed');
SELECT concurrency.drop_queue('jobs_keyed');
