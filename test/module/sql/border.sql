-- The C++/PostgreSQL border, through a test-only module (test/module) that is
-- never part of the shipped extension.
CREATE FUNCTION pg_temp.border_pg_error(text) RETURNS int
    LANGUAGE c AS 'concurrency_ext_test', 'border_test_pg_error';
CREATE FUNCTION pg_temp.border_cpp_exception(text) RETURNS text
    LANGUAGE c AS 'concurrency_ext_test', 'border_test_cpp_exception';
CREATE FUNCTION pg_temp.border_subtransaction(int) RETURNS int
    LANGUAGE c STRICT AS 'concurrency_ext_test', 'border_test_subtransaction';
CREATE FUNCTION pg_temp.border_guard_cpp_throw(boolean) RETURNS boolean
    LANGUAGE c AS 'concurrency_ext_test', 'border_test_guard_cpp_throw';
CREATE FUNCTION pg_temp.border_location() RETURNS void
    LANGUAGE c AS 'concurrency_ext_test', 'border_test_location';

-- guarded code returns normally when PostgreSQL raises nothing
SELECT pg_temp.border_pg_error('42');
-- a PostgreSQL error inside guarded C++ code surfaces with its own SQLSTATE
-- (22P02); psql prints each error's SQLSTATE after it
SELECT pg_temp.border_pg_error('not a number');
\echo :LAST_ERROR_SQLSTATE
-- C++ exceptions become clean errors with a SQLSTATE
SELECT pg_temp.border_cpp_exception('error');
\echo :LAST_ERROR_SQLSTATE
SELECT pg_temp.border_cpp_exception('std');
\echo :LAST_ERROR_SQLSTATE
SELECT pg_temp.border_cpp_exception('bad_alloc');
\echo :LAST_ERROR_SQLSTATE
SELECT pg_temp.border_cpp_exception('unknown');
\echo :LAST_ERROR_SQLSTATE
SELECT pg_temp.border_cpp_exception(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT pg_temp.border_cpp_exception('none');

-- an error is survived only inside a subtransaction, which is rolled back:
-- every one of them, with memory context and resource owner restored
SELECT pg_temp.border_subtransaction(1000);
-- and the transaction goes on: a subtransaction that failed left nothing
BEGIN;
SELECT pg_temp.border_subtransaction(3);
SELECT 1 AS still_usable;
COMMIT;

-- a C++ exception inside guard() restores PostgreSQL's error handler ...
SELECT pg_temp.border_guard_cpp_throw(false);
-- ... so that a PostgreSQL error afterwards is reported, not a crash
SELECT pg_temp.border_guard_cpp_throw(true);
\echo :LAST_ERROR_SQLSTATE

-- an error's LOCATION is the place that threw it (border_test.cpp), not the
-- wrapper that reported it (guard.cpp)
\set VERBOSITY verbose
SELECT pg_temp.border_location();
-- the same for an argument reader's error: a NULL argument is located in the
-- function that read it (border_test.cpp), not in the reader (pg/datum.cpp)
SELECT pg_temp.border_cpp_exception(NULL);
\set VERBOSITY default

-- the backend survives all of it, and thousands of round trips do not grow
-- its memory: compare the total of all contexts before and after
CREATE TEMP TABLE mem AS
  SELECT sum(total_bytes) AS bytes FROM pg_backend_memory_contexts;
DO $$
BEGIN
  FOR i IN 1..5000 LOOP
    BEGIN
      PERFORM pg_temp.border_pg_error('x');
    EXCEPTION WHEN invalid_text_representation THEN NULL;
    END;
    BEGIN
      PERFORM pg_temp.border_cpp_exception('std');
    EXCEPTION WHEN internal_error THEN NULL;
    END;
  END LOOP;
END $$;
SELECT (SELECT sum(total_bytes) FROM pg_backend_memory_contexts) - bytes < 1024 * 1024 AS no_growth
  FROM mem;
