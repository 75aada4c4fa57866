-- ---------------------------------------------------------------------------
-- Named locks on several resources of one subsystem in one ordered call.
-- ---------------------------------------------------------------------------

-- Several resources of one subsystem (two accounts of a transfer): each taken
-- once, in ascending order, so that two callers over the same resources never
-- deadlock on them. NULL array or element: 22004; an empty array: nothing.
CREATE FUNCTION concurrency.xact_lock_all(name text, resources bigint[], timeout interval DEFAULT NULL,
                                          shared boolean DEFAULT false)
    RETURNS void LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_xact_lock_all';
COMMENT ON FUNCTION concurrency.xact_lock_all(text, bigint[], interval, boolean) IS
    'takes the locks on several resources of one subsystem until the end of the transaction, each once, in ascending order (no deadlock between callers); timeout bounds the whole call';

CREATE FUNCTION concurrency.try_xact_lock_all(name text, resources bigint[], shared boolean DEFAULT false)
    RETURNS boolean LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_try_xact_lock_all';
COMMENT ON FUNCTION concurrency.try_xact_lock_all(text, bigint[], boolean) IS
    'takes the locks on all the given resources of one subsystem if every one is free, else none; never waits';
