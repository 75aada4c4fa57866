-- Keyed concurrency and queue-wide limits: settings, admission, release,
-- queue_keys, queue_stats.blocked and bad input. (Concurrent claims:
-- isolation specs queue_keys and queue_limits; crashes and load: TAP
-- 023_queue_keys.)
SELECT concurrency.create_queue('keys', key_limit => 1);
SELECT name, key_limit, max_leased FROM concurrency.queue WHERE name = 'keys';

-- a serial key: enqueue order, whatever the priority
SELECT concurrency.enqueue('keys', '{"n": 1}', concurrency_key => 'A') AS a1 \gset
SELECT concurrency.enqueue('keys', '{"n": 2}', concurrency_key => 'A', priority => 100) AS a2 \gset
SELECT concurrency.enqueue('keys', '{"n": 3}', concurrency_key => 'B') AS b1 \gset
SELECT concurrency.enqueue('keys', '{"n": 4}') AS free \gset
SELECT payload ->> 'n' AS n, state FROM concurrency."q_keys" ORDER BY id;
SELECT ready, leased, blocked FROM concurrency.queue_stats WHERE queue = 'keys';
SELECT concurrency_key, leased, waiting, oldest_waiting_age >= interval '0' AS has_age
  FROM concurrency.queue_keys('keys');

-- claim everything claimable: a1, b1 and the task without a key, not a2
SELECT payload ->> 'n' AS n FROM concurrency.dequeue('keys', 10) ORDER BY 1;
SELECT concurrency_key, leased, waiting FROM concurrency.queue_keys('keys');
-- completing a1 admits a2
SELECT concurrency.complete('keys', :a1, (SELECT lease_token FROM concurrency."q_keys" WHERE id = :a1));
SELECT payload ->> 'n' AS n, state FROM concurrency."q_keys" WHERE concurrency_key = 'A';
-- a retry holds the key; failing for good releases it
SELECT task_id = :a2 AS is_a2, lease_token AS t2 FROM concurrency.dequeue('keys') \gset
SELECT :'is_a2' AS is_a2;
SELECT concurrency.enqueue('keys', '{"n": 5}', concurrency_key => 'A') AS a3 \gset
SELECT concurrency.fail('keys', :a2, :t2, 'later', retry_in => '1 hour');
SELECT payload ->> 'n' AS n, state FROM concurrency."q_keys" WHERE concurrency_key = 'A' ORDER BY id;
SELECT count(*) AS claimed_while_a2_waits FROM concurrency.dequeue('keys');
UPDATE concurrency."q_keys" SET run_at = now() - interval '1 second' WHERE id = :a2;
SELECT task_id = :a2 AS a2_again, lease_token AS t2 FROM concurrency.dequeue('keys') \gset
SELECT :'a2_again' AS a2_again;
SELECT concurrency.alter_queue('keys', max_attempts => 2);
SELECT concurrency.fail('keys', :a2, :t2, 'for good');
SELECT payload ->> 'n' AS n, state FROM concurrency."q_keys" WHERE concurrency_key = 'A' ORDER BY id;
-- retry_dead puts a2 back in line, behind a3
SELECT concurrency.retry_dead('keys', ARRAY[:a2]::bigint[]);
SELECT payload ->> 'n' AS n, state FROM concurrency."q_keys" WHERE concurrency_key = 'A' ORDER BY id;

-- cancel, complete_batch and fail_batch release keys too
SELECT concurrency.create_queue('release', key_limit => 1, max_attempts => 1);
SELECT count(concurrency.enqueue('release', jsonb_build_object('k', k, 'n', n), concurrency_key => k))
  FROM unnest(ARRAY['c', 'b', 'f']) AS k, generate_series(1, 2) AS n;
SELECT concurrency.cancel('release', ARRAY(SELECT id FROM concurrency."q_release"
                                            WHERE concurrency_key = 'c' AND state = 'ready'));
