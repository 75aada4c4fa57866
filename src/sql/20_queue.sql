-- ---------------------------------------------------------------------------
-- Lease-aware task queue.
--
-- Each queue's tasks live in a table of its own, concurrency."q_<queue>",
-- created at run time by create_queue. Those tables are deliberately NOT
-- members of the extension: pg_dump dumps them (definition, rows, owner and
-- GRANTs) like any other table, and DROP EXTENSION refuses while one exists,
-- because it depends on the extension's schema. The catalog below and the
-- lease token sequence are members, marked with pg_extension_config_dump so
-- that pg_dump keeps their contents.
-- ---------------------------------------------------------------------------

-- One row per queue, with its settings (changed with alter_queue). NULL in
-- retain, key_limit or max_leased: no such setting. The settings added in
-- 0.2.0 come last, as ALTER TABLE ADD COLUMN puts them in an upgraded one.
CREATE TABLE concurrency.queue (
    name         text        PRIMARY KEY CHECK (octet_length(name) BETWEEN 1 AND 48),
    lease        interval    NOT NULL CHECK (lease > interval '0'),
    max_attempts integer     NOT NULL CHECK (max_attempts >= 1),
    created_at   timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    created_by   name        NOT NULL DEFAULT CURRENT_USER,
    retain       interval    CHECK (retain > interval '0'),
    key_limit    integer     CHECK (key_limit >= 1),
    max_leased   integer     CHECK (max_leased >= 1)
);
COMMENT ON TABLE concurrency.queue IS
    'catalog of concurrency_ext task queues; each has its tasks in table concurrency."q_<name>"';
SELECT pg_catalog.pg_extension_config_dump('concurrency.queue', '');
GRANT SELECT ON concurrency.queue TO PUBLIC;

-- Plain DML sends no relcache invalidation; this statement trigger sends one
-- for the catalog, so that every backend's queue cache reads the settings
-- again (see src/queue/queue.hpp). Also fires for COPY (pg_restore).
CREATE FUNCTION concurrency.queue_changed() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'concurrency_queue_changed';
COMMENT ON FUNCTION concurrency.queue_changed() IS
    'trigger: invalidates the backends'' queue caches after a change of concurrency.queue';
REVOKE EXECUTE ON FUNCTION concurrency.queue_changed() FROM PUBLIC;
CREATE TRIGGER queue_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON concurrency.queue
    FOR EACH STATEMENT EXECUTE FUNCTION concurrency.queue_changed();

-- Lease tokens: every claim takes a fresh value, so that a token names one
-- lease of one task and never comes back. Its position is dumped too, so that
-- a restored database does not issue tokens again that workers may still hold.
CREATE SEQUENCE concurrency.lease_token AS bigint;
COMMENT ON SEQUENCE concurrency.lease_token IS
    'source of concurrency_ext lease tokens (one value per claim)';
SELECT pg_catalog.pg_extension_config_dump('concurrency.lease_token', '');
-- The queue functions run their statements as the queue's owner (see
-- 22_queue_permissions.sql), whoever that is: the sequence must not add a
-- condition of its own.
GRANT USAGE ON SEQUENCE concurrency.lease_token TO PUBLIC;

-- Creating and dropping queues is for the extension owner and superusers,
-- unless EXECUTE is granted. They run as their owner (SECURITY DEFINER) so
-- that such a grant is all a role needs: the queue table it creates belongs
-- to it, and only a role that owns a queue's table may drop the queue.
CREATE FUNCTION concurrency.create_queue(queue text, lease interval DEFAULT '30 seconds',
                                         max_attempts integer DEFAULT 5, retain interval DEFAULT NULL,
                                         key_limit integer DEFAULT NULL, max_leased integer DEFAULT NULL,
                                         distributed boolean DEFAULT false)
    RETURNS void
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_create_queue';
COMMENT ON FUNCTION concurrency.create_queue(text, interval, integer, interval, integer, integer, boolean) IS
    'creates the task queue with its table concurrency."q_<queue>"; the same settings again is a no-op, other settings are an error (see alter_queue); distributed => true also makes it a Citus distributed queue (on a coordinator; see distribute_queue)';
