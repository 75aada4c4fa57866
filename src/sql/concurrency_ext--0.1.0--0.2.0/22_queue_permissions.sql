-- ---------------------------------------------------------------------------
-- 0.1.0 -> 0.2.0: queue permissions (least privilege). The objects are those
-- of src/sql/22_queue_permissions.sql (kept as they were released: this part
-- must not follow later changes to the install part). Then the 0.1.0 table
-- GRANTs are converted into permissions, so that every role keeps calling
-- what it could call (see the end of this file).
-- ---------------------------------------------------------------------------
CREATE TABLE concurrency.queue_permission (
    queue      text    NOT NULL REFERENCES concurrency.queue (name) ON DELETE CASCADE,
    grantee    regrole NOT NULL,
    permission text    NOT NULL CHECK (permission IN ('enqueue', 'work', 'read', 'manage')),
    PRIMARY KEY (queue, grantee, permission)
);
COMMENT ON TABLE concurrency.queue_permission IS
    'permissions on concurrency_ext queues (grantee - is PUBLIC); change them with grant_queue and revoke_queue';
SELECT pg_catalog.pg_extension_config_dump('concurrency.queue_permission',
    'WHERE grantee OPERATOR(pg_catalog.=) 0 OR EXISTS (SELECT FROM pg_catalog.pg_roles AS r '
    'WHERE r.oid OPERATOR(pg_catalog.=) grantee::pg_catalog.oid)');
GRANT SELECT ON concurrency.queue_permission TO PUBLIC;

-- Every change to the table (the functions below, a restore, a superuser's
-- DML) tells every backend to read the permissions again at its next call.
CREATE FUNCTION concurrency.queue_permission_changed()
    RETURNS trigger
    LANGUAGE c
    AS 'MODULE_PATHNAME', 'concurrency_queue_permission_changed';
COMMENT ON FUNCTION concurrency.queue_permission_changed() IS
    'trigger of concurrency.queue_permission: invalidates the permission caches of all backends';
CREATE TRIGGER queue_permission_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON concurrency.queue_permission
    FOR EACH STATEMENT EXECUTE FUNCTION concurrency.queue_permission_changed();

-- Callable by everyone: each checks that the caller holds manage on the
-- queue (its owner and superusers do). They are SECURITY INVOKER and switch
-- to the owner of the permission table, and of the queue's table, only for
-- the statements they run; those run with search_path pinned
-- (src/pg/spi.cpp) and are schema-qualified.
CREATE FUNCTION concurrency.grant_queue(queue text, role name, permissions text[])
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_grant_queue';
COMMENT ON FUNCTION concurrency.grant_queue(text, name, text[]) IS
    'grants permissions (enqueue, work, read, manage) on a queue to a role (''public'': everyone); needs manage on the queue';

-- alter_queue is for the holders of manage (its owner included): it checks
-- that itself (SECURITY DEFINER, search_path pinned), so everyone may call it.
GRANT EXECUTE ON FUNCTION concurrency.alter_queue(text, interval, integer, interval, integer, integer) TO PUBLIC;

CREATE FUNCTION concurrency.revoke_queue(queue text, role name, permissions text[])
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_revoke_queue';
COMMENT ON FUNCTION concurrency.revoke_queue(text, name, text[]) IS
    'revokes permissions (enqueue, work, read, manage) on a queue from a role (''public'': everyone); needs manage on the queue';


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
