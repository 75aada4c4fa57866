-- Finally-children (batches with a callback): enqueue_graph's "after_ends"
-- makes a task that waits until each of its parents has ended, whatever the
-- end (done, dead or cancelled); no parent cancels it, and parent_outcomes
-- tells its worker how each one ended. Ordinary children (after) are still
-- cancelled by a dead or cancelled parent; a finally-child's own children
-- behave as usual. Race of two ends: test/isolation/specs/
-- queue_finally.spec.

CREATE FUNCTION pg_temp.error_of(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- claims task `id` of `queue` (the only claimable one) and returns its
-- lease token
CREATE FUNCTION pg_temp.claim(queue text, id bigint) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    t record;
BEGIN
    SELECT * INTO t FROM concurrency.dequeue(queue);
    IF NOT FOUND OR t.task_id <> id THEN
        RAISE EXCEPTION 'claimed % instead of %', t.task_id, id;
    END IF;
    RETURN t.lease_token;
END $$;
-- claims task `id` and completes it
CREATE FUNCTION pg_temp.complete_one(queue text, id bigint, result jsonb DEFAULT NULL) RETURNS void
LANGUAGE sql AS $$ SELECT concurrency.complete(queue, id, pg_temp.claim(queue, id), result) $$;
-- claims task `id` and fails it (dead where max_attempts is 1)
CREATE FUNCTION pg_temp.fail_one(queue text, id bigint, error text) RETURNS void
LANGUAGE sql AS $$ SELECT concurrency.fail(queue, id, pg_temp.claim(queue, id), error) $$;

-- a queue that retains nothing, whose failed tasks die at once
SELECT concurrency.create_queue('fin', max_attempts => 1, lease => '1 hour');

-- all parents done: the callback is released by the last one, and reads
-- their results
CREATE TEMP TABLE g1 AS SELECT * FROM concurrency.enqueue_graph('fin', $$[
    {"ref": "a", "payload": {"n": "a"}},
    {"ref": "b", "payload": {"n": "b"}},
    {"ref": "callback", "payload": {"n": "callback"}, "after_ends": ["a", "b"]}
]$$);
SELECT ref, state, parents_open FROM g1, concurrency.task_status('fin', g1.task_id) ORDER BY ref;
-- the mark is the child's row's
SELECT ref, after_ends FROM g1 JOIN concurrency.q_fin q ON q.id = g1.task_id ORDER BY ref;
SELECT pg_temp.complete_one('fin', (SELECT task_id FROM g1 WHERE ref = 'a'), '{"from": "a"}');
SELECT state, parents_open FROM concurrency.task_status('fin', (SELECT task_id FROM g1 WHERE ref = 'callback'));
SELECT pg_temp.complete_one('fin', (SELECT task_id FROM g1 WHERE ref = 'b'), '{"from": "b"}');
SELECT state, parents_open FROM concurrency.task_status('fin', (SELECT task_id FROM g1 WHERE ref = 'callback'));
SELECT g1.ref, o.parent_queue, o.state, o.result, o.last_error
  FROM concurrency.parent_outcomes('fin', (SELECT task_id FROM g1 WHERE ref = 'callback')) o
  JOIN g1 ON g1.task_id = o.task_id ORDER BY g1.ref;
SELECT g1.ref, r.result FROM concurrency.parent_results('fin', (SELECT task_id FROM g1 WHERE ref = 'callback')) r
  JOIN g1 ON g1.task_id = r.task_id ORDER BY g1.ref;
SELECT pg_temp.complete_one('fin', (SELECT task_id FROM g1 WHERE ref = 'callback'));
-- the parents, kept for the callback, go with it
SELECT concurrency.purge('fin') AS purged;
SELECT count(*) AS tasks_left FROM concurrency.q_fin;

-- one parent dead: the callback is released all the same, and its ordinary
-- sibling (after) is cancelled; the callback's own child waits for it as usual
CREATE TEMP TABLE g2 AS SELECT * FROM concurrency.enqueue_graph('fin', $$[
    {"ref": "a", "payload": {"n": "a"}},
    {"ref": "b", "payload": {"n": "b"}},
    {"ref": "after_b", "after": ["b"]},
    {"ref": "callback", "after_ends": ["a", "b"]},
    {"ref": "report", "after": ["callback"]}
]$$);
SELECT pg_temp.complete_one('fin', (SELECT task_id FROM g2 WHERE ref = 'a'), '{"from": "a"}');
SELECT pg_temp.fail_one('fin', (SELECT task_id FROM g2 WHERE ref = 'b'), 'boom');
SELECT ref, state, parents_open, last_error IS NOT NULL AS has_error
  FROM g2, concurrency.task_status('fin', g2.task_id) ORDER BY ref;
SELECT g2.ref, o.state, o.result, o.last_error
  FROM concurrency.parent_outcomes('fin', (SELECT task_id FROM g2 WHERE ref = 'callback')) o
  JOIN g2 ON g2.task_id = o.task_id ORDER BY g2.ref;
-- parent_results: the done parents only
SELECT g2.ref, r.result FROM concurrency.parent_results('fin', (SELECT task_id FROM g2 WHERE ref = 'callback')) r
  JOIN g2 ON g2.task_id = r.task_id ORDER BY g2.ref;
SELECT pg_temp.complete_one('fin', (SELECT task_id FROM g2 WHERE ref = 'callback'), '{"summary": 1}');
SELECT state FROM concurrency.task_status('fin', (SELECT task_id FROM g2 WHERE ref = 'report'));
SELECT pg_temp.complete_one('fin', (SELECT task_id FROM g2 WHERE ref = 'report'));

-- one parent cancelled (on a queue that retains nothing, kept for its
-- finally-child, so that its outcome can be read), one done after it
CREATE TEMP TABLE g3 AS SELECT * FROM concurrency.enqueue_graph('fin', $$[
    {"ref": "a", "payload": {"n": "a"}},
    {"ref": "b", "payload": {"n": "b"}},
    {"ref": "callback", "after_ends": ["a", "b"]}
]$$);
SELECT concurrency.cancel('fin', ARRAY(SELECT task_id FROM g3 WHERE ref = 'a')) AS cancelled;
SELECT state, parents_open FROM concurrency.task_status('fin', (SELECT task_id FROM g3 WHERE ref = 'callback'));
SELECT pg_temp.complete_one('fin', (SELECT task_id FROM g3 WHERE ref = 'b'), '{"from": "b"}');
SELECT g3.ref, o.state, o.result FROM concurrency.parent_outcomes('fin', (SELECT task_id FROM g3 WHERE ref = 'callback')) o
  JOIN g3 ON g3.task_id = o.task_id ORDER BY g3.ref;
SELECT pg_temp.complete_one('fin', (SELECT task_id FROM g3 WHERE ref = 'callback'));
SELECT concurrency.purge('fin') AS purged;
SELECT state, count(*) FROM concurrency.q_fin GROUP BY state ORDER BY state;

-- a cancelled parent cancels its ordinary children, whose own finally-child
-- counts their cancellation as their end: the cancellation stops there
CREATE TEMP TABLE g4 AS SELECT * FROM concurrency.enqueue_graph('fin', $$[
    {"ref": "root"},
    {"ref": "x", "after": ["root"]},
    {"ref": "y", "after": ["root"]},
    {"ref": "callback", "after_ends": ["x", "y"]},
    {"ref": "after_callback", "after": ["callback"]}
]$$);
SELECT concurrency.cancel('fin', ARRAY(SELECT task_id FROM g4 WHERE ref = 'root')) AS cancelled;
SELECT ref, state, parents_open FROM g4, concurrency.task_status('fin', g4.task_id) ORDER BY ref;
SELECT g4.ref, o.state, o.last_error FROM concurrency.parent_outcomes('fin', (SELECT task_id FROM g4 WHERE ref = 'callback')) o
  JOIN g4 ON g4.task_id = o.task_id ORDER BY g4.ref;
SELECT pg_temp.complete_one('fin', (SELECT task_id FROM g4 WHERE ref = 'callback'));
SELECT state FROM concurrency.task_status('fin', (SELECT task_id FROM g4 WHERE ref = 'after_callback'));
SELECT pg_temp.complete_one('fin', (SELECT task_id FROM g4 WHERE ref = 'after_callback'));

-- parents enqueued before (ids, and tasks of another queue), one of them
-- dead already, one cancelled in the graph itself: they count as ended at
-- once; the callback waits for the one still open
SELECT concurrency.create_queue('fin_other', retain => '1 hour');
SELECT concurrency.enqueue('fin', '{"n": "dead"}') AS dead_id \gset
SELECT pg_temp.fail_one('fin', :dead_id, 'gone');
SELECT concurrency.enqueue('fin_other', '{"n": "open"}') AS open_id \gset
CREATE TEMP TABLE g5 AS SELECT * FROM concurrency.enqueue_graph('fin', format($$[
    {"ref": "doomed", "after": [%s]},
    {"ref": "callback", "after_ends": [%s, {"queue": "fin_other", "id": %s}, "doomed"]}
]$$, :dead_id, :dead_id, :open_id)::jsonb);
SELECT ref, state, parents_open FROM g5, concurrency.task_status('fin', g5.task_id) ORDER BY ref;
SELECT pg_temp.complete_one('fin_other', :open_id, '{"from": "other"}');
SELECT state, parents_open FROM concurrency.task_status('fin', (SELECT task_id FROM g5 WHERE ref = 'callback'));
SELECT o.task_id = :dead_id AS is_dead_one, o.task_id = :open_id AS is_open_one, o.parent_queue, o.state, o.result, o.last_error
  FROM concurrency.parent_outcomes('fin', (SELECT task_id FROM g5 WHERE ref = 'callback')) o
 ORDER BY o.parent_queue, o.task_id;
SELECT pg_temp.complete_one('fin', (SELECT task_id FROM g5 WHERE ref = 'callback'));
-- the same with all its parents in its own queue (as a distributed queue's
-- graph has them): the dead one and the doomed one count at once, the open
-- one is waited for
SELECT concurrency.enqueue('fin', '{"n": "open here"}') AS open_here \gset
CREATE TEMP TABLE g5b AS SELECT * FROM concurrency.enqueue_graph('fin', format($$[
    {"ref": "doomed", "after": [%s]},
    {"ref": "callback", "after_ends": [%s, %s, "doomed"]}
]$$, :dead_id, :dead_id, :open_here)::jsonb);
SELECT ref, state, parents_open FROM g5b, concurrency.task_status('fin', g5b.task_id) ORDER BY ref;
SELECT pg_temp.complete_one('fin', :open_here, '{"from": "here"}');
SELECT state, parents_open FROM concurrency.task_status('fin', (SELECT task_id FROM g5b WHERE ref = 'callback'));
SELECT o.task_id = :dead_id AS is_dead_one, o.task_id = :open_here AS is_open_one, o.state, o.result, o.last_error
  FROM concurrency.parent_outcomes('fin', (SELECT task_id FROM g5b WHERE ref = 'callback')) o
 ORDER BY o.task_id;
SELECT pg_temp.complete_one('fin', (SELECT task_id FROM g5b WHERE ref = 'callback'));
-- all parents ended already: the callback is ready at once
SELECT state, parents_open FROM concurrency.enqueue_graph('fin', format('[{"after_ends": [%s]}]', :dead_id)::jsonb) g,
       concurrency.task_status('fin', g.task_id);
SELECT concurrency.cancel('fin', ARRAY(SELECT id FROM concurrency.q_fin WHERE state = 'ready')) AS cancelled;

-- retry_dead of a dead parent whose end a finally-child has counted: the
-- parent's next end does not count again (b, not due, stays open meanwhile)
CREATE TEMP TABLE g6 AS SELECT * FROM concurrency.enqueue_graph('fin', $$[
    {"ref": "a"}, {"ref": "b", "run_at": "2100-01-01"}, {"ref": "callback", "after_ends": ["a", "b"]}
]$$);
SELECT pg_temp.fail_one('fin', (SELECT task_id FROM g6 WHERE ref = 'a'), 'first try');
SELECT concurrency.retry_dead('fin', ARRAY(SELECT task_id FROM g6 WHERE ref = 'a')) AS revived;
SELECT pg_temp.complete_one('fin', (SELECT task_id FROM g6 WHERE ref = 'a'));
SELECT state, parents_open FROM concurrency.task_status('fin', (SELECT task_id FROM g6 WHERE ref = 'callback'));
SELECT concurrency.cancel('fin', ARRAY(SELECT task_id FROM g6 WHERE ref = 'b')) AS cancelled;
SELECT state, parents_open FROM concurrency.task_status('fin', (SELECT task_id FROM g6 WHERE ref = 'callback'));
SELECT pg_temp.complete_one('fin', (SELECT task_id FROM g6 WHERE ref = 'callback'));

-- bad input: 22023 naming the element, nothing enqueued
SELECT count(*) AS before FROM concurrency.q_fin \gset
SELECT pg_temp.error_of($$SELECT * FROM concurrency.enqueue_graph('fin', '[{"ref": "a"}, {"ref": "b", "after": ["a"], "after_ends": ["a"]}]')$$);
SELECT pg_temp.error_of($$SELECT * FROM concurrency.enqueue_graph('fin', '[{"ref": "a", "after_ends": "b"}]')$$);
SELECT pg_temp.error_of($$SELECT * FROM concurrency.enqueue_graph('fin', '[{"ref": "a", "after_ends": ["nobody"]}]')$$);
SELECT pg_temp.error_of($$SELECT * FROM concurrency.enqueue_graph('fin', '[{"ref": "a", "after_ends": ["a"]}]')$$);
SELECT pg_temp.error_of($$SELECT * FROM concurrency.enqueue_graph('fin', '[{"ref": "a", "after_ends": [true]}]')$$);
SELECT pg_temp.error_of($$SELECT * FROM concurrency.enqueue_graph('fin', '[{"ref": "a", "after_ends": [{"id": "1x"}]}]')$$);
SELECT pg_temp.error_of($$SELECT * FROM concurrency.enqueue_graph('fin', '[{"ref": "a", "after_ends": [999999999]}]')$$);
SELECT pg_temp.error_of($$SELECT * FROM concurrency.enqueue_graph('fin', '[{"ref": "a", "after_ends": ["b"]}, {"ref": "b", "after_ends": ["a"]}]')$$);
SELECT pg_temp.error_of($$SELECT * FROM concurrency.enqueue_graph('fin', '[{"ref": "a", "after_ends": [{"queue": "fin"}]}]')$$);
-- an empty after_ends is no parent; after_ends: null is none
SELECT state, parents_open FROM concurrency.enqueue_graph('fin', '[{"after": [], "after_ends": []}, {"after_ends": null}]') g,
       concurrency.task_status('fin', g.task_id);
SELECT count(*) - :before AS added FROM concurrency.q_fin;
-- 22004: a NULL argument
SELECT pg_temp.error_of($$SELECT * FROM concurrency.parent_outcomes('fin', NULL)$$);
SELECT pg_temp.error_of($$SELECT * FROM concurrency.parent_outcomes(NULL, 1)$$);
-- a task without parents has no outcomes; an unknown queue is 42704
SELECT count(*) FROM concurrency.parent_outcomes('fin', :dead_id);
SELECT pg_temp.error_of($$SELECT * FROM concurrency.parent_outcomes('no_such_queue', 1)$$);

-- permissions: parent_outcomes needs work on the child's queue
CREATE ROLE fin_reader;
SELECT concurrency.grant_queue('fin', 'fin_reader', ARRAY['read']);
SET ROLE fin_reader;
SELECT pg_temp.error_of($$SELECT * FROM concurrency.parent_outcomes('fin', 1)$$);
RESET ROLE;

SELECT concurrency.drop_queue('fin');
SELECT concurrency.drop_queue('fin_other');
DROP ROLE fin_reader;
SELECT count(*) AS edges_left FROM concurrency.task_dependency;
