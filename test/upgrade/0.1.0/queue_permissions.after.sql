-- Run after ALTER EXTENSION UPDATE from 0.1.0 (scripts/upgrade-check.sh
-- compares the output with queue_permissions.after.out): every table GRANT
-- became the permissions for the same calls, the table privileges are as
-- they were, the live tasks and the held lease are intact.
SELECT queue, grantee, permission FROM concurrency.queue_permission ORDER BY queue, grantee::text, permission;
SELECT c.relname, a.grantee::regrole, string_agg(a.privilege_type, ',' ORDER BY a.privilege_type) AS privileges
  FROM pg_class c, aclexplode(c.relacl) a
 WHERE c.relnamespace = 'concurrency'::regnamespace AND c.relname LIKE 'q\_%' AND a.grantee <> c.relowner
 GROUP BY 1, 2 ORDER BY 1, 2::text;
SET ROLE upgrade_producer;
SELECT concurrency.enqueue('emails', '{"n": 4}') AS enqueued;
SELECT count(*) FROM concurrency.dequeue('emails');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SET ROLE upgrade_worker;
SELECT concurrency.complete('emails', task_id, lease_token) FROM upgrade_held;
SELECT count(*) AS claimed FROM concurrency.dequeue('emails', 10);
SELECT count(*) AS claimed_owned FROM concurrency.dequeue('owned');
SELECT concurrency.enqueue('emails', '{}');
\echo :LAST_ERROR_SQLSTATE
-- the one call that needs more in 0.2.0: retry_dead needs manage
SELECT concurrency.retry_dead('emails');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SET ROLE upgrade_reader;
SELECT ready, leased FROM concurrency.queue_stats WHERE queue = 'emails';
RESET ROLE;
SET ROLE upgrade_outsider;
SELECT concurrency.enqueue('x";odd', '{}') AS enqueued_by_public;
SELECT count(*) FROM concurrency.dequeue('emails');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SET ROLE upgrade_owner;
SELECT concurrency.enqueue('owned', '{}') AS enqueued_by_owner;
SELECT concurrency.grant_queue('owned', 'upgrade_reader', '{read}');
RESET ROLE;
-- clean up
SELECT concurrency.drop_queue('emails');
SELECT concurrency.drop_queue('x";odd');
SELECT concurrency.drop_queue('owned');
DROP TABLE upgrade_held;
REVOKE EXECUTE ON FUNCTION concurrency.create_queue(text, interval, integer) FROM upgrade_owner;
DROP ROLE upgrade_producer, upgrade_worker, upgrade_reader, upgrade_owner, upgrade_outsider;
