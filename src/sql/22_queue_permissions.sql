-- ---------------------------------------------------------------------------
-- Queue permissions (least privilege): who may enqueue, work, read or manage
-- a queue, apart from any privilege on its table.
--
-- One row per role and permission. The role is a regrole: its OID, so that a
-- role dropped and re-created under the same name does not inherit the old
-- role's permissions, printed and read back as the role's name, so that
-- pg_dump / pg_restore bring the rows back for the roles of the same names.
-- Grantee 0 (shown as '-') is PUBLIC. Rows of dropped roles are left out of
-- dumps (the filter below) and deleted by grant_queue, revoke_queue and
-- create_queue; a queue dropped with drop_queue takes its rows along (the
-- foreign key), and create_queue deletes any rows of the name it creates.
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
GRANT EXECUTE ON FUNCTION concurrency.alter_queue(text, interval, integer, interval, integer, integer, integer, interval, boolean, integer, interval) TO PUBLIC;

CREATE FUNCTION concurrency.revoke_queue(queue text, role name, permissions text[])
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_revoke_queue';
COMMENT ON FUNCTION concurrency.revoke_queue(text, name, text[]) IS
    'revokes permissions (enqueue, work, read, manage) on a queue from a role (''public'': everyone); needs manage on the queue';
