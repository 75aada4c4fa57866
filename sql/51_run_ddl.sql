-- CALL concurrency.run_ddl in one session: several statements in one
-- attempt, rolled back together when one fails (its error unchanged, not
-- retried); concurrency.ddl_log and who may read it; 25001 inside a
-- transaction block; 42501 for terminate_blockers_after without the right
-- to signal; bad arguments. Blockers, waits, NOTICEs, terminations and
-- giving up need other sessions: test/t/050_run_ddl.pl.
CREATE TABLE ddl_t (id int PRIMARY KEY);
CREATE TABLE ddl_parent (id int PRIMARY KEY);
SET client_min_messages = warning; -- the success NOTICE says how long it waited
-- several statements, atomically, each lock known in advance
CALL concurrency.run_ddl($$
  ALTER TABLE ddl_t ADD COLUMN a int;
  CREATE INDEX ddl_t_a ON ddl_t (a);
  ALTER TABLE ddl_t ADD COLUMN parent int REFERENCES ddl_parent;
  CREATE TABLE ddl_new (x int);
  ALTER TABLE ddl_new ADD COLUMN y int
$$);
RESET client_min_messages;
SELECT attname FROM pg_attribute WHERE attrelid = 'ddl_t'::regclass AND attnum > 0 ORDER BY attnum;
SELECT to_regclass('ddl_t_a') IS NOT NULL AS index_made, to_regclass('ddl_new') IS NOT NULL AS table_made;
-- one statement fails: its error as it is, at once, and nothing of the others stays
CALL concurrency.run_ddl($$ALTER TABLE ddl_t ADD COLUMN b int; ALTER TABLE ddl_nope ADD COLUMN c int$$);
CALL concurrency.run_ddl($$ALTER TABLE ddl_t ADD COLUMN b int; ALTER TABLE ddl_t ADD COLUMN a int$$);
SELECT count(*) FROM pg_attribute WHERE attrelid = 'ddl_t'::regclass AND attname = 'b';
-- a lock timeout raised by the statements themselves is retried (here: always,
-- so it gives up after max_duration, with 55P03)
CREATE FUNCTION ddl_always_busy() RETURNS void LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'simulated lock timeout' USING ERRCODE = '55P03'; END $$;
SET client_min_messages = warning;
\set VERBOSITY terse
CALL concurrency.run_ddl($$SELECT ddl_always_busy()$$, lock_timeout => '10 ms', max_duration => '200 ms');
\set VERBOSITY default
RESET client_min_messages;
-- the log: one row per run, in order
SELECT run_by = current_user AS mine, outcome, attempts = 1 AS one_attempt, attempts > 1 AS retried,
       error, blockers_terminated, finished >= started AS in_order, waited >= '0' AS waited_ok,
       left(regexp_replace(statements, '\s+', ' ', 'g'), 40) AS statements
  FROM concurrency.ddl_log ORDER BY id;
-- each role reads its own rows only, and writes none
CREATE ROLE ddl_migrator;
GRANT CREATE ON SCHEMA public TO ddl_migrator;
SET ROLE ddl_migrator;
SELECT count(*) AS visible FROM concurrency.ddl_log;
SET client_min_messages = warning;
CALL concurrency.run_ddl('CREATE TABLE ddl_mine (x int)');
RESET client_min_messages;
SELECT run_by, outcome, statements FROM concurrency.ddl_log;
INSERT INTO concurrency.ddl_log (run_by, statements, started, finished, attempts, waited, outcome)
  VALUES ('ddl_migrator', 'forged', now(), now(), 1, '0', 'done');
UPDATE concurrency.ddl_log SET outcome = 'failed';
DELETE FROM concurrency.ddl_log;
-- terminate_blockers_after needs the right to signal others: 42501 before anything runs
CALL concurrency.run_ddl('DROP TABLE ddl_mine', terminate_blockers_after => '1 s');
SELECT to_regclass('ddl_mine') IS NOT NULL AS still_there;
RESET ROLE;
SELECT count(*) AS runs FROM concurrency.ddl_log;
-- inside a transaction block, or from a function: 25001
BEGIN;
CALL concurrency.run_ddl('ALTER TABLE ddl_t ADD COLUMN z int');
ROLLBACK;
-- bad arguments: nothing runs, nothing logged
CALL concurrency.run_ddl(NULL);
CALL concurrency.run_ddl('ALTER TABLE ddl_t ADD COLUMN z int', lock_timeout => NULL);
CALL concurrency.run_ddl('ALTER TABLE ddl_t ADD COLUMN z int', lock_timeout => '0');
CALL concurrency.run_ddl('ALTER TABLE ddl_t ADD COLUMN z int', lock_timeout => '-1 s');
CALL concurrency.run_ddl('ALTER TABLE ddl_t ADD COLUMN z int', lock_timeout => '100 days');
CALL concurrency.run_ddl('ALTER TABLE ddl_t ADD COLUMN z int', max_duration => NULL);
CALL concurrency.run_ddl('ALTER TABLE ddl_t ADD COLUMN z int', max_duration => '-1 min');
CALL concurrency.run_ddl('ALTER TABLE ddl_t ADD COLUMN z int', terminate_blockers_after => '-1 s');
CALL concurrency.run_ddl('ALTER TABLE ddl_t ADD COLUMN z int; ALTER TABLE');
CALL concurrency.run_ddl('');
CALL concurrency.run_ddl('ALTER TABLE ddl_t ADD COLUMN z int; COMMIT');
SELECT count(*) FROM pg_attribute WHERE attrelid = 'ddl_t'::regclass AND attname = 'z';
SELECT count(*) AS runs FROM concurrency.ddl_log;
DROP TABLE ddl_t, ddl_parent, ddl_new, ddl_mine;
DROP FUNCTION ddl_always_busy();
REVOKE CREATE ON SCHEMA public FROM ddl_migrator;
DROP ROLE ddl_migrator;
TRUNCATE concurrency.ddl_log;
