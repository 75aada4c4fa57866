-- The lock-wait history without shared_preload_libraries (how the suites'
-- own clusters run): the view and functions say how to enable it (55000 with
-- a HINT). On a server with the preload (make installcheck against a live
-- server) the history is real: it is only read, never reset or shown, and the
-- expected output is 40_lock_history_off_1.out.
SELECT setting ~ '(^|[\s,])concurrency_ext($|[\s,])' AS preloaded
  FROM pg_settings WHERE name = 'shared_preload_libraries' \gset
\if :preloaded
SELECT count(*) >= 0 AS history_readable FROM concurrency.lock_history;
\else
SELECT * FROM concurrency.lock_history;
SELECT concurrency.lock_history_reset();
SELECT * FROM concurrency.lock_history_status();
DO $$
BEGIN
    PERFORM * FROM concurrency.lock_history;
EXCEPTION WHEN object_not_in_prerequisite_state THEN
    RAISE NOTICE 'lock_history: SQLSTATE %', SQLSTATE;
END $$;
\endif
