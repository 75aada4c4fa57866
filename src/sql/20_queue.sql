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
-- 0.2.0, then 0.3.0's paused (pause_queue), rate limit, fair and key rate limit, come last, as ALTER TABLE ADD
-- COLUMN puts them in an upgraded one.
CREATE TABLE concurrency.queue (
    name         text        PRIMARY KEY CHECK (octet_length(name) BETWEEN 1 AND 48),
    lease        interval    NOT NULL CHECK (lease > interval '0'),
    max_attempts integer     NOT NULL CHECK (max_attempts >= 1),
    created_at   timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    created_by   name        NOT NULL DEFAULT CURRENT_USER,
    retain       interval    CHECK (retain > interval '0'),
    key_limit    integer     CHECK (key_limit >= 1),
    max_leased   integer     CHECK (max_leased >= 1),
    paused       boolean     NOT NULL DEFAULT false,
    rate_limit   integer     CHECK (rate_limit >= 1),
    rate_period  interval    CHECK (rate_period > interval '0'),
    fair         boolean     NOT NULL DEFAULT false,
    CONSTRAINT queue_rate_check CHECK ((rate_limit IS NULL) = (rate_period IS NULL)),
    key_rate_limit  integer  CHECK (key_rate_limit >= 1),
    key_rate_period interval CHECK (key_rate_period > interval '0'),
    CONSTRAINT queue_key_rate_check CHECK ((key_rate_limit IS NULL) = (key_rate_period IS NULL))
);
COMMENT ON TABLE concurrency.queue IS
    'catalog of concurrency_ext task queues; each has its tasks in table concurrency."q_<name>"';
SELECT pg_catalog.pg_extension_config_dump('concurrency.queue', '');
GRANT SELECT ON concurrency.queue TO PUBLIC;

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
-- unless EXECUTE is granted (create_queue and alter_queue are in
-- 21_queue_settings.sql). They run as their owner (SECURITY DEFINER) so that such a grant is all a
-- role needs: only a role that owns a queue's table may drop the queue.
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
-- dequeue and heartbeat: 24_queue_wait.sql (with wait and progress).

CREATE FUNCTION concurrency.fail(queue text, task_id bigint, lease_token bigint, error text DEFAULT NULL,
                                 retry_in interval DEFAULT NULL)
    RETURNS text
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_fail';
COMMENT ON FUNCTION concurrency.fail(text, bigint, bigint, text, interval) IS
    'records a failed attempt of a task held with lease_token; retries it after retry_in (or an exponential backoff) or marks it dead; returns ''ready'' or ''dead''';

CREATE FUNCTION concurrency.retry_dead(queue text, task_ids bigint[] DEFAULT NULL)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_retry_dead';
COMMENT ON FUNCTION concurrency.retry_dead(text, bigint[]) IS
    'makes dead tasks (all when task_ids is NULL) ready again with a fresh attempt budget; returns how many';
