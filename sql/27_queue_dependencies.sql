-- Dependencies: enqueue(…, after) and enqueue_graph make tasks that wait
-- ('waiting', parents_open) until every parent is done; a parent that ends
-- dead or cancelled cancels its waiting descendants; parent_results gives a
-- child's worker its parents' results, which are kept until the child has
-- finished whatever the retention. Races: test/isolation/specs/
-- queue_dependencies.spec; a graph drained by killed workers:
-- test/t/027_queue_graph.pl.

CREATE FUNCTION pg_temp.error_of(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- claims one task of `queue` and completes it with `result`; returns its id
CREATE FUNCTION pg_temp.run_one(queue text, result jsonb DEFAULT NULL) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    t record;
BEGIN
    SELECT * INTO t FROM concurrency.dequeue(queue);
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    PERFORM concurrency.complete(queue, t.task_id, t.lease_token, result);
    RETURN t.task_id;
END $$;

-- a queue that retains nothing: parents are kept for their children anyway
SELECT concurrency.create_queue('dep', lease => '1 hour');
SELECT concurrency.enqueue('dep', '{"step": "a"}') AS a \gset
SELECT concurrency.enqueue('dep', '{"step": "b"}') AS b \gset
SELECT concurrency.enqueue('dep', '{"step": "c"}', after => ARRAY[:a, :b, :a]::bigint[]) AS c \gset
SELECT state, parents_open FROM concurrency.task_status('dep', :c);
SELECT ready, waiting FROM concurrency.queue_stats WHERE queue = 'dep';
SELECT parent_id, child_id = :c AS child FROM concurrency.task_dependency
 WHERE child_queue = 'dep' ORDER BY parent_id;

-- the parents are claimed (in order), the child only after both are done
SELECT pg_temp.run_one('dep', '{"from": "a"}') = :a AS ran_a;
SELECT state, parents_open FROM concurrency.task_status('dep', :c);
SELECT state, result FROM concurrency.task_status('dep', :a);
SELECT pg_temp.run_one('dep', '{"from": "b"}') = :b AS ran_b;
SELECT state, parents_open FROM concurrency.task_status('dep', :c);

-- the child's worker reads its parents' results
SELECT task_id = :a AS is_a, parent_queue, result FROM concurrency.parent_results('dep', :c) ORDER BY task_id;
-- the parents stay (done) while the child runs, purge or not
SELECT concurrency.purge('dep') AS purged;
SELECT count(*) AS parents_kept FROM concurrency.q_dep WHERE id IN (:a, :b) AND state = 'done';
SELECT pg_temp.run_one('dep') = :c AS ran_child;
SELECT count(*) AS edges_left FROM concurrency.task_dependency WHERE child_queue = 'dep';
SELECT concurrency.purge('dep') AS purged;
SELECT count(*) AS tasks_left FROM concurrency.q_dep;

-- a parent done already counts as done; a missing one is an error
SELECT concurrency.create_queue('kept', retain => '1 hour');
SELECT concurrency.enqueue('kept', '{}') AS p \gset
SELECT pg_temp.run_one('kept', '{"n": 1}') = :p AS ran;
SELECT concurrency.enqueue('kept', '{}', after => ARRAY[:p]::bigint[]) AS q \gset
SELECT state, parents_open FROM concurrency.task_status('kept', :q);
SELECT result FROM concurrency.parent_results('kept', :q);
SELECT pg_temp.error_of($$SELECT concurrency.enqueue('kept', '{}', after => ARRAY[424242]::bigint[])$$);
SELECT pg_temp.error_of($$SELECT concurrency.enqueue('kept', '{}', after => ARRAY[NULL]::bigint[])$$);
SELECT count(*) AS tasks FROM concurrency.q_kept;
-- an empty list is no parent
SELECT state FROM concurrency.task_status('kept', concurrency.enqueue('kept', '{}', after => '{}'));

-- a dedupe_key's holder keeps its own parents
SELECT concurrency.enqueue('kept', '{}', dedupe_key => 'd') AS holder \gset
SELECT concurrency.enqueue('kept', '{}', dedupe_key => 'd', after => ARRAY[:q]::bigint[]) = :holder AS same;
SELECT state, parents_open FROM concurrency.task_status('kept', :holder);

-- enqueue_batch: one parent list for the whole batch (a holder of a dedupe
-- key keeps its own parents); on a queue with a key_limit as well
SELECT concurrency.create_queue('bq', retain => '1 hour', key_limit => 5);
SELECT concurrency.enqueue('bq', '{}') AS bp \gset
SELECT concurrency.enqueue('bq', '{}', dedupe_key => 'held') AS bheld \gset
SELECT b.id = :bheld AS holder, s.state, s.parents_open
  FROM concurrency.enqueue_batch('bq', ARRAY['{"i": 1}', '{"i": 2}', '{"i": 3}']::jsonb[],
                                 dedupe_keys => ARRAY[NULL, NULL, 'held'],
                                 after => ARRAY[:bp, :bheld]::bigint[]) WITH ORDINALITY AS b(id, n),
       concurrency.task_status('bq', b.id) AS s ORDER BY b.n;
SELECT s.state, s.parents_open
  FROM concurrency.enqueue_batch('bq', ARRAY['{"i": 4}', '{"i": 5}']::jsonb[], concurrency_keys => ARRAY['k', 'k'],
                                 after => ARRAY[:bp]::bigint[]) AS b(id),
       concurrency.task_status('bq', b.id) AS s ORDER BY b.id;
SELECT pg_temp.run_one('bq') = :bp AS ran_parent, pg_temp.run_one('bq') = :bheld AS ran_holder;
SELECT state, count(*) FROM concurrency.q_bq GROUP BY state ORDER BY state;
SELECT pg_temp.error_of($$SELECT concurrency.enqueue_batch('bq', ARRAY['{}']::jsonb[], after => ARRAY[987654]::bigint[])$$);

-- replace on a waiting holder: the new payload, still waiting
SELECT concurrency.enqueue('kept', '{"v": 1}', dedupe_key => 'w', after => ARRAY[:holder]::bigint[]) AS whold \gset
SELECT concurrency.enqueue('kept', '{"v": 2}', dedupe_key => 'w', on_conflict => 'replace') = :whold AS same;
SELECT s.state, s.parents_open, q.payload FROM concurrency.task_status('kept', :whold) AS s JOIN concurrency.q_kept AS q ON q.id = :whold;

-- a dead parent cancels its waiting descendants, through generations and
-- queues, with last_error naming it; cancelled tasks stay cancelled when the
-- parent is retried
SELECT concurrency.create_queue('once', max_attempts => 1, retain => '1 hour');
SELECT concurrency.create_queue('other', retain => '1 hour');
SELECT ref, task_id FROM concurrency.enqueue_graph('once', $$[
    {"ref": "root"},
    {"ref": "mid", "after": ["root"]},
    {"ref": "leaf", "after": ["mid"], "queue": "other"},
    {"ref": "free"}
]$$) ORDER BY ref;
SELECT task_id AS root, lease_token AS root_lease FROM concurrency.dequeue('once', 1) \gset
SELECT concurrency.fail('once', :root, :root_lease, 'boom');
SELECT t.ref, s.state, s.last_error
  FROM (VALUES ('once', 2, 'mid'), ('other', 1, 'leaf'), ('once', 3, 'free')) AS t(queue, id, ref),
       concurrency.task_status(t.queue, t.id) AS s
 ORDER BY t.ref;
SELECT concurrency.retry_dead('once', ARRAY[:root]::bigint[]) AS revived;
SELECT state FROM concurrency.task_status('once', 2);
SELECT count(*) AS edges FROM concurrency.task_dependency WHERE parent_queue = 'once' OR child_queue = 'once';
-- a dead parent named at enqueue cancels the child at once
SELECT concurrency.enqueue('once', '{}') AS doomed_parent \gset
SELECT task_id AS dp, lease_token AS dl FROM concurrency.dequeue('once', 1) \gset
SELECT concurrency.fail('once', :dp, :dl, 'no');
SELECT s.state, s.last_error
  FROM concurrency.task_status('once', concurrency.enqueue('once', '{}', after => ARRAY[:dp]::bigint[])) AS s;

-- a lease that expires for good (the wake-up step of dequeue) does the same
SELECT concurrency.create_queue('expiring', max_attempts => 1, lease => '1 hour', retain => '1 hour');
SELECT ref, task_id FROM concurrency.enqueue_graph('expiring', '[{"ref": "p"}, {"ref": "c", "after": ["p"]}]');
SELECT count(*) AS claimed FROM concurrency.dequeue('expiring', 1);
UPDATE concurrency.q_expiring SET lease_expires_at = now() - interval '1 second' WHERE state = 'leased';
SELECT count(*) AS claimed FROM concurrency.dequeue('expiring', 1);
SELECT id, state, last_error FROM concurrency.q_expiring ORDER BY id;

-- cancel: of a parent, its waiting descendants too; of a waiting task, that
-- task alone (its parents run on)
SELECT concurrency.create_queue('cq', retain => '1 hour');
CREATE TEMP TABLE cq_graph AS SELECT ref, task_id FROM concurrency.enqueue_graph('cq', $$[
    {"ref": "p"}, {"ref": "c1", "after": ["p"]}, {"ref": "c2", "after": ["c1"]},
    {"ref": "q"}, {"ref": "d", "after": ["q"]}
]$$);
SELECT ref, task_id FROM cq_graph ORDER BY task_id;
SELECT concurrency.cancel('cq', ARRAY(SELECT task_id FROM cq_graph WHERE ref = 'p')) AS cancelled;
SELECT concurrency.cancel('cq', ARRAY(SELECT task_id FROM cq_graph WHERE ref = 'd')) AS cancelled;
SELECT id, state, last_error FROM concurrency.q_cq ORDER BY id;
SELECT pg_temp.run_one('cq') AS ran;
SELECT count(*) AS edges FROM concurrency.task_dependency WHERE child_queue = 'cq';

-- enqueue_graph: all or nothing, in order, refs and ids, several queues
SELECT concurrency.create_queue('g1', retain => '1 hour');
SELECT concurrency.create_queue('g2', retain => '1 hour');
SELECT concurrency.enqueue('g2', '{"old": true}') AS old \gset
SELECT ref, task_id FROM concurrency.enqueue_graph('g1', format($$[
    {"ref": "fetch", "payload": {"url": "x"}, "priority": 5},
    {"ref": "parse", "after": ["fetch"], "queue": "g2"},
    {"ref": "store", "after": ["parse", {"queue": "g2", "id": %s}], "run_at": "2000-01-01T00:00:00Z"},
    {"after": ["fetch"], "concurrency_key": "k"}
]$$, :old)::jsonb);
SELECT id, state, parents_open, has_children, priority, payload, concurrency_key FROM concurrency.q_g1 ORDER BY id;
SELECT id, state, parents_open, has_children FROM concurrency.q_g2 ORDER BY id;
SELECT parent_queue, parent_id, child_queue, child_id FROM concurrency.task_dependency
 WHERE child_queue IN ('g1', 'g2') ORDER BY 1, 2, 3, 4;
SELECT pg_temp.run_one('g1', '"fetched"') AS ran;
-- a parent in the child's row (same queue, one graph) and one in task_dependency
SELECT task_id, parent_queue, result FROM concurrency.parent_results('g1', 3);
SELECT task_id, parent_queue, result FROM concurrency.parent_results('g2', 2);
SELECT pg_temp.run_one('g2', '"parsed"') AS ran;
SELECT pg_temp.run_one('g2', '"old done"') AS ran;
SELECT pg_temp.run_one('g1') AS ran, pg_temp.run_one('g1') AS ran_too;
SELECT id, state FROM concurrency.q_g1 ORDER BY id;
SELECT * FROM concurrency.enqueue_graph('g1', '[]');
-- a parent named twice is one parent; a JSON null payload stays null, a
-- missing one is {}
SELECT concurrency.enqueue('g2', '{}') AS twice \gset
SELECT task_id AS twice_child FROM concurrency.enqueue_graph('g2',
    format('[{"after": [%s, {"id": %s}, {"queue": "g2", "id": %s}], "payload": null}]', :twice, :twice, :twice)::jsonb) \gset
SELECT state, parents_open FROM concurrency.task_status('g2', :twice_child);
SELECT pg_temp.run_one('g2') = :twice AS ran;
SELECT s.state, q.payload FROM concurrency.task_status('g2', :twice_child) AS s JOIN concurrency.q_g2 AS q ON q.id = :twice_child;

-- bad graphs: 22023 (42704 for a queue that does not exist), nothing enqueued
SELECT count(*) AS before FROM concurrency.q_g1 \gset
SELECT pg_temp.error_of(format('SELECT * FROM concurrency.enqueue_graph(%L, %L)', 'g1', g))
  FROM (VALUES ('{"ref": "a"}'),
               ('[1]'),
               ('[{"ref": "a", "aftr": ["b"]}]'),
               ('[{"ref": "a", "after": "b"}]'),
               ('[{"ref": "a", "after": ["b"]}, {"ref": "b", "after": ["a"]}]'),
               ('[{"ref": "a", "after": ["a"]}]'),
               ('[{"ref": "a"}, {"ref": "a"}]'),
               ('[{"ref": "a", "after": ["nope"]}]'),
               ('[{"ref": "a", "after": [true]}]'),
               ('[{"ref": "a", "after": [1.5]}]'),
               ('[{"ref": "a", "after": [{"queue": "g2"}]}]'),
               ('[{"ref": "a", "after": [{"queue": "g2", "id": 1, "x": 1}]}]'),
               ('[{"ref": "a"}, {"ref": "b", "after": ["a", 999999]}]'),
               ('[{"ref": "a", "queue": "no such queue"}]'),
               ('[{"ref": "a", "queue": "nosuch"}]'),
               ('[{"ref": "a", "run_at": "infinity"}]'),
               ('[{"ref": "a", "priority": "high"}]'),
               ('[{"ref": {"x": 1}}]'),
               ('[{"ref": "a", "after": [{"queue": "g2", "id": "x"}]}]'),
               ('[{"ref": "a", "run_at": "tomorrow-ish"}]'),
               ('[{"ref": "a", "queue": ["g1"]}]')) AS t(g);
SELECT count(*) = :before AS nothing_added FROM concurrency.q_g1;
SELECT pg_temp.error_of($$SELECT * FROM concurrency.enqueue_graph('g1', NULL)$$);

-- key_limit: a released child with a key waits behind its key
SELECT concurrency.create_queue('kl', key_limit => 1, lease => '1 hour', retain => '1 hour');
SELECT concurrency.enqueue('kl', '{}', concurrency_key => 'k') AS busy \gset
SELECT concurrency.enqueue('kl', '{}') AS parent \gset
SELECT concurrency.enqueue('kl', '{}', concurrency_key => 'k', after => ARRAY[:parent]::bigint[]) AS child \gset
SELECT task_id AS t1, lease_token AS l1 FROM concurrency.dequeue('kl', 1) \gset
SELECT task_id AS t2, lease_token AS l2 FROM concurrency.dequeue('kl', 1) \gset
SELECT concurrency.complete('kl', :parent, CASE WHEN :t1 = :parent THEN :l1 ELSE :l2 END);
SELECT state FROM concurrency.task_status('kl', :child);
SELECT concurrency.complete('kl', :busy, CASE WHEN :t1 = :busy THEN :l1 ELSE :l2 END);
SELECT state FROM concurrency.task_status('kl', :child);

-- permissions: enqueue on the task's queue, and read (or enqueue) on a
-- parent's; parent_results needs work on the child's queue
CREATE ROLE dep_producer;
SELECT concurrency.grant_queue('g1', 'dep_producer', ARRAY['enqueue']);
SET ROLE dep_producer;
SELECT pg_temp.error_of(format('SELECT * FROM concurrency.enqueue_graph(%L, %L)', 'g1',
                               '[{"after": [{"queue": "g2", "id": 1}]}]'));
SELECT pg_temp.error_of(format('SELECT * FROM concurrency.enqueue_graph(%L, %L)', 'g1',
                               '[{"queue": "g2"}]'));
SELECT pg_temp.error_of($$SELECT * FROM concurrency.parent_results('g1', 1)$$);
SELECT pg_temp.error_of($$SELECT * FROM concurrency.task_dependency$$);
SELECT pg_temp.error_of($$DELETE FROM concurrency.task_dependency$$);
RESET ROLE;
SELECT concurrency.grant_queue('g2', 'dep_producer', ARRAY['read']);
SET ROLE dep_producer;
SELECT count(*) AS enqueued FROM concurrency.enqueue_graph('g1', '[{"after": [{"queue": "g2", "id": 1}]}]');
RESET ROLE;

-- completing a parent with many children finds them through indexes: no
-- sequential scan of the queues' tables or of the edges (1,000 children in
-- the parent's queue, their edges in the rows; 1,000 in another queue,
-- their edges in task_dependency)
SELECT concurrency.create_queue('fan', lease => '1 hour');
SELECT concurrency.create_queue('fan_kids', lease => '1 hour');
SELECT count(*) AS enqueued FROM concurrency.enqueue_graph('fan',
    (SELECT jsonb_agg(CASE WHEN i = 0 THEN '{"ref": "p"}'::jsonb
                           WHEN i <= 1000 THEN '{"after": ["p"]}'::jsonb
                           ELSE '{"after": ["p"], "queue": "fan_kids"}'::jsonb END)
       FROM generate_series(0, 2000) AS i));