CREATE TEMP TABLE held AS SELECT * FROM concurrency.dequeue('release', 10);
SELECT payload ->> 'k' AS k, payload ->> 'n' AS n FROM held ORDER BY 1, 2;
SELECT concurrency.complete_batch('release', ARRAY(SELECT task_id FROM held WHERE payload ->> 'k' = 'b'),
                                  ARRAY(SELECT lease_token FROM held WHERE payload ->> 'k' = 'b'));
SELECT state FROM concurrency.fail_batch('release', ARRAY(SELECT task_id FROM held WHERE payload ->> 'k' = 'f'),
                                         ARRAY(SELECT lease_token FROM held WHERE payload ->> 'k' = 'f'), 'for good');
SELECT concurrency_key, payload ->> 'n' AS n, state FROM concurrency."q_release"
 WHERE state IN ('ready', 'blocked') ORDER BY 1, 2;

-- key_limit 2, then removed; max_leased
SELECT concurrency.create_queue('pairs', key_limit => 2);
SELECT count(concurrency.enqueue('pairs', jsonb_build_object('n', i), concurrency_key => 'K')) FROM generate_series(1, 5) AS i;
SELECT state, count(*) FROM concurrency."q_pairs" GROUP BY 1 ORDER BY 1;
SELECT concurrency.alter_queue('pairs', key_limit => 3);
SELECT state, count(*) FROM concurrency."q_pairs" GROUP BY 1 ORDER BY 1;
SELECT concurrency.alter_queue('pairs', key_limit => 0);
SELECT state, count(*) FROM concurrency."q_pairs" GROUP BY 1 ORDER BY 1;
SELECT concurrency.alter_queue('pairs', max_leased => 2);
SELECT count(*) AS claimed FROM concurrency.dequeue('pairs', 5);
SELECT count(*) AS claimed_at_the_limit FROM concurrency.dequeue('pairs', 5);
SELECT ready, leased, blocked FROM concurrency.queue_stats WHERE queue = 'pairs';
SELECT concurrency.alter_queue('pairs', max_leased => 3);
SELECT count(*) AS claimed_after_raising FROM concurrency.dequeue('pairs', 5);
SELECT concurrency.alter_queue('pairs', max_leased => 0);
SELECT count(*) AS claimed_without_limit FROM concurrency.dequeue('pairs', 5);

-- a key on a queue without key_limit changes nothing, and shows in queue_keys
SELECT concurrency.create_queue('plain');
SELECT count(concurrency.enqueue('plain', '{}', concurrency_key => 'X')) FROM generate_series(1, 3);
SELECT count(*) AS claimed FROM concurrency.dequeue('plain', 3);
SELECT concurrency_key, leased, waiting FROM concurrency.queue_keys('plain');

-- bad input: nothing changes
\set VERBOSITY sqlstate
SELECT concurrency.create_queue('bad', key_limit => -1);
SELECT concurrency.create_queue('bad', max_leased => -1);
SELECT concurrency.alter_queue('keys', key_limit => -1);
SELECT concurrency.alter_queue('keys', max_leased => -2);
SELECT concurrency.enqueue('keys', '{}', concurrency_key => repeat('k', 1025));
SELECT concurrency.enqueue_batch('keys', ARRAY['{}'::jsonb], concurrency_keys => ARRAY[repeat('k', 1025)]);
SELECT concurrency.queue_keys(NULL);
SELECT concurrency.queue_keys('nosuchqueue');
SELECT concurrency.queue_keys('bad name');
\set VERBOSITY default
SELECT count(*) AS bad_queues FROM concurrency.queue WHERE name = 'bad';
SELECT count(*) AS long_keys FROM concurrency."q_keys" WHERE octet_length(concurrency_key) > 1024;
-- the longest key is accepted
SELECT concurrency.enqueue('keys', '{}', concurrency_key => repeat('k', 1024)) > 0 AS accepted;

