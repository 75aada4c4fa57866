-- ---------------------------------------------------------------------------
-- Task queue: dependencies between tasks (docs/queue.md, "Dependencies").
-- A task enqueued with parents (enqueue(…, after), enqueue_graph) waits in
-- state 'waiting', its row counting the parents not done yet
-- (parents_open), until the last of them completes; a parent that ends dead
-- or cancelled cancels its waiting descendants, but for a finally-child
-- (enqueue_graph's after_ends, the queue table's column after_ends), which
-- counts any end of a parent as its end. An edge between two tasks of
-- one queue that one enqueue_graph made is kept in their rows (the columns
-- children and parents of the queue's table); every other edge is a row of
-- concurrency.task_dependency, which the queue functions read and write as
-- its owner (src/queue/graphs/dependencies.hpp): a role needs no privilege on it.
-- An edge lives until its child has finished, and keeps its parent (done,
-- with its result) from being purged until then, whatever the retention.
-- ---------------------------------------------------------------------------

-- Queue names compare bytewise ("C"): an edge is inserted into two indexes.
CREATE TABLE IF NOT EXISTS concurrency.task_dependency (
    parent_queue text COLLATE "C" NOT NULL,
    parent_id    bigint           NOT NULL,
    child_queue  text COLLATE "C" NOT NULL,
    child_id     bigint           NOT NULL,
    CONSTRAINT task_dependency_pkey PRIMARY KEY (parent_queue, parent_id, child_queue, child_id)
);
CREATE INDEX IF NOT EXISTS task_dependency_child ON concurrency.task_dependency (child_queue, child_id);
COMMENT ON TABLE concurrency.task_dependency IS
    'edges between concurrency_ext tasks: the child waits for the parent (internal: written by the queue functions)';
SELECT pg_catalog.pg_extension_config_dump('concurrency.task_dependency', '');
-- purge, run as a queue's owner, keeps the parents that a child still needs
GRANT SELECT ON concurrency.task_dependency TO PUBLIC;

CREATE OR REPLACE FUNCTION concurrency.enqueue_graph(queue text, tasks jsonb)
    RETURNS TABLE (ref text, task_id bigint)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_enqueue_graph';
COMMENT ON FUNCTION concurrency.enqueue_graph(text, jsonb) IS
    'adds a graph of tasks all or nothing: tasks is a JSON array of {ref, payload, after, after_ends, queue, run_at, priority, concurrency_key}, after naming refs of the graph, ids of tasks of the task''s queue or {queue, id}; a task waits until its parents are done (after) or have ended, whatever their end (after_ends); returns each task''s ref and id in order';

CREATE OR REPLACE FUNCTION concurrency.parent_results(queue text, id bigint)
    RETURNS TABLE (task_id bigint, parent_queue text, result jsonb)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_parent_results';
COMMENT ON FUNCTION concurrency.parent_results(text, bigint) IS
    'the results the parents of a task completed with (for its worker: permission work on the task''s queue)';

-- ---------------------------------------------------------------------------
-- Task queue: the outcomes of a task's parents (docs/queue.md,
-- "Dependencies"), what the worker of a finally-child (enqueue_graph's
-- after_ends: released when each of its parents has ended, whatever its end)
-- reads. parent_results keeps its columns, the results of the parents that
-- are done.
-- ---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION concurrency.parent_outcomes(queue text, id bigint)
    RETURNS TABLE (task_id bigint, parent_queue text, state text, result jsonb, last_error text)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_parent_outcomes';
COMMENT ON FUNCTION concurrency.parent_outcomes(text, bigint) IS
    'the state, result and last error of each parent of a task, whatever its end (for its worker: permission work on the task''s queue)';
