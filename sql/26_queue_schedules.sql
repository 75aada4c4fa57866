-- Schedules: schedule, unschedule, the view schedules, every error with its
-- SQLSTATE, and the due times that dequeue turns into tasks. Time is moved
-- by setting a schedule's last_due back (as a superuser), so nothing here
-- sleeps. Two dequeues materializing one due time once is the isolation spec
-- queue_schedule; restarts and waiting workers, TAP 026_queue_schedule.pl.

CREATE FUNCTION pg_temp.error_of(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- Moves schedule `name` back in time: as if its due times were enqueued up
-- to `last_due`, and the next one came at `next_run_at`.
CREATE FUNCTION pg_temp.rewind(schedule text, last_due timestamptz, next_run_at timestamptz) RETURNS void
LANGUAGE sql AS $$
    UPDATE concurrency.schedule SET last_due = $2, next_run_at = $3 WHERE name = $1
$$;

-- Where the module is preloaded, the schedule runner (a background worker)
-- would enqueue the due times made here by hand before this test's dequeue
-- calls do: off in this database while the test runs (TAP
-- 026_queue_schedule.pl tests the runner).
DO $$ BEGIN
    EXECUTE format('ALTER DATABASE %I SET concurrency.schedule_runner = off', current_database());
END $$;

SELECT concurrency.create_queue('sq', lease => '1 hour');
SELECT concurrency.create_queue('sq2', lease => '1 hour');

-- cron, every, and their view
SELECT concurrency.schedule('hourly', 'sq', cron => '@hourly', payload => '{"report": "sales"}');
SELECT concurrency.schedule('berlin', 'sq', cron => '30 2 * * sun', time_zone => 'Europe/Berlin');
SELECT concurrency.schedule('tick', 'sq', every => '90 seconds', priority => 5, concurrency_key => 'ticks');
SELECT name, queue, spec, time_zone, next_run_at > now() AS in_future, last_run_at, last_task_id, enabled, skipped
  FROM concurrency.schedules ORDER BY name;
-- @hourly: on the hour; every: multiples of the interval since 1970-01-01 UTC
SELECT next_run_at > now() AND next_run_at <= now() + interval '1 hour' AS within_the_hour,
       extract(epoch FROM next_run_at)::bigint % 3600 AS past_the_hour
  FROM concurrency.schedules WHERE name = 'hourly';
SELECT extract(epoch FROM next_run_at)::bigint % 90 AS phase, next_run_at <= now() + interval '90 seconds' AS within
  FROM concurrency.schedules WHERE name = 'tick';
-- Berlin's 02:30 on a Sunday, read in Europe/Berlin
SELECT extract(dow FROM next_run_at AT TIME ZONE 'Europe/Berlin') AS dow,
       (next_run_at AT TIME ZONE 'Europe/Berlin')::time AS local_time
  FROM concurrency.schedules WHERE name = 'berlin';

-- the same settings again: nothing changes, the next due time stays
SELECT pg_temp.rewind('hourly', now() - interval '10 minutes', '2100-01-01 00:00+00');
SELECT concurrency.schedule('hourly', 'sq', cron => '@hourly', payload => '{"report": "sales"}');
SELECT next_run_at = '2100-01-01 00:00+00' AS kept FROM concurrency.schedules WHERE name = 'hourly';
-- other settings: replaced, the next due time computed from now
SELECT concurrency.schedule('hourly', 'sq', cron => '@hourly', payload => '{"report": "costs"}');
SELECT next_run_at <= now() + interval '1 hour' AS recomputed,
       (SELECT payload FROM concurrency.schedule WHERE name = 'hourly') AS payload
  FROM concurrency.schedules WHERE name = 'hourly';

-- errors
SELECT pg_temp.error_of($$SELECT concurrency.schedule('x', 'sq', cron => '61 * * * *')$$);
SELECT pg_temp.error_of($$SELECT concurrency.schedule('x', 'sq', cron => '* * * *')$$);
SELECT pg_temp.error_of($$SELECT concurrency.schedule('x', 'sq', cron => '0 0 * 13 *')$$);
SELECT pg_temp.error_of($$SELECT concurrency.schedule('x', 'sq', cron => '0 0 * * funday')$$);
SELECT pg_temp.error_of($$SELECT concurrency.schedule('x', 'sq', cron => '@sometimes')$$);
SELECT pg_temp.error_of($$SELECT concurrency.schedule('x', 'sq', cron => '0 0 30 2 *')$$);
SELECT pg_temp.error_of($$SELECT concurrency.schedule('x', 'sq')$$);
SELECT pg_temp.error_of($$SELECT concurrency.schedule('x', 'sq', cron => '@daily', every => '1 hour')$$);
SELECT pg_temp.error_of($$SELECT concurrency.schedule('x', 'sq', every => '0 seconds')$$);
SELECT pg_temp.error_of($$SELECT concurrency.schedule('x', 'sq', every => '-1 hour')$$);
SELECT pg_temp.error_of($$SELECT concurrency.schedule('x', 'sq', every => '1.5 seconds')$$);
SELECT pg_temp.error_of($$SELECT concurrency.schedule('x', 'sq', every => '1 month')$$);
SELECT pg_temp.error_of($$SELECT concurrency.schedule('x', 'sq', every => '40000 days')$$);
SELECT pg_temp.error_of($$SELECT concurrency.schedule('x', 'sq', every => '1 hour', time_zone => 'Mars/Olympus')$$);
SELECT pg_temp.error_of($$SELECT concurrency.schedule('x', 'sq', every => '1 hour', time_zone => NULL)$$);
SELECT pg_temp.error_of($$SELECT concurrency.schedule('x', 'sq', every => '1 hour', catch_up => 0)$$);
SELECT pg_temp.error_of($$SELECT concurrency.schedule('x', 'sq', every => '1 hour', catch_up => 1001)$$);
SELECT pg_temp.error_of($$SELECT concurrency.schedule('x', 'sq', every => '1 hour', payload => '[1, 2]')$$);
SELECT pg_temp.error_of($$SELECT concurrency.schedule('x', 'sq', every => '1 hour', payload => NULL)$$);
SELECT pg_temp.error_of($$SELECT concurrency.schedule('x', 'sq', every => '1 hour', concurrency_key => repeat('k', 1025))$$);
SELECT pg_temp.error_of($$SELECT concurrency.schedule('', 'sq', every => '1 hour')$$);
SELECT pg_temp.error_of($$SELECT concurrency.schedule(NULL, 'sq', every => '1 hour')$$);
SELECT pg_temp.error_of($$SELECT concurrency.schedule('x', 'no queue', every => '1 hour')$$);
SELECT pg_temp.error_of($$SELECT concurrency.schedule('x', 'missing', every => '1 hour')$$);
SELECT pg_temp.error_of($$SELECT concurrency.unschedule(NULL)$$);
SELECT count(*) AS schedules FROM concurrency.schedule WHERE name = 'x';

-- materialization: hourly due times missed since `since`; catch_up 2
-- enqueues the latest two (oldest first) and counts the others as skipped
CREATE TEMP TABLE clock AS SELECT date_trunc('hour', now()) - interval '3 hours' AS since;
SELECT concurrency.schedule('hourly', 'sq', cron => '@hourly', payload => '{"report": "costs"}', catch_up => 2);
SELECT pg_temp.rewind('hourly', since, since + interval '1 hour') FROM clock;
SELECT concurrency.unschedule('tick') AS unscheduled, concurrency.unschedule('berlin') AS unscheduled;
CREATE TEMP TABLE got AS SELECT task_id, payload, (payload->>'scheduled_for')::timestamptz AS due
  FROM concurrency.dequeue('sq', batch => 10);
SELECT count(*) AS tasks, max(due) - min(due) AS apart, bool_and(payload - 'scheduled_for' = '{"report": "costs"}') AS payload,
       bool_and(payload->>'scheduled_for' ~ '^\d{4}-\d\d-\d\dT\d\d:00:00Z$') AS iso_utc
  FROM got;
SELECT s.last_run_at = (SELECT max(due) FROM got) AS last_run, s.last_task_id = (SELECT max(task_id) FROM got) AS last_task,
       s.last_run_at <= now() AND s.next_run_at > now() AS now_between, s.next_run_at - s.last_run_at AS next_after,
       s.skipped = extract(epoch FROM s.last_run_at - c.since) / 3600 - 2 AS skipped_the_rest
  FROM concurrency.schedules s, clock c WHERE name = 'hourly';
-- the task of the latest due time came later in the same statement
SELECT (SELECT due FROM got ORDER BY task_id DESC LIMIT 1) = max(due) AS latest_last FROM got;
-- nothing more is due: the next dequeue enqueues nothing
SELECT count(*) AS claimed FROM concurrency.dequeue('sq', batch => 10);
-- every: 10 due times missed, catch_up 1 (the default): one task, the
-- others skipped; with the schedule's priority and concurrency key
SELECT concurrency.schedule('tick', 'sq2', every => '1 day', priority => 7, concurrency_key => 'ticks');
UPDATE clock SET since = date_trunc('day', now(), 'UTC') - interval '10 days';
SELECT pg_temp.rewind('tick', since, since + interval '1 day') FROM clock;
CREATE TEMP TABLE ticked AS SELECT payload FROM concurrency.dequeue('sq2');
SELECT (payload->>'scheduled_for')::timestamptz = s.last_run_at AS latest, s.next_run_at - s.last_run_at AS next_after,
       s.skipped = extract(epoch FROM s.last_run_at - c.since) / 86400 - 1 AS skipped_the_rest
  FROM ticked, concurrency.schedules s, clock c WHERE s.name = 'tick';
SELECT t.priority, t.concurrency_key
  FROM concurrency.task_status('sq2', (SELECT last_task_id FROM concurrency.schedules WHERE name = 'tick')) t;
-- a paused queue's dequeue enqueues nothing; after the resume catch_up counts
UPDATE concurrency.schedule SET skipped = 0 WHERE name = 'tick';
SELECT pg_temp.rewind('tick', since, since + interval '1 day') FROM clock;
SELECT concurrency.pause_queue('sq2');
SELECT count(*) AS claimed FROM concurrency.dequeue('sq2');
SELECT next_run_at = since + interval '1 day' AS still_due FROM concurrency.schedules, clock WHERE name = 'tick';
SELECT concurrency.resume_queue('sq2');
SELECT count(*) AS claimed FROM concurrency.dequeue('sq2');
SELECT next_run_at > now() AS advanced FROM concurrency.schedules WHERE name = 'tick';
-- a rolled back dequeue rolls its tasks and the advance back together
SELECT pg_temp.rewind('tick', since, since + interval '1 day') FROM clock;
BEGIN;
SELECT count(*) AS claimed FROM concurrency.dequeue('sq2');
ROLLBACK;
SELECT next_run_at = since + interval '1 day' AS still_due FROM concurrency.schedules, clock WHERE name = 'tick';
SELECT count(*) AS claimed FROM concurrency.dequeue('sq2');
SELECT next_run_at > now() AS advanced FROM concurrency.schedules WHERE name = 'tick';
-- a REPEATABLE READ dequeue materializes too
SELECT pg_temp.rewind('tick', since, since + interval '1 day') FROM clock;
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) AS claimed FROM concurrency.dequeue('sq2');
COMMIT;
SELECT next_run_at > now() AS advanced FROM concurrency.schedules WHERE name = 'tick';
-- a read-only transaction's dequeue: the claim's 25006, nothing enqueued
SELECT pg_temp.rewind('tick', since, since + interval '1 day') FROM clock;
BEGIN READ ONLY;
SELECT pg_temp.error_of($$SELECT count(*) FROM concurrency.dequeue('sq2')$$);
ROLLBACK;
SELECT next_run_at = since + interval '1 day' AS still_due FROM concurrency.schedules, clock WHERE name = 'tick';
-- a row that schedule() would refuse (changed by hand) is disabled, not an
-- error of every dequeue; schedule() enables it again
UPDATE concurrency.schedule SET every = NULL, cron = '61 * * * *' WHERE name = 'tick';
SELECT pg_temp.rewind('tick', since, since + interval '1 day') FROM clock;
SELECT count(*) AS claimed FROM concurrency.dequeue('sq2');
SELECT enabled, next_run_at = since + interval '1 day' AS untouched FROM concurrency.schedules, clock WHERE name = 'tick';
SELECT concurrency.schedule('tick', 'sq2', every => '1 day', priority => 7, concurrency_key => 'ticks');
SELECT enabled, next_run_at > now() AS ahead FROM concurrency.schedules WHERE name = 'tick';
-- moving a schedule to another queue
SELECT concurrency.schedule('tick', 'sq', every => '1 minute');
SELECT queue, spec FROM concurrency.schedules WHERE name = 'tick';

