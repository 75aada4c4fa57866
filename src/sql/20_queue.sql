-- ---------------------------------------------------------------------------
-- Lease-aware task queue.
--
-- Each queue's tasks live in a table of its own, concurrency."q_<queue>",
-- created at run time by create_queue. Those tables are deliberately NOT
-- members of the extension: pg_dump dumps them (definition, rows, owner and
-- GRANTs) like any other table, and DROP EXTENSION refuses while one exists,
-- because it depends on the extension's schema. The catalog below and the
-- lease token sequence are members, marked with pg_extension_config_dump so
-- that pg_dump keeps their contents.
-- ---------------------------------------------------------------------------

-- One row per queue, with its settings (changed with alter_queue). NULL in
-- retain, key_limit or max_leased: no such setting. The settings added in
-- 0.2.0, then 0.3.0's paused (pause_queue), rate limit, fair and key rate limit, come last, as ALTER TABLE ADD
-- COLUMN puts them in an upgraded one.
CREATE TABLE IF NOT EXISTS concurrency.queue (
    name         text        PRIMARY KEY CHECK (octet_length(name) BETWEEN 1 AND 48),
    lease        interval    NOT NULL CHECK (lease > interval '0'),
    max_attempts integer     NOT NULL CHECK (max_attempts >= 1),
    created_at   timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    created_by   name        NOT NULL DEFAULT CURRENT_USER,
    retain       interval    CHECK (retain > interval '0'),
    key_limit    integer     CHECK (key_limit >= 1),
    max_leased   integer     CHECK (max_leased >= 1),
    paused       boolean     NOT NULL DEFAULT false,
    rate_limit   integer     CHECK (rate_limit >= 1),
    rate_period  interval    CHECK (rate_period > interval '0'),
    fair         boolean     NOT NULL DEFAULT false,
    CONSTRAINT queue_rate_check CHECK ((rate_limit IS NULL) = (rate_period IS NULL)),
    key_rate_limit  integer  CHECK (key_rate_limit >= 1),
    key_rate_period interval CHECK (key_rate_period > interval '0'),
    CONSTRAINT queue_key_rate_check CHECK ((key_rate_limit IS NULL) = (key_rate_period IS NULL))
);
COMMENT ON TABLE concurrency.queue IS
    'catalog of concurrency_ext task queues; each has its tasks in table concurrency."q_<name>"';
SELECT pg_catalog.pg_extension_config_dump('concurrency.queue', '');
GRANT SELECT ON concurrency.queue TO PUBLIC;

-- Lease tokens: every claim takes a fresh value, so that a token names one
-- lease of one task and never comes back. Its position is dumped too, so that
-- a restored database does not issue tokens again that workers may still hold.
CREATE SEQUENCE IF NOT EXISTS concurrency.lease_token AS bigint;
COMMENT ON SEQUENCE concurrency.lease_token IS
    'source of concurrency_ext lease tokens (one value per claim)';
SELECT pg_catalog.pg_extension_config_dump('concurrency.lease_token', '');
-- The queue functions run their statements as the queue's owner (see the
-- permissions below), whoever that is: the sequence must not add a
-- condition of its own.
GRANT USAGE ON SEQUENCE concurrency.lease_token TO PUBLIC;

-- ---------------------------------------------------------------------------
-- Task queue settings: the per-backend cache of them and the catalog trigger
-- that keeps it right (create_queue and alter_queue, which write them, are in
-- 21_queue_lifecycle.sql).
-- ---------------------------------------------------------------------------

-- Plain DML sends no relcache invalidation; this statement trigger sends one
-- for the catalog, so that every backend's queue cache reads the settings
-- again (see src/queue/queue.hpp). Also fires for COPY (pg_restore).
CREATE OR REPLACE FUNCTION concurrency_internal.queue_changed() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'concurrency_queue_changed';
COMMENT ON FUNCTION concurrency_internal.queue_changed() IS
    'trigger: invalidates the backends'' queue caches after a change of concurrency.queue';
REVOKE EXECUTE ON FUNCTION concurrency_internal.queue_changed() FROM PUBLIC;
CREATE OR REPLACE TRIGGER queue_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON concurrency.queue
    FOR EACH STATEMENT EXECUTE FUNCTION concurrency_internal.queue_changed();

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
CREATE TABLE IF NOT EXISTS concurrency.queue_permission (
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
CREATE OR REPLACE FUNCTION concurrency_internal.queue_permission_changed()
    RETURNS trigger
    LANGUAGE c
    AS 'MODULE_PATHNAME', 'concurrency_queue_permission_changed';
COMMENT ON FUNCTION concurrency_internal.queue_permission_changed() IS
    'trigger of concurrency.queue_permission: invalidates the permission caches of all backends';
CREATE OR REPLACE TRIGGER queue_permission_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON concurrency.queue_permission
    FOR EACH STATEMENT EXECUTE FUNCTION concurrency_internal.queue_permission_changed();

-- Callable by everyone: each checks that the caller holds manage on the
-- queue (its owner and superusers do). They are SECURITY INVOKER and switch
-- to the owner of the permission table, and of the queue's table, only for
-- the statements they run; those run with search_path pinned
-- (src/pg/spi.cpp) and are schema-qualified.
CREATE OR REPLACE FUNCTION concurrency.grant_queue(queue text, role name, permissions text[])
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_grant_queue';
COMMENT ON FUNCTION concurrency.grant_queue(text, name, text[]) IS
    'grants permissions (enqueue, work, read, manage) on a queue to a role (''public'': everyone); needs manage on the queue';

CREATE OR REPLACE FUNCTION concurrency.revoke_queue(queue text, role name, permissions text[])
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_revoke_queue';
COMMENT ON FUNCTION concurrency.revoke_queue(text, name, text[]) IS
    'revokes permissions (enqueue, work, read, manage) on a queue from a role (''public'': everyone); needs manage on the queue';

-- ---------------------------------------------------------------------------
-- concurrency_monitor: a role whose members hold permission read on every
-- queue of every database where the extension is installed, present and
-- future — for metrics exporters and dashboards, as pg_monitor is for the
-- server's own statistics: GRANT concurrency_monitor TO postgres_exporter.
-- It gives read through the functions (queue_stats, queue_keys, task_status),
-- not SELECT on the queues' tables.
--
-- Roles belong to the cluster, not to a database: the first CREATE EXTENSION
-- (or ALTER EXTENSION ... UPDATE) creates it, later ones find it; DROP
-- EXTENSION leaves it (DROP ROLE it when no database uses the extension).
-- pg_dump does not dump roles: pg_dumpall --roles-only keeps it and its
-- members, and a restore into a cluster without it creates it again with the
-- extension.
-- ---------------------------------------------------------------------------
DO $monitor$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) 'concurrency_monitor') THEN
        -- CREATE EXTENSION in another database at the same time may create
        -- it first: its commit makes this CREATE ROLE fail on the unique
        -- index of role names, and the role is there
        BEGIN
            CREATE ROLE concurrency_monitor NOLOGIN;
            COMMENT ON ROLE concurrency_monitor IS
                'members hold permission read on every concurrency_ext queue (counts, keys, task status), present and future';
        EXCEPTION WHEN unique_violation OR duplicate_object THEN
            NULL;
        END;
    END IF;
END
$monitor$;
