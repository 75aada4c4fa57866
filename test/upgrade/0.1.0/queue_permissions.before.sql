-- Run in a database with concurrency_ext 0.1.0, before ALTER EXTENSION UPDATE
-- (scripts/upgrade-check.sh): queues with live tasks and the GRANTs on their
-- tables that 0.1.0 used as its permission model.
CREATE ROLE upgrade_producer;
CREATE ROLE upgrade_worker;
CREATE ROLE upgrade_reader;
CREATE ROLE upgrade_owner;
CREATE ROLE upgrade_outsider;
SELECT concurrency.create_queue('emails');
SELECT concurrency.create_queue('x";odd');
GRANT EXECUTE ON FUNCTION concurrency.create_queue(text, interval, integer) TO upgrade_owner;
SET ROLE upgrade_owner;
SELECT concurrency.create_queue('owned');
RESET ROLE;
GRANT SELECT, INSERT ON concurrency."q_emails" TO upgrade_producer;
GRANT SELECT, UPDATE, DELETE ON concurrency."q_emails" TO upgrade_worker;
GRANT SELECT ON concurrency."q_emails" TO upgrade_reader;
GRANT SELECT, INSERT ON concurrency."q_x"";odd" TO PUBLIC;
SET ROLE upgrade_owner;
GRANT SELECT, UPDATE, DELETE ON concurrency."q_owned" TO upgrade_worker;
RESET ROLE;
SET ROLE upgrade_producer;
SELECT count(concurrency.enqueue('emails', jsonb_build_object('n', n))) FROM generate_series(1, 3) AS n;
RESET ROLE;
-- a lease taken under 0.1.0, to be completed under 0.2.0
CREATE TABLE upgrade_held AS SELECT task_id, lease_token FROM concurrency.dequeue('emails', worker => 'w');
GRANT SELECT ON upgrade_held TO upgrade_worker;
-- The module is 0.2.0 already (a package upgrade replaces it before ALTER
-- EXTENSION … UPDATE runs): with 0.1.0's objects the 0.1.0 model still
-- holds, the table privileges decide.
SET ROLE upgrade_worker;
SELECT count(concurrency.complete('emails', task_id, lease_token))
  FROM concurrency.dequeue('emails', worker => 'w');
RESET ROLE;
SET ROLE upgrade_producer;
SELECT concurrency.enqueue('emails', '{"n": 3.5}');
RESET ROLE;
SET ROLE upgrade_outsider;
DO $$BEGIN
  PERFORM concurrency.dequeue('emails');
  RAISE EXCEPTION 'a role without privileges claimed a task';
EXCEPTION WHEN insufficient_privilege THEN NULL;
END$$;
RESET ROLE;