-- permissions: manage to schedule and unschedule, read to see
CREATE ROLE regress_schedule_manager;
CREATE ROLE regress_schedule_reader;
CREATE ROLE regress_schedule_outsider;
SELECT concurrency.grant_queue('sq', 'regress_schedule_manager', ARRAY['manage']);
SELECT concurrency.grant_queue('sq', 'regress_schedule_reader', ARRAY['read']);
SET ROLE regress_schedule_manager;
SELECT concurrency.schedule('managed', 'sq', every => '1 hour');
SELECT pg_temp.error_of($$SELECT concurrency.schedule('managed', 'sq2', every => '1 hour')$$);
-- manage alone does not show them: the view needs read, as queue_stats does
SELECT name FROM concurrency.schedules ORDER BY name;
SELECT pg_temp.error_of($$SELECT * FROM concurrency.schedule$$);
RESET ROLE;
SET ROLE regress_schedule_reader;
SELECT name FROM concurrency.schedules ORDER BY name;
SELECT pg_temp.error_of($$SELECT concurrency.schedule('reader', 'sq', every => '1 hour')$$);
SELECT pg_temp.error_of($$SELECT concurrency.unschedule('managed')$$);
RESET ROLE;
SET ROLE regress_schedule_outsider;
SELECT count(*) AS visible FROM concurrency.schedules;
SELECT pg_temp.error_of($$SELECT concurrency.unschedule('managed')$$);
-- a schedule that does not exist: false, whoever asks
SELECT concurrency.unschedule('nothing') AS unscheduled;
RESET ROLE;
SET ROLE regress_schedule_manager;
SELECT concurrency.unschedule('managed') AS unscheduled;
RESET ROLE;

-- dropping a queue drops its schedules
SELECT concurrency.drop_queue('sq');
SELECT name, queue FROM concurrency.schedules ORDER BY name;
SELECT concurrency.drop_queue('sq2');
SELECT count(*) AS schedules FROM concurrency.schedule;
DROP ROLE regress_schedule_manager, regress_schedule_reader, regress_schedule_outsider;
DO $$ BEGIN
    EXECUTE format('ALTER DATABASE %I RESET concurrency.schedule_runner', current_database());
END $$;
