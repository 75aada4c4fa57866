-- Live 0.3.0 data for the update to 0.4.0 (scripts/upgrade-check.sh runs this
-- before ALTER EXTENSION … UPDATE, live.after.sql after it): a queue with a
-- leased, a ready, a scheduled, a dead and a retained done task, a parent
-- leased with a child waiting for it, a serial key whose head is leased with
-- the next task blocked, a paused queue and a schedule.
CREATE TABLE live_held (queue text, n integer, task_id bigint, lease_token bigint);

SELECT concurrency.create_queue('up_main', max_attempts => 1, retain => '1 day');
SELECT concurrency.enqueue('up_main', '{"n": 5}', priority => 20);
SELECT count(*) FROM concurrency.dequeue('up_main', lease => '1 microsecond');  -- dead at its next claim
SELECT concurrency.enqueue('up_main', '{"n": 4}', priority => 10);
SELECT concurrency.complete('up_main', task_id, lease_token) FROM concurrency.dequeue('up_main') WHERE payload ->> 'n' = '4';
SELECT concurrency.enqueue('up_main', '{"n": 1}', priority => 5);
INSERT INTO live_held SELECT 'up_main', (payload ->> 'n')::integer, task_id, lease_token
  FROM concurrency.dequeue('up_main', lease => '1 hour', worker => 'old-worker');
SELECT concurrency.enqueue('up_main', '{"n": 2}');
SELECT concurrency.enqueue('up_main', '{"n": 3}', run_at => clock_timestamp() + interval '1 hour');

SELECT concurrency.create_queue('up_graph');
SELECT count(*) FROM concurrency.enqueue_graph('up_graph', '[{"ref": "parent", "payload": {"n": 1}},
                                                              {"ref": "child", "payload": {"n": 2}, "after": ["parent"]}]');
INSERT INTO live_held SELECT 'up_graph', (payload ->> 'n')::integer, task_id, lease_token
  FROM concurrency.dequeue('up_graph', lease => '1 hour');

SELECT concurrency.create_queue('up_serial', key_limit => 1);
SELECT count(*) FROM concurrency.enqueue_batch('up_serial', ARRAY['{"n": 1}', '{"n": 2}']::jsonb[],
                                                concurrency_keys => ARRAY['a', 'a']);
INSERT INTO live_held SELECT 'up_serial', (payload ->> 'n')::integer, task_id, lease_token
  FROM concurrency.dequeue('up_serial', 5, lease => '1 hour');

SELECT concurrency.create_queue('up_paused');
SELECT concurrency.enqueue('up_paused', '{"n": 1}');
SELECT concurrency.pause_queue('up_paused');
SELECT concurrency.schedule('live_tick', 'up_paused', every => '1 hour');

-- The tables as 0.3.0's create_queue made them: the library here (0.4.0's)
-- adds the columns of workflows (steps, awaiting) that the update must add.
DO $$
DECLARE
    q record;
BEGIN
    FOR q IN SELECT name FROM concurrency.queue LOOP
        EXECUTE format('ALTER TABLE concurrency.%I DROP COLUMN IF EXISTS steps, DROP COLUMN IF EXISTS awaiting',
                       'q_' || q.name);
    END LOOP;
END $$;
