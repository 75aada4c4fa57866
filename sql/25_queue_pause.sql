-- Pausing a queue: pause_queue and resume_queue. While paused, dequeue
-- claims nothing (with or without wait), enqueue works, and the tasks already
-- leased may be heartbeated, completed, failed and released; queue_stats
-- shows the flag. That a pause takes effect for the next claim of another
-- session, and that a resume wakes a waiting dequeue, is in the isolation
-- spec queue_pause; that it survives a restart and pg_dump, in TAP
-- 021_queue_dump.pl.

CREATE FUNCTION pg_temp.error_of(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

SELECT concurrency.create_queue('pq', lease => '1 hour');
SELECT concurrency.enqueue('pq', jsonb_build_object('n', n)) > 0 AS enqueued FROM generate_series(1, 4) n;
CREATE TEMP TABLE held AS SELECT task_id, lease_token FROM concurrency.dequeue('pq', batch => 3);
SELECT count(*) AS held FROM held;

-- pause: true the first time, false when it was paused already
SELECT concurrency.pause_queue('pq') AS paused;
SELECT concurrency.pause_queue('pq') AS paused_again;
SELECT queue, ready, leased, paused FROM concurrency.queue_stats WHERE queue = 'pq';

-- no claims, with or without wait (the wait passes with nothing)
SELECT count(*) AS claimed FROM concurrency.dequeue('pq');
SELECT count(*) AS claimed FROM concurrency.dequeue('pq', batch => 10);
SELECT count(*) AS claimed FROM concurrency.dequeue('pq', wait => '30 milliseconds');
-- an expired lease is not taken over while paused either
SELECT min(task_id) AS first_held, clock_timestamp() - interval '1 minute' AS a_minute_ago,
       clock_timestamp() + interval '1 hour' AS in_an_hour FROM held \gset
UPDATE concurrency.q_pq SET lease_expires_at = :'a_minute_ago' WHERE id = :first_held;
SELECT count(*) AS claimed FROM concurrency.dequeue('pq');
UPDATE concurrency.q_pq SET lease_expires_at = :'in_an_hour' WHERE id = :first_held;

-- enqueue works
SELECT concurrency.enqueue('pq', '{"n": 5}') > 0 AS enqueued;
-- the leased tasks can be finished: heartbeat, complete, fail, release
-- (one task each: held's rows in order, numbered)
CREATE TEMP TABLE held_n AS SELECT row_number() OVER (ORDER BY task_id) AS n, * FROM held;
SELECT concurrency.heartbeat('pq', task_id, lease_token) > clock_timestamp() AS beat FROM held_n WHERE n = 1;
SELECT concurrency.complete('pq', task_id, lease_token) FROM held_n WHERE n = 1;
SELECT concurrency.fail('pq', task_id, lease_token, 'boom', retry_in => '0') AS failed FROM held_n WHERE n = 2;
SELECT concurrency.release('pq', task_id, lease_token) AS released FROM held_n WHERE n = 3;
SELECT queue, ready, leased, paused FROM concurrency.queue_stats WHERE queue = 'pq';
SELECT count(*) AS claimed FROM concurrency.dequeue('pq', batch => 10);

-- resume: true, then false; claims start again
SELECT concurrency.resume_queue('pq') AS resumed;
SELECT concurrency.resume_queue('pq') AS resumed_again;
SELECT count(*) AS claimed FROM concurrency.dequeue('pq', batch => 10);
SELECT queue, ready, leased, paused FROM concurrency.queue_stats WHERE queue = 'pq';

-- a pause rolled back leaves the queue running
BEGIN;
SELECT concurrency.pause_queue('pq') AS paused;
SELECT paused FROM concurrency.queue_stats WHERE queue = 'pq';
ROLLBACK;
SELECT paused FROM concurrency.queue_stats WHERE queue = 'pq';

-- bad input: the right SQLSTATE, nothing changed
SELECT pg_temp.error_of($$SELECT concurrency.pause_queue(NULL)$$);
SELECT pg_temp.error_of($$SELECT concurrency.pause_queue('no_such_queue')$$);
SELECT pg_temp.error_of($$SELECT concurrency.resume_queue('no_such_queue')$$);
SELECT pg_temp.error_of($$SELECT concurrency.pause_queue('')$$);

-- permission manage is needed: work is not enough; manage is
CREATE ROLE pause_worker;
CREATE ROLE pause_admin;
SELECT concurrency.grant_queue('pq', 'pause_worker', '{work}');
SELECT concurrency.grant_queue('pq', 'pause_admin', '{manage}');
SET ROLE pause_worker;
SELECT pg_temp.error_of($$SELECT concurrency.pause_queue('pq')$$);
SELECT pg_temp.error_of($$SELECT concurrency.resume_queue('pq')$$);
RESET ROLE;
SELECT paused FROM concurrency.queue_stats WHERE queue = 'pq';
SET ROLE pause_admin;
SELECT concurrency.pause_queue('pq') AS paused;
RESET ROLE;
SET ROLE pause_worker;
SELECT count(*) AS claimed FROM concurrency.dequeue('pq');
RESET ROLE;
SET ROLE pause_admin;
SELECT concurrency.resume_queue('pq') AS resumed;
RESET ROLE;

-- alter_queue leaves the flag alone; the paused flag stays with the queue
SELECT concurrency.pause_queue('pq') AS paused;
SELECT concurrency.alter_queue('pq', max_attempts => 7);
SELECT paused FROM concurrency.queue_stats WHERE queue = 'pq';
SELECT concurrency.drop_queue('pq');
SELECT concurrency.create_queue('pq');
SELECT paused FROM concurrency.queue_stats WHERE queue = 'pq';
SELECT concurrency.drop_queue('pq');
DROP ROLE pause_worker;
DROP ROLE pause_admin;
