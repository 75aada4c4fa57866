-- Waiting for work, handing it back, reporting progress: dequeue(…, wait),
-- release and release_batch, heartbeat(…, progress) and task_status's
-- progress. The concurrent promises (wake-ups, no lost wake-up, cancel,
-- fencing under concurrency) are in the isolation specs queue_wait and
-- queue_release. Times differ from run to run: compared, never printed.

CREATE FUNCTION pg_temp.error_of(statement text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    detail text;
    hint text;
BEGIN
    EXECUTE statement;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL, hint = PG_EXCEPTION_HINT;
    RETURN SQLSTATE || ': ' || SQLERRM || ' / ' || coalesce(detail, '') || ' / ' || coalesce(hint, '');
END $$;

SELECT concurrency.create_queue('wq');

-- wait: refused where the snapshot cannot move, bad values refused
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT pg_temp.error_of($$SELECT * FROM concurrency.dequeue('wq', wait => '1 second')$$);
ROLLBACK;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT pg_temp.error_of($$SELECT * FROM concurrency.dequeue('wq', wait => '1 second')$$);
-- without wait, dequeue works there as before
SELECT count(*) AS claimed FROM concurrency.dequeue('wq');
ROLLBACK;
SELECT pg_temp.error_of($$SELECT * FROM concurrency.dequeue('wq', wait => '-1 second')$$);
-- zero and NULL: no wait
SELECT count(*) AS claimed FROM concurrency.dequeue('wq', wait => '0');
SELECT count(*) AS claimed FROM concurrency.dequeue('wq', wait => NULL);
-- an empty queue: nothing once the wait has passed
SELECT count(*) AS claimed FROM concurrency.dequeue('wq', wait => '20 milliseconds');
-- a task there: claimed at once
SELECT concurrency.enqueue('wq', '{"n": 1}') > 0 AS enqueued;
CREATE TEMP TABLE held AS SELECT task_id, lease_token, attempt FROM concurrency.dequeue('wq', wait => '1 hour');
SELECT count(*) AS claimed, min(attempt) AS attempt FROM held;
-- a scheduled task coming due wakes the waiter (the next due time bounds its sleep)
SELECT concurrency.enqueue('wq', '{"n": 2}', run_at => clock_timestamp() + interval '50 milliseconds') > 0 AS enqueued;
SELECT count(*) AS claimed FROM concurrency.dequeue('wq', wait => '1 hour');

-- progress: stored by heartbeat, shown by task_status while the task runs
SELECT concurrency.heartbeat('wq', task_id, lease_token, progress => '{"done": 10}') > clock_timestamp() AS beat
  FROM held;
SELECT state, progress FROM held, concurrency.task_status('wq', held.task_id);
-- a heartbeat without progress keeps it
SELECT concurrency.heartbeat('wq', task_id, lease_token) > clock_timestamp() AS beat FROM held;
SELECT progress FROM held, concurrency.task_status('wq', held.task_id);

-- release: ready again in its place, the attempt not counted, the token fenced
SELECT concurrency.release('wq', task_id, lease_token) AS released FROM held;
SELECT s.state, s.attempt, s.lease_expires_at IS NULL AS no_lease, s.worker FROM held, concurrency.task_status('wq', held.task_id) s;
SELECT pg_temp.error_of(format('SELECT concurrency.release(%L, %s, %s)', 'wq', task_id, lease_token)) FROM held;
SELECT pg_temp.error_of(format('SELECT concurrency.complete(%L, %s, %s)', 'wq', task_id, lease_token)) FROM held;
SELECT task_id = (SELECT task_id FROM held) AS same_task, attempt FROM concurrency.dequeue('wq') \gset claim_
\echo :claim_same_task :claim_attempt
DELETE FROM held;
INSERT INTO held SELECT task_id, lease_token, attempt FROM concurrency.dequeue('wq');
SELECT count(*) FROM held;
TRUNCATE held;
-- release at a run_at: scheduled until then
SELECT count(*) FROM concurrency.enqueue_batch('wq', ARRAY['{"n": 3}', '{"n": 4}']::jsonb[]);
INSERT INTO held SELECT task_id, lease_token, attempt FROM concurrency.dequeue('wq', 10);
SELECT count(*) AS claimed FROM held;
SELECT concurrency.release('wq', task_id, lease_token, run_at => clock_timestamp() + interval '1 hour') AS released
  FROM held WHERE attempt = 1 ORDER BY task_id LIMIT 1;
SELECT scheduled, leased FROM concurrency.queue_stats WHERE queue = 'wq';
SELECT pg_temp.error_of($$SELECT concurrency.release('wq', 1, 1, run_at => 'infinity')$$);
-- release_batch: all or nothing
SELECT pg_temp.error_of(format('SELECT concurrency.release_batch(%L, %L, %L)', 'wq',
                               array_agg(task_id ORDER BY task_id), array_agg(lease_token + 1 ORDER BY task_id)))
  FROM held;
SELECT scheduled, leased FROM concurrency.queue_stats WHERE queue = 'wq';
SELECT array_agg(id) AS leased_ids, array_agg(lease_token) AS leased_tokens FROM concurrency."q_wq"
 WHERE state = 'leased' \gset
SELECT concurrency.release_batch('wq', array_agg(task_id ORDER BY task_id), array_agg(lease_token ORDER BY task_id))
  FROM held WHERE (task_id, lease_token) IN (SELECT * FROM unnest(:'leased_ids'::bigint[], :'leased_tokens'::bigint[]));
SELECT ready, scheduled, leased FROM concurrency.queue_stats WHERE queue = 'wq';
SELECT concurrency.release_batch('wq', ARRAY[]::bigint[], ARRAY[]::bigint[]) AS empty_batch;
SELECT pg_temp.error_of($$SELECT concurrency.release_batch('wq', ARRAY[1, 2], ARRAY[1])$$);

-- heartbeat_batch with progress: one value per task, NULL keeps a task's
TRUNCATE held;
INSERT INTO held SELECT task_id, lease_token, attempt FROM concurrency.dequeue('wq', 10);
SELECT count(*) AS claimed FROM held;
SELECT concurrency.heartbeat_batch('wq', array_agg(task_id ORDER BY task_id), array_agg(lease_token ORDER BY task_id),
                                   progress => array_agg(jsonb_build_object('step', task_id - (SELECT min(task_id) FROM held)) ORDER BY task_id))
       > clock_timestamp() AS beat
  FROM held;
SELECT s.progress FROM held, concurrency.task_status('wq', held.task_id) s ORDER BY held.task_id;
SELECT concurrency.heartbeat_batch('wq', array_agg(task_id ORDER BY task_id), array_agg(lease_token ORDER BY task_id),
                                   progress => array_agg(CASE WHEN task_id = (SELECT min(task_id) FROM held) THEN '{"step": 9}'::jsonb END ORDER BY task_id))
       > clock_timestamp() AS beat
  FROM held;
SELECT s.progress FROM held, concurrency.task_status('wq', held.task_id) s ORDER BY held.task_id;
SELECT pg_temp.error_of(format('SELECT concurrency.heartbeat_batch(%L, %L, %L, progress => %L)', 'wq',
                               array_agg(task_id), array_agg(lease_token), ARRAY['{}', '{}']::jsonb[]))
  FROM held;
-- a finished task shows no progress any more (a queue that retains tasks)
SELECT concurrency.alter_queue('wq', retain => '1 hour');
SELECT concurrency.complete('wq', task_id, lease_token) FROM held;
SELECT s.state, s.progress FROM held, concurrency.task_status('wq', held.task_id) s ORDER BY held.task_id;

-- a serial key: its released head is the key's next task again
SELECT concurrency.create_queue('wkeys', key_limit => 1);
SELECT count(*) FROM concurrency.enqueue_batch('wkeys', ARRAY['{"n": 1}', '{"n": 2}']::jsonb[],
                                                concurrency_keys => ARRAY['k', 'k']);
CREATE TEMP TABLE kheld AS SELECT task_id, lease_token, payload FROM concurrency.dequeue('wkeys', 5);
SELECT payload FROM kheld;
SELECT concurrency.release('wkeys', task_id, lease_token) FROM kheld;
SELECT payload, attempt FROM concurrency.dequeue('wkeys', 5);

-- max_leased: a released task's lease slot is free again
SELECT concurrency.create_queue('wslots', max_leased => 1);
SELECT count(*) FROM concurrency.enqueue_batch('wslots', ARRAY['{"n": 1}', '{"n": 2}']::jsonb[]);
CREATE TEMP TABLE sheld AS SELECT task_id, lease_token FROM concurrency.dequeue('wslots', 5);
SELECT count(*) AS claimed FROM sheld;
SELECT count(*) AS claimed_beyond_the_limit FROM concurrency.dequeue('wslots');
SELECT concurrency.release('wslots', task_id, lease_token) FROM sheld;
SELECT count(*) AS claimed_after_release FROM concurrency.dequeue('wslots');

SELECT concurrency.drop_queue('wq');
SELECT concurrency.drop_queue('wkeys');
SELECT concurrency.drop_queue('wslots');