-- a dedupe_key has the same limit: 22023 before anything is written (not the
-- B-tree's 54000 from inside the insert), in enqueue and in enqueue_batch
SELECT concurrency.create_queue('dedupe_limit');
\set VERBOSITY sqlstate
SELECT concurrency.enqueue('dedupe_limit', '{}', dedupe_key => repeat('d', 6400));
SELECT concurrency.enqueue('dedupe_limit', '{}', dedupe_key => repeat('d', 1025));
SELECT concurrency.enqueue_batch('dedupe_limit', ARRAY['{}', '{}']::jsonb[], dedupe_keys => ARRAY['short', repeat('d', 1025)]);
\set VERBOSITY default
SELECT concurrency.enqueue_batch('dedupe_limit', ARRAY['{}']::jsonb[], dedupe_keys => ARRAY[repeat('d', 1025)]);
SELECT count(*) AS written FROM concurrency."q_dedupe_limit";
SELECT concurrency.enqueue('dedupe_limit', '{}', dedupe_key => repeat('d', 1024)) > 0 AS longest_accepted;
-- a payload over concurrency.max_payload_size (default 4MB) is refused with
-- 22023 and a HINT naming the setting; nothing is written
SET concurrency.max_payload_size = '1kB';
\set VERBOSITY default
SELECT concurrency.enqueue('dedupe_limit', jsonb_build_object('big', repeat('p', 2000)));
SELECT :'LAST_ERROR_SQLSTATE' AS sqlstate;
SELECT concurrency.enqueue_batch('dedupe_limit', ARRAY['{}', jsonb_build_object('big', repeat('p', 2000))]);
SELECT * FROM concurrency.enqueue_graph('dedupe_limit', jsonb_build_array(jsonb_build_object('ref', 'a'),
       jsonb_build_object('ref', 'b', 'payload', jsonb_build_object('big', repeat('p', 2000)))));
\set VERBOSITY sqlstate
SELECT count(*) AS written FROM concurrency."q_dedupe_limit" WHERE payload ? 'big';
SELECT concurrency.enqueue('dedupe_limit', jsonb_build_object('big', repeat('p', 900))) > 0 AS under_the_limit;
RESET concurrency.max_payload_size;
SELECT concurrency.enqueue('dedupe_limit', jsonb_build_object('big', repeat('p', 2000))) > 0 AS default_limit;
SELECT concurrency.drop_queue('dedupe_limit');

-- the key table holds the keys in use: a key's row goes with its last live
-- task (completed, failed for good or cancelled), and comes back with the
-- key's next task
SELECT concurrency.create_queue('forget', key_limit => 1);
SELECT count(*) AS enqueued FROM (
  SELECT concurrency.enqueue('forget', jsonb_build_object('n', n), concurrency_key => k)
    FROM (VALUES (1, 'a'), (2, 'a'), (3, 'b'), (4, 'c')) AS v(n, k)) AS e;
SELECT concurrency_key FROM concurrency."k_forget" ORDER BY 1;
CREATE TEMP TABLE forget_held AS SELECT * FROM concurrency.dequeue('forget', 3);
SELECT concurrency.complete('forget', task_id, lease_token) FROM forget_held WHERE payload->>'n' IN ('1', '3');
SELECT concurrency.fail('forget', task_id, lease_token, 'no', retry_in => NULL) IS NOT NULL AS failed
  FROM forget_held WHERE payload->>'n' = '4';
SELECT concurrency_key FROM concurrency."k_forget" ORDER BY 1;  -- a (task 2 admitted) and c (task 4 waits for its retry)
SELECT concurrency.cancel('forget', ARRAY(SELECT id FROM concurrency."q_forget" WHERE concurrency_key IN ('a', 'c')));
SELECT count(*) AS keys_left FROM concurrency."k_forget";
SELECT concurrency.enqueue('forget', '{}', concurrency_key => 'a') > 0 AS enqueued_again;
SELECT concurrency_key FROM concurrency."k_forget" ORDER BY 1;
SELECT state, count(*) FROM concurrency."q_forget" GROUP BY state ORDER BY state;

SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name IN ('forget', 'keys', 'pairs', 'plain', 'release') ORDER BY name;
SELECT count(*) AS side_tables_left FROM pg_class
 WHERE relnamespace = 'concurrency'::regnamespace AND relname IN ('k_keys', 's_keys', 'k_pairs', 's_pairs');
