-- Durable workflows: steps kept with the task under its lease, durable sleep,
-- events (await_event / emit_event, both orders, the timeout), await_task,
-- results kept on a queue that retains nothing, permissions, every error.

SELECT concurrency.create_queue('wf_orders', lease => '1 minute');
SELECT concurrency.enqueue('wf_orders', '{"order": 42}') AS t1 \gset
SELECT task_id = :t1 AS claimed, lease_token AS tok FROM concurrency.dequeue('wf_orders') \gset
-- a step not recorded reads NULL; recorded, its result (JSON null for none)
SELECT concurrency.step_result('wf_orders', :t1, :tok, 'charge') IS NULL AS not_recorded;
BEGIN;
CREATE TABLE wf_charges (order_id int PRIMARY KEY, amount int);
INSERT INTO wf_charges VALUES (42, 100);
SELECT concurrency.record_step('wf_orders', :t1, :tok, 'charge', '{"charge": "ch_42"}');
COMMIT;
SELECT concurrency.record_step('wf_orders', :t1, :tok, 'receipt');
SELECT concurrency.step_result('wf_orders', :t1, :tok, 'charge') AS charge,
       concurrency.step_result('wf_orders', :t1, :tok, 'receipt') AS receipt,
       concurrency.step_result('wf_orders', :t1, :tok, 'receipt') IS NULL AS receipt_is_sql_null;
-- a step recorded in a transaction that rolls back was never recorded
BEGIN;
SELECT concurrency.record_step('wf_orders', :t1, :tok, 'ship', '"boxed"');
ROLLBACK;
SELECT concurrency.step_result('wf_orders', :t1, :tok, 'ship') IS NULL AS ship_not_recorded;
SELECT step, result FROM concurrency.task_steps('wf_orders', :t1);

-- steps survive a failed attempt: the next holder reads them
SELECT concurrency.fail('wf_orders', :t1, :tok, 'card network down', retry_in => '0');
SELECT lease_token AS tok2, attempt FROM concurrency.dequeue('wf_orders') \gset
SELECT :attempt AS attempt, concurrency.step_result('wf_orders', :t1, :tok2, 'charge') AS charge_after_retry;
-- the old token is fenced off for every workflow call
\set VERBOSITY sqlstate
SELECT concurrency.record_step('wf_orders', :t1, :tok, 'late', '1');
SELECT concurrency.step_result('wf_orders', :t1, :tok, 'charge');
SELECT * FROM concurrency.await_event('wf_orders', :t1, :tok, 'reply');
SELECT concurrency.sleep_task_for('wf_orders', :t1, :tok, '1 hour');
\set VERBOSITY default
SELECT count(*) AS steps_unchanged FROM concurrency.task_steps('wf_orders', :t1);

-- durable sleep: no worker, no attempt spent, steps kept, the token fenced
SELECT concurrency.sleep_task_for('wf_orders', :t1, :tok2, '1 hour') > now() + interval '59 minutes' AS sleeps_an_hour;
SELECT state, attempt, lease_expires_at IS NULL AS no_lease FROM concurrency.task_status('wf_orders', :t1);
SELECT count(*) AS claimable_now FROM concurrency.dequeue('wf_orders');
\set VERBOSITY sqlstate
SELECT concurrency.record_step('wf_orders', :t1, :tok2, 'late', '1');
\set VERBOSITY default
-- woken early by an operator's move of run_at (as a test's clock): a sleep
-- into the past makes it claimable now
UPDATE concurrency."q_wf_orders" SET run_at = now() - interval '1 second' WHERE id = :t1;
SELECT lease_token AS tok3, attempt FROM concurrency.dequeue('wf_orders') \gset
SELECT :attempt AS attempt_after_sleep;
SELECT concurrency.sleep_task('wf_orders', :t1, :tok3, now() - interval '1 day') <= clock_timestamp() AS past_is_now;
SELECT lease_token AS tok3, attempt FROM concurrency.dequeue('wf_orders') \gset
SELECT :attempt AS attempt_after_past_sleep, count(*) AS steps FROM concurrency.task_steps('wf_orders', :t1);

