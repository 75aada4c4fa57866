-- ---------------------------------------------------------------------------
-- 0.1.0 -> 0.2.0: queue permissions. The objects (the table
-- concurrency.queue_permission, grant_queue, revoke_queue) come from the
-- install part 22_queue_permissions.sql, which runs before this part. Here the
-- 0.1.0 table GRANTs are converted into permissions, so that every role keeps
-- calling what it could call.
-- ---------------------------------------------------------------------------

-- In 0.1.0 the privileges on a queue's table decided which functions a role
-- could call. Each role (or PUBLIC) that held a table privilege gets the
-- permissions for the same calls:
--   SELECT and INSERT -> enqueue (enqueue, enqueue_batch)
--   SELECT and UPDATE -> work    (dequeue, heartbeat, fail; complete needed DELETE too)
--   SELECT            -> read    (queue_stats counts; read is SELECT on the table)
-- The table privileges themselves are left as they are: revoking them is the
-- operator's decision (docs/queue.md, "Upgrading from 0.1.0"). The owner of
-- the table holds every permission anyway. retry_dead needs manage in 0.2.0,
-- which is not given here: in 0.1.0 every worker could call it, and manage
-- also lets a role cancel, purge, alter the queue and grant on it; a role
-- that called retry_dead gets 42501 with the grant_queue call in the HINT.
INSERT INTO concurrency.queue_permission (queue, grantee, permission)
SELECT q.name, a.grantee::pg_catalog.regrole, p.permission
  FROM concurrency.queue AS q
  JOIN pg_catalog.pg_class AS c
    ON c.relnamespace = 'concurrency'::pg_catalog.regnamespace
   AND c.relname OPERATOR(pg_catalog.=) ('q_' OPERATOR(pg_catalog.||) q.name)
   AND c.relkind OPERATOR(pg_catalog.=) 'r'
 CROSS JOIN LATERAL (
       SELECT e.grantee, pg_catalog.array_agg(e.privilege_type) AS privileges
         FROM pg_catalog.aclexplode(c.relacl) AS e
        WHERE e.grantee OPERATOR(pg_catalog.<>) c.relowner
        GROUP BY e.grantee) AS a
 CROSS JOIN LATERAL (VALUES
       ('enqueue', a.privileges OPERATOR(pg_catalog.@>) ARRAY['SELECT', 'INSERT']),
       ('work', a.privileges OPERATOR(pg_catalog.@>) ARRAY['SELECT', 'UPDATE']),
       ('read', a.privileges OPERATOR(pg_catalog.@>) ARRAY['SELECT'])) AS p(permission, held)
 WHERE p.held
   AND (a.grantee OPERATOR(pg_catalog.=) 0
        OR EXISTS (SELECT FROM pg_catalog.pg_roles AS r WHERE r.oid OPERATOR(pg_catalog.=) a.grantee));
