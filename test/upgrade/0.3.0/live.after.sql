-- After ALTER EXTENSION concurrency_ext UPDATE from 0.3.0 with the live data
-- of live.before.sql: every task kept in its state, the leases taken under
-- 0.3.0 still fenced and completed with their tokens, the parent's completion
-- releasing its child, the key admitting its next task, the paused queue
-- still paused and its schedule kept. Any failed check raises an error.
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
                        FROM concurrency."q_up_main") IN ('{leased:1,ready:2,scheduled:3,done:4,dead:5}',
                                                        '{leased:1,ready:2,scheduled:3,done:4,leased:5}'),
                     'tasks of queue up_main');
SELECT pg_temp.check((SELECT array_agg(state || ':' || (payload ->> 'n') ORDER BY payload ->> 'n')
                        FROM concurrency."q_up_graph") = '{leased:1,waiting:2}', 'tasks of queue up_graph');
SELECT pg_temp.check((SELECT array_agg(state || ':' || (payload ->> 'n') ORDER BY payload ->> 'n')
                        FROM concurrency."q_up_serial") = '{leased:1,blocked:2}', 'tasks of queue up_serial');
SELECT pg_temp.check((SELECT paused FROM concurrency.queue_stats WHERE queue = 'up_paused'), 'up_paused still paused');
SELECT pg_temp.check((SELECT count(*) = 1 FROM concurrency.schedules WHERE name = 'live_tick'), 'schedule kept');

-- a stale token is fenced; the 0.3.0 tokens complete
SELECT pg_temp.check(pg_temp.sqlstate_of(format('SELECT concurrency.complete(%L, %s, %s)', queue, task_id, lease_token + 1000)) = 'CE001',
                     'a wrong token is fenced') FROM live_held WHERE queue = 'up_main';
SELECT concurrency.record_step(queue, task_id, lease_token, 'after-update', to_jsonb(n)) FROM live_held ORDER BY queue, n;
SELECT pg_temp.check(concurrency.step_result(queue, task_id, lease_token, 'after-update') = to_jsonb(n), 'a step recorded under a 0.3.0 token')
  FROM live_held ORDER BY queue, n;
SELECT pg_temp.check(concurrency.complete(queue, task_id, lease_token) IS NOT NULL, 'complete with a 0.3.0 token')
  FROM live_held ORDER BY queue, n;

-- the parent's completion released its child; the key admitted its next task
SELECT pg_temp.check((SELECT state FROM concurrency."q_up_graph" WHERE payload ->> 'n' = '2') = 'ready', 'child released');
SELECT pg_temp.check((SELECT state FROM concurrency."q_up_serial" WHERE payload ->> 'n' = '2') = 'ready', 'key admits the next task');

-- the updated tables have the columns of a table that 0.4.0's create_queue
-- makes, and a task claimed under 0.3.0 records a step with its token
SELECT concurrency.create_queue('made_by_0_4_0');
SELECT pg_temp.check((SELECT array_agg(attname || ' ' || format_type(atttypid, atttypmod) ORDER BY attnum)
                        FROM pg_attribute WHERE attrelid = format('concurrency.%I', 'q_' || q.name)::regclass
                         AND attnum > 0 AND NOT attisdropped)
                     = (SELECT array_agg(attname || ' ' || format_type(atttypid, atttypmod) ORDER BY attnum)
                          FROM pg_attribute WHERE attrelid = 'concurrency."q_made_by_0_4_0"'::regclass AND attnum > 0 AND NOT attisdropped),
                     'columns of queue ' || q.name)
  FROM concurrency.queue q WHERE q.name LIKE 'up\_%';
SELECT concurrency.drop_queue('made_by_0_4_0');

-- and everything drains
SELECT pg_temp.check((SELECT count(*) FROM concurrency.dequeue('up_main', 10) d, concurrency.complete('up_main', d.task_id, d.lease_token) c) >= 1, 'up_main drains');
SELECT pg_temp.check((SELECT count(*) FROM concurrency.dequeue('up_graph', 10) d, concurrency.complete('up_graph', d.task_id, d.lease_token) c) = 1, 'up_graph drains');
SELECT pg_temp.check((SELECT count(*) FROM concurrency.dequeue('up_serial', 10) d, concurrency.complete('up_serial', d.task_id, d.lease_token) c) = 1, 'up_serial drains');
SELECT concurrency.resume_queue('up_paused');
SELECT pg_temp.check((SELECT count(*) FROM concurrency.dequeue('up_paused', 10)) >= 1, 'up_paused drains after its resume');