SELECT count(*) AS edge_rows FROM concurrency.task_dependency WHERE parent_queue = 'fan';
ANALYZE concurrency.q_fan, concurrency.q_fan_kids, concurrency.task_dependency;
SELECT pg_stat_force_next_flush();
CREATE TEMP TABLE scans_before AS
    SELECT relname, seq_scan, idx_scan FROM pg_stat_user_tables
     WHERE relname IN ('q_fan', 'q_fan_kids', 'task_dependency');
SELECT pg_temp.run_one('fan') AS ran;
SELECT pg_stat_force_next_flush();
SELECT pg_stat_clear_snapshot();
SELECT s.relname, s.seq_scan = b.seq_scan AS no_sequential_scan, s.idx_scan > b.idx_scan AS index_scans
  FROM pg_stat_user_tables s JOIN scans_before b USING (relname) ORDER BY s.relname;
SELECT queue, ready, waiting FROM concurrency.queue_stats WHERE queue IN ('fan', 'fan_kids') ORDER BY queue;

-- a queue that retains nothing keeps a parent whose edges are in the rows
-- until its child has finished
SELECT concurrency.create_queue('rowkept', lease => '1 hour');
CREATE TEMP TABLE rowkept_graph AS
  SELECT ref, task_id FROM concurrency.enqueue_graph('rowkept', '[{"ref": "p"}, {"ref": "c", "after": ["p"]}]');
