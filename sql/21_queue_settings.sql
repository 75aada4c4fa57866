-- Queue settings: create_queue with every setting, alter_queue, the catalog,
-- concurrency keys on enqueue, complete with a result (retained or dropped).

-- create_queue takes every setting; the catalog shows them (NULL: none)
SELECT concurrency.create_queue('s1', '1 minute', 4, retain => '7 days', key_limit => 2, max_leased => 10);
SELECT concurrency.create_queue('s2');
SELECT name, lease, max_attempts, retain, key_limit, max_leased FROM concurrency.queue
 WHERE name IN ('s1', 's2') ORDER BY name;
-- the same settings again: a no-op (an equal interval spelled otherwise too)
SELECT concurrency.create_queue('s1', '60 seconds', 4, retain => '168 hours', key_limit => 2, max_leased => 10);
-- other settings: 42710 with a hint to alter_queue
SELECT concurrency.create_queue('s1', '1 minute', 4, retain => '7 days', key_limit => 2);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.create_queue('s2', retain => '1 day');
\echo :LAST_ERROR_SQLSTATE
-- 0 means none at creation as well
SELECT concurrency.create_queue('s2', retain => '0', key_limit => 0, max_leased => 0);
-- negative settings: 22023, nothing created
SELECT concurrency.create_queue('s3', retain => '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.create_queue('s3', key_limit => -1);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.create_queue('s3', max_leased => -5);
\echo :LAST_ERROR_SQLSTATE
-- one slot row per lease: at most 10000, in create_queue and alter_queue
SELECT concurrency.create_queue('s3', max_leased => 2147483647);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.alter_queue('s1', max_leased => 10001);
\echo :LAST_ERROR_SQLSTATE
-- at most 100 years
SELECT concurrency.create_queue('s3', retain => '101 years');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS no_s3 FROM concurrency.queue WHERE name = 's3';

SELECT concurrency.create_queue('s3', retain => '100 years');
SELECT retain FROM concurrency.queue WHERE name = 's3';
SELECT concurrency.drop_queue('s3');

-- alter_queue: NULL keeps a setting, a value changes it, 0 removes it
SELECT concurrency.alter_queue('s1', lease => '2 minutes');
SELECT name, lease, max_attempts, retain, key_limit, max_leased FROM concurrency.queue WHERE name = 's1';
SELECT concurrency.alter_queue('s1', max_attempts => 9, key_limit => 1);
SELECT name, lease, max_attempts, retain, key_limit, max_leased FROM concurrency.queue WHERE name = 's1';
SELECT concurrency.alter_queue('s1', retain => '0', key_limit => 0, max_leased => 0);
SELECT name, lease, max_attempts, retain, key_limit, max_leased FROM concurrency.queue WHERE name = 's1';
SELECT concurrency.alter_queue('s1');                     -- nothing given: nothing changes
SELECT concurrency.alter_queue('s1', retain => '1 hour', max_leased => 3);
SELECT name, lease, max_attempts, retain, key_limit, max_leased FROM concurrency.queue WHERE name = 's1';
-- after alter_queue, create_queue with the new settings is the no-op
SELECT concurrency.create_queue('s1', '2 minutes', 9, retain => '1 hour', max_leased => 3);
-- bad values: 22023 (22004 for the queue), unknown queue: 42704; nothing changes
SELECT concurrency.alter_queue('s1', lease => '0 seconds');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.alter_queue('s1', lease => '-1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.alter_queue('s1', max_attempts => 0);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.alter_queue('s1', retain => '-1 day');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.alter_queue('s1', retain => '1 day', key_limit => -1);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.alter_queue('s1', max_leased => -1);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.alter_queue(NULL, lease => '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.alter_queue('bad name');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.alter_queue('nosuchqueue', lease => '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT name, lease, max_attempts, retain, key_limit, max_leased FROM concurrency.queue WHERE name = 's1';

-- the new lease is the one the next claim uses in this session
SELECT concurrency.alter_queue('s2', lease => '1 hour');
SELECT concurrency.enqueue('s2', '{}') AS t1 \gset
SELECT lease_expires_at > clock_timestamp() + interval '59 minutes' AS one_hour_lease
  FROM concurrency.dequeue('s2');
SELECT concurrency.alter_queue('s2', lease => '10 seconds');
SELECT concurrency.enqueue('s2', '{}') AS t2 \gset
SELECT lease_expires_at < clock_timestamp() + interval '11 seconds' AS ten_second_lease
  FROM concurrency.dequeue('s2');

-- only the owner of the queue's table, or a role holding manage on the queue
-- (see 20_queue_grants), may alter it
CREATE ROLE regress_queue_settings;
SET ROLE regress_queue_settings;
SELECT concurrency.alter_queue('s1', lease => '1 minute');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT concurrency.grant_queue('s1', 'regress_queue_settings', '{manage}');
SET ROLE regress_queue_settings;
SELECT concurrency.alter_queue('s1', lease => '1 minute');
RESET ROLE;
SELECT lease FROM concurrency.queue WHERE name = 's1';
SELECT concurrency.revoke_queue('s1', 'regress_queue_settings', '{manage}');
DROP ROLE regress_queue_settings;

-- the queue table: finished tasks and concurrency keys, and the partial
-- index purge walks (claims never see finished tasks)
SELECT pg_get_indexdef('concurrency."finished_q_s1"'::regclass);
SELECT pg_get_indexdef('concurrency."dedupe_q_s1"'::regclass);

-- enqueue stores a concurrency_key; one longer than an index can hold: 22023
SELECT concurrency.enqueue('s2', '{"k": 1}', concurrency_key => 'customer-1') AS k1 \gset
SELECT concurrency_key FROM concurrency."q_s2" WHERE id = :k1;
SELECT concurrency.enqueue('s2', '{}', concurrency_key => repeat('x', 1024)) > 0 AS longest_key;
SELECT concurrency.enqueue('s2', '{}', concurrency_key => repeat('x', 1025));
\echo :LAST_ERROR_SQLSTATE
-- (also when it would compress well: the limit is on the text itself)
SELECT concurrency.enqueue('s2', '{}', concurrency_key => repeat('é', 600));
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS tasks FROM concurrency."q_s2";

-- errors with the task's fate in their DETAIL (times replaced)
CREATE FUNCTION pg_temp.error_of(statement text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    detail text;
BEGIN
    EXECUTE statement;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
    RETURN SQLSTATE || ': ' || SQLERRM || ' / '
           || regexp_replace(detail, '\d{4}-\d\d-\d\d [0-9:.+-]+', '<time>', 'g');
END $$;

-- complete with a result: kept with the done task on a queue that retains
-- tasks; accepted and dropped on one that does not
SELECT concurrency.drop_queue('s2');
SELECT concurrency.create_queue('s2');
SELECT concurrency.enqueue('s1', '{"r": 1}') AS r1 \gset
SELECT task_id AS r1_task, lease_token AS r1_token FROM concurrency.dequeue('s1', worker => 'w1') \gset
SELECT concurrency.complete('s1', :r1_task, :r1_token, '{"answer": 42}');
SELECT state, result, worker, attempt, finished_at IS NOT NULL AS finished, lease_token IS NULL AS released
  FROM concurrency."q_s1" WHERE id = :r1;
SELECT pg_temp.error_of(format('SELECT concurrency.complete(%L, %s, %s)', 's1', :r1_task, :r1_token));
SELECT pg_temp.error_of(format('SELECT concurrency.heartbeat(%L, %s, %s)', 's1', :r1_task, :r1_token));
SELECT pg_temp.error_of(format('SELECT concurrency.fail(%L, %s, %s)', 's1', :r1_task, :r1_token));
SELECT concurrency.enqueue('s2', '{"r": 2}') AS r2 \gset
SELECT task_id AS r2_task, lease_token AS r2_token FROM concurrency.dequeue('s2') \gset
SELECT concurrency.complete('s2', :r2_task, :r2_token, '{"kept": true}');
-- a result on a queue that retains nothing is kept (await_task), for concurrency.result_retention
SELECT state, result FROM concurrency."q_s2" WHERE id = :r2;
SELECT queue, ready, leased, done, cancelled FROM concurrency.queue_stats WHERE queue IN ('s1', 's2') ORDER BY 1;

SELECT concurrency.drop_queue('s1');
SELECT concurrency.drop_queue('s2');
