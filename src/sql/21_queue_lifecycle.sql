-- ---------------------------------------------------------------------------
-- The task's lifecycle (src/queue/lifecycle/): creating and dropping queues
-- and their settings (admin.cpp), adding tasks (enqueue.cpp), claiming them
-- (claim.cpp), finishing them (finish.cpp), pausing a queue (admin.cpp) and
-- what is there to see (inspect.cpp). The catalog these write, its trigger and
-- the permissions are the hall's (20_queue.sql).
-- ---------------------------------------------------------------------------

-- Creating and dropping queues is for the extension owner and superusers,
-- unless EXECUTE is granted (create_queue and alter_queue below). They run as their owner (SECURITY DEFINER) so that such a grant is all a
-- role needs: only a role that owns a queue's table may drop the queue.
CREATE OR REPLACE FUNCTION concurrency.drop_queue(queue text)
    RETURNS void
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_drop_queue';
COMMENT ON FUNCTION concurrency.drop_queue(text) IS
    'drops the task queue with all its tasks';
REVOKE ALL ON FUNCTION concurrency.drop_queue(text) FROM PUBLIC;

-- The task functions are SECURITY INVOKER: each checks that the caller holds
-- its permission on the queue (enqueue, work, read or manage; see
-- 20_queue.sql and src/queue/permissions.hpp), then runs its
-- statements as the queue table's owner. The caller needs no privilege on
-- the table. No SET search_path clause (it would cost a GUC save and restore
-- per call of these hot functions): the C code pins search_path around its
-- SPI statements (src/pg/spi.cpp), and those statements are schema-qualified
-- throughout as well (src/queue/queue_sql.cpp).
CREATE OR REPLACE FUNCTION concurrency.fail(queue text, task_id bigint, lease_token bigint, error text DEFAULT NULL,
                                 retry_in interval DEFAULT NULL)
    RETURNS text
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_fail';
COMMENT ON FUNCTION concurrency.fail(text, bigint, bigint, text, interval) IS
    'records a failed attempt of a task held with lease_token; retries it after retry_in (or an exponential backoff) or marks it dead; returns ''ready'' or ''dead''';

CREATE OR REPLACE FUNCTION concurrency.retry_dead(queue text, task_ids bigint[] DEFAULT NULL)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_retry_dead';
COMMENT ON FUNCTION concurrency.retry_dead(text, bigint[]) IS
    'makes dead tasks (all when task_ids is NULL) ready again with a fresh attempt budget; returns how many';

-- ---------------------------------------------------------------------------
-- Task queue: create_queue and alter_queue, with every setting of 0.3.0
-- (rate_limit, rate_period, fair, key_rate_limit, key_rate_period); the catalog they write and its trigger are in
-- 20_queue.sql.
-- ---------------------------------------------------------------------------

-- Creating queues is for the extension owner and superusers, unless EXECUTE
-- is granted. It runs as its owner (SECURITY DEFINER) so that such a grant is
-- all a role needs: the queue table it creates belongs to it (drop_queue,
-- above, works the same way).
CREATE OR REPLACE FUNCTION concurrency.create_queue(queue text, lease interval DEFAULT '30 seconds',
                                         max_attempts integer DEFAULT 5, retain interval DEFAULT NULL,
                                         key_limit integer DEFAULT NULL, max_leased integer DEFAULT NULL,
                                         distributed boolean DEFAULT false, rate_limit integer DEFAULT NULL,
                                         rate_period interval DEFAULT NULL, key_rate_limit integer DEFAULT NULL,
                                         key_rate_period interval DEFAULT NULL)
    RETURNS void
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_create_queue';
COMMENT ON FUNCTION concurrency.create_queue(text, interval, integer, interval, integer, integer, boolean, integer, interval, integer, interval) IS
    'creates the task queue with its table concurrency."q_<queue>"; the same settings again is a no-op, other settings are an error (see alter_queue); distributed => true also makes it a Citus distributed queue (on a coordinator; see distribute_queue); rate_limit claims at most in any rate_period, key_rate_limit claims of each concurrency key in any key_rate_period';
