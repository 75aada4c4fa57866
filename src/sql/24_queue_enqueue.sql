-- ---------------------------------------------------------------------------
-- Task queue: enqueue and enqueue_batch (docs/queue.md, "Deduplication"). With a dedupe_key
-- whose holder exists, on_conflict says what happens: 'ignore' (the default)
-- returns the holder's id and changes nothing; 'replace' gives the holder
-- the new payload, run_at and priority if it has not started (ready,
-- scheduled, blocked by its key or waiting for its parents), and returns its
-- id (a debounce). With after, a new task waits for those tasks
-- (27_queue_dependencies.sql). Like the other task functions, SECURITY
-- INVOKER without SET search_path.
-- ---------------------------------------------------------------------------

CREATE FUNCTION concurrency.enqueue(queue text, payload jsonb DEFAULT '{}', run_at timestamptz DEFAULT NULL,
                                    priority integer DEFAULT 0, dedupe_key text DEFAULT NULL,
                                    concurrency_key text DEFAULT NULL, on_conflict text DEFAULT 'ignore',
                                    after bigint[] DEFAULT NULL)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_enqueue';
COMMENT ON FUNCTION concurrency.enqueue(text, jsonb, timestamptz, integer, text, text, text, bigint[]) IS
    'adds a task and returns its id (the id of the task holding dedupe_key, live or retained as done, if any; with on_conflict => ''replace'', a holder not yet started takes the new payload, run_at and priority); a new task with after waits until those tasks of the queue are done; notifies channel concurrency_<queue> at commit';

CREATE FUNCTION concurrency.enqueue_batch(queue text, payloads jsonb[], run_at timestamptz DEFAULT NULL,
                                          priority integer DEFAULT 0, dedupe_keys text[] DEFAULT NULL,
                                          concurrency_keys text[] DEFAULT NULL, after bigint[] DEFAULT NULL)
    RETURNS SETOF bigint
    LANGUAGE c VOLATILE ROWS 100
    AS 'MODULE_PATHNAME', 'concurrency_enqueue_batch';
COMMENT ON FUNCTION concurrency.enqueue_batch(text, jsonb[], timestamptz, integer, text[], text[], bigint[]) IS
    'adds one task per payload in one statement and returns their ids in payload order (per-element dedupe and concurrency keys; the new tasks wait for the tasks of the queue in after)';