-- events: awaited first, the task parks without a lease until the emit
SELECT * FROM concurrency.await_event('wf_orders', :t1, :tok3, 'reply-42', '1 day');
SELECT state, lease_expires_at IS NULL AS no_lease FROM concurrency.task_status('wf_orders', :t1);
SELECT count(*) AS claimable_while_waiting FROM concurrency.dequeue('wf_orders');
SELECT event, queue, task_id = :t1 AS this_task FROM concurrency.event_wait;
SELECT concurrency.emit_event('reply-42', '{"answer": "yes"}') AS woken;
SELECT count(*) AS waits_left FROM concurrency.event_wait;
SELECT state FROM concurrency.task_status('wf_orders', :t1);
SELECT lease_token AS tok4 FROM concurrency.dequeue('wf_orders') \gset
SELECT * FROM concurrency.await_event('wf_orders', :t1, :tok4, 'reply-42', '1 day');
SELECT concurrency.step_result('wf_orders', :t1, :tok4, 'event:reply-42') AS recorded_as_step;
-- emitted first, the event is kept and a later await takes it at once
SELECT concurrency.emit_event('invoice-42', '[1, 2, 3]') AS woken;
SELECT * FROM concurrency.await_event('wf_orders', :t1, :tok4, 'invoice-42');
-- emitted again: later awaits take the new payload; this task keeps what it took
SELECT concurrency.emit_event('invoice-42', '"second"') AS woken;
SELECT * FROM concurrency.await_event('wf_orders', :t1, :tok4, 'invoice-42');
SELECT payload FROM concurrency.event WHERE name = 'invoice-42';

-- the timeout: the task is claimable again and its await reports timed_out
SELECT * FROM concurrency.await_event('wf_orders', :t1, :tok4, 'never', '1 hour');
UPDATE concurrency."q_wf_orders" SET run_at = now() - interval '1 second' WHERE id = :t1; -- the hour passed
SELECT lease_token AS tok5 FROM concurrency.dequeue('wf_orders') \gset
SELECT * FROM concurrency.await_event('wf_orders', :t1, :tok5, 'never', '1 hour');
SELECT count(*) AS waits_left FROM concurrency.event_wait;
-- the timeout is kept as the event's step (result null): awaited again, in
-- this run or a later one, it times out at once; a late emit changes nothing
SELECT * FROM concurrency.await_event('wf_orders', :t1, :tok5, 'never', '1 hour');
SELECT concurrency.step_result('wf_orders', :t1, :tok5, 'event:never') AS step_after_timeout;
SELECT concurrency.emit_event('never', 'null') AS woken;
SELECT * FROM concurrency.await_event('wf_orders', :t1, :tok5, 'never');
\set tok6 :tok5

-- results: a queue that retains nothing keeps a result for await_task
SELECT * FROM concurrency.await_task('wf_orders', :t1);
SELECT concurrency.complete('wf_orders', :t1, :tok6, '{"shipped": true}');
SELECT * FROM concurrency.await_task('wf_orders', :t1);
SELECT * FROM concurrency.await_task('wf_orders', :t1, '10 seconds');  -- ended: at once
SELECT step, result FROM concurrency.task_steps('wf_orders', :t1);
-- a task completed without a result goes at once, its steps with it
SELECT concurrency.enqueue('wf_orders', '{}') AS t2 \gset
SELECT lease_token AS tok FROM concurrency.dequeue('wf_orders') \gset
SELECT concurrency.record_step('wf_orders', :t2, :tok, 'one', '1');
SELECT concurrency.complete('wf_orders', :t2, :tok);
SELECT count(*) AS rows_left FROM concurrency.await_task('wf_orders', :t2);
SELECT count(*) AS steps_left FROM concurrency.task_steps('wf_orders', :t2);
-- dead, with its last error; cancelled; unknown; still running after the wait
SELECT concurrency.create_queue('wf_once', max_attempts => 1);
SELECT concurrency.enqueue('wf_once', '{}') AS t3 \gset
SELECT lease_token AS tok FROM concurrency.dequeue('wf_once') \gset
SELECT concurrency.fail('wf_once', :t3, :tok, 'out of stock');
SELECT * FROM concurrency.await_task('wf_once', :t3);
SELECT concurrency.enqueue('wf_once', '{}') AS t4 \gset
SELECT concurrency.cancel('wf_once', ARRAY[:t4]::bigint[]);
-- (a queue that retains nothing deletes a cancelled task at once: no row)
SELECT count(*) AS cancelled_gone FROM concurrency.await_task('wf_once', :t4);
-- the result kept on a queue that retains nothing goes with purge()
SELECT concurrency.purge('wf_orders') AS purged;
SELECT count(*) AS after_purge FROM concurrency.await_task('wf_orders', :t1);
SELECT * FROM concurrency.await_task('wf_once', 999999);
SELECT concurrency.enqueue('wf_once', '{}') AS t5 \gset
SELECT * FROM concurrency.await_task('wf_once', :t5, '0.05 seconds');

