-- Task queue: every function, its results and its errors.
-- Tokens and timestamps differ from run to run: they are kept in psql
-- variables (\gset) and compared, never printed.

-- create_queue: defaults, idempotence, settings conflicts
SELECT concurrency.create_queue('jobs');
SELECT name, lease, max_attempts, created_by = current_user AS by_me FROM concurrency.queue WHERE name = 'jobs';
SELECT concurrency.create_queue('jobs');                         -- same settings again: no error
SELECT concurrency.create_queue('jobs', '30 seconds', 5);        -- spelled out: the same
SELECT concurrency.create_queue('jobs', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.create_queue('jobs', max_attempts => 3);
\echo :LAST_ERROR_SQLSTATE

-- invalid arguments
SELECT concurrency.create_queue(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.create_queue('');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.create_queue('with space');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.create_queue(E'tab\there');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.create_queue(repeat('x', 49));
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.create_queue('q', lease => '0 seconds');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.create_queue('q', lease => '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.create_queue('q', lease => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.create_queue('q', max_attempts => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.create_queue('q', max_attempts => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS no_queue_q FROM concurrency.queue WHERE name = 'q';

-- the queue's table: an ordinary table (not an extension member), with the
-- indexes that keep claims direct, fillfactor and autovacuum settings
SELECT c.relname, c.reloptions,
       EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                                        AND d.deptype = 'e') AS extension_member
  FROM pg_class c WHERE c.oid = 'concurrency."q_jobs"'::regclass;
SELECT indexrelid::regclass AS index, pg_get_indexdef(indexrelid) LIKE '%WHERE%' AS partial
  FROM pg_index WHERE indrelid = 'concurrency."q_jobs"'::regclass ORDER BY indexrelid::regclass::text;
SELECT pg_get_indexdef('concurrency."ready_q_jobs"'::regclass);

-- enqueue: ids, run_at, priority, dedupe_key
SELECT concurrency.enqueue('jobs', '{"n": 1}');
SELECT concurrency.enqueue('jobs', '{"n": 2}', priority => 5);
SELECT concurrency.enqueue('jobs', '{"n": 3}', run_at => clock_timestamp() + interval '1 hour');
SELECT concurrency.enqueue('jobs', '{"n": 4}', run_at => clock_timestamp() - interval '1 hour');
SELECT concurrency.enqueue('jobs', '{"n": 5}', dedupe_key => 'invoice-7');
SELECT concurrency.enqueue('jobs', '{"n": 6}', dedupe_key => 'invoice-7');  -- the same task's id
SELECT concurrency.enqueue('jobs');                                         -- payload defaults to {}
SELECT id, state, priority, attempt, dedupe_key, payload FROM concurrency."q_jobs" ORDER BY id;
SELECT concurrency.enqueue('jobs', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.enqueue('jobs', '{}', priority => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.enqueue('nosuchqueue', '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.enqueue('bad name', '{}');
\echo :LAST_ERROR_SQLSTATE

-- enqueue_batch: one id per payload, in payload order
SELECT * FROM concurrency.enqueue_batch('jobs', ARRAY['{"b": 1}', '{"b": 2}', '{"b": 3}']::jsonb[], priority => -1);
SELECT * FROM concurrency.enqueue_batch('jobs', ARRAY[]::jsonb[]);
SELECT * FROM concurrency.enqueue_batch('jobs', ARRAY['{}', NULL]::jsonb[]);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM concurrency.enqueue_batch('jobs', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM concurrency.enqueue_batch('jobs', ARRAY['{}']::jsonb[], priority => NULL);
\echo :LAST_ERROR_SQLSTATE

SELECT queue, ready, scheduled, leased, expired, dead FROM concurrency.queue_stats WHERE queue = 'jobs';

-- dequeue: highest priority first, then earliest run_at, then lowest id; the
-- scheduled task is not claimed
SELECT task_id, attempt, payload FROM concurrency.dequeue('jobs', 3, worker => 'w1');
SELECT task_id, attempt, payload FROM concurrency.dequeue('jobs', 10, worker => 'w1');
SELECT task_id FROM concurrency.dequeue('jobs');                 -- nothing left: no rows
SELECT id, state, attempt, worker FROM concurrency."q_jobs" ORDER BY id;
SELECT queue, ready, scheduled, leased, expired, dead FROM concurrency.queue_stats WHERE queue = 'jobs';
SELECT count(DISTINCT lease_token) AS distinct_tokens FROM concurrency."q_jobs" WHERE state = 'leased';
SELECT * FROM concurrency.dequeue('jobs', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM concurrency.dequeue('jobs', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM concurrency.dequeue('jobs', lease => '0 seconds');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM concurrency.dequeue('nosuchqueue');
\echo :LAST_ERROR_SQLSTATE

-- the deadline comes from the clock at claim time, not from the start of the
-- transaction
SELECT concurrency.enqueue('jobs', '{"clock": true}') AS clock_task \gset
BEGIN;
SELECT pg_sleep(0.2);
SELECT task_id = :clock_task AS claimed, lease_expires_at >= now() + interval '10 seconds' + interval '0.2 seconds' AS from_clock
  FROM concurrency.dequeue('jobs', lease => '10 seconds');
COMMIT;

-- complete: removes the task; a second complete, or a wrong token: CE001
SELECT concurrency.enqueue('jobs', '{"c": 1}') AS c1 \gset
SELECT task_id AS c1_task, lease_token AS c1_token FROM concurrency.dequeue('jobs') \gset
SELECT :c1_task = :c1 AS same_task;
SELECT concurrency.complete('jobs', :c1_task, :c1_token + 1000000);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.complete('jobs', :c1_task, :c1_token);
SELECT count(*) AS gone FROM concurrency."q_jobs" WHERE id = :c1_task;
SELECT concurrency.complete('jobs', :c1_task, :c1_token);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.complete('jobs', NULL, :c1_token);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.complete('jobs', :c1_task, NULL);
\echo :LAST_ERROR_SQLSTATE
-- the key of a finished task is free again
SELECT concurrency.enqueue('jobs', '{}', dedupe_key => 'once') AS d1 \gset
SELECT task_id AS d1_task, lease_token AS d1_token FROM concurrency.dequeue('jobs') \gset
SELECT concurrency.enqueue('jobs', '{}', dedupe_key => 'once') = :d1 AS leased_task_holds_key;
SELECT concurrency.complete('jobs', :d1_task, :d1_token);
SELECT concurrency.enqueue('jobs', '{}', dedupe_key => 'once') > :d1 AS new_task;

-- complete rolls back with the worker's transaction, and a refused complete
-- takes the worker's own writes with it
CREATE TABLE queue_effects (task_id bigint);
SELECT task_id AS e_task, lease_token AS e_token FROM concurrency.dequeue('jobs') \gset
BEGIN;
INSERT INTO queue_effects VALUES (:e_task);
SELECT concurrency.complete('jobs', :e_task, :e_token);
ROLLBACK;
SELECT state FROM concurrency."q_jobs" WHERE id = :e_task;
BEGIN;
INSERT INTO queue_effects VALUES (:e_task);
SELECT concurrency.complete('jobs', :e_task, :e_token + 1000000);
COMMIT;
SELECT count(*) AS effects FROM queue_effects;
SELECT concurrency.complete('jobs', :e_task, :e_token);
DROP TABLE queue_effects;

-- heartbeat: a new deadline; a later one, while the indexed deadline is at
-- least half the new lease away, is a HOT update (no index changes)
SELECT concurrency.enqueue('jobs', '{"h": 1}') AS h \gset
SELECT task_id AS h_task, lease_token AS h_token, lease_expires_at AS h_deadline
  FROM concurrency.dequeue('jobs', lease => '1 minute') \gset
BEGIN;
SELECT n_tup_upd AS upd0, n_tup_hot_upd AS hot0
  FROM pg_stat_xact_user_tables WHERE relid = 'concurrency."q_jobs"'::regclass \gset
SELECT concurrency.heartbeat('jobs', :h_task, :h_token, '1 minute') > :'h_deadline'::timestamptz AS later;
SELECT n_tup_upd - :upd0 AS updates, n_tup_hot_upd - :hot0 AS hot_updates
  FROM pg_stat_xact_user_tables WHERE relid = 'concurrency."q_jobs"'::regclass;
COMMIT;
SELECT state, lease_expires_at = :'h_deadline'::timestamptz AS index_deadline_kept,
       lease_extended_to > lease_expires_at AS extended
  FROM concurrency."q_jobs" WHERE id = :h_task;
-- closer than half the new lease, the heartbeat moves the indexed deadline
-- itself (dequeue's wake-up leaves extended leases alone)
SELECT concurrency.heartbeat('jobs', :h_task, :h_token, '1 hour') AS h_deadline2 \gset
SELECT state, lease_expires_at = :'h_deadline2'::timestamptz AS index_deadline_moved,
       lease_extended_to IS NULL AS no_extension
  FROM concurrency."q_jobs" WHERE id = :h_task;
-- NULL extends by the queue's lease (30 seconds from the clock at the call)
SELECT deadline >= before + interval '30 seconds' AND deadline <= clock_timestamp() + interval '30 seconds'
       AS by_queue_lease
  FROM (SELECT clock_timestamp() AS before, concurrency.heartbeat('jobs', :h_task, :h_token) AS deadline) AS h;
SELECT concurrency.heartbeat('jobs', :h_task, :h_token + 1000000);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.heartbeat('jobs', :h_task, :h_token, '0 seconds');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.heartbeat('jobs', 999999, :h_token);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.complete('jobs', :h_task, :h_token);

-- fail: retry after retry_in, or after an exponential backoff; dead after
-- max_attempts, keeping its last error and attempt count
SELECT concurrency.create_queue('flaky', '30 seconds', max_attempts => 3);
SELECT concurrency.enqueue('flaky', '{"job": "flaky"}') AS f \gset
SELECT task_id, attempt, lease_token AS f_token FROM concurrency.dequeue('flaky') \gset
SELECT concurrency.fail('flaky', :f, :f_token, 'boom 1', retry_in => '0 seconds');
SELECT state, attempt, last_error, lease_token IS NULL AS released FROM concurrency."q_flaky";
SELECT concurrency.fail('flaky', :f, :f_token, 'again');                        -- that lease is over
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.complete('flaky', :f, :f_token);
\echo :LAST_ERROR_SQLSTATE
SELECT lease_token AS f_token FROM concurrency.dequeue('flaky') \gset
SELECT clock_timestamp() AS before_fail \gset
SELECT concurrency.fail('flaky', :f, :f_token, 'boom 2');                       -- backoff
-- after attempt 2: 2 s scaled by [0.5, 1], from the clock at the call
SELECT state, attempt, last_error,
       run_at >= :'before_fail'::timestamptz + interval '1 second' AS at_least_1s,
       run_at <= clock_timestamp() + interval '2 seconds' AS at_most_2s
  FROM concurrency."q_flaky";
SELECT queue, ready, scheduled, leased, expired, dead FROM concurrency.queue_stats WHERE queue = 'flaky';
SELECT task_id FROM concurrency.dequeue('flaky');                               -- not yet due
SELECT clock_timestamp() - interval '1 second' AS a_second_ago \gset
UPDATE concurrency."q_flaky" SET run_at = :'a_second_ago';  -- pretend time passed
SELECT task_id, attempt, lease_token AS f_token FROM concurrency.dequeue('flaky') \gset
SELECT :attempt AS attempt;
SELECT concurrency.fail('flaky', :f, :f_token, 'boom 3', retry_in => '1 second');  -- attempts used up
SELECT state, attempt, last_error FROM concurrency."q_flaky";
SELECT queue, ready, scheduled, leased, expired, dead FROM concurrency.queue_stats WHERE queue = 'flaky';
SELECT task_id FROM concurrency.dequeue('flaky');                               -- dead tasks are not claimed
SELECT concurrency.fail('flaky', :f, :f_token, 'boom 4');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.fail('flaky', :f, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.enqueue('flaky', '{}', dedupe_key => 'k') AS k1 \gset
SELECT task_id AS k1_task, lease_token AS k1_token FROM concurrency.dequeue('flaky') \gset
SELECT concurrency.fail('flaky', :k1_task, :k1_token, retry_in => '-1 second');
\echo :LAST_ERROR_SQLSTATE

-- retry_dead: a fresh attempt budget; the error stays for the record
SELECT concurrency.retry_dead('flaky', ARRAY[12345]);
SELECT concurrency.retry_dead('flaky');
SELECT state, attempt, last_error FROM concurrency."q_flaky" WHERE id = :f;
SELECT concurrency.retry_dead('flaky');
-- a dead task releases its dedupe_key; it stays dead if the key is taken again
SELECT concurrency.fail('flaky', :k1_task, :k1_token, 'x', '0 seconds');
UPDATE concurrency."q_flaky" SET state = 'dead' WHERE id = :k1;
SELECT concurrency.enqueue('flaky', '{}', dedupe_key => 'k') > :k1 AS new_task_for_released_key;
SELECT concurrency.retry_dead('flaky', ARRAY[:k1]::bigint[]);
SELECT state FROM concurrency."q_flaky" WHERE id = :k1;

-- an expired lease is reclaimed by dequeue: ready again with attempt + 1 and a
-- new token; the old holder is fenced off; until someone claims it again, the
-- old holder may still finish it
SELECT concurrency.create_queue('leases', '30 seconds', max_attempts => 2);
SELECT concurrency.enqueue('leases', '{"x": 1}') AS x \gset
SELECT lease_token AS x_token1 FROM concurrency.dequeue('leases', lease => '10 milliseconds') \gset
SELECT pg_sleep(0.05);
SELECT queue, ready, scheduled, leased, expired, dead FROM concurrency.queue_stats WHERE queue = 'leases';
SELECT concurrency.heartbeat('leases', :x, :x_token1, '10 milliseconds') IS NOT NULL AS still_holder;
SELECT pg_sleep(0.05);
SELECT task_id = :x AS same_task, attempt, lease_token <> :x_token1 AS new_token
  FROM concurrency.dequeue('leases', lease => '10 milliseconds') \gset
SELECT :'same_task' AS same_task, :attempt AS attempt, :'new_token' AS new_token;
SELECT concurrency.complete('leases', :x, :x_token1);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.heartbeat('leases', :x, :x_token1);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.fail('leases', :x, :x_token1);
\echo :LAST_ERROR_SQLSTATE
-- attempts used up: the expired task becomes dead instead of being claimed
SELECT pg_sleep(0.05);
SELECT task_id FROM concurrency.dequeue('leases');
SELECT state, attempt, last_error FROM concurrency."q_leases" WHERE id = :x;
-- the holder of an expired lease that nobody claimed may still complete it
SELECT concurrency.enqueue('leases', '{"y": 1}') AS y \gset
SELECT lease_token AS y_token FROM concurrency.dequeue('leases', lease => '10 milliseconds') \gset
SELECT pg_sleep(0.05);
SELECT queue, ready, scheduled, leased, expired, dead FROM concurrency.queue_stats WHERE queue = 'leases';
SELECT concurrency.complete('leases', :y, :y_token);
-- ... also once a dequeue has made it ready again without claiming it (a
-- higher-priority task took the batch)
SELECT concurrency.enqueue('leases', '{"w": 1}') AS w \gset
SELECT lease_token AS w_token FROM concurrency.dequeue('leases', lease => '10 milliseconds') \gset
SELECT pg_sleep(0.05);
SELECT concurrency.enqueue('leases', '{"urgent": 1}', priority => 9) AS u \gset
SELECT task_id = :u AS took_the_urgent_one FROM concurrency.dequeue('leases');
SELECT state, attempt FROM concurrency."q_leases" WHERE id = :w;
SELECT concurrency.complete('leases', :w, :w_token);
SELECT count(*) AS gone FROM concurrency."q_leases" WHERE id = :w;
-- a lease extended by a heartbeat is not reclaimed when its first deadline passes
SELECT concurrency.enqueue('leases', '{"z": 1}') AS z \gset
SELECT lease_token AS z_token FROM concurrency.dequeue('leases', lease => '10 milliseconds') \gset
SELECT concurrency.heartbeat('leases', :z, :z_token, '1 hour') IS NOT NULL AS extended;
SELECT pg_sleep(0.05);
SELECT task_id FROM concurrency.dequeue('leases');
SELECT state, attempt, lease_expires_at > clock_timestamp() + interval '59 minutes' AS deadline_moved,
       lease_extended_to IS NULL AS folded
  FROM concurrency."q_leases" WHERE id = :z;
SELECT concurrency.complete('leases', :z, :z_token);

-- priorities at the ends of the integer range keep their order
SELECT concurrency.create_queue('prio');
SELECT concurrency.enqueue('prio', '{"p": "min"}', priority => -2147483648);
SELECT concurrency.enqueue('prio', '{"p": "max"}', priority => 2147483647);
SELECT concurrency.enqueue('prio', '{"p": "zero"}');
SELECT payload FROM concurrency.dequeue('prio', 3);

-- drop_queue: the table goes with it; later calls in this backend (which has
-- the queue's plans) say the queue does not exist
SELECT concurrency.drop_queue('prio');
SELECT to_regclass('concurrency."q_prio"') AS table_left;
SELECT concurrency.enqueue('prio', '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM concurrency.dequeue('prio');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.drop_queue('prio');
\echo :LAST_ERROR_SQLSTATE
-- re-created with other settings: this backend sees the new ones
SELECT concurrency.create_queue('prio', '5 minutes');
SELECT concurrency.enqueue('prio', '{}') AS p \gset
SELECT lease_expires_at > clock_timestamp() + interval '4 minutes' AS new_lease FROM concurrency.dequeue('prio');

SELECT concurrency.drop_queue('jobs');
SELECT concurrency.drop_queue('flaky');
SELECT concurrency.drop_queue('leases');
SELECT concurrency.drop_queue('prio');
SELECT count(*) AS queues_left FROM concurrency.queue;
