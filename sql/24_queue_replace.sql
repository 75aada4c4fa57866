-- enqueue(…, on_conflict): what a second enqueue of a dedupe_key does to the
-- task that holds it. 'ignore' (the default) returns the holder's id and
-- changes nothing; 'replace' gives a holder that has not started (ready,
-- scheduled, or blocked by its key) the new payload, run_at and priority
-- and returns its id (debounce); a leased or finished holder is left as it
-- is. On a distributed queue: test/citus/test_queue.py.

CREATE FUNCTION pg_temp.error_of(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

SELECT concurrency.create_queue('rq', lease => '1 hour', retain => '1 hour');
SELECT concurrency.enqueue('rq', '{"v": 1}', dedupe_key => 'k') AS first \gset

-- ignore (the default, and when asked for): the holder as it was
SELECT concurrency.enqueue('rq', '{"v": 2}', priority => 9, dedupe_key => 'k') = :first AS same_task;
SELECT concurrency.enqueue('rq', '{"v": 2}', dedupe_key => 'k', on_conflict => 'ignore') = :first AS same_task;
SELECT state, priority, payload FROM concurrency.q_rq WHERE id = :first;

-- replace: the same task, with the new payload and priority
SELECT concurrency.enqueue('rq', '{"v": 3}', priority => 5, dedupe_key => 'k', on_conflict => 'replace') = :first
       AS same_task;
SELECT state, priority, payload FROM concurrency.q_rq WHERE id = :first;
SELECT count(*) AS tasks FROM concurrency.q_rq;

-- a later run_at makes it scheduled, none makes it ready again
SELECT concurrency.enqueue('rq', '{"v": 4}', run_at => now() + interval '1 hour', dedupe_key => 'k',
                           on_conflict => 'replace') = :first AS same_task;
SELECT state, payload, run_at > now() + interval '59 minutes' AS later FROM concurrency.q_rq WHERE id = :first;
SELECT count(*) AS claimed FROM concurrency.dequeue('rq');
SELECT concurrency.enqueue('rq', '{"v": 5}', dedupe_key => 'k', on_conflict => 'replace') = :first AS same_task;
SELECT state, payload FROM concurrency.q_rq WHERE id = :first;

-- a leased holder is left as it is: its worker runs what it claimed
CREATE TEMP TABLE held AS SELECT task_id, lease_token, payload FROM concurrency.dequeue('rq');
SELECT task_id = :first AS holder_claimed, payload FROM held;
SELECT concurrency.enqueue('rq', '{"v": 6}', priority => 1, dedupe_key => 'k', on_conflict => 'replace') = :first
       AS same_task;
SELECT state, priority, payload FROM concurrency.q_rq WHERE id = :first;

-- so is a finished one that the queue retains (it still holds the key)
SELECT concurrency.complete('rq', task_id, lease_token) FROM held;
SELECT concurrency.enqueue('rq', '{"v": 7}', dedupe_key => 'k', on_conflict => 'replace') = :first AS same_task;
SELECT state, payload FROM concurrency.q_rq WHERE id = :first;

-- without a dedupe_key there is nothing to replace: a new task
SELECT concurrency.enqueue('rq', '{"v": 8}', on_conflict => 'replace') <> :first AS new_task;

-- a task held back by its key stays blocked, with the new payload
SELECT concurrency.create_queue('rk', key_limit => 1);
SELECT concurrency.enqueue('rk', '{"n": 1}', concurrency_key => 'c') > 0 AS enqueued;
SELECT concurrency.enqueue('rk', '{"n": 2}', dedupe_key => 'd', concurrency_key => 'c') AS blocked \gset
SELECT concurrency.enqueue('rk', '{"n": 3}', dedupe_key => 'd', concurrency_key => 'c', on_conflict => 'replace')
       = :blocked AS same_task;
SELECT state, payload FROM concurrency.q_rk WHERE id = :blocked;

-- bad values: 22023 and 22004, nothing enqueued or changed
SELECT pg_temp.error_of($$SELECT concurrency.enqueue('rq', '{"v": 9}', dedupe_key => 'k', on_conflict => 'merge')$$);
SELECT pg_temp.error_of($$SELECT concurrency.enqueue('rq', '{"v": 9}', dedupe_key => 'k', on_conflict => NULL)$$);
SELECT pg_temp.error_of($$SELECT concurrency.enqueue('rq', '{"v": 9}', on_conflict => '')$$);
SELECT count(*) AS tasks, count(*) FILTER (WHERE payload = '{"v": 9}') AS nines FROM concurrency.q_rq;

SELECT concurrency.drop_queue('rq'), concurrency.drop_queue('rk');
