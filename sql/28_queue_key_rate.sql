-- Rate limits per concurrency key: create_queue(…, key_rate_limit,
-- key_rate_period) and alter_queue. At most key_rate_limit claims of each key
-- in any window of key_rate_period; the tasks without a key are not limited
-- by it. The claims of such a queue walk its keys in turn (as a fair queue's
-- do) and pass over a key whose window is full. That two sessions never
-- exceed a key's limit together is in the isolation spec queue_key_rate.

CREATE FUNCTION pg_temp.error_of(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

SELECT concurrency.create_queue('kr', lease => '1 hour', key_rate_limit => 2, key_rate_period => '1 hour');
SELECT name, key_rate_limit, key_rate_period, rate_limit, fair FROM concurrency.queue WHERE name = 'kr';
-- its slot table (empty: a key's slots are made by its claims) and the index
-- its claims walk
SELECT count(*) AS slots FROM concurrency.rk_kr;
SELECT to_regclass('concurrency.fair_q_kr') IS NOT NULL AS key_index;
-- three keys of four tasks each, and two tasks without a key
SELECT count(*) AS enqueued
  FROM generate_series(1, 12) AS i,
       LATERAL concurrency.enqueue('kr', jsonb_build_object('i', i), concurrency_key => 'k' || (i % 3));
SELECT count(*) AS enqueued FROM concurrency.enqueue_batch('kr', array_fill('{}'::jsonb, ARRAY[2]));

-- a batch takes the keys in turn (the tasks without a key first, as one more
-- key that is never held back), each key at most twice in the hour
SELECT coalesce(t.concurrency_key, '(none)') AS key, count(*) AS claimed
  FROM concurrency.dequeue('kr', batch => 20) AS d JOIN concurrency.q_kr AS t ON t.id = d.task_id
 GROUP BY 1 ORDER BY 1;
SELECT count(*) AS claimed FROM concurrency.dequeue('kr', batch => 20);
SELECT concurrency_key, count(*) AS slots_used FROM concurrency.rk_kr
 WHERE used_at > '-infinity' GROUP BY 1 ORDER BY 1;
-- one at a time: the same
SELECT concurrency.enqueue('kr', '{"late": true}', concurrency_key => 'k9') > 0 AS enqueued;
SELECT t.concurrency_key FROM concurrency.dequeue('kr') AS d JOIN concurrency.q_kr AS t ON t.id = d.task_id;
SELECT count(*) AS claimed FROM concurrency.dequeue('kr');

-- once a slot's last use is key_rate_period ago, it serves its key again
SELECT clock_timestamp() - interval '1 hour' AS an_hour_ago \gset
UPDATE concurrency.rk_kr SET used_at = :'an_hour_ago' WHERE concurrency_key = 'k1' AND slot = 1;
SELECT t.concurrency_key FROM concurrency.dequeue('kr', batch => 20) AS d JOIN concurrency.q_kr AS t ON t.id = d.task_id;
SELECT count(*) AS claimed FROM concurrency.dequeue('kr', batch => 20);

-- a claim that finds no task of a key uses none of its slots
SELECT concurrency.create_queue('kr_empty', key_rate_limit => 1, key_rate_period => '1 hour');
SELECT count(*) AS claimed FROM concurrency.dequeue('kr_empty', batch => 5);
SELECT count(*) AS slots FROM concurrency.rk_kr_empty;

-- alter_queue: a higher limit lets each key claim more in the same window, a
-- lower one drops the slots beyond it, key_rate_limit => 0 removes the limit,
-- its slots, and the index (the queue is not fair)
SELECT concurrency.alter_queue('kr', key_rate_limit => 3);
SELECT coalesce(t.concurrency_key, '(none)') AS key, count(*) AS claimed
  FROM concurrency.dequeue('kr', batch => 20) AS d JOIN concurrency.q_kr AS t ON t.id = d.task_id
 GROUP BY 1 ORDER BY 1;
SELECT concurrency.alter_queue('kr', key_rate_limit => 1);
SELECT max(slot) AS highest_slot FROM concurrency.rk_kr;
SELECT concurrency.alter_queue('kr', key_rate_period => '2 hours');
SELECT key_rate_limit, key_rate_period FROM concurrency.queue WHERE name = 'kr';
SELECT concurrency.alter_queue('kr', key_rate_limit => 0);
SELECT key_rate_limit, key_rate_period, to_regclass('concurrency.rk_kr') AS slot_table,
       to_regclass('concurrency.fair_q_kr') AS key_index
  FROM concurrency.queue WHERE name = 'kr';
SELECT count(*) AS claimed FROM concurrency.dequeue('kr', batch => 20);
-- a fair queue keeps its index when the key limit goes
SELECT concurrency.alter_queue('kr', fair => true, key_rate_limit => 1, key_rate_period => '1 hour');
SELECT concurrency.alter_queue('kr', key_rate_limit => 0);
SELECT fair, to_regclass('concurrency.fair_q_kr') IS NOT NULL AS key_index FROM concurrency.queue WHERE name = 'kr';

-- with the queue's own rate_limit too: both limits hold
SELECT concurrency.create_queue('kr_both', rate_limit => 3, rate_period => '1 hour',
                                key_rate_limit => 2, key_rate_period => '1 hour');
SELECT count(*) AS enqueued
  FROM generate_series(1, 6) AS i,
       LATERAL concurrency.enqueue('kr_both', jsonb_build_object('i', i), concurrency_key => 'k' || (i % 2));
SELECT count(*) AS claimed FROM concurrency.dequeue('kr_both', batch => 10);
UPDATE concurrency.r_kr_both SET used_at = '-infinity';
SELECT count(*) AS claimed FROM concurrency.dequeue('kr_both', batch => 10);

-- and with key_limit: a key's blocked tasks are not ready, and wait their turn
SELECT concurrency.create_queue('kr_limited', key_limit => 1, key_rate_limit => 5, key_rate_period => '1 hour');
SELECT count(*) AS enqueued
  FROM generate_series(1, 4) AS i,
       LATERAL concurrency.enqueue('kr_limited', jsonb_build_object('i', i), concurrency_key => 'k' || (i % 2));
SELECT t.concurrency_key
  FROM concurrency.dequeue('kr_limited', batch => 10) AS d JOIN concurrency.q_kr_limited AS t ON t.id = d.task_id
 ORDER BY 1;

-- a waiting dequeue held back by a key's limit sleeps until the key's window
-- opens (here 300 ms after its last claim), not until its wait is over
SELECT concurrency.create_queue('kr_wait', key_rate_limit => 1, key_rate_period => '300 milliseconds');
SELECT count(*) AS enqueued
  FROM generate_series(1, 2) AS i, LATERAL concurrency.enqueue('kr_wait', jsonb_build_object('i', i), concurrency_key => 'k');
SELECT count(*) AS claimed FROM concurrency.dequeue('kr_wait');
CREATE TEMP TABLE waited AS
SELECT clock_timestamp() AS started, (SELECT count(*) FROM concurrency.dequeue('kr_wait', wait => '60 seconds')) AS claimed;
SELECT claimed, clock_timestamp() - started < interval '30 seconds' AS before_its_wait_ended FROM waited;

-- the side table belongs to the queue's owner and is reached as that owner:
-- a role with work only claims under the limit
CREATE ROLE regress_key_rate_worker;
SELECT concurrency.create_queue('kr_role', key_rate_limit => 1, key_rate_period => '1 hour');
SELECT concurrency.grant_queue('kr_role', 'regress_key_rate_worker', ARRAY['work']);
SELECT pg_get_userbyid(relowner) = current_user AS owned_by_creator FROM pg_class WHERE oid = 'concurrency.rk_kr_role'::regclass;
SELECT count(*) AS enqueued
  FROM generate_series(1, 3) AS i, LATERAL concurrency.enqueue('kr_role', jsonb_build_object('i', i), concurrency_key => 'k');
SET ROLE regress_key_rate_worker;
SELECT count(*) AS claimed FROM concurrency.dequeue('kr_role', batch => 5);
SELECT count(*) AS claimed FROM concurrency.dequeue('kr_role', batch => 5);
SELECT pg_temp.error_of('SELECT count(*) FROM concurrency.rk_kr_role');
RESET ROLE;

-- bad values: 22023, nothing changed
SELECT pg_temp.error_of($$SELECT concurrency.create_queue('kr_bad', key_rate_limit => 5)$$);
SELECT pg_temp.error_of($$SELECT concurrency.create_queue('kr_bad', key_rate_period => '1 second')$$);
SELECT pg_temp.error_of($$SELECT concurrency.create_queue('kr_bad', key_rate_limit => -1, key_rate_period => '1 second')$$);
SELECT pg_temp.error_of($$SELECT concurrency.create_queue('kr_bad', key_rate_limit => 10001, key_rate_period => '1 second')$$);
SELECT pg_temp.error_of($$SELECT concurrency.create_queue('kr_bad', key_rate_limit => 5, key_rate_period => '0')$$);
SELECT pg_temp.error_of($$SELECT concurrency.create_queue('kr_bad', key_rate_limit => 5, key_rate_period => '101 years')$$);
SELECT pg_temp.error_of($$SELECT concurrency.create_queue('kr_bad', key_rate_limit => 0, key_rate_period => '1 second')$$);
SELECT count(*) AS created FROM concurrency.queue WHERE name = 'kr_bad';
SELECT pg_temp.error_of($$SELECT concurrency.alter_queue('kr', key_rate_limit => 4)$$);
SELECT pg_temp.error_of($$SELECT concurrency.alter_queue('kr', key_rate_period => '1 minute')$$);
SELECT pg_temp.error_of($$SELECT concurrency.alter_queue('kr_empty', key_rate_limit => 0, key_rate_period => '1 minute')$$);
SELECT key_rate_limit, key_rate_period FROM concurrency.queue WHERE name IN ('kr', 'kr_empty') ORDER BY name;
-- create_queue with the same settings again: nothing to do; other ones: 42710
SELECT concurrency.create_queue('kr_empty', key_rate_limit => 1, key_rate_period => '1 hour');
SELECT pg_temp.error_of($$SELECT concurrency.create_queue('kr_empty', key_rate_limit => 2, key_rate_period => '1 hour')$$);
SELECT pg_temp.error_of($$SELECT concurrency.create_queue('kr_empty')$$);

-- drop_queue takes the slot table along
SELECT concurrency.drop_queue(q) FROM unnest(ARRAY['kr', 'kr_empty', 'kr_both', 'kr_limited', 'kr_wait', 'kr_role']) q;
SELECT count(*) AS slot_tables_left FROM pg_class WHERE relnamespace = 'concurrency'::regnamespace AND relname LIKE 'rk\_kr%';
DROP ROLE regress_key_rate_worker;
