-- Rate limits: create_queue(…, rate_limit, rate_period) and alter_queue. At
-- most rate_limit claims of a queue in any window of rate_period: each claim
-- takes a rate slot last used at least rate_period ago and writes its claim
-- time into it. That two sessions never exceed the limit together is in the
-- isolation spec queue_rate; that 16 workers never exceed it in any window,
-- in TAP 028_queue_rate.pl.

CREATE FUNCTION pg_temp.error_of(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

SELECT concurrency.create_queue('rq', lease => '1 hour', rate_limit => 3, rate_period => '1 hour');
SELECT name, rate_limit, rate_period FROM concurrency.queue WHERE name = 'rq';
-- its rate slots: one per claim of a window, never used yet
SELECT slot, used_at FROM concurrency.r_rq ORDER BY slot;
SELECT count(*) AS enqueued FROM concurrency.enqueue_batch('rq', array_fill('{}'::jsonb, ARRAY[10]));

-- a claim takes at most as many tasks as there are free slots
SELECT count(*) AS claimed FROM concurrency.dequeue('rq', batch => 2);
SELECT count(*) AS claimed FROM concurrency.dequeue('rq', batch => 5);
SELECT count(*) AS claimed FROM concurrency.dequeue('rq', batch => 5);
SELECT count(*) AS used FROM concurrency.r_rq WHERE used_at > '-infinity';
-- once a slot's last use is rate_period ago, it serves a claim again
UPDATE concurrency.r_rq SET used_at = used_at - interval '1 hour' WHERE slot = 1;
SELECT count(*) AS claimed FROM concurrency.dequeue('rq', batch => 5);
SELECT count(*) AS claimed FROM concurrency.dequeue('rq', batch => 5);

-- a claim that finds no task uses no slot
UPDATE concurrency.r_rq SET used_at = '-infinity';
SELECT concurrency.create_queue('rq_empty', rate_limit => 2, rate_period => '1 hour');
SELECT count(*) AS claimed FROM concurrency.dequeue('rq_empty', batch => 5);
SELECT count(*) AS used FROM concurrency.r_rq_empty WHERE used_at > '-infinity';
SELECT concurrency.enqueue('rq_empty', '{}') > 0 AS enqueued;
SELECT count(*) AS claimed FROM concurrency.dequeue('rq_empty', batch => 5);
SELECT count(*) AS used FROM concurrency.r_rq_empty WHERE used_at > '-infinity';
-- a slot taken by a claim and given back keeps the time of its use before,
-- by either claim path (not "free": a claim whose clock is behind may still
-- see that use inside its window, and must)
UPDATE concurrency.r_rq_empty SET used_at = timestamptz '2000-01-01 00:00 UTC' + slot * interval '1 minute';
SELECT count(*) AS claimed FROM concurrency.dequeue('rq_empty', batch => 5);
SET concurrency.direct_claim = off;
SELECT count(*) AS claimed FROM concurrency.dequeue('rq_empty', batch => 5);
RESET concurrency.direct_claim;
SELECT slot, used_at = timestamptz '2000-01-01 00:00 UTC' + slot * interval '1 minute' AS kept
  FROM concurrency.r_rq_empty ORDER BY slot;

-- alter_queue: a new limit resizes the slots (the used ones stay used), a
-- new period keeps them, rate_limit => 0 removes the limit and its slots
SELECT concurrency.alter_queue('rq', rate_limit => 5);
SELECT slot, used_at > '-infinity' AS used FROM concurrency.r_rq ORDER BY slot;
SELECT concurrency.alter_queue('rq', rate_limit => 2);
SELECT slot FROM concurrency.r_rq ORDER BY slot;
SELECT concurrency.alter_queue('rq', rate_period => '2 hours');
SELECT rate_limit, rate_period FROM concurrency.queue WHERE name = 'rq';
SELECT count(*) AS claimed FROM concurrency.dequeue('rq', batch => 5);
SELECT concurrency.alter_queue('rq', rate_limit => 0);
SELECT rate_limit, rate_period, to_regclass('concurrency.r_rq') AS slot_table FROM concurrency.queue WHERE name = 'rq';
SELECT count(*) AS claimed FROM concurrency.dequeue('rq', batch => 5);
SELECT concurrency.alter_queue('rq', rate_limit => 1, rate_period => '1 hour');
SELECT count(*) AS enqueued FROM concurrency.enqueue_batch('rq', array_fill('{}'::jsonb, ARRAY[3]));
SELECT count(*) AS claimed FROM concurrency.dequeue('rq', batch => 5);
SELECT count(*) AS claimed FROM concurrency.dequeue('rq', batch => 5);

-- a batch of any size takes at most the queue's slots (nothing is made
-- per slot it asks for)
UPDATE concurrency.r_rq SET used_at = '-infinity';
SELECT count(*) AS claimed FROM concurrency.dequeue('rq', batch => 2147483647);

