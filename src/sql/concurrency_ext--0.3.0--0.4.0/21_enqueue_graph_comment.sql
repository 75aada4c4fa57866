-- ---------------------------------------------------------------------------
-- Task queue 0.3.0 -> 0.4.0: enqueue_graph's comment names its new field
-- after_ends (finally-children), as in src/sql/27_queue_dependencies.sql.
-- ---------------------------------------------------------------------------

COMMENT ON FUNCTION concurrency.enqueue_graph(text, jsonb) IS
    'adds a graph of tasks all or nothing: tasks is a JSON array of {ref, payload, after, after_ends, queue, run_at, priority, concurrency_key}, after naming refs of the graph, ids of tasks of the task''s queue or {queue, id}; a task waits until its parents are done (after) or have ended, whatever their end (after_ends); returns each task''s ref and id in order';
