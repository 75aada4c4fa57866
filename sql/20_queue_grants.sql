-- Task queue: who may do what (permissions enqueue, work, read and manage,
-- given with grant_queue; the queue's owner holds them all), hostile queue
-- names, and what DROP EXTENSION does to queues.
CREATE ROLE regress_queue_admin;
CREATE ROLE regress_queue_producer;
CREATE ROLE regress_queue_worker;
CREATE ROLE regress_queue_reader;
CREATE ROLE regress_queue_operator;
CREATE ROLE regress_queue_outsider;

SELECT concurrency.create_queue('orders');
SELECT concurrency.enqueue('orders', '{"order": 1}');
SELECT concurrency.grant_queue('orders', 'regress_queue_producer', '{enqueue}');
SELECT concurrency.grant_queue('orders', 'regress_queue_worker', '{work}');
SELECT concurrency.grant_queue('orders', 'regress_queue_reader', '{read}');
SELECT concurrency.grant_queue('orders', 'regress_queue_operator', ARRAY['manage']);
SELECT concurrency.grant_queue('orders', 'regress_queue_worker', '{work}');   -- again: no error, no new row
SELECT queue, grantee, permission FROM concurrency.queue_permission ORDER BY grantee::text, permission;
-- no permission is a table privilege, except read, which is SELECT on the table
SELECT r AS role, string_agg(p, ',' ORDER BY p) AS table_privileges
  FROM unnest(ARRAY['regress_queue_producer', 'regress_queue_worker', 'regress_queue_reader',
                    'regress_queue_operator']) AS r
  LEFT JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE']) AS p
    ON has_table_privilege(r, 'concurrency."q_orders"', p)
 GROUP BY r ORDER BY r;

-- a producer may enqueue; it may not claim, nor read a payload in any way
SET ROLE regress_queue_producer;
SELECT concurrency.enqueue('orders', '{"order": 2}');
SELECT * FROM concurrency.enqueue_batch('orders', ARRAY['{"order": 3}']::jsonb[]);
SELECT task_id FROM concurrency.dequeue('orders');
\echo :LAST_ERROR_SQLSTATE
SELECT payload FROM concurrency."q_orders";
\echo :LAST_ERROR_SQLSTATE
SELECT queue, ready, leased FROM concurrency.queue_stats WHERE queue = 'orders';
SELECT concurrency.retry_dead('orders');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- a worker may claim (and sees the payloads it claims), heartbeat, complete
-- and fail; it may not enqueue, retry dead tasks, or touch the table itself
SET ROLE regress_queue_worker;
SELECT concurrency.enqueue('orders', '{"order": 4}');
\echo :LAST_ERROR_SQLSTATE
SELECT task_id AS t1, lease_token AS k1, payload FROM concurrency.dequeue('orders', worker => 'w') \gset
SELECT :t1 AS claimed, :'payload' AS payload;
SELECT concurrency.heartbeat('orders', :t1, :k1) IS NOT NULL AS heartbeat;
SELECT concurrency.complete('orders', :t1, :k1);
SELECT task_id AS t2, lease_token AS k2 FROM concurrency.dequeue('orders') \gset
SELECT concurrency.fail('orders', :t2, :k2, 'no stock', '0 seconds');
SELECT concurrency.retry_dead('orders');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM concurrency."q_orders";
\echo :LAST_ERROR_SQLSTATE
UPDATE concurrency."q_orders" SET lease_token = 1, state = 'leased';
\echo :LAST_ERROR_SQLSTATE
DELETE FROM concurrency."q_orders";
\echo :LAST_ERROR_SQLSTATE
SELECT queue, ready, leased FROM concurrency.queue_stats WHERE queue = 'orders';
-- a lost lease is still CE001 for a worker (not a privilege error), and the
-- role is the worker again after the error
SELECT concurrency.complete('orders', :t1, :k1);
\echo :LAST_ERROR_SQLSTATE
SELECT current_user;
RESET ROLE;

-- a reader sees the counts and may SELECT the table; it may not claim or write
SET ROLE regress_queue_reader;
SELECT queue, ready, leased FROM concurrency.queue_stats WHERE queue = 'orders';
SELECT count(*) AS tasks FROM concurrency."q_orders";
SELECT task_id FROM concurrency.dequeue('orders');
\echo :LAST_ERROR_SQLSTATE
UPDATE concurrency."q_orders" SET priority = 9;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- an operator (manage) may retry dead tasks and grant and revoke on the
-- queue; manage is not work
SET ROLE regress_queue_operator;
SELECT task_id AS t3, lease_token AS k3 FROM concurrency.dequeue('orders');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.grant_queue('orders', 'regress_queue_outsider', '{read,enqueue}');
SELECT concurrency.revoke_queue('orders', 'regress_queue_outsider', '{read,enqueue}');
SELECT concurrency.retry_dead('orders');
RESET ROLE;

-- the message names the permission and the queue, the hint the call that grants it

SET ROLE regress_queue_outsider;
SELECT concurrency.enqueue('orders', '{}');
SELECT task_id FROM concurrency.dequeue('orders');
SELECT concurrency.complete('orders', :t2, :k2);
SELECT concurrency.grant_queue('orders', 'regress_queue_outsider', '{work}');

SELECT concurrency.revoke_queue('orders', 'regress_queue_worker', '{work}');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM concurrency.queue_stats WHERE queue = 'orders';
SELECT count(*) FROM concurrency."q_orders";
\echo :LAST_ERROR_SQLSTATE
INSERT INTO concurrency.queue_permission VALUES ('orders', 'regress_queue_outsider', 'work');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- a revoke counts at the next call, in the same session too; revoking read
-- revokes SELECT on the table
SELECT concurrency.revoke_queue('orders', 'regress_queue_worker', '{work}');
SELECT concurrency.revoke_queue('orders', 'regress_queue_reader', '{read}');
SELECT concurrency.revoke_queue('orders', 'regress_queue_reader', '{read}');   -- again: no error
SET ROLE regress_queue_worker;
SELECT task_id FROM concurrency.dequeue('orders');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SET ROLE regress_queue_reader;
SELECT count(*) FROM concurrency."q_orders";
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- bad arguments: nothing changes
SELECT concurrency.grant_queue('orders', 'regress_queue_no_such_role', '{work}');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.grant_queue('orders', 'regress_queue_worker', '{work,steal}');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.grant_queue('orders', 'regress_queue_worker', '{Work}');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.grant_queue('orders', 'regress_queue_worker', '{}');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.grant_queue('orders', 'regress_queue_worker', '{work,NULL}');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.grant_queue('orders', 'regress_queue_worker', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.grant_queue('orders', NULL, '{work}');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.grant_queue('no_such_queue', 'regress_queue_worker', '{work}');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.grant_queue('bad name', 'regress_queue_worker', '{work}');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS worker_rows FROM concurrency.queue_permission WHERE grantee = 'regress_queue_worker'::regrole;

-- 'public' is everyone (stored as grantee 0, shown as -)
SELECT concurrency.grant_queue('orders', 'public', '{enqueue}');
SELECT queue, grantee, permission FROM concurrency.queue_permission WHERE grantee = 0;
SET ROLE regress_queue_outsider;
SELECT concurrency.enqueue('orders', '{"from": "anyone"}') > 0 AS enqueued;
RESET ROLE;
SELECT concurrency.revoke_queue('orders', 'public', '{enqueue}');

-- table GRANTs (the 0.1.0 way) give direct table access and nothing else:
-- the functions ask for permissions (the upgrade from 0.1.0 converts the
-- GRANTs it finds, see test/upgrade)
GRANT SELECT, INSERT ON concurrency."q_orders" TO regress_queue_outsider;
SET ROLE regress_queue_outsider;
SELECT concurrency.enqueue('orders', '{}');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
REVOKE SELECT, INSERT ON concurrency."q_orders" FROM regress_queue_outsider;

-- creating and dropping queues is not for everyone (not for a manager either)
SET ROLE regress_queue_outsider;
SELECT concurrency.create_queue('mine');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.drop_queue('orders');
\echo :LAST_ERROR_SQLSTATE
SET ROLE regress_queue_operator;
SELECT concurrency.drop_queue('orders');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- unless granted: the queue's table then belongs to the role that created it,
-- and only its owner may drop it
GRANT EXECUTE ON FUNCTION concurrency.create_queue(text, interval, integer, interval, integer, integer, boolean, integer, interval, integer, interval) TO regress_queue_admin;
GRANT EXECUTE ON FUNCTION concurrency.drop_queue(text) TO regress_queue_admin;
SET ROLE regress_queue_admin;
SELECT concurrency.create_queue('mine');
SELECT concurrency.enqueue('mine', '{"mine": true}');
SELECT created_by FROM concurrency.queue WHERE name = 'mine';
SELECT concurrency.drop_queue('orders');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT tableowner FROM pg_tables WHERE schemaname = 'concurrency' AND tablename = 'q_mine';
SET ROLE regress_queue_admin;
SELECT concurrency.drop_queue('mine');
RESET ROLE;
REVOKE EXECUTE ON FUNCTION concurrency.create_queue(text, interval, integer, interval, integer, integer, boolean, integer, interval, integer, interval) FROM regress_queue_admin;
REVOKE EXECUTE ON FUNCTION concurrency.drop_queue(text) FROM regress_queue_admin;

-- the privileges on the functions themselves
SELECT p.proname, p.prosecdef AS security_definer,
       has_function_privilege('regress_queue_outsider', p.oid, 'EXECUTE') AS public_may_execute,
       p.proconfig
  FROM pg_proc p
 WHERE p.pronamespace IN ('concurrency'::regnamespace, 'concurrency_internal'::regnamespace)
   AND p.proname IN ('create_queue', 'drop_queue', 'enqueue', 'enqueue_batch', 'dequeue', 'heartbeat',
                     'complete', 'fail', 'retry_dead', 'queue_stats_rows', 'grant_queue', 'revoke_queue',
                     'alter_queue', 'cancel', 'purge', 'task_status', 'complete_batch', 'fail_batch', 'heartbeat_batch')
 ORDER BY p.proname;

-- the task functions do not pin search_path, so everything in their SQL is
-- schema-qualified: an "=" that says yes to everything, ahead of pg_catalog
-- in the caller's search_path, changes nothing
CREATE SCHEMA regress_queue_evil;
CREATE FUNCTION regress_queue_evil.always(bigint, bigint) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR regress_queue_evil.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = regress_queue_evil.always);
CREATE FUNCTION regress_queue_evil.always(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT true';
CREATE OPERATOR regress_queue_evil.= (LEFTARG = text, RIGHTARG = text, FUNCTION = regress_queue_evil.always);
SELECT concurrency.create_queue('evil');
SET search_path = regress_queue_evil, pg_catalog;
SELECT 1::bigint = 2::bigint AS evil_operator_active;
SELECT concurrency.enqueue('evil', '{}') AS e1 \gset
SELECT concurrency.enqueue('evil', '{}', dedupe_key => 'a') AS ea \gset
SELECT concurrency.enqueue('evil', '{}', dedupe_key => 'b') <> :ea AS other_key_other_task;
SELECT task_id AS et, lease_token AS ek FROM concurrency.dequeue('evil') \gset
SELECT concurrency.complete('evil', :et, :ek + 1);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.heartbeat('evil', :et, :ek + 1);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.complete('evil', :et, :ek);
RESET search_path;
SELECT queue, ready, leased FROM concurrency.queue_stats WHERE queue = 'evil';
SELECT concurrency.drop_queue('evil');
DROP SCHEMA regress_queue_evil CASCADE;

-- a hostile queue name is just a name: it names a queue, and nothing else
CREATE TABLE queue_canary (x int);
SELECT concurrency.create_queue('x";DROP/**/TABLE/**/queue_canary;--');
SELECT concurrency.create_queue($q$x');DROP/**/TABLE/**/queue_canary;--$q$);
SELECT concurrency.create_queue('Robert"); DROP TABLE queue_canary;--');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.create_queue('ünïcødé-ÿ');
SELECT concurrency.create_queue(E'back\\slash$$''');
SELECT concurrency.create_queue('"');
SELECT concurrency.create_queue(repeat('é', 24));                       -- 48 bytes: the longest name
SELECT relname, octet_length(relname) AS bytes FROM pg_class
 WHERE relnamespace = 'concurrency'::regnamespace AND relname LIKE 'q\_%' AND relkind = 'r' ORDER BY relname;
SELECT concurrency.enqueue('x";DROP/**/TABLE/**/queue_canary;--', '{"hostile": 1}');
SELECT task_id, payload FROM concurrency.dequeue('x";DROP/**/TABLE/**/queue_canary;--') \gset
SELECT :task_id AS task_id, :'payload' AS payload;
SELECT concurrency.enqueue($q$x');DROP/**/TABLE/**/queue_canary;--$q$, '{"hostile": 2}');
SELECT concurrency.enqueue(repeat('é', 24), '{"long": true}');
SELECT concurrency.enqueue(E'back\\slash$$''', '{"backslash": true}');
SELECT concurrency.enqueue('"', '{"quote": true}');
SELECT obj_description('concurrency."q_back\slash$$''"'::regclass, 'pg_class');
SELECT queue, ready, leased FROM concurrency.queue_stats ORDER BY queue;
SELECT concurrency.drop_queue('x";DROP/**/TABLE/**/queue_canary;--');
SELECT concurrency.drop_queue($q$x');DROP/**/TABLE/**/queue_canary;--$q$);
SELECT concurrency.drop_queue('ünïcødé-ÿ');
SELECT concurrency.drop_queue(E'back\\slash$$''');
SELECT concurrency.drop_queue('"');
SELECT concurrency.drop_queue(repeat('é', 24));
SELECT to_regclass('queue_canary') IS NOT NULL AS canary_alive;
DROP TABLE queue_canary;

-- DROP EXTENSION never silently destroys task data: it refuses while a queue
-- exists; CASCADE (said deliberately) takes the queues with it
DROP EXTENSION concurrency_ext;
\echo :LAST_ERROR_SQLSTATE
BEGIN;
DROP EXTENSION concurrency_ext CASCADE;
SELECT to_regclass('concurrency."q_orders"') AS orders_table;
ROLLBACK;
SELECT count(*) AS orders_tasks_kept FROM concurrency."q_orders";

SELECT concurrency.drop_queue('orders');
DROP ROLE regress_queue_admin;
DROP ROLE regress_queue_producer;
DROP ROLE regress_queue_worker;
DROP ROLE regress_queue_outsider;
DROP ROLE regress_queue_reader;
DROP ROLE regress_queue_operator;
