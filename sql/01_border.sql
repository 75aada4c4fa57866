-- The C++/PostgreSQL border, through a test-only module (test/module) that is
-- never part of the shipped extension.
CREATE FUNCTION pg_temp.border_pg_error(text) RETURNS int
    LANGUAGE c AS 'concurrency_ext_test', 'border_test_pg_error';
CREATE FUNCTION pg_temp.border_cpp_exception(text) RETURNS text
    LANGUAGE c AS 'concurrency_ext_test', 'border_test_cpp_exception';
CREATE FUNCTION pg_temp.border_guard_recovers(int) RETURNS int
    LANGUAGE c STRICT AS 'concurrency_ext_test', 'border_test_guard_recovers';

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

-- guard() restores memory context and error state: C++ can catch and go on
SELECT pg_temp.border_guard_recovers(1000);

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
