-- After ALTER EXTENSION concurrency_ext UPDATE from 0.1.0 (upgrade-check
-- compares the output with queue_permissions.after.out): every role's table
-- GRANTs became the permissions for the same calls, the table privileges are
-- as they were, and each role may call what it could, and no more.
-- (before.sql revoked EXECUTE on enqueue from PUBLIC to check that the
-- upgrade carries it over; here it is the default again)
GRANT EXECUTE ON FUNCTION concurrency.enqueue(text, jsonb, timestamptz, integer, text, text, text, bigint[]) TO PUBLIC;
SELECT queue, grantee, permission FROM concurrency.queue_permission ORDER BY queue, grantee::text, permission;
SELECT c.relname, a.grantee::regrole, string_agg(a.privilege_type, ',' ORDER BY a.privilege_type) AS privileges
  FROM pg_class c, aclexplode(c.relacl) a
 WHERE c.relnamespace = 'concurrency'::regnamespace AND c.relname LIKE 'q\_%' AND a.grantee <> c.relowner
 GROUP BY 1, 2 ORDER BY 1, 2::text;
SELECT has_function_privilege('upgrade_outsider',
         'concurrency.alter_queue(text, interval, integer, interval, integer, integer, integer, interval, boolean, integer, interval)', 'EXECUTE') AS anyone_may_call_alter_queue;
SET ROLE upgrade_producer;
SELECT concurrency.enqueue('live', '{"by": "producer"}') > 0 AS producer_enqueues;
SELECT count(*) FROM concurrency.dequeue('live');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SET ROLE upgrade_worker;
SELECT count(*) >= 0 AS worker_claims FROM concurrency.dequeue('live');
SELECT count(*) >= 0 AS worker_claims_mixed FROM concurrency.dequeue('Mixed"Q');
SELECT concurrency.enqueue('live', '{}');
\echo :LAST_ERROR_SQLSTATE
-- the one call that needs more in 0.2.0: retry_dead needs manage
SELECT concurrency.retry_dead('live');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.alter_queue('live', max_attempts => 9);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SET ROLE upgrade_reader;
SELECT ready IS NOT NULL AS reader_sees_counts FROM concurrency.queue_stats WHERE queue = 'live';
RESET ROLE;
SET ROLE upgrade_outsider;
SELECT concurrency.enqueue('Mixed"Q', '{}') > 0 AS public_enqueues;
SELECT ready IS NOT NULL AS outsider_sees_counts FROM concurrency.queue_stats WHERE queue = 'live';
SELECT count(*) FROM concurrency.dequeue('live');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- the queue's owner grants manage; the operator may then alter the queue
SELECT concurrency.grant_queue('live', 'upgrade_outsider', '{manage}');
SET ROLE upgrade_outsider;
SELECT concurrency.alter_queue('live', max_attempts => 9);
SELECT max_attempts FROM concurrency.queue WHERE name = 'live';
RESET ROLE;
DROP OWNED BY upgrade_producer, upgrade_worker, upgrade_reader, upgrade_outsider;
DROP ROLE upgrade_producer, upgrade_worker, upgrade_reader, upgrade_outsider;