REVOKE ALL ON FUNCTION concurrency.create_queue(text, interval, integer, interval, integer, integer, boolean) FROM PUBLIC;

-- Only the owner of a queue's table (or a superuser) may change its settings.
CREATE FUNCTION concurrency.alter_queue(queue text, lease interval DEFAULT NULL, max_attempts integer DEFAULT NULL,
                                        retain interval DEFAULT NULL, key_limit integer DEFAULT NULL,
                                        max_leased integer DEFAULT NULL)
    RETURNS void
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_alter_queue';
COMMENT ON FUNCTION concurrency.alter_queue(text, interval, integer, interval, integer, integer) IS
    'changes settings of a queue in place: NULL keeps a setting; retain => ''0'', key_limit => 0, max_leased => 0 remove it';
REVOKE ALL ON FUNCTION concurrency.alter_queue(text, interval, integer, interval, integer, integer) FROM PUBLIC;

CREATE FUNCTION concurrency.drop_queue(queue text)
    RETURNS void
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_drop_queue';
COMMENT ON FUNCTION concurrency.drop_queue(text) IS
    'drops the task queue with all its tasks';
REVOKE ALL ON FUNCTION concurrency.drop_queue(text) FROM PUBLIC;

-- The task functions are SECURITY INVOKER: each checks that the caller holds
-- its permission on the queue (enqueue, work, read or manage; see
-- 22_queue_permissions.sql and src/queue/permissions.hpp), then runs its
-- statements as the queue table's owner. The caller needs no privilege on
-- the table. No SET search_path clause (it would cost a GUC save and restore
-- per call of these hot functions): the C code pins search_path around its
-- SPI statements (src/pg/spi.cpp), and those statements are schema-qualified
-- throughout as well (src/queue/queue_sql.cpp).
CREATE FUNCTION concurrency.enqueue(queue text, payload jsonb DEFAULT '{}', run_at timestamptz DEFAULT NULL,
                                    priority integer DEFAULT 0, dedupe_key text DEFAULT NULL,
                                    concurrency_key text DEFAULT NULL)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_enqueue';
COMMENT ON FUNCTION concurrency.enqueue(text, jsonb, timestamptz, integer, text, text) IS
    'adds a task and returns its id (the id of the task holding dedupe_key, live or retained as done, if any); notifies channel concurrency_<queue> at commit';

CREATE FUNCTION concurrency.enqueue_batch(queue text, payloads jsonb[], run_at timestamptz DEFAULT NULL,
                                          priority integer DEFAULT 0, dedupe_keys text[] DEFAULT NULL,
                                          concurrency_keys text[] DEFAULT NULL)
    RETURNS SETOF bigint
    LANGUAGE c VOLATILE ROWS 100
    AS 'MODULE_PATHNAME', 'concurrency_enqueue_batch';
COMMENT ON FUNCTION concurrency.enqueue_batch(text, jsonb[], timestamptz, integer, text[], text[]) IS
    'adds one task per payload in one statement and returns their ids in payload order (per-element dedupe and concurrency keys)';

CREATE FUNCTION concurrency.dequeue(queue text, batch integer DEFAULT 1, lease interval DEFAULT NULL,
                                    worker text DEFAULT NULL)
    RETURNS TABLE (task_id bigint, lease_token bigint, attempt integer, payload jsonb,
                   enqueued_at timestamptz, lease_expires_at timestamptz)
    LANGUAGE c VOLATILE ROWS 1
    AS 'MODULE_PATHNAME', 'concurrency_dequeue';
COMMENT ON FUNCTION concurrency.dequeue(text, integer, interval, text) IS
    'claims up to batch ready tasks (or tasks whose lease expired) without waiting for other workers; each claim gets a new lease token';