-- bad input: clear errors, nothing changed
SELECT lease_token AS tok FROM concurrency.dequeue('wf_once') \gset
\set VERBOSITY sqlstate
SELECT concurrency.record_step('wf_once', :t5, :tok, NULL, '1');
SELECT concurrency.record_step('wf_once', :t5, :tok, '', '1');
SELECT concurrency.record_step('wf_once', :t5, :tok, repeat('x', 1001), '1');
SET concurrency.max_payload_size = '1kB';
SELECT concurrency.record_step('wf_once', :t5, :tok, 'big', jsonb_build_object('x', repeat('x', 2000)));
RESET concurrency.max_payload_size;
SELECT concurrency.step_result('wf_once', :t5, :tok, NULL);
SELECT * FROM concurrency.await_event('wf_once', :t5, :tok, NULL);
SELECT * FROM concurrency.await_event('wf_once', :t5, :tok, '');
SELECT * FROM concurrency.await_event('wf_once', :t5, :tok, 'e', '-1 second');
SELECT * FROM concurrency.await_event('wf_once', :t5, :tok, 'e', '0');
SELECT concurrency.emit_event(NULL, '1');
SELECT concurrency.emit_event('', '1');
SELECT concurrency.sleep_task('wf_once', :t5, :tok, NULL);
SELECT concurrency.sleep_task('wf_once', :t5, :tok, 'infinity');
SELECT concurrency.sleep_task_for('wf_once', :t5, :tok, NULL);
SELECT concurrency.sleep_task_for('wf_once', :t5, :tok, '300000 years');
SELECT concurrency.sleep_task(NULL, :t5, :tok, now());
SELECT concurrency.sleep_task('wf_once', NULL, :tok, now());
SELECT concurrency.sleep_task_for('wf_once', :t5, NULL, '1 hour');
SELECT concurrency.sleep_task('', :t5, :tok, now());
SELECT concurrency.sleep_task_for('wf_nope', 1, 1, '1 hour');
SELECT concurrency.sleep_task('wf_once', :t5, :tok + 1, now());
SELECT * FROM concurrency.await_task('wf_once', :t5, '-1 second');
SELECT * FROM concurrency.await_task('wf_nope', 1);
SELECT concurrency.record_step('wf_nope', 1, 1, 's', '1');
\set VERBOSITY default
SELECT state, attempt, lease_expires_at IS NOT NULL AS still_leased FROM concurrency.task_status('wf_once', :t5);
SELECT count(*) AS steps, (SELECT count(*) FROM concurrency.event WHERE name IN ('', 'e')) AS events
  FROM concurrency.task_steps('wf_once', :t5);

-- permissions: work for steps and events, read for task_steps and await_task,
-- EXECUTE on emit_event (revoked from PUBLIC)
CREATE ROLE regress_wf_worker;
CREATE ROLE regress_wf_outsider;
SELECT concurrency.grant_queue('wf_once', 'regress_wf_worker', ARRAY['work']);
SET ROLE regress_wf_outsider;
\set VERBOSITY sqlstate
SELECT concurrency.step_result('wf_once', :t5, :tok, 'one');
SELECT * FROM concurrency.task_steps('wf_once', :t5);
SELECT * FROM concurrency.await_task('wf_once', :t5);
SELECT concurrency.emit_event('x', '1');
SELECT concurrency.sleep_task('wf_once', :t5, :tok, now());
SELECT concurrency.sleep_task_for('wf_once', :t5, :tok, '1 hour');
RESET ROLE;
SET ROLE regress_wf_worker;
SELECT concurrency.record_step('wf_once', :t5, :tok, 'one', '1');
SELECT * FROM concurrency.task_steps('wf_once', :t5);
SELECT concurrency.emit_event('x', '1');
\set VERBOSITY default
RESET ROLE;
GRANT EXECUTE ON FUNCTION concurrency.emit_event(text, jsonb) TO regress_wf_worker;
SET ROLE regress_wf_worker;
SELECT concurrency.emit_event('x', '1') AS woken;
-- the worker's durable sleep: run as the caller (SECURITY INVOKER), for
-- everyone who may work on the queue (EXECUTE not revoked)
SELECT concurrency.sleep_task_for('wf_once', :t5, :tok, '1 hour') > now() AS slept;
RESET ROLE;
SELECT state, lease_expires_at IS NULL AS no_lease FROM concurrency.task_status('wf_once', :t5);
SELECT p.proname, l.lanname, p.prosecdef, p.proconfig, has_function_privilege('public', p.oid, 'EXECUTE') AS public
  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
 WHERE p.oid IN ('concurrency.sleep_task(text, bigint, bigint, timestamptz)'::regprocedure,
                 'concurrency.sleep_task_for(text, bigint, bigint, interval)'::regprocedure)
 ORDER BY 1;

SELECT concurrency.drop_queue('wf_orders');
SELECT concurrency.drop_queue('wf_once');
DROP TABLE wf_charges;
DELETE FROM concurrency.event;
REVOKE EXECUTE ON FUNCTION concurrency.emit_event(text, jsonb) FROM regress_wf_worker;
DROP ROLE regress_wf_worker;
DROP ROLE regress_wf_outsider;
