-- ---------------------------------------------------------------------------
-- Task queue: waiting for work, handing it back, reporting progress
-- (docs/queue.md, "Waiting for work"; src/queue/wait.hpp). Like the other
-- task functions these are SECURITY INVOKER and check the caller's queue
-- permission themselves (work, or read for task_status).
-- ---------------------------------------------------------------------------

CREATE FUNCTION concurrency.dequeue(queue text, batch integer DEFAULT 1, lease interval DEFAULT NULL,
                                    worker text DEFAULT NULL, wait interval DEFAULT NULL)
    RETURNS TABLE (task_id bigint, lease_token bigint, attempt integer, payload jsonb,
                   enqueued_at timestamptz, lease_expires_at timestamptz)
    LANGUAGE c VOLATILE ROWS 1
    AS 'MODULE_PATHNAME', 'concurrency_dequeue';
COMMENT ON FUNCTION concurrency.dequeue(text, integer, interval, text, interval) IS
    'claims up to batch ready tasks (or tasks whose lease expired) without waiting for other workers; each claim gets a new lease token; with wait, a call that finds nothing sleeps until a commit, a due task or an expired lease makes one claimable, for at most wait';

CREATE FUNCTION concurrency.heartbeat(queue text, task_id bigint, lease_token bigint,
                                      extend interval DEFAULT NULL, progress jsonb DEFAULT NULL)
    RETURNS timestamptz
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_heartbeat';
COMMENT ON FUNCTION concurrency.heartbeat(text, bigint, bigint, interval, jsonb) IS
    'extends the lease of a task held with lease_token (by the queue''s lease when extend is NULL) and stores progress when given (shown by task_status); returns the new deadline; SQLSTATE CE001 if the lease was lost';

CREATE FUNCTION concurrency.heartbeat_batch(queue text, task_ids bigint[], lease_tokens bigint[],
                                            extend interval DEFAULT NULL, progress jsonb[] DEFAULT NULL)
    RETURNS timestamptz
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_heartbeat_many';
COMMENT ON FUNCTION concurrency.heartbeat_batch(text, bigint[], bigint[], interval, jsonb[]) IS
    'extends the leases of the tasks held with the lease tokens at the same positions, all or none (SQLSTATE CE001 naming a lost lease), and stores the progress at the same positions when given; returns the new deadline';

CREATE FUNCTION concurrency.release(queue text, task_id bigint, lease_token bigint, run_at timestamptz DEFAULT NULL)
    RETURNS boolean
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_release';
COMMENT ON FUNCTION concurrency.release(text, bigint, bigint, timestamptz) IS
    'hands a task held with lease_token back unstarted: ready again in its place (or scheduled at run_at), the attempt not counted, the token fenced off; returns true; SQLSTATE CE001 if the lease was lost';

CREATE FUNCTION concurrency.release_batch(queue text, task_ids bigint[], lease_tokens bigint[],
                                          run_at timestamptz DEFAULT NULL)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_release_many';
COMMENT ON FUNCTION concurrency.release_batch(text, bigint[], bigint[], timestamptz) IS
    'hands the tasks held with the lease tokens at the same positions back unstarted, all or none (SQLSTATE CE001 naming a lost lease); returns how many';

CREATE FUNCTION concurrency.task_status(queue text, id bigint)
    RETURNS TABLE (task_id bigint, state text, attempt integer, priority integer, run_at timestamptz,
                   enqueued_at timestamptz, lease_expires_at timestamptz, worker text, last_error text,
                   finished_at timestamptz, result jsonb, dedupe_key text, concurrency_key text,
                   progress jsonb, parents_open integer)
    LANGUAGE c VOLATILE ROWS 1
    AS 'MODULE_PATHNAME', 'concurrency_task_status';
COMMENT ON FUNCTION concurrency.task_status(text, bigint) IS
    'what became of a task: one row (state, attempt, times, worker, last error, result, keys, the progress of a task not finished yet, and how many parents a waiting task waits for), or none if it does not exist (any more)';
