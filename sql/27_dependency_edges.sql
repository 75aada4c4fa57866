-- The edges between tasks of a queue of one server, in concurrency.task_dependency
-- (a distributed queue keeps them in its rows, so the Citus suite leaves this file out).
-- a parent's complete reads its children's edges, and a child's end drops
-- its own, one edge each, also while concurrency.task_dependency has no
-- statistics (a generic plan could then take the queue's name alone as the
-- index key, and read all 200 edges of the queue): the entries read, of the
-- table's scans and its indexes', in this transaction, are a handful
SELECT concurrency.create_queue('manyedges', lease => '1 hour');
SELECT count(concurrency.enqueue('manyedges', '{}', run_at => now() + interval '1 day',
                                 after => ARRAY[concurrency.enqueue('manyedges', '{}')]))
  FROM generate_series(1, 200);
DELETE FROM pg_statistic WHERE starelid = 'concurrency.task_dependency'::regclass;
\c
CREATE FUNCTION pg_temp.edges_read() RETURNS bigint LANGUAGE sql AS $$
  SELECT sum(pg_stat_get_xact_tuples_returned(r))::bigint
    FROM unnest(ARRAY['concurrency.task_dependency'::regclass, 'concurrency.task_dependency_pkey'::regclass,
                      'concurrency.task_dependency_child'::regclass]) AS r $$;
BEGIN;
SELECT pg_temp.edges_read() AS read \gset
SELECT task_id, lease_token FROM concurrency.dequeue('manyedges') \gset
SELECT concurrency.complete('manyedges', :task_id, :lease_token);
SELECT pg_temp.edges_read() - :read < 10 AS not_every_edge;
SELECT pg_temp.edges_read() AS read \gset
SELECT concurrency.cancel('manyedges', ARRAY[:task_id + 1]::bigint[]);
SELECT pg_temp.edges_read() - :read < 10 AS not_every_edge;
COMMIT;
SELECT count(*) AS edges FROM concurrency.task_dependency WHERE parent_queue = 'manyedges';
SELECT concurrency.drop_queue('manyedges');
