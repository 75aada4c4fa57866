-- ---------------------------------------------------------------------------
-- Transactions that retry: run_transaction (serialization failures and
-- deadlocks) and run_ddl (schema changes that never stall the application).
-- Both are procedures: each attempt commits, so they refuse to run inside a
-- transaction block (25001). No SET search_path clause: a procedure with SET
-- clauses cannot commit, and the statements must run with the caller's
-- search_path; the C code qualifies every name of its own SQL.
-- ---------------------------------------------------------------------------

CREATE PROCEDURE concurrency.run_transaction(statements text, isolation text DEFAULT 'read committed',
                                             max_attempts integer DEFAULT 5)
    LANGUAGE c AS 'MODULE_PATHNAME', 'concurrency_run_transaction';
COMMENT ON PROCEDURE concurrency.run_transaction(text, text, integer) IS
    'runs the statements in a transaction of their own at that isolation level and commits; retries serialization failures (40001) and deadlocks (40P01) with a jittered, growing wait, up to max_attempts';
