-- Live 0.2.0 data for the update to 0.3.0 (scripts/upgrade-check.sh runs this
-- before ALTER EXTENSION … UPDATE, wait.after.sql after it): a queue with a
-- dead, a leased, a ready and a scheduled task, a serial key whose head is
-- leased with the next task blocked, and a privilege on a replaced function
-- taken from PUBLIC and given to one role.
CREATE TABLE wait_held (queue text, n integer, task_id bigint, lease_token bigint);

SELECT concurrency.create_queue('wlive', max_attempts => 1);
-- dead: claimed under a lease that is over at once, then reclaimed with its
-- one attempt used
SELECT concurrency.enqueue('wlive', '{"n": 4}', priority => 10);
SELECT count(*) FROM concurrency.dequeue('wlive', lease => '1 microsecond');
SELECT concurrency.enqueue('wlive', '{"n": 1}', priority => 5);
INSERT INTO wait_held SELECT 'wlive', (payload ->> 'n')::integer, task_id, lease_token
  FROM concurrency.dequeue('wlive', lease => '1 hour', worker => 'old-worker');
SELECT concurrency.enqueue('wlive', '{"n": 2}');
SELECT concurrency.enqueue('wlive', '{"n": 3}', run_at => clock_timestamp() + interval '1 hour');

SELECT concurrency.create_queue('wkeyed', key_limit => 1);
SELECT count(*) FROM concurrency.enqueue_batch('wkeyed', ARRAY['{"n": 1}', '{"n": 2}']::jsonb[],
                                                concurrency_keys => ARRAY['a', 'a']);
INSERT INTO wait_held SELECT 'wkeyed', (payload ->> 'n')::integer, task_id, lease_token
  FROM concurrency.dequeue('wkeyed', 5, lease => '1 hour');

-- The tables as 0.2.0's create_queue made them: the library here (0.3.0's)
-- adds the progress column and those of dependencies (with their index)
-- that the update must add to 0.2.0's tables, and 0.4.0's those of workflows.
ALTER TABLE concurrency."q_wlive" DROP COLUMN progress, DROP COLUMN parents_open, DROP COLUMN has_children,
    DROP COLUMN children, DROP COLUMN parents, DROP COLUMN IF EXISTS steps, DROP COLUMN IF EXISTS awaiting;
ALTER TABLE concurrency."q_wkeyed" DROP COLUMN progress, DROP COLUMN parents_open, DROP COLUMN has_children,
    DROP COLUMN children, DROP COLUMN parents, DROP COLUMN IF EXISTS steps, DROP COLUMN IF EXISTS awaiting;
DROP INDEX concurrency."q_wlive_waiting", concurrency."q_wkeyed_waiting";

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'upgrade_wait_worker') THEN
        CREATE ROLE upgrade_wait_worker;
    END IF;
END $$;
REVOKE EXECUTE ON FUNCTION concurrency.heartbeat(text, bigint, bigint, interval) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION concurrency.heartbeat(text, bigint, bigint, interval) TO upgrade_wait_worker;
