-- Finishing work: batch complete/fail/heartbeat, cancel, retention and purge,
-- idempotent enqueue over retained tasks, task_status, queue_stats.
-- Times differ from run to run: compared, never printed.

-- errors with their DETAIL (times replaced), and psql's LAST_ERROR_SQLSTATE
CREATE FUNCTION pg_temp.error_of(statement text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    detail text;
BEGIN
    EXECUTE statement;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
    RETURN SQLSTATE || ': ' || SQLERRM || ' / '
           || regexp_replace(detail, '\d{4}-\d\d-\d\d [0-9:.+-]+', '<time>', 'g');
END $$;

SELECT concurrency.create_queue('fin', max_attempts => 2);
SELECT count(*) FROM concurrency.enqueue_batch('fin', array_fill('{}'::jsonb, ARRAY[6]));
-- n: each task's place in enqueue order (its id on one server; a distributed
-- queue's ids are other numbers), and the ids of the third to sixth
CREATE TEMP TABLE held AS
  SELECT row_number() OVER (ORDER BY task_id) AS n, task_id, lease_token
    FROM concurrency.dequeue('fin', 6, worker => 'w');
SELECT max(task_id) FILTER (WHERE n = 3) AS t3, max(task_id) FILTER (WHERE n = 4) AS t4,
       max(task_id) FILTER (WHERE n = 5) AS t5, max(task_id) FILTER (WHERE n = 6) AS t6 FROM held \gset
SELECT count(*) AS held FROM held;

-- batch heartbeat: every lease extended, one deadline returned
SELECT concurrency.heartbeat_batch('fin', array_agg(task_id ORDER BY task_id), array_agg(lease_token ORDER BY task_id),
                             '10 minutes') > clock_timestamp() + interval '9 minutes' AS extended
  FROM held;
SELECT count(*) AS extended_rows FROM concurrency."q_fin"
 WHERE COALESCE(lease_extended_to, lease_expires_at) > clock_timestamp() + interval '9 minutes';
SELECT concurrency.heartbeat_batch('fin', ARRAY[]::bigint[], ARRAY[]::bigint[]) AS empty_batch;

-- batch complete: all or nothing; the first lost lease is named
SELECT pg_temp.error_of(format('SELECT concurrency.complete_batch(%L, %L::bigint[], %L::bigint[])', 'fin',
       (SELECT array_agg(task_id ORDER BY task_id) FROM held WHERE n <= 3),
       (SELECT array_agg(CASE WHEN n = 2 THEN lease_token + 1000 ELSE lease_token END ORDER BY task_id)
          FROM held WHERE n <= 3)));
SELECT count(*) AS still_leased FROM concurrency."q_fin" WHERE state = 'leased';
SELECT concurrency.complete_batch('fin', array_agg(task_id ORDER BY task_id), array_agg(lease_token ORDER BY task_id))
  FROM held WHERE n <= 2;
SELECT count(*) AS left_after_complete FROM concurrency."q_fin";
-- completing them again: CE001, the task is gone
SELECT pg_temp.error_of(format('SELECT concurrency.complete_batch(%L, %L::bigint[], %L::bigint[])', 'fin',
       (SELECT array_agg(task_id ORDER BY task_id) FROM held WHERE n <= 2),
       (SELECT array_agg(lease_token ORDER BY task_id) FROM held WHERE n <= 2)));
SELECT concurrency.complete_batch('fin', ARRAY[]::bigint[], ARRAY[]::bigint[]) AS empty_complete;

-- bad arrays: 22023 for lengths and duplicates, 22004 for NULLs; nothing changes
SELECT concurrency.complete_batch('fin', ARRAY[3, 4]::bigint[], ARRAY[1]::bigint[]);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.complete_batch('fin', ARRAY[3, 3]::bigint[], ARRAY[1, 1]::bigint[]);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.complete_batch('fin', ARRAY[3, NULL]::bigint[], ARRAY[1, 1]::bigint[]);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.complete_batch('fin', ARRAY[3]::bigint[], ARRAY[NULL]::bigint[]);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.complete_batch('fin', NULL::bigint[], ARRAY[1]::bigint[]);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.complete_batch('fin', ARRAY[[3]]::bigint[], ARRAY[[1]]::bigint[]);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.heartbeat_batch('fin', ARRAY[3, 4]::bigint[], ARRAY[1, 2, 3]::bigint[]);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.heartbeat_batch('fin', ARRAY[3, 3]::bigint[], ARRAY[1, 2]::bigint[]);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.heartbeat_batch('fin', ARRAY[3]::bigint[], ARRAY[1]::bigint[], '0 seconds');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM concurrency.fail_batch('fin', ARRAY[3]::bigint[], ARRAY[1, 2]::bigint[]);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM concurrency.fail_batch('fin', ARRAY[3, NULL]::bigint[], ARRAY[1, 2]::bigint[]);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM concurrency.fail_batch('fin', ARRAY[3]::bigint[], ARRAY[1]::bigint[], retry_in => '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.complete_batch('nosuchqueue', ARRAY[3]::bigint[], ARRAY[1]::bigint[]);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS unchanged FROM concurrency."q_fin" WHERE state = 'leased';

-- batch heartbeat with one lost lease: CE001 naming it, no lease extended
SELECT clock_timestamp() + interval '1 minute' AS in_a_minute \gset
UPDATE concurrency."q_fin" SET lease_extended_to = NULL, lease_expires_at = :'in_a_minute';
SELECT pg_temp.error_of(format('SELECT concurrency.heartbeat_batch(%L, %L::bigint[], %L::bigint[], %L)', 'fin',
       (SELECT array_agg(task_id ORDER BY task_id DESC) FROM held WHERE n >= 3),
       (SELECT array_agg(CASE WHEN n = 4 THEN 0 ELSE lease_token END ORDER BY task_id DESC)
          FROM held WHERE n >= 3), '1 hour'));
SELECT count(*) AS none_extended FROM concurrency."q_fin" WHERE lease_extended_to IS NOT NULL;

-- batch fail: one state per task, in argument order; the last attempt dies
SELECT * FROM concurrency.fail_batch('fin', (SELECT array_agg(task_id ORDER BY task_id DESC) FROM held WHERE n IN (3, 4)),
                               (SELECT array_agg(lease_token ORDER BY task_id DESC) FROM held WHERE n IN (3, 4)),
                               'boom', retry_in => '0 seconds');
SELECT id, state, attempt, last_error, lease_token IS NULL AS released FROM concurrency."q_fin"
 WHERE id IN (:t3, :t4) ORDER BY id;
CREATE TEMP TABLE again AS SELECT task_id, lease_token FROM concurrency.dequeue('fin', 2);
SELECT * FROM concurrency.fail_batch('fin', (SELECT array_agg(task_id ORDER BY task_id) FROM again),
                               (SELECT array_agg(lease_token ORDER BY task_id) FROM again), 'boom 2');
SELECT id, state, attempt, last_error FROM concurrency."q_fin" WHERE id IN (:t3, :t4) ORDER BY id;
-- with a lost lease: nothing recorded
SELECT pg_temp.error_of(format('SELECT * FROM concurrency.fail_batch(%L, %L::bigint[], %L::bigint[])', 'fin',
       (SELECT array_agg(task_id ORDER BY task_id) FROM held WHERE n IN (5, 6)),
       (SELECT array_agg(CASE WHEN n = 6 THEN 0 ELSE lease_token END ORDER BY task_id) FROM held
         WHERE n IN (5, 6))));
SELECT id, state, attempt, last_error FROM concurrency."q_fin" WHERE id IN (:t5, :t6) ORDER BY id;

-- cancel: any state but done; unknown ids count 0; a holder learns at its
-- next call that the task was cancelled (on a queue that retains nothing, the
-- cancelled task stays until its holder's lease ends, then purge removes it)
SELECT concurrency.enqueue('fin', '{"s": "scheduled"}', run_at => clock_timestamp() + interval '1 hour') AS sch \gset
SELECT concurrency.enqueue('fin', '{"s": "ready"}', dedupe_key => 'cancel-me') AS rdy \gset
SELECT id, state FROM concurrency."q_fin" ORDER BY id;
SELECT concurrency.cancel('fin', ARRAY[:t3, :t4, :t5, :sch, :rdy, 999999]::bigint[]) AS cancelled;
SELECT id, state, finished_at IS NOT NULL AS finished, lease_token IS NULL AS released
  FROM concurrency."q_fin" ORDER BY id;
SELECT pg_temp.error_of(format('SELECT concurrency.heartbeat(%L, %s, %s)', 'fin',
       (SELECT task_id FROM held WHERE n = 5), (SELECT lease_token FROM held WHERE n = 5)));
SELECT pg_temp.error_of(format('SELECT concurrency.complete(%L, %s, %s)', 'fin',
       (SELECT task_id FROM held WHERE n = 5), (SELECT lease_token FROM held WHERE n = 5)));
SELECT pg_temp.error_of(format('SELECT concurrency.fail(%L, %s, %s)', 'fin',
       (SELECT task_id FROM held WHERE n = 5), (SELECT lease_token FROM held WHERE n = 5)));
SELECT concurrency.cancel('fin', ARRAY[:t5]::bigint[]) AS cancelled_again;
SELECT concurrency.cancel('fin', ARRAY[]::bigint[]) AS nothing;
-- a cancelled task gives its dedupe_key up
SELECT concurrency.enqueue('fin', '{}', dedupe_key => 'cancel-me') <> :rdy AS new_task;
SELECT concurrency.cancel('fin', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.cancel('fin', ARRAY[NULL]::bigint[]);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.cancel('nosuchqueue', ARRAY[1]::bigint[]);
\echo :LAST_ERROR_SQLSTATE
-- the held task 5 stays while its lease runs; purge takes it once it ended
SELECT concurrency.purge('fin') AS purged_while_leased;
SELECT clock_timestamp() - interval '1 second' AS a_second_ago \gset
UPDATE concurrency."q_fin" SET lease_expires_at = :'a_second_ago' WHERE id = :t5;
SELECT concurrency.purge('fin') AS purged;
SELECT id, state FROM concurrency."q_fin" ORDER BY id;
SELECT concurrency.purge(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT queue, ready, scheduled, leased, dead, done, cancelled FROM concurrency.queue_stats WHERE queue = 'fin';
SELECT concurrency.drop_queue('fin');

-- retention: done and cancelled tasks stay for `retain` with their result,
-- worker and attempt; a done task keeps its dedupe_key (idempotent enqueue)
SELECT concurrency.create_queue('ret', retain => '1 day');
SELECT concurrency.enqueue('ret', '{"order": 7}', dedupe_key => 'order-7-mail') AS o7 \gset
SELECT concurrency.enqueue('ret', '{"order": 8}', dedupe_key => 'order-8-mail', concurrency_key => 'customer-8') AS o8 \gset
SELECT task_id AS o7_task, lease_token AS o7_token FROM concurrency.dequeue('ret', worker => 'mailer-1') \gset
SELECT concurrency.complete('ret', :o7_task, :o7_token, '{"message_id": "m-1"}');
SELECT concurrency.enqueue('ret', '{"order": 7}', dedupe_key => 'order-7-mail') = :o7 AS same_task_while_retained;
SELECT task_id = :o7 AS id, state, attempt, priority, worker, last_error, result, dedupe_key, concurrency_key,
       run_at IS NOT NULL AS has_run_at, enqueued_at IS NOT NULL AS has_enqueued_at,
       lease_expires_at IS NULL AS no_lease, finished_at IS NOT NULL AS finished
  FROM concurrency.task_status('ret', :o7);
SELECT task_id = :o8 AS id, state, attempt, dedupe_key, concurrency_key, finished_at IS NULL AS live
  FROM concurrency.task_status('ret', :o8);
SELECT count(*) AS no_such_task FROM concurrency.task_status('ret', 999999);
SELECT * FROM concurrency.task_status('ret', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM concurrency.task_status('nosuchqueue', 1);
\echo :LAST_ERROR_SQLSTATE
-- leased state and its deadline, and a scheduled task that is due reads ready
SELECT task_id AS o8_task, lease_token AS o8_token FROM concurrency.dequeue('ret', worker => 'mailer-2') \gset
SELECT state, lease_expires_at > clock_timestamp() AS lease_runs, worker FROM concurrency.task_status('ret', :o8);
SELECT concurrency.cancel('ret', ARRAY[:o8]::bigint[]) AS cancelled;
SELECT state, lease_expires_at IS NULL AS no_lease, finished_at IS NOT NULL AS finished
  FROM concurrency.task_status('ret', :o8);
SELECT pg_temp.error_of(format('SELECT concurrency.heartbeat(%L, %s, %s)', 'ret', :o8_task, :o8_token));
-- batch complete on a retaining queue: done, no result
SELECT count(*) FROM concurrency.enqueue_batch('ret', array_fill('{}'::jsonb, ARRAY[3]));
CREATE TEMP TABLE r AS SELECT task_id, lease_token FROM concurrency.dequeue('ret', 3);
SELECT concurrency.complete_batch('ret', array_agg(task_id), array_agg(lease_token)) FROM r;
SELECT state, count(*), count(result) AS results FROM concurrency."q_ret" GROUP BY state ORDER BY state;
SELECT queue, ready, leased, done, cancelled FROM concurrency.queue_stats WHERE queue = 'ret';
-- nothing is due for purge yet
SELECT concurrency.purge('ret') AS purged_too_early;
-- a day later (finished_at moved back): purged, and the key is free again
SELECT clock_timestamp() - interval '25 hours' AS a_day_ago \gset
UPDATE concurrency."q_ret" SET finished_at = :'a_day_ago' WHERE id = :o7;
SELECT concurrency.purge('ret') AS purged;
SELECT count(*) AS o7_gone FROM concurrency.task_status('ret', :o7);
SELECT concurrency.enqueue('ret', '{"order": 7}', dedupe_key => 'order-7-mail') > :o7 AS new_task_after_retention;
-- queue calls purge by themselves, in chunks: a new session's first call
UPDATE concurrency."q_ret" SET finished_at = :'a_day_ago' WHERE state = 'done';
SELECT count(*) AS due FROM concurrency."q_ret" WHERE state IN ('done', 'cancelled')
   AND finished_at < clock_timestamp() - interval '1 day';
\c
SELECT count(*) AS claimed FROM concurrency.dequeue('ret');
SELECT count(*) AS due_after_dequeue FROM concurrency."q_ret" WHERE state IN ('done', 'cancelled')
   AND finished_at < clock_timestamp() - interval '1 day';
-- retention removed: every finished task goes at the next purge (but the
-- cancelled task whose holder's lease still runs, until the lease ends)
SELECT concurrency.alter_queue('ret', retain => '0');
SELECT concurrency.purge('ret') AS purged_all_finished;
SELECT state, count(*) FROM concurrency."q_ret" GROUP BY state ORDER BY state;

-- enqueue_batch with keys: ids in payload order; a key twice in one batch
-- and a key held by a (retained) task give the holder's id
SELECT concurrency.alter_queue('ret', retain => '1 hour');
SELECT concurrency.enqueue('ret', '{}', dedupe_key => 'held') AS held_id \gset
SELECT array_agg(id ORDER BY n) AS ids FROM concurrency.enqueue_batch('ret',
    ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}', '{"n": 4}', '{"n": 5}']::jsonb[],
    dedupe_keys => ARRAY['a', NULL, 'held', 'a', NULL],
    concurrency_keys => ARRAY['k1', 'k2', NULL, 'k1', NULL]) WITH ORDINALITY AS b(id, n) \gset
SELECT (:'ids'::bigint[])[1] = (:'ids'::bigint[])[4] AS same_key_same_id,
       (:'ids'::bigint[])[3] = :held_id AS held_key,
       (:'ids'::bigint[])[2] < (:'ids'::bigint[])[5] AS payload_order,
       cardinality(:'ids'::bigint[]) AS n;
SELECT payload, dedupe_key, concurrency_key FROM concurrency."q_ret"
 WHERE id = ANY (:'ids'::bigint[]) ORDER BY id;
SELECT * FROM concurrency.enqueue_batch('ret', ARRAY['{}', '{}']::jsonb[], dedupe_keys => ARRAY['x']);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM concurrency.enqueue_batch('ret', ARRAY['{}']::jsonb[], concurrency_keys => ARRAY['x', 'y']);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM concurrency.enqueue_batch('ret', ARRAY['{}']::jsonb[], concurrency_keys => ARRAY[repeat('k', 1025)]);
\echo :LAST_ERROR_SQLSTATE

-- finished tasks never reach a claim: claims walk the index of ready tasks
SELECT count(*) FROM concurrency.enqueue_batch('ret', array_fill('{}'::jsonb, ARRAY[200]));
CREATE TEMP TABLE many AS SELECT task_id, lease_token FROM concurrency.dequeue('ret', 200);
SELECT concurrency.complete_batch('ret', array_agg(task_id), array_agg(lease_token)) AS completed FROM many;
ANALYZE concurrency."q_ret";
EXPLAIN (COSTS OFF) SELECT id FROM concurrency."q_ret" WHERE state = 'ready'
 ORDER BY (- (priority::int8)), run_at, id LIMIT 1;
EXPLAIN (COSTS OFF) SELECT id FROM concurrency."q_ret"
 WHERE state = ANY ('{done,cancelled}'::text[]) AND finished_at <= now() ORDER BY finished_at LIMIT 10;
SELECT concurrency.drop_queue('ret');

-- without privileges on the queue's table: 42501, naming what was refused
SELECT concurrency.create_queue('locked');
CREATE ROLE regress_queue_finish_outsider;
SET ROLE regress_queue_finish_outsider;
SELECT concurrency.cancel('locked', ARRAY[1]::bigint[]);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.purge('locked');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM concurrency.task_status('locked', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.complete_batch('locked', ARRAY[1]::bigint[], ARRAY[1]::bigint[]);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM concurrency.fail_batch('locked', ARRAY[1]::bigint[], ARRAY[1]::bigint[]);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.heartbeat_batch('locked', ARRAY[1]::bigint[], ARRAY[1]::bigint[]);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE regress_queue_finish_outsider;
SELECT concurrency.drop_queue('locked');

-- the batch forms have names of their own: callers of the 0.1.0 functions
-- that send untyped parameters (as pgx, asyncpg and node-postgres do) still
-- resolve to them
PREPARE untyped_complete AS SELECT concurrency.complete($1, $2, $3);
PREPARE untyped_heartbeat AS SELECT concurrency.heartbeat($1, $2, $3);
PREPARE untyped_fail AS SELECT concurrency.fail($1, $2, $3, $4);
PREPARE untyped_enqueue AS SELECT concurrency.enqueue($1, $2, $3, $4, $5);
SELECT name, parameter_types FROM pg_prepared_statements WHERE name LIKE 'untyped%' ORDER BY name;
DEALLOCATE ALL;