SELECT ref, task_id FROM rowkept_graph;
SELECT pg_temp.run_one('rowkept', '{"p": 1}') AS ran;
SELECT concurrency.purge('rowkept') AS purged;
SELECT id, state, children, parents FROM concurrency.q_rowkept ORDER BY id;
SELECT result FROM concurrency.parent_results('rowkept', (SELECT task_id FROM rowkept_graph WHERE ref = 'c'));
SELECT pg_temp.run_one('rowkept') AS ran;
SELECT concurrency.purge('rowkept') AS purged;
SELECT count(*) AS tasks_left FROM concurrency.q_rowkept;
SELECT concurrency.drop_queue('rowkept');

-- drop_queue: the waiting children of its tasks in other queues are
-- cancelled, and no edge from or to its tasks is left
SELECT concurrency.create_queue('pa');
SELECT concurrency.create_queue('ch', retain => '1 hour');
SELECT ref, task_id FROM concurrency.enqueue_graph('pa', '[{"ref": "p"}, {"ref": "c", "after": ["p"], "queue": "ch"}]');
SELECT concurrency.drop_queue('pa');
SELECT state, last_error FROM concurrency.task_status('ch', 1);
SELECT count(*) AS edges FROM concurrency.task_dependency WHERE 'pa' IN (parent_queue, child_queue);
SELECT concurrency.drop_queue('ch');

SELECT concurrency.drop_queue(q) FROM unnest('{bq,dep,kept,once,other,expiring,cq,g1,g2,kl,fan,fan_kids}'::text[]) AS q;
DROP ROLE dep_producer;

