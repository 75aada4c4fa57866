-- CALL concurrency.run_transaction: arguments, retries of 40001 and 40P01
-- (counted with a sequence, which a rollback does not undo), a NOTICE per
-- retry, the original error with the attempt count after the last attempt,
-- other errors at once, the isolation level, and 25001 inside a transaction
-- block. The concurrent cases are in test/isolation/specs/txn_retry.spec.
CREATE TABLE txn_t (id int PRIMARY KEY, v int);
CREATE SEQUENCE txn_attempts;
-- fails with `code` until the sequence reaches n
CREATE FUNCTION txn_fail_until(n int, code text DEFAULT '40001') RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  IF nextval('txn_attempts') < n THEN
    RAISE EXCEPTION 'simulated failure %', code USING ERRCODE = code, DETAIL = 'original detail';
  END IF;
END $$;

\set VERBOSITY terse
-- two serialization failures, then success: two NOTICEs, one row
CALL concurrency.run_transaction($$INSERT INTO txn_t VALUES (1, 1); SELECT txn_fail_until(3)$$, 'serializable');
SELECT * FROM txn_t;
SELECT last_value FROM txn_attempts;
-- a deadlock is retried too
SELECT setval('txn_attempts', 1, false);
CALL concurrency.run_transaction($$INSERT INTO txn_t VALUES (2, 1); SELECT txn_fail_until(2, '40P01')$$);
SELECT * FROM txn_t ORDER BY id;
-- any other error at once and unchanged (one attempt), nothing kept
SELECT setval('txn_attempts', 1, false);
CALL concurrency.run_transaction($$INSERT INTO txn_t VALUES (3, 1); SELECT txn_fail_until(5, '55P03')$$);
CALL concurrency.run_transaction($$SELECT nextval('txn_attempts'); INSERT INTO txn_t VALUES (1, 1)$$);
SELECT last_value FROM txn_attempts;
SELECT * FROM txn_t ORDER BY id;
\set VERBOSITY default
-- max_attempts exhausted: the last error, with its SQLSTATE, and a DETAIL counting the attempts
SELECT setval('txn_attempts', 1, false);
SET client_min_messages = warning;
\set SHOW_CONTEXT never
CALL concurrency.run_transaction($$INSERT INTO txn_t VALUES (4, 1); SELECT txn_fail_until(10)$$, 'serializable', 3);
\echo :LAST_ERROR_SQLSTATE
CALL concurrency.run_transaction($$SELECT txn_fail_until(100, '40P01')$$, max_attempts => 1);
\echo :LAST_ERROR_SQLSTATE
RESET client_min_messages;
\set SHOW_CONTEXT errors
SELECT last_value FROM txn_attempts;
SELECT * FROM txn_t ORDER BY id;
-- the isolation level applies to every attempt; several statements run as one transaction
CREATE TABLE txn_levels (level text);
CALL concurrency.run_transaction($$INSERT INTO txn_levels SELECT current_setting('transaction_isolation')$$, ' Repeatable   READ ');
CALL concurrency.run_transaction($$INSERT INTO txn_levels SELECT current_setting('transaction_isolation')$$, 'serializable');
CALL concurrency.run_transaction($$INSERT INTO txn_levels SELECT current_setting('transaction_isolation')$$);
SELECT level FROM txn_levels;
-- the caller's search_path applies to the statements
CREATE SCHEMA txn_s;
CREATE TABLE txn_s.only_here (x int);
SET search_path = txn_s, public;
CALL concurrency.run_transaction($$INSERT INTO only_here VALUES (1)$$);
RESET search_path;
SELECT * FROM txn_s.only_here;
-- inside a transaction block, or from a function: 25001
BEGIN;
CALL concurrency.run_transaction('SELECT 1');
ROLLBACK;
CREATE FUNCTION txn_in_function() RETURNS void LANGUAGE plpgsql AS $f$
BEGIN CALL concurrency.run_transaction('SELECT 1'); END $f$;
SELECT txn_in_function();
-- a procedure or a DO block called outside a transaction block may call it
-- (it commits the caller's earlier work, as COMMIT would)
CREATE PROCEDURE txn_outer() LANGUAGE plpgsql AS $p$
BEGIN
  INSERT INTO txn_t VALUES (10, 10);
  CALL concurrency.run_transaction($$INSERT INTO txn_t VALUES (11, 11)$$);
END $p$;
CALL txn_outer();
DO $d$BEGIN CALL concurrency.run_transaction($$INSERT INTO txn_t VALUES (12, 12)$$); END$d$;
SELECT * FROM txn_t WHERE id >= 10 ORDER BY id;
-- bad arguments: nothing runs
CALL concurrency.run_transaction(NULL);
CALL concurrency.run_transaction('SELECT 1', NULL);
CALL concurrency.run_transaction('SELECT 1', 'read committed', NULL);
CALL concurrency.run_transaction('SELECT 1', 'snapshot');
CALL concurrency.run_transaction('SELECT 1', max_attempts => 0);
CALL concurrency.run_transaction('  -- nothing');
CALL concurrency.run_transaction('INSERT INTO txn_t VALUES (20, 20); SELEC 1');
CALL concurrency.run_transaction('INSERT INTO txn_t VALUES (20, 20); COMMIT');
CALL concurrency.run_transaction('SAVEPOINT a');
SELECT count(*) FROM txn_t WHERE id = 20;
DROP PROCEDURE txn_outer();
DROP FUNCTION txn_in_function();
DROP TABLE txn_t, txn_levels, txn_s.only_here;
DROP SCHEMA txn_s;
DROP SEQUENCE txn_attempts;
DROP FUNCTION txn_fail_until(int, text);
