-- ---------------------------------------------------------------------------
-- Task queue: the outcomes of a task's parents (docs/queue.md,
-- "Dependencies"), what the worker of a finally-child (enqueue_graph's
-- after_ends: released when each of its parents has ended, whatever its end)
-- reads. parent_results keeps its columns, the results of the parents that
-- are done.
-- ---------------------------------------------------------------------------

CREATE FUNCTION concurrency.parent_outcomes(queue text, id bigint)
    RETURNS TABLE (task_id bigint, parent_queue text, state text, result jsonb, last_error text)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_parent_outcomes';
COMMENT ON FUNCTION concurrency.parent_outcomes(text, bigint) IS
    'the state, result and last error of each parent of a task, whatever its end (for its worker: permission work on the task''s queue)';
