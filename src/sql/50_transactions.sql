-- ---------------------------------------------------------------------------
-- Transactions that retry: run_transaction (serialization failures and
-- deadlocks) and run_ddl (schema changes that never stall the application).
-- Both are procedures: each attempt commits, so they refuse to run inside a
-- transaction block (25001). No SET search_path clause: a procedure with SET
-- clauses cannot commit, and the statements must run with the caller's
-- search_path; the C code qualifies every name of its own SQL.
-- ---------------------------------------------------------------------------

CREATE OR REPLACE PROCEDURE concurrency.run_transaction(statements text, isolation text DEFAULT 'read committed',
                                             max_attempts integer DEFAULT 5)
    LANGUAGE c AS 'MODULE_PATHNAME', 'concurrency_run_transaction';
COMMENT ON PROCEDURE concurrency.run_transaction(text, text, integer) IS
    'runs the statements in a transaction of their own at that isolation level and commits; retries serialization failures (40001) and deadlocks (40P01) with a jittered, growing wait, up to max_attempts';

-- One row per run_ddl call: what ran, when, how many attempts, how long it
-- waited, how it ended, and which sessions it terminated or cancelled. Written
-- by run_ddl as the table's owner; each role reads its own rows (row security).
CREATE TABLE IF NOT EXISTS concurrency.ddl_log (
    id                  bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_by              name        NOT NULL,
    statements          text        NOT NULL,
    started             timestamptz NOT NULL,
    finished            timestamptz NOT NULL,
    attempts            integer     NOT NULL,
    waited              interval    NOT NULL,
    outcome             text        NOT NULL CHECK (outcome IN ('done', 'failed', 'gave up')),
    error               text,
    blockers_terminated integer[]   NOT NULL DEFAULT '{}'
);
COMMENT ON TABLE concurrency.ddl_log IS
    'one row per run_ddl call: statements, started, finished, attempts, time waited, outcome, error, pids of the blockers it terminated or cancelled; each role sees its own rows';
-- The log is the operators' record of what changed the schema and whom it
-- stopped: user data, so pg_dump keeps its rows, and the position of its id
-- sequence, so that a restored log goes on without reusing ids.
SELECT pg_catalog.pg_extension_config_dump('concurrency.ddl_log', '');
SELECT pg_catalog.pg_extension_config_dump('concurrency.ddl_log_id_seq', '');
ALTER TABLE concurrency.ddl_log ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS ddl_log_own_rows ON concurrency.ddl_log;
CREATE POLICY ddl_log_own_rows ON concurrency.ddl_log FOR SELECT USING (run_by = current_user);
GRANT SELECT ON concurrency.ddl_log TO PUBLIC;

CREATE OR REPLACE PROCEDURE concurrency.run_ddl(statements text, lock_timeout interval DEFAULT '1 s',
                                     max_duration interval DEFAULT '10 min',
                                     terminate_blockers_after interval DEFAULT NULL)
    LANGUAGE c AS 'MODULE_PATHNAME', 'concurrency_run_ddl';
COMMENT ON PROCEDURE concurrency.run_ddl(text, interval, interval, interval) IS
    'runs schema changes in a transaction of their own, taking their locks without queueing behind (or stalling others behind) a conflicting holder: waits outside the lock queue, queues for at most lock_timeout per attempt, names who is in the way, gives up after max_duration (55P03)';
