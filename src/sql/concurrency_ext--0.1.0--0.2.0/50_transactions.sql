-- ---------------------------------------------------------------------------
-- Transactions 0.2.0: run_transaction, run_ddl and concurrency.ddl_log (new).
-- ---------------------------------------------------------------------------

CREATE PROCEDURE concurrency.run_transaction(statements text, isolation text DEFAULT 'read committed',
                                             max_attempts integer DEFAULT 5)
    LANGUAGE c AS 'MODULE_PATHNAME', 'concurrency_run_transaction';
COMMENT ON PROCEDURE concurrency.run_transaction(text, text, integer) IS
    'runs the statements in a transaction of their own at that isolation level and commits; retries serialization failures (40001) and deadlocks (40P01) with a jittered, growing wait, up to max_attempts';