-- with max_leased too: both limits hold
SELECT concurrency.create_queue('rq_both', rate_limit => 3, rate_period => '1 hour', max_leased => 2);
SELECT count(*) AS enqueued FROM concurrency.enqueue_batch('rq_both', array_fill('{}'::jsonb, ARRAY[5]));
SELECT count(*) AS claimed FROM concurrency.dequeue('rq_both', batch => 5);
SELECT count(*) AS used FROM concurrency.r_rq_both WHERE used_at > '-infinity';

-- a waiting dequeue held back by the limit sleeps until the window opens
-- (here 300 ms after the last claim), not until its wait is over
SELECT concurrency.create_queue('rq_wait', rate_limit => 1, rate_period => '300 milliseconds');
SELECT count(*) AS enqueued FROM concurrency.enqueue_batch('rq_wait', array_fill('{}'::jsonb, ARRAY[2]));
SELECT count(*) AS claimed FROM concurrency.dequeue('rq_wait');
CREATE TEMP TABLE waited AS
SELECT clock_timestamp() AS started, (SELECT count(*) FROM concurrency.dequeue('rq_wait', wait => '60 seconds')) AS claimed;
SELECT claimed, clock_timestamp() - started < interval '30 seconds' AS before_its_wait_ended FROM waited;

-- the side table belongs to the queue's owner and is reached as that owner:
-- a role with work only claims under the limit
CREATE ROLE regress_rate_worker;
SELECT concurrency.create_queue('rq_role', rate_limit => 1, rate_period => '1 hour');
SELECT concurrency.grant_queue('rq_role', 'regress_rate_worker', ARRAY['work']);
SELECT pg_get_userbyid(relowner) = current_user AS owned_by_creator FROM pg_class WHERE oid = 'concurrency.r_rq_role'::regclass;
SELECT count(*) AS enqueued FROM concurrency.enqueue_batch('rq_role', array_fill('{}'::jsonb, ARRAY[3]));
SET ROLE regress_rate_worker;
SELECT count(*) AS claimed FROM concurrency.dequeue('rq_role', batch => 5);
SELECT count(*) AS claimed FROM concurrency.dequeue('rq_role', batch => 5);
SELECT pg_temp.error_of('SELECT count(*) FROM concurrency.r_rq_role');
RESET ROLE;

