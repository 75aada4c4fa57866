-- After ALTER EXTENSION concurrency_ext UPDATE from 0.2.0 with the live data
-- of wait.before.sql: every task kept in its state, the old lease tokens
-- still fenced and usable with the new functions (heartbeat with progress,
-- release, dequeue with wait), the queue tables given the progress column,
-- the catalog its paused flag (every queue running),
-- the replaced function's privileges carried over. Any failed check raises
-- an error.
CREATE FUNCTION pg_temp.check(ok boolean, what text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF ok IS NOT TRUE THEN
        RAISE EXCEPTION 'upgrade check failed: %', what;
    END IF;
END $$;
CREATE FUNCTION pg_temp.sqlstate_of(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END $$;

SELECT pg_temp.check((SELECT array_agg(state || ':' || (payload ->> 'n') ORDER BY payload ->> 'n')
                        FROM concurrency."q_wlive") = '{leased:1,ready:2,scheduled:3,dead:4}', 'tasks of queue wlive');
SELECT pg_temp.check((SELECT array_agg(state || ':' || (payload ->> 'n') ORDER BY payload ->> 'n')
                        FROM concurrency."q_wkeyed") = '{leased:1,blocked:2}', 'tasks of queue wkeyed');

-- the updated tables have the columns of a table that 0.3.0's create_queue makes
SELECT concurrency.create_queue('made_by_0_3_0');
SELECT pg_temp.check((SELECT array_agg(attname || ' ' || format_type(atttypid, atttypmod) ORDER BY attnum)
                        FROM pg_attribute WHERE attrelid = 'concurrency."q_wlive"'::regclass AND attnum > 0 AND NOT attisdropped)
                     = (SELECT array_agg(attname || ' ' || format_type(atttypid, atttypmod) ORDER BY attnum)
                          FROM pg_attribute WHERE attrelid = 'concurrency."q_made_by_0_3_0"'::regclass AND attnum > 0 AND NOT attisdropped),
                     'columns of queue wlive');
SELECT concurrency.drop_queue('made_by_0_3_0');

-- the privilege taken from PUBLIC and given to one role stays so
SELECT pg_temp.check(has_function_privilege('upgrade_wait_worker',
                         'concurrency.heartbeat(text, bigint, bigint, interval, jsonb)', 'EXECUTE'), 'heartbeat granted');
SELECT pg_temp.check(NOT (SELECT bool_or(a.grantee = 0) FROM pg_proc p, aclexplode(p.proacl) a
                           WHERE p.oid = 'concurrency.heartbeat(text, bigint, bigint, interval, jsonb)'::regprocedure),
                     'heartbeat not for PUBLIC');
SELECT pg_temp.check(has_function_privilege('public', 'concurrency.dequeue(text, integer, interval, text, interval)', 'EXECUTE'),
                     'dequeue for PUBLIC');

-- the leased task: heartbeat with progress under its 0.2.0 token, then release
SELECT pg_temp.check(concurrency.heartbeat('wlive', task_id, lease_token, progress => '{"percent": 50}') > clock_timestamp(),
                     'heartbeat with progress') FROM wait_held WHERE queue = 'wlive';
SELECT pg_temp.check(s.progress = '{"percent": 50}' AND s.state = 'leased', 'progress shown')
  FROM wait_held h, concurrency.task_status('wlive', h.task_id) s WHERE h.queue = 'wlive';
SELECT pg_temp.check(pg_temp.sqlstate_of(format('SELECT concurrency.release(%L, %s, %s)', 'wlive', task_id, lease_token + 1000)) = 'CE001',
                     'a wrong token is fenced') FROM wait_held WHERE queue = 'wlive';
SELECT pg_temp.check(concurrency.release('wlive', task_id, lease_token), 'release') FROM wait_held WHERE queue = 'wlive';
SELECT pg_temp.check(s.state = 'ready' AND s.attempt = 0, 'released: ready, attempt not counted')
  FROM wait_held h, concurrency.task_status('wlive', h.task_id) s WHERE h.queue = 'wlive';
-- every 0.2.0 queue runs after the update; a pause holds back its claims
SELECT pg_temp.check((SELECT bool_and(NOT paused) FROM concurrency.queue_stats), 'no queue paused by the update');
SELECT pg_temp.check(concurrency.pause_queue('wlive'), 'pause an updated queue');
SELECT pg_temp.check((SELECT count(*) FROM concurrency.dequeue('wlive', 5)) = 0, 'paused: nothing claimed');
SELECT pg_temp.check(concurrency.resume_queue('wlive'), 'resume it');
-- a 0.2.0 task can be a parent: a new task waits for task 2
SELECT pg_temp.check(to_regclass('concurrency.q_wlive_waiting') IS NOT NULL, 'the index of waiting tasks');
SELECT pg_temp.check(s.state = 'waiting' AND s.parents_open = 1, 'a child of a 0.2.0 task waits')
  FROM concurrency.task_status('wlive', concurrency.enqueue('wlive', '{"n": 5}', after =>
           ARRAY[(SELECT id FROM concurrency."q_wlive" WHERE payload ->> 'n' = '2')])) AS s;
SELECT pg_temp.check(waiting = 1, 'queue_stats counts it') FROM concurrency.queue_stats WHERE queue = 'wlive';
-- claimable and completable again, by a waiting dequeue
CREATE TEMP TABLE claimed AS SELECT task_id, lease_token, payload FROM concurrency.dequeue('wlive', 5, wait => '1 minute');
SELECT pg_temp.check((SELECT array_agg(payload ->> 'n' ORDER BY payload ->> 'n') FROM claimed) = '{1,2}', 'claimed 1 and 2');
SELECT pg_temp.check(concurrency.complete_batch('wlive', array_agg(task_id), array_agg(lease_token)) = 2, 'completed')
  FROM claimed;
-- the parent stays (done) for its child, which is ready now
SELECT pg_temp.check((SELECT array_agg(state || ':' || (payload ->> 'n') ORDER BY payload ->> 'n')
                        FROM concurrency."q_wlive") = '{done:2,scheduled:3,dead:4,ready:5}', 'done parent, scheduled, dead and the child left');

-- a 0.2.0 queue made fair: its task without a key (5) and new ones of keys
-- x and y are claimed in turn
SELECT concurrency.alter_queue('wlive', fair => true);
SELECT count(*) FROM concurrency.enqueue_batch('wlive', ARRAY['{"n": 6}', '{"n": 7}', '{"n": 8}']::jsonb[],
                                                concurrency_keys => ARRAY['x', 'x', 'y']);
SELECT pg_temp.check((SELECT string_agg(d.payload ->> 'n', ' ' ORDER BY g)
                        FROM generate_series(1, 4) g, LATERAL concurrency.dequeue('wlive', 1 + 0 * g) d) = '5 6 8 7',
                     'fair claims on an updated queue');

-- the serial key: its released head is its next task again, then the second
SELECT pg_temp.check(concurrency.release('wkeyed', task_id, lease_token), 'release the head')
  FROM wait_held WHERE queue = 'wkeyed';
DROP TABLE claimed;
CREATE TEMP TABLE claimed AS SELECT task_id, lease_token, payload FROM concurrency.dequeue('wkeyed', 5, wait => '1 minute');
SELECT pg_temp.check((SELECT array_agg(payload ->> 'n') FROM claimed) = '{1}', 'the head again');
SELECT concurrency.complete('wkeyed', task_id, lease_token) FROM claimed;
SELECT pg_temp.check((SELECT array_agg(payload ->> 'n') FROM concurrency.dequeue('wkeyed', 5, wait => '1 minute')) = '{2}',
                     'then the second task of the key');

-- a queue of 0.2.0 takes a rate limit (its slot table is made then): one
-- claim in the hour, then none
SELECT concurrency.alter_queue('wkeyed', rate_limit => 1, rate_period => '1 hour');
SELECT concurrency.enqueue('wkeyed', jsonb_build_object('n', n)) FROM generate_series(10, 12) n;
SELECT pg_temp.check((SELECT count(*) FROM concurrency.dequeue('wkeyed', 5)) = 1, 'one claim under the rate limit');
SELECT pg_temp.check((SELECT count(*) FROM concurrency.dequeue('wkeyed', 5)) = 0, 'then none in the window');

-- DROP OWNED BY also takes the initial privileges (pg_init_privs) that
-- PostgreSQL 17 and later record for a GRANT made by ALTER EXTENSION UPDATE
DROP OWNED BY upgrade_wait_worker;
DROP ROLE upgrade_wait_worker;
