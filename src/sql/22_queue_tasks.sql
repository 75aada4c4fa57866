-- ---------------------------------------------------------------------------
-- Task queue: adding tasks (with dedupe and concurrency keys), finishing them
-- (kept as done with a result while the queue retains tasks), batch forms,
-- cancel, purge and task_status. SECURITY INVOKER, without a SET search_path
-- clause, like the other task functions (see 20_queue.sql).
-- ---------------------------------------------------------------------------

-- enqueue and enqueue_batch: 24_queue_enqueue.sql (with on_conflict, after).

CREATE FUNCTION concurrency.complete(queue text, task_id bigint, lease_token bigint, result jsonb DEFAULT NULL)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_complete';
COMMENT ON FUNCTION concurrency.complete(text, bigint, bigint, jsonb) IS
    'finishes a task held with lease_token: kept as done with its result when the queue retains tasks, removed otherwise; SQLSTATE CE001 if the lease was lost or the task is gone';

-- Batch forms of complete, heartbeat and fail: all or nothing (one lease
-- lost: CE001 naming that task, and the call changes nothing). Their own
-- names, not overloads of complete, heartbeat and fail: an overload taking
-- bigint[] where the 0.1.0 function takes bigint would make every call with
-- untyped parameters ambiguous (42725) - the way pgx, asyncpg and
-- node-postgres send them - and so break the workers written for 0.1.0.
CREATE FUNCTION concurrency.complete_batch(queue text, task_ids bigint[], lease_tokens bigint[])
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_complete_many';
COMMENT ON FUNCTION concurrency.complete_batch(text, bigint[], bigint[]) IS
    'finishes the tasks held with the lease tokens at the same positions, all or none (SQLSTATE CE001 naming a lost lease); returns how many';

-- heartbeat_batch: 24_queue_wait.sql (with progress).

CREATE FUNCTION concurrency.fail_batch(queue text, task_ids bigint[], lease_tokens bigint[], error text DEFAULT NULL,
                                       retry_in interval DEFAULT NULL)
    RETURNS TABLE (task_id bigint, state text)
    LANGUAGE c VOLATILE ROWS 10
    AS 'MODULE_PATHNAME', 'concurrency_fail_many';
COMMENT ON FUNCTION concurrency.fail_batch(text, bigint[], bigint[], text, interval) IS
    'records a failed attempt of each task held with the lease tokens at the same positions, all or none (SQLSTATE CE001 naming a lost lease); returns each task''s new state, ''ready'' or ''dead''';

CREATE FUNCTION concurrency.cancel(queue text, task_ids bigint[])
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_cancel';
COMMENT ON FUNCTION concurrency.cancel(text, bigint[]) IS
    'cancels tasks in any state but done: a holder of a cancelled lease gets SQLSTATE CE001 at its next heartbeat, complete or fail; returns how many were cancelled';

CREATE FUNCTION concurrency.purge(queue text)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_purge';
COMMENT ON FUNCTION concurrency.purge(text) IS
    'deletes the done and cancelled tasks whose retention has passed (queue calls do it too, in bounded chunks); returns how many';

-- task_status: 24_queue_wait.sql (with progress).