-- bad values: 22023, nothing changed
SELECT pg_temp.error_of($$SELECT concurrency.create_queue('rq_bad', rate_limit => 5)$$);
SELECT pg_temp.error_of($$SELECT concurrency.create_queue('rq_bad', rate_period => '1 second')$$);
SELECT pg_temp.error_of($$SELECT concurrency.create_queue('rq_bad', rate_limit => -1, rate_period => '1 second')$$);
SELECT pg_temp.error_of($$SELECT concurrency.create_queue('rq_bad', rate_limit => 10001, rate_period => '1 second')$$);
SELECT pg_temp.error_of($$SELECT concurrency.create_queue('rq_bad', rate_limit => 5, rate_period => '0')$$);
SELECT pg_temp.error_of($$SELECT concurrency.create_queue('rq_bad', rate_limit => 5, rate_period => '-1 second')$$);
SELECT pg_temp.error_of($$SELECT concurrency.create_queue('rq_bad', rate_limit => 5, rate_period => '101 years')$$);
SELECT pg_temp.error_of($$SELECT concurrency.create_queue('rq_bad', rate_limit => 0, rate_period => '1 second')$$);
SELECT count(*) AS created FROM concurrency.queue WHERE name = 'rq_bad';
SELECT pg_temp.error_of($$SELECT concurrency.alter_queue('rq', rate_limit => 0, rate_period => '1 minute')$$);
SELECT pg_temp.error_of($$SELECT concurrency.alter_queue('rq_empty', rate_limit => 10001)$$);
SELECT concurrency.alter_queue('rq', rate_limit => 0);
SELECT pg_temp.error_of($$SELECT concurrency.alter_queue('rq', rate_limit => 4)$$);
SELECT pg_temp.error_of($$SELECT concurrency.alter_queue('rq', rate_period => '1 minute')$$);
SELECT rate_limit, rate_period FROM concurrency.queue WHERE name = 'rq';
-- create_queue with the same settings again: nothing to do; other ones: 42710
SELECT concurrency.create_queue('rq_empty', rate_limit => 2, rate_period => '1 hour');
SELECT pg_temp.error_of($$SELECT concurrency.create_queue('rq_empty', rate_limit => 3, rate_period => '1 hour')$$);
SELECT pg_temp.error_of($$SELECT concurrency.create_queue('rq_empty')$$);

-- where dequeue claims without the executor (concurrency.direct_claim), it
-- takes the rate slots so too: first the slots after the one the backend took
-- last, by their key, and only where one of them is not free the table in
-- its order, which the statement reads every time; the same slots taken and
-- written either way
SELECT concurrency.create_queue('rq_direct', rate_limit => 4, rate_period => '1 hour');
SELECT count(*) AS enqueued FROM concurrency.enqueue_batch('rq_direct', array_fill('{}'::jsonb, ARRAY[5]));
CREATE FUNCTION pg_temp.slot_table_reads() RETURNS bigint LANGUAGE sql AS
    $$ SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 'r_rq_direct' $$;
CREATE TEMP TABLE rate_claims (seq serial, direct boolean, claimed bigint, scans_before bigint);
SET concurrency.direct_claim = on;
SELECT pg_stat_force_next_flush();
INSERT INTO rate_claims (direct, claimed, scans_before)
SELECT true, (SELECT count(*) FROM concurrency.dequeue('rq_direct', 2)), pg_temp.slot_table_reads();
SELECT pg_stat_force_next_flush();
SET concurrency.direct_claim = off;
INSERT INTO rate_claims (direct, claimed, scans_before)
SELECT false, (SELECT count(*) FROM concurrency.dequeue('rq_direct', 2)), pg_temp.slot_table_reads();
SELECT pg_stat_force_next_flush();
SET concurrency.direct_claim = on;
INSERT INTO rate_claims (direct, claimed, scans_before)
SELECT true, (SELECT count(*) FROM concurrency.dequeue('rq_direct', 2)), pg_temp.slot_table_reads();
SELECT pg_stat_force_next_flush();
RESET concurrency.direct_claim;
SELECT direct, claimed, coalesce(lead(scans_before) OVER (ORDER BY seq), pg_temp.slot_table_reads()) - scans_before > 0 AS slot_table_read
  FROM rate_claims ORDER BY seq;
SELECT count(*) AS used FROM concurrency.r_rq_direct WHERE used_at > '-infinity';

-- drop_queue takes the slot table along
SELECT concurrency.drop_queue(q) FROM unnest(ARRAY['rq', 'rq_empty', 'rq_both', 'rq_wait', 'rq_role', 'rq_direct']) q;
SELECT count(*) AS slot_tables_left FROM pg_class WHERE relnamespace = 'concurrency'::regnamespace AND relname LIKE 'r\_rq%';
DROP ROLE regress_rate_worker;