CREATE FUNCTION concurrency.heartbeat(queue text, task_id bigint, lease_token bigint,
                                      extend interval DEFAULT NULL)
    RETURNS timestamptz
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_heartbeat';
COMMENT ON FUNCTION concurrency.heartbeat(text, bigint, bigint, interval) IS
    'extends the lease of a task held with lease_token (by the queue''s lease when extend is NULL); returns the new deadline; SQLSTATE CE001 if the lease was lost';

CREATE FUNCTION concurrency.complete(queue text, task_id bigint, lease_token bigint, result jsonb DEFAULT NULL)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_complete';
COMMENT ON FUNCTION concurrency.complete(text, bigint, bigint, jsonb) IS
    'finishes a task held with lease_token: kept as done with its result when the queue retains tasks, removed otherwise; SQLSTATE CE001 if the lease was lost or the task is gone';

CREATE FUNCTION concurrency.fail(queue text, task_id bigint, lease_token bigint, error text DEFAULT NULL,
                                 retry_in interval DEFAULT NULL)
    RETURNS text
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_fail';
COMMENT ON FUNCTION concurrency.fail(text, bigint, bigint, text, interval) IS
    'records a failed attempt of a task held with lease_token; retries it after retry_in (or an exponential backoff) or marks it dead; returns ''ready'' or ''dead''';

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

CREATE FUNCTION concurrency.heartbeat_batch(queue text, task_ids bigint[], lease_tokens bigint[],
                                            extend interval DEFAULT NULL)
    RETURNS timestamptz
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_heartbeat_many';
COMMENT ON FUNCTION concurrency.heartbeat_batch(text, bigint[], bigint[], interval) IS
    'extends the leases of the tasks held with the lease tokens at the same positions, all or none (SQLSTATE CE001 naming a lost lease); returns the new deadline';

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

CREATE FUNCTION concurrency.task_status(queue text, id bigint)
    RETURNS TABLE (task_id bigint, state text, attempt integer, priority integer, run_at timestamptz,
                   enqueued_at timestamptz, lease_expires_at timestamptz, worker text, last_error text,
                   finished_at timestamptz, result jsonb, dedupe_key text, concurrency_key text)
    LANGUAGE c VOLATILE ROWS 1
    AS 'MODULE_PATHNAME', 'concurrency_task_status';
COMMENT ON FUNCTION concurrency.task_status(text, bigint) IS
    'what became of a task: one row (state, attempt, times, worker, last error, result, keys), or none if it does not exist (any more)';

CREATE FUNCTION concurrency.retry_dead(queue text, task_ids bigint[] DEFAULT NULL)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_retry_dead';
COMMENT ON FUNCTION concurrency.retry_dead(text, bigint[]) IS
    'makes dead tasks (all when task_ids is NULL) ready again with a fresh attempt budget; returns how many';

CREATE FUNCTION concurrency.queue_stats_rows()
    RETURNS TABLE (queue text, ready bigint, scheduled bigint, leased bigint, expired bigint, dead bigint,
                   oldest_ready_age interval, done bigint, cancelled bigint, blocked bigint)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_queue_stats';
COMMENT ON FUNCTION concurrency.queue_stats_rows() IS
    'rows of the view concurrency.queue_stats';

CREATE VIEW concurrency.queue_stats AS
    SELECT queue, ready, scheduled, leased, expired, dead, done, cancelled, blocked, oldest_ready_age
      FROM concurrency.queue_stats_rows();
COMMENT ON VIEW concurrency.queue_stats IS
    'per queue: tasks ready, scheduled (run_at in the future), leased, expired (lease passed, not yet reclaimed), dead, done and cancelled (retained), blocked (held back by key_limit or max_leased now), and the age of the oldest ready task; counts are NULL for queues on which you lack permission read';
GRANT SELECT ON concurrency.queue_stats TO PUBLIC;

CREATE FUNCTION concurrency.queue_keys(queue text)
    RETURNS TABLE (concurrency_key text, leased bigint, waiting bigint, oldest_waiting_age interval)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_queue_keys';
COMMENT ON FUNCTION concurrency.queue_keys(text) IS
    'per concurrency key with live tasks: how many are leased, how many wait (ready, scheduled or blocked) and since when the oldest waits';