REVOKE ALL ON FUNCTION concurrency.create_queue(text, interval, integer, interval, integer, integer, boolean, integer, interval, integer, interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION concurrency.alter_queue(queue text, lease interval DEFAULT NULL, max_attempts integer DEFAULT NULL,
                                        retain interval DEFAULT NULL, key_limit integer DEFAULT NULL,
                                        max_leased integer DEFAULT NULL, rate_limit integer DEFAULT NULL,
                                        rate_period interval DEFAULT NULL, fair boolean DEFAULT NULL,
                                        key_rate_limit integer DEFAULT NULL, key_rate_period interval DEFAULT NULL)
    RETURNS void
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_alter_queue';
COMMENT ON FUNCTION concurrency.alter_queue(text, interval, integer, interval, integer, integer, integer, interval, boolean, integer, interval) IS
    'changes settings of a queue in place: NULL keeps a setting; retain => ''0'', key_limit => 0, max_leased => 0, rate_limit => 0, key_rate_limit => 0 remove it; fair => true rotates claims among concurrency keys';
REVOKE ALL ON FUNCTION concurrency.alter_queue(text, interval, integer, interval, integer, integer, integer, interval, boolean, integer, interval) FROM PUBLIC;
-- alter_queue is for the holders of manage (its owner included): it checks
-- that itself (SECURITY DEFINER, search_path pinned), so everyone may call it.
GRANT EXECUTE ON FUNCTION concurrency.alter_queue(text, interval, integer, interval, integer, integer, integer, interval, boolean, integer, interval) TO PUBLIC;

-- ---------------------------------------------------------------------------
-- Task queue: enqueue and enqueue_batch (docs/queue.md, "Deduplication"). With a dedupe_key
-- whose holder exists, on_conflict says what happens: 'ignore' (the default)
-- returns the holder's id and changes nothing; 'replace' gives the holder
-- the new payload, run_at and priority if it has not started (ready,
-- scheduled, blocked by its key or waiting for its parents), and returns its
-- id (a debounce). With after, a new task waits for those tasks
-- (23_queue_graphs.sql). Like the other task functions, SECURITY
-- INVOKER without SET search_path.
-- ---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION concurrency.enqueue(queue text, payload jsonb DEFAULT '{}', run_at timestamptz DEFAULT NULL,
                                    priority integer DEFAULT 0, dedupe_key text DEFAULT NULL,
                                    concurrency_key text DEFAULT NULL, on_conflict text DEFAULT 'ignore',
                                    after bigint[] DEFAULT NULL)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_enqueue';
COMMENT ON FUNCTION concurrency.enqueue(text, jsonb, timestamptz, integer, text, text, text, bigint[]) IS
    'adds a task and returns its id (the id of the task holding dedupe_key, live or retained as done, if any; with on_conflict => ''replace'', a holder not yet started takes the new payload, run_at and priority); a new task with after waits until those tasks of the queue are done; notifies channel concurrency_<queue> at commit';

CREATE OR REPLACE FUNCTION concurrency.enqueue_batch(queue text, payloads jsonb[], run_at timestamptz DEFAULT NULL,
                                          priority integer DEFAULT 0, dedupe_keys text[] DEFAULT NULL,
                                          concurrency_keys text[] DEFAULT NULL, after bigint[] DEFAULT NULL)
    RETURNS SETOF bigint
    LANGUAGE c VOLATILE ROWS 100
    AS 'MODULE_PATHNAME', 'concurrency_enqueue_batch';
COMMENT ON FUNCTION concurrency.enqueue_batch(text, jsonb[], timestamptz, integer, text[], text[], bigint[]) IS
    'adds one task per payload in one statement and returns their ids in payload order (per-element dedupe and concurrency keys; the new tasks wait for the tasks of the queue in after)';

-- ---------------------------------------------------------------------------
-- Task queue: waiting for work, handing it back, reporting progress
-- (docs/queue.md, "Waiting for work"; src/queue/time/wait.hpp). Like the other
-- task functions these are SECURITY INVOKER and check the caller's queue
-- permission themselves (work, or read for task_status).
-- ---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION concurrency.dequeue(queue text, batch integer DEFAULT 1, lease interval DEFAULT NULL,
                                    worker text DEFAULT NULL, wait interval DEFAULT NULL)
    RETURNS TABLE (task_id bigint, lease_token bigint, attempt integer, payload jsonb,
                   enqueued_at timestamptz, lease_expires_at timestamptz)
    LANGUAGE c VOLATILE ROWS 1
    AS 'MODULE_PATHNAME', 'concurrency_dequeue';
COMMENT ON FUNCTION concurrency.dequeue(text, integer, interval, text, interval) IS
    'claims up to batch ready tasks (or tasks whose lease expired) without waiting for other workers; each claim gets a new lease token; with wait, a call that finds nothing sleeps until a commit, a due task or an expired lease makes one claimable, for at most wait';

CREATE OR REPLACE FUNCTION concurrency.heartbeat(queue text, task_id bigint, lease_token bigint,
                                      extend interval DEFAULT NULL, progress jsonb DEFAULT NULL)
    RETURNS timestamptz
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_heartbeat';
COMMENT ON FUNCTION concurrency.heartbeat(text, bigint, bigint, interval, jsonb) IS
    'extends the lease of a task held with lease_token (by the queue''s lease when extend is NULL) and stores progress when given (shown by task_status); returns the new deadline; SQLSTATE CE001 if the lease was lost';

CREATE OR REPLACE FUNCTION concurrency.heartbeat_batch(queue text, task_ids bigint[], lease_tokens bigint[],
                                            extend interval DEFAULT NULL, progress jsonb[] DEFAULT NULL)
    RETURNS timestamptz
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_heartbeat_many';
COMMENT ON FUNCTION concurrency.heartbeat_batch(text, bigint[], bigint[], interval, jsonb[]) IS
    'extends the leases of the tasks held with the lease tokens at the same positions, all or none (SQLSTATE CE001 naming a lost lease), and stores the progress at the same positions when given; returns the new deadline';

CREATE OR REPLACE FUNCTION concurrency.release(queue text, task_id bigint, lease_token bigint, run_at timestamptz DEFAULT NULL)
    RETURNS boolean
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_release';
COMMENT ON FUNCTION concurrency.release(text, bigint, bigint, timestamptz) IS
    'hands a task held with lease_token back unstarted: ready again in its place (or scheduled at run_at), the attempt not counted, the token fenced off; returns true; SQLSTATE CE001 if the lease was lost';

CREATE OR REPLACE FUNCTION concurrency.release_batch(queue text, task_ids bigint[], lease_tokens bigint[],
                                          run_at timestamptz DEFAULT NULL)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_release_many';
COMMENT ON FUNCTION concurrency.release_batch(text, bigint[], bigint[], timestamptz) IS
    'hands the tasks held with the lease tokens at the same positions back unstarted, all or none (SQLSTATE CE001 naming a lost lease); returns how many';

CREATE OR REPLACE FUNCTION concurrency.task_status(queue text, id bigint)
    RETURNS TABLE (task_id bigint, state text, attempt integer, priority integer, run_at timestamptz,
                   enqueued_at timestamptz, lease_expires_at timestamptz, worker text, last_error text,
                   finished_at timestamptz, result jsonb, dedupe_key text, concurrency_key text,
                   progress jsonb, parents_open integer)
    LANGUAGE c VOLATILE ROWS 1
    AS 'MODULE_PATHNAME', 'concurrency_task_status';
COMMENT ON FUNCTION concurrency.task_status(text, bigint) IS
    'what became of a task: one row (state, attempt, times, worker, last error, result, keys, the progress of a task not finished yet, and how many parents a waiting task waits for), or none if it does not exist (any more)';

-- ---------------------------------------------------------------------------
-- Task queue: adding tasks (with dedupe and concurrency keys), finishing them
-- (kept as done with a result while the queue retains tasks), batch forms,
-- cancel, purge and task_status. SECURITY INVOKER, without a SET search_path
-- clause, like the other task functions (see above).
-- ---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION concurrency.complete(queue text, task_id bigint, lease_token bigint, result jsonb DEFAULT NULL)
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
CREATE OR REPLACE FUNCTION concurrency.complete_batch(queue text, task_ids bigint[], lease_tokens bigint[])
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_complete_many';
COMMENT ON FUNCTION concurrency.complete_batch(text, bigint[], bigint[]) IS
    'finishes the tasks held with the lease tokens at the same positions, all or none (SQLSTATE CE001 naming a lost lease); returns how many';

CREATE OR REPLACE FUNCTION concurrency.fail_batch(queue text, task_ids bigint[], lease_tokens bigint[], error text DEFAULT NULL,
                                       retry_in interval DEFAULT NULL)
    RETURNS TABLE (task_id bigint, state text)
    LANGUAGE c VOLATILE ROWS 10
    AS 'MODULE_PATHNAME', 'concurrency_fail_many';
COMMENT ON FUNCTION concurrency.fail_batch(text, bigint[], bigint[], text, interval) IS
    'records a failed attempt of each task held with the lease tokens at the same positions, all or none (SQLSTATE CE001 naming a lost lease); returns each task''s new state, ''ready'' or ''dead''';

CREATE OR REPLACE FUNCTION concurrency.cancel(queue text, task_ids bigint[])
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_cancel';
COMMENT ON FUNCTION concurrency.cancel(text, bigint[]) IS
    'cancels tasks in any state but done: a holder of a cancelled lease gets SQLSTATE CE001 at its next heartbeat, complete or fail; returns how many were cancelled';

CREATE OR REPLACE FUNCTION concurrency.purge(queue text)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_purge';
COMMENT ON FUNCTION concurrency.purge(text) IS
    'deletes the done and cancelled tasks whose retention has passed (queue calls do it too, in bounded chunks); returns how many';

-- ---------------------------------------------------------------------------
-- Task queue: pausing a queue (docs/queue.md, "Pausing a queue"). While
-- concurrency.queue.paused is set, dequeue claims nothing (a waiting call
-- keeps waiting and is woken by the resume); enqueue works, and leased tasks
-- may still be heartbeated, completed, failed, released and cancelled. The
-- flag is a column of the catalog, so a pause survives restarts, pg_dump and
-- pg_restore. Like alter_queue these are SECURITY DEFINER (they change the
-- catalog) and check that the caller holds permission manage on the queue.
-- ---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION concurrency.pause_queue(queue text)
    RETURNS boolean
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_pause_queue';
COMMENT ON FUNCTION concurrency.pause_queue(text) IS
    'stops claims from the queue until resume_queue (enqueue, heartbeat, complete, fail and release go on); returns false if it was paused already';

CREATE OR REPLACE FUNCTION concurrency.resume_queue(queue text)
    RETURNS boolean
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_resume_queue';
COMMENT ON FUNCTION concurrency.resume_queue(text) IS
    'lets workers claim from a paused queue again, waking its waiting dequeue calls at commit; returns false if it was not paused';

-- ---------------------------------------------------------------------------
-- Task queue: counts per queue (the view concurrency.queue_stats) and per
-- concurrency key (queue_keys).
-- ---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION concurrency_internal.queue_stats_rows()
    RETURNS TABLE (queue text, ready bigint, scheduled bigint, leased bigint, expired bigint, dead bigint,
                   oldest_ready_age interval, done bigint, cancelled bigint, blocked bigint, waiting bigint)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_queue_stats';
COMMENT ON FUNCTION concurrency_internal.queue_stats_rows() IS
    'rows of the view concurrency.queue_stats';

-- paused (pause_queue) comes from the catalog, which every role may read;
-- 0.3.0's columns come last, where an update adds them
CREATE OR REPLACE VIEW concurrency.queue_stats AS
    SELECT s.queue, s.ready, s.scheduled, s.leased, s.expired, s.dead, s.done, s.cancelled, s.blocked,
           s.oldest_ready_age, q.paused, s.waiting
      FROM concurrency_internal.queue_stats_rows() s
      LEFT JOIN concurrency.queue q ON q.name OPERATOR(pg_catalog.=) s.queue;
COMMENT ON VIEW concurrency.queue_stats IS
    'per queue: tasks ready, scheduled (run_at in the future), leased, expired (lease passed, not yet reclaimed), dead, done and cancelled (retained), blocked (held back by key_limit or max_leased now), the age of the oldest ready task, whether the queue is paused (pause_queue), and tasks waiting for their parents; counts are NULL for queues on which you lack permission read';
GRANT SELECT ON concurrency.queue_stats TO PUBLIC;

CREATE OR REPLACE FUNCTION concurrency.queue_keys(queue text)
    RETURNS TABLE (concurrency_key text, leased bigint, waiting bigint, oldest_waiting_age interval)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_queue_keys';
COMMENT ON FUNCTION concurrency.queue_keys(text) IS
    'per concurrency key with live tasks: how many are leased, how many wait (ready, scheduled or blocked) and since when the oldest waits';

-- ---------------------------------------------------------------------------
-- The names of a queue's relations (src/queue/relation_names.hpp), for the
-- SQL that needs them, so that they are built in one place: its tables
-- q_<queue>, k_, s_, r_, rk_<queue>, and their indexes and identity
-- sequence, named role first since 0.4.0 (ready_q_jobs, pkey_k_jobs,
-- id_seq_q_jobs: no such name is another queue's relation's) and table first
-- before (q_jobs_ready, kept by the queues made then).
-- ---------------------------------------------------------------------------

-- The name (unquoted) of table tbl (tasks, keys, slots, rate, key_rate) of a
-- queue, or with role, of that table's index or identity sequence of that
-- role (pkey, ready, scheduled, leased, dedupe, finished, waiting, dead,
-- keyed, fair, id_seq): the name it has, or, where the table has none
-- (yet), the name it gets. 22023 for a word it does not know.
CREATE OR REPLACE FUNCTION concurrency_internal.queue_relation_name(queue text, tbl text, role text DEFAULT NULL)
    RETURNS text
    LANGUAGE c STABLE PARALLEL SAFE
    AS 'MODULE_PATHNAME', 'concurrency_queue_relation_name';
COMMENT ON FUNCTION concurrency_internal.queue_relation_name(text, text, text) IS
    'the name of a table of a queue (tasks, keys, slots, rate, key_rate), or of its index or identity sequence of a role (pkey, ready, …, id_seq), as it is or will be (internal)';
