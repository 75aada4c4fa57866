-- generated from src/sql/concurrency_ext--0.3.0--0.4.0/ and the install parts src/sql/NN_*.sql by make upgrade-scripts: edit those
\echo Use "ALTER EXTENSION concurrency_ext UPDATE" to load this file. \quit
-- concurrency_ext lives in its own schema. The script creates it, so that it is
-- a member of the extension: DROP EXTENSION removes it, and refuses (unless
-- CASCADE) while queue tables, which are user data, are still in it.
CREATE SCHEMA IF NOT EXISTS concurrency;
GRANT USAGE ON SCHEMA concurrency TO PUBLIC;

-- concurrency.version() — the version of the loaded C++ module.
CREATE OR REPLACE FUNCTION concurrency.version() RETURNS text
    LANGUAGE c STABLE PARALLEL SAFE
    AS 'MODULE_PATHNAME', 'concurrency_version';
COMMENT ON FUNCTION concurrency.version() IS 'version of the loaded concurrency_ext module';


-- concurrency_internal: what is no API (routed functions of distributed queues, trigger
-- functions, the rows behind views), so that \df concurrency.* lists the public API only.
CREATE SCHEMA IF NOT EXISTS concurrency_internal;
REVOKE ALL ON SCHEMA concurrency_internal FROM PUBLIC;
COMMENT ON SCHEMA concurrency_internal IS
    'internal functions of concurrency_ext (routed functions of distributed queues, trigger functions, the rows behind views); not an API: PUBLIC cannot use it';
-- ---------------------------------------------------------------------------
-- concurrency_ext 0.3.0 -> 0.4.0: the parts of src/sql/concurrency_ext--0.3.0--0.4.0/
-- (what turns 0.3.0's tables and data into 0.4.0's) and every install part
-- (each runs again over 0.3.0's version of its objects), applied in the
-- order of their file names. Every part must keep the data of a live
-- 0.3.0 installation (local and distributed queues with leased, scheduled
-- and dead tasks, keys, permissions, schedules, dependencies, registered
-- subsystems, lock history), and the result must equal a fresh install
-- (scripts/upgrade-check.sh).
-- ---------------------------------------------------------------------------
-- ---------------------------------------------------------------------------
-- Named advisory locks: the registry of subsystems and their fixed keys.
-- ---------------------------------------------------------------------------

-- One row per subsystem. `key` is the bigint advisory-lock key of the
-- subsystem lock itself (exactly pg_advisory_lock(key)); `slot` is a small
-- number assigned at registration that identifies the subsystem's resource
-- locks in the lock manager (the 16-bit objsubid field of the advisory lock
-- tag, 16–65535: above PostgreSQL's 1 and 2 and Citus's 4–15).
CREATE TABLE IF NOT EXISTS concurrency.subsystem (
    name          text        PRIMARY KEY,
    key           bigint      NOT NULL UNIQUE,
    slot          integer     NOT NULL UNIQUE CHECK (slot BETWEEN 16 AND 65535),
    description   text,
    xact_only     boolean     NOT NULL DEFAULT false,
    registered_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    registered_by name        NOT NULL DEFAULT current_user
);
COMMENT ON TABLE concurrency.subsystem IS
    'registry of named advisory-lock subsystems and their fixed keys';
SELECT pg_catalog.pg_extension_config_dump('concurrency.subsystem', '');
GRANT SELECT ON concurrency.subsystem TO PUBLIC;

-- Plain DML sends no relcache invalidation; this statement trigger sends one
-- for the registry table, so that every backend's name → key cache drops its
-- copy (see src/locks/registry.hpp). Also fires for COPY (pg_restore).
CREATE OR REPLACE FUNCTION concurrency_internal.subsystem_changed() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'concurrency_subsystem_changed';
COMMENT ON FUNCTION concurrency_internal.subsystem_changed() IS
    'trigger: invalidates the backends'' subsystem name caches after a registry change';
REVOKE EXECUTE ON FUNCTION concurrency_internal.subsystem_changed() FROM PUBLIC;
CREATE OR REPLACE TRIGGER subsystem_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON concurrency.subsystem
    FOR EACH STATEMENT EXECUTE FUNCTION concurrency_internal.subsystem_changed();

-- Registration: admin-only (the extension owner and superusers) by default.
-- To delegate, GRANT EXECUTE on both functions and INSERT, UPDATE, DELETE on
-- concurrency.subsystem.
CREATE OR REPLACE FUNCTION concurrency.register_subsystem(name text, key bigint, description text DEFAULT NULL,
                                               xact_only boolean DEFAULT NULL)
    RETURNS void LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_register_subsystem';
COMMENT ON FUNCTION concurrency.register_subsystem(text, bigint, text, boolean) IS
    'registers a subsystem under a fixed advisory-lock key (again with the same key: no error, description and xact_only updated when given)';
REVOKE EXECUTE ON FUNCTION concurrency.register_subsystem(text, bigint, text, boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION concurrency.unregister_subsystem(name text) RETURNS boolean
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_unregister_subsystem';
COMMENT ON FUNCTION concurrency.unregister_subsystem(text) IS
    'removes a subsystem from the registry; false if it was not registered';
REVOKE EXECUTE ON FUNCTION concurrency.unregister_subsystem(text) FROM PUBLIC;

-- Taking locks: any role, as with pg_advisory_lock. Not STRICT: a NULL name
-- raises 22004 instead of silently skipping the lock. No SET search_path
-- clause (a GUC save/restore on every call): the lock path runs no SQL, and
-- the C code pins search_path around the SPI statements it runs elsewhere.
CREATE OR REPLACE FUNCTION concurrency.xact_lock(name text, resource bigint DEFAULT NULL, timeout interval DEFAULT NULL,
                                      shared boolean DEFAULT false)
    RETURNS void LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_xact_lock';
COMMENT ON FUNCTION concurrency.xact_lock(text, bigint, interval, boolean) IS
    'takes the named lock (or the lock on one resource of the subsystem) until the end of the transaction; waits, at most timeout';

CREATE OR REPLACE FUNCTION concurrency.try_xact_lock(name text, resource bigint DEFAULT NULL, shared boolean DEFAULT false)
    RETURNS boolean LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_try_xact_lock';
COMMENT ON FUNCTION concurrency.try_xact_lock(text, bigint, boolean) IS
    'takes the named lock until the end of the transaction if it is free; never waits';

CREATE OR REPLACE FUNCTION concurrency.xact_lock(names text[], timeout interval DEFAULT NULL)
    RETURNS void LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_xact_lock_many';
COMMENT ON FUNCTION concurrency.xact_lock(text[], interval) IS
    'takes several subsystem locks until the end of the transaction, in ascending key order (no deadlock between callers); timeout bounds the whole call';

CREATE OR REPLACE FUNCTION concurrency.session_lock(name text, resource bigint DEFAULT NULL, timeout interval DEFAULT NULL,
                                         shared boolean DEFAULT false)
    RETURNS void LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_session_lock';
COMMENT ON FUNCTION concurrency.session_lock(text, bigint, interval, boolean) IS
    'takes the named lock until session_unlock or the end of the session (dedicated connections only); re-entrant';

CREATE OR REPLACE FUNCTION concurrency.try_session_lock(name text, resource bigint DEFAULT NULL, shared boolean DEFAULT false)
    RETURNS boolean LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_try_session_lock';
COMMENT ON FUNCTION concurrency.try_session_lock(text, bigint, boolean) IS
    'takes the named session-level lock if it is free; never waits';

CREATE OR REPLACE FUNCTION concurrency.session_unlock(name text, resource bigint DEFAULT NULL, shared boolean DEFAULT false)
    RETURNS boolean LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_session_unlock';
COMMENT ON FUNCTION concurrency.session_unlock(text, bigint, boolean) IS
    'releases one hold of a named session-level lock; false (with a WARNING) if this session holds none';

-- ---------------------------------------------------------------------------
-- Seeing named locks.
-- ---------------------------------------------------------------------------

-- The hold counts this backend keeps for what it took through the named
-- functions, with the lock tag as pg_locks shows it (for the view below).
CREATE OR REPLACE FUNCTION concurrency_internal.my_named_locks(
        OUT name text, OUT resource bigint, OUT level text, OUT mode text, OUT count bigint,
        OUT lock_classid oid, OUT lock_objid oid, OUT lock_objsubid integer)
    RETURNS SETOF record LANGUAGE c VOLATILE ROWS 10
    AS 'MODULE_PATHNAME', 'concurrency_my_named_locks';
COMMENT ON FUNCTION concurrency_internal.my_named_locks() IS
    'hold counts of the named locks taken by this backend (behind the view concurrency.my_locks)';

-- Only what the lock manager still shows as held: a raw pg_advisory_unlock_all()
-- releases named session locks without our functions knowing.
CREATE OR REPLACE VIEW concurrency.my_locks AS
SELECT m.name, m.resource, m.level, m.mode, m.count
  FROM concurrency_internal.my_named_locks() m
 WHERE EXISTS (SELECT FROM pg_catalog.pg_locks l
                WHERE l.locktype = 'advisory' AND l.granted
                  AND l.pid = pg_catalog.pg_backend_pid()
                  AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d
                                     WHERE d.datname = pg_catalog.current_database())
                  AND l.classid = m.lock_classid AND l.objid = m.lock_objid
                  AND (l.objsubid::integer & 65535) = m.lock_objsubid
                  AND l.mode = m.mode);
COMMENT ON VIEW concurrency.my_locks IS
    'named locks held by the current backend: name, resource, level (session/transaction), mode and hold count';
GRANT SELECT ON concurrency.my_locks TO PUBLIC;

-- ---------------------------------------------------------------------------
-- Named locks on several resources of one subsystem in one ordered call.
-- ---------------------------------------------------------------------------

-- Several resources of one subsystem (two accounts of a transfer): each taken
-- once, in ascending order, so that two callers over the same resources never
-- deadlock on them. NULL array or element: 22004; an empty array: nothing.
CREATE OR REPLACE FUNCTION concurrency.xact_lock_all(name text, resources bigint[], timeout interval DEFAULT NULL,
                                          shared boolean DEFAULT false)
    RETURNS void LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_xact_lock_all';
COMMENT ON FUNCTION concurrency.xact_lock_all(text, bigint[], interval, boolean) IS
    'takes the locks on several resources of one subsystem until the end of the transaction, each once, in ascending order (no deadlock between callers); timeout bounds the whole call';

CREATE OR REPLACE FUNCTION concurrency.try_xact_lock_all(name text, resources bigint[], shared boolean DEFAULT false)
    RETURNS boolean LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_try_xact_lock_all';
COMMENT ON FUNCTION concurrency.try_xact_lock_all(text, bigint[], boolean) IS
    'takes the locks on all the given resources of one subsystem if every one is free, else none; never waits';

-- ---------------------------------------------------------------------------
-- Which registered subsystem each advisory lock of pg_locks belongs to.
-- ---------------------------------------------------------------------------

-- Which named lock an advisory lock of pg_locks is: the subsystem, and the
-- resource for a resource lock; no row when it is no registered subsystem's.
-- The tag is decoded by the same C++ code that encodes it for the lock calls
-- (src/locks/lock_keys.hpp), against the same registry cache; pg_locks shows
-- objsubid as a signed smallint (slots above 32767 appear negative), which it
-- takes as the 16-bit field it is.
CREATE OR REPLACE FUNCTION concurrency.named_lock(classid oid, objid oid, objsubid smallint)
    RETURNS TABLE (subsystem text, resource bigint) LANGUAGE c STABLE ROWS 1
    AS 'MODULE_PATHNAME', 'concurrency_named_lock';
COMMENT ON FUNCTION concurrency.named_lock(oid, oid, smallint) IS
    'the registered subsystem (and resource) that an advisory lock of pg_locks belongs to; no row when none';

-- Every advisory lock of the current database that belongs to a registered
-- subsystem, held or awaited.
CREATE OR REPLACE VIEW concurrency.held_locks AS
WITH advisory AS MATERIALIZED (
    SELECT l.classid, l.objid, l.objsubid, l.mode, l.granted, l.pid
      FROM pg_catalog.pg_locks l
     WHERE l.locktype = 'advisory'
       AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d
                          WHERE d.datname = pg_catalog.current_database())
), named AS (
    SELECT n.subsystem, n.resource, l.mode, l.granted, l.pid
      FROM advisory l
     CROSS JOIN LATERAL concurrency.named_lock(l.classid, l.objid, l.objsubid) n
)
SELECT n.subsystem, n.resource, n.mode, n.granted, n.pid,
       a.state, a.application_name AS application,
       CASE WHEN a.xact_start IS NOT NULL THEN a.xact_start ELSE a.state_change END AS since,
       n.granted AND a.state = 'idle' AS suspect_leak
  FROM named n
  LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = n.pid;
COMMENT ON VIEW concurrency.held_locks IS
    'every named lock of the current database, held or awaited, with its holder''s state; suspect_leak: held by a session idle outside any transaction';
GRANT SELECT ON concurrency.held_locks TO PUBLIC;
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
-- ---------------------------------------------------------------------------
-- Task queue 0.3.0 -> 0.4.0: every queue's table (a distributed queue's too:
-- Citus sends the ALTER to its shards) gets the columns of durable workflows
-- (steps, awaiting) and the mark of finally-children (after_ends), last, as
-- create_queue makes them. Tasks of every state stay as they are (no task of
-- 0.3.0 is a finally-child: after_ends stays NULL); a queue created after the
-- new library was installed but before this update has them already.
-- ---------------------------------------------------------------------------

DO $upgrade$
DECLARE
    q record;
BEGIN
    FOR q IN SELECT name FROM concurrency.queue ORDER BY name LOOP
        IF pg_catalog.to_regclass(pg_catalog.format('concurrency.%I', 'q_' || q.name)) IS NOT NULL THEN
            EXECUTE pg_catalog.format('ALTER TABLE concurrency.%I ADD COLUMN IF NOT EXISTS steps jsonb, '
                                      'ADD COLUMN IF NOT EXISTS awaiting text, '
                                      'ADD COLUMN IF NOT EXISTS after_ends boolean', 'q_' || q.name);
        END IF;
    END LOOP;
END
$upgrade$;
-- ---------------------------------------------------------------------------
-- The task's lifecycle (src/queue/lifecycle/): creating and dropping queues
-- and their settings (admin.cpp), adding tasks (enqueue.cpp), claiming them
-- (claim.cpp), finishing them (finish.cpp), pausing a queue (admin.cpp) and
-- what is there to see (inspect.cpp). The catalog these write, its trigger and
-- the permissions are the hall's (20_queue.sql).
-- ---------------------------------------------------------------------------

-- Creating and dropping queues is for the extension owner and superusers,
-- unless EXECUTE is granted (create_queue and alter_queue below). They run as their owner (SECURITY DEFINER) so that such a grant is all a
-- role needs: only a role that owns a queue's table may drop the queue.
CREATE OR REPLACE FUNCTION concurrency.drop_queue(queue text)
    RETURNS void
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_drop_queue';
COMMENT ON FUNCTION concurrency.drop_queue(text) IS
    'drops the task queue with all its tasks';
REVOKE ALL ON FUNCTION concurrency.drop_queue(text) FROM PUBLIC;

-- The task functions are SECURITY INVOKER: each checks that the caller holds
-- its permission on the queue (enqueue, work, read or manage; see
-- 20_queue.sql and src/queue/permissions.hpp), then runs its
-- statements as the queue table's owner. The caller needs no privilege on
-- the table. No SET search_path clause (it would cost a GUC save and restore
-- per call of these hot functions): the C code pins search_path around its
-- SPI statements (src/pg/spi.cpp), and those statements are schema-qualified
-- throughout as well (src/queue/queue_sql.cpp).
CREATE OR REPLACE FUNCTION concurrency.fail(queue text, task_id bigint, lease_token bigint, error text DEFAULT NULL,
                                 retry_in interval DEFAULT NULL)
    RETURNS text
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_fail';
COMMENT ON FUNCTION concurrency.fail(text, bigint, bigint, text, interval) IS
    'records a failed attempt of a task held with lease_token; retries it after retry_in (or an exponential backoff) or marks it dead; returns ''ready'' or ''dead''';

CREATE OR REPLACE FUNCTION concurrency.retry_dead(queue text, task_ids bigint[] DEFAULT NULL)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_retry_dead';
COMMENT ON FUNCTION concurrency.retry_dead(text, bigint[]) IS
    'makes dead tasks (all when task_ids is NULL) ready again with a fresh attempt budget; returns how many';

-- ---------------------------------------------------------------------------
-- Task queue: create_queue and alter_queue, with every setting of 0.3.0
-- (rate_limit, rate_period, fair, key_rate_limit, key_rate_period); the catalog they write and its trigger are in
-- 20_queue.sql.
-- ---------------------------------------------------------------------------

-- Creating queues is for the extension owner and superusers, unless EXECUTE
-- is granted. It runs as its owner (SECURITY DEFINER) so that such a grant is
-- all a role needs: the queue table it creates belongs to it (drop_queue,
-- above, works the same way).
CREATE OR REPLACE FUNCTION concurrency.create_queue(queue text, lease interval DEFAULT '30 seconds',
                                         max_attempts integer DEFAULT 5, retain interval DEFAULT NULL,
                                         key_limit integer DEFAULT NULL, max_leased integer DEFAULT NULL,
                                         distributed boolean DEFAULT false, rate_limit integer DEFAULT NULL,
                                         rate_period interval DEFAULT NULL, key_rate_limit integer DEFAULT NULL,
                                         key_rate_period interval DEFAULT NULL)
    RETURNS void
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_create_queue';
COMMENT ON FUNCTION concurrency.create_queue(text, interval, integer, interval, integer, integer, boolean, integer, interval, integer, interval) IS
    'creates the task queue with its table concurrency."q_<queue>"; the same settings again is a no-op, other settings are an error (see alter_queue); distributed => true also makes it a Citus distributed queue (on a coordinator; see distribute_queue); rate_limit claims at most in any rate_period, key_rate_limit claims of each concurrency key in any key_rate_period';
REVOKE ALL ON FUNCTION concurrency.create_queue(text, interval, integer, interval, integer, integer, boolean, integer, interval, integer, interval) FROM PUBLIC;

CREATE OR REPLACE FUNCTION concurrency.alter_queue(queue text, lease interval DEFAULT NULL, max_attempts integer DEFAULT NULL,
                                        retain interval DEFAULT NULL, key_limit integer DEFAULT NULL,
                                        max_leased integer DEFAULT NULL, rate_limit integer DEFAULT NULL,
                                        rate_period interval DEFAULT NULL, fair boolean DEFAULT NULL,
                                        key_rate_limit integer DEFAULT NULL, key_rate_period interval DEFAULT NULL)
    RETURNS void
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_alter_queue';
COMMENT ON FUNCTION concurrency.alter_queue(text, interval, integer, interval, integer, integer, integer, interval, boolean, integer, interval) IS
    'changes settings of a queue in place: NULL keeps a setting; retain => ''0'', key_limit => 0, max_leased => 0, rate_limit => 0, key_rate_limit => 0 remove it; fair => true rotates claims among concurrency keys';
REVOKE ALL ON FUNCTION concurrency.alter_queue(text, interval, integer, interval, integer, integer, integer, interval, boolean, integer, interval) FROM PUBLIC;
-- alter_queue is for the holders of manage (its owner included): it checks
-- that itself (SECURITY DEFINER, search_path pinned), so everyone may call it.
GRANT EXECUTE ON FUNCTION concurrency.alter_queue(text, interval, integer, interval, integer, integer, integer, interval, boolean, integer, interval) TO PUBLIC;

-- ---------------------------------------------------------------------------
-- Task queue: enqueue and enqueue_batch (docs/queue.md, "Deduplication"). With a dedupe_key
-- whose holder exists, on_conflict says what happens: 'ignore' (the default)
-- returns the holder's id and changes nothing; 'replace' gives the holder
-- the new payload, run_at and priority if it has not started (ready,
-- scheduled, blocked by its key or waiting for its parents), and returns its
-- id (a debounce). With after, a new task waits for those tasks
-- (23_queue_graphs.sql). Like the other task functions, SECURITY
-- INVOKER without SET search_path.
-- ---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION concurrency.enqueue(queue text, payload jsonb DEFAULT '{}', run_at timestamptz DEFAULT NULL,
                                    priority integer DEFAULT 0, dedupe_key text DEFAULT NULL,
                                    concurrency_key text DEFAULT NULL, on_conflict text DEFAULT 'ignore',
                                    after bigint[] DEFAULT NULL)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_enqueue';
COMMENT ON FUNCTION concurrency.enqueue(text, jsonb, timestamptz, integer, text, text, text, bigint[]) IS
    'adds a task and returns its id (the id of the task holding dedupe_key, live or retained as done, if any; with on_conflict => ''replace'', a holder not yet started takes the new payload, run_at and priority); a new task with after waits until those tasks of the queue are done; notifies channel concurrency_<queue> at commit';

CREATE OR REPLACE FUNCTION concurrency.enqueue_batch(queue text, payloads jsonb[], run_at timestamptz DEFAULT NULL,
                                          priority integer DEFAULT 0, dedupe_keys text[] DEFAULT NULL,
                                          concurrency_keys text[] DEFAULT NULL, after bigint[] DEFAULT NULL)
    RETURNS SETOF bigint
    LANGUAGE c VOLATILE ROWS 100
    AS 'MODULE_PATHNAME', 'concurrency_enqueue_batch';
COMMENT ON FUNCTION concurrency.enqueue_batch(text, jsonb[], timestamptz, integer, text[], text[], bigint[]) IS
    'adds one task per payload in one statement and returns their ids in payload order (per-element dedupe and concurrency keys; the new tasks wait for the tasks of the queue in after)';

-- ---------------------------------------------------------------------------
-- Task queue: waiting for work, handing it back, reporting progress
-- (docs/queue.md, "Waiting for work"; src/queue/time/wait.hpp). Like the other
-- task functions these are SECURITY INVOKER and check the caller's queue
-- permission themselves (work, or read for task_status).
-- ---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION concurrency.dequeue(queue text, batch integer DEFAULT 1, lease interval DEFAULT NULL,
                                    worker text DEFAULT NULL, wait interval DEFAULT NULL)
    RETURNS TABLE (task_id bigint, lease_token bigint, attempt integer, payload jsonb,
                   enqueued_at timestamptz, lease_expires_at timestamptz)
    LANGUAGE c VOLATILE ROWS 1
    AS 'MODULE_PATHNAME', 'concurrency_dequeue';
COMMENT ON FUNCTION concurrency.dequeue(text, integer, interval, text, interval) IS
    'claims up to batch ready tasks (or tasks whose lease expired) without waiting for other workers; each claim gets a new lease token; with wait, a call that finds nothing sleeps until a commit, a due task or an expired lease makes one claimable, for at most wait';

CREATE OR REPLACE FUNCTION concurrency.heartbeat(queue text, task_id bigint, lease_token bigint,
                                      extend interval DEFAULT NULL, progress jsonb DEFAULT NULL)
    RETURNS timestamptz
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_heartbeat';
COMMENT ON FUNCTION concurrency.heartbeat(text, bigint, bigint, interval, jsonb) IS
    'extends the lease of a task held with lease_token (by the queue''s lease when extend is NULL) and stores progress when given (shown by task_status); returns the new deadline; SQLSTATE CE001 if the lease was lost';

CREATE OR REPLACE FUNCTION concurrency.heartbeat_batch(queue text, task_ids bigint[], lease_tokens bigint[],
                                            extend interval DEFAULT NULL, progress jsonb[] DEFAULT NULL)
    RETURNS timestamptz
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_heartbeat_many';
COMMENT ON FUNCTION concurrency.heartbeat_batch(text, bigint[], bigint[], interval, jsonb[]) IS
    'extends the leases of the tasks held with the lease tokens at the same positions, all or none (SQLSTATE CE001 naming a lost lease), and stores the progress at the same positions when given; returns the new deadline';

CREATE OR REPLACE FUNCTION concurrency.release(queue text, task_id bigint, lease_token bigint, run_at timestamptz DEFAULT NULL)
    RETURNS boolean
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_release';
COMMENT ON FUNCTION concurrency.release(text, bigint, bigint, timestamptz) IS
    'hands a task held with lease_token back unstarted: ready again in its place (or scheduled at run_at), the attempt not counted, the token fenced off; returns true; SQLSTATE CE001 if the lease was lost';

CREATE OR REPLACE FUNCTION concurrency.release_batch(queue text, task_ids bigint[], lease_tokens bigint[],
                                          run_at timestamptz DEFAULT NULL)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_release_many';
COMMENT ON FUNCTION concurrency.release_batch(text, bigint[], bigint[], timestamptz) IS
    'hands the tasks held with the lease tokens at the same positions back unstarted, all or none (SQLSTATE CE001 naming a lost lease); returns how many';

CREATE OR REPLACE FUNCTION concurrency.task_status(queue text, id bigint)
    RETURNS TABLE (task_id bigint, state text, attempt integer, priority integer, run_at timestamptz,
                   enqueued_at timestamptz, lease_expires_at timestamptz, worker text, last_error text,
                   finished_at timestamptz, result jsonb, dedupe_key text, concurrency_key text,
                   progress jsonb, parents_open integer)
    LANGUAGE c VOLATILE ROWS 1
    AS 'MODULE_PATHNAME', 'concurrency_task_status';
COMMENT ON FUNCTION concurrency.task_status(text, bigint) IS
    'what became of a task: one row (state, attempt, times, worker, last error, result, keys, the progress of a task not finished yet, and how many parents a waiting task waits for), or none if it does not exist (any more)';

-- ---------------------------------------------------------------------------
-- Task queue: adding tasks (with dedupe and concurrency keys), finishing them
-- (kept as done with a result while the queue retains tasks), batch forms,
-- cancel, purge and task_status. SECURITY INVOKER, without a SET search_path
-- clause, like the other task functions (see above).
-- ---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION concurrency.complete(queue text, task_id bigint, lease_token bigint, result jsonb DEFAULT NULL)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_complete';
COMMENT ON FUNCTION concurrency.complete(text, bigint, bigint, jsonb) IS
    'finishes a task held with lease_token: kept as done with its result when the queue retains tasks, removed otherwise; SQLSTATE CE001 if the lease was lost or the task is gone';

-- Batch forms of complete, heartbeat and fail: all or nothing (one lease
-- lost: CE001 naming that task, and the call changes nothing). Their own
-- names, not overloads of complete, heartbeat and fail: an overload taking
-- bigint[] where the 0.1.0 function takes bigint would make every call with
-- untyped parameters ambiguous (42725) - the way pgx, asyncpg and
-- node-postgres send them - and so break the workers written for 0.1.0.
CREATE OR REPLACE FUNCTION concurrency.complete_batch(queue text, task_ids bigint[], lease_tokens bigint[])
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_complete_many';
COMMENT ON FUNCTION concurrency.complete_batch(text, bigint[], bigint[]) IS
    'finishes the tasks held with the lease tokens at the same positions, all or none (SQLSTATE CE001 naming a lost lease); returns how many';

CREATE OR REPLACE FUNCTION concurrency.fail_batch(queue text, task_ids bigint[], lease_tokens bigint[], error text DEFAULT NULL,
                                       retry_in interval DEFAULT NULL)
    RETURNS TABLE (task_id bigint, state text)
    LANGUAGE c VOLATILE ROWS 10
    AS 'MODULE_PATHNAME', 'concurrency_fail_many';
COMMENT ON FUNCTION concurrency.fail_batch(text, bigint[], bigint[], text, interval) IS
    'records a failed attempt of each task held with the lease tokens at the same positions, all or none (SQLSTATE CE001 naming a lost lease); returns each task''s new state, ''ready'' or ''dead''';

CREATE OR REPLACE FUNCTION concurrency.cancel(queue text, task_ids bigint[])
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_cancel';
COMMENT ON FUNCTION concurrency.cancel(text, bigint[]) IS
    'cancels tasks in any state but done: a holder of a cancelled lease gets SQLSTATE CE001 at its next heartbeat, complete or fail; returns how many were cancelled';

CREATE OR REPLACE FUNCTION concurrency.purge(queue text)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_purge';
COMMENT ON FUNCTION concurrency.purge(text) IS
    'deletes the done and cancelled tasks whose retention has passed (queue calls do it too, in bounded chunks); returns how many';

-- ---------------------------------------------------------------------------
-- Task queue: pausing a queue (docs/queue.md, "Pausing a queue"). While
-- concurrency.queue.paused is set, dequeue claims nothing (a waiting call
-- keeps waiting and is woken by the resume); enqueue works, and leased tasks
-- may still be heartbeated, completed, failed, released and cancelled. The
-- flag is a column of the catalog, so a pause survives restarts, pg_dump and
-- pg_restore. Like alter_queue these are SECURITY DEFINER (they change the
-- catalog) and check that the caller holds permission manage on the queue.
-- ---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION concurrency.pause_queue(queue text)
    RETURNS boolean
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_pause_queue';
COMMENT ON FUNCTION concurrency.pause_queue(text) IS
    'stops claims from the queue until resume_queue (enqueue, heartbeat, complete, fail and release go on); returns false if it was paused already';

CREATE OR REPLACE FUNCTION concurrency.resume_queue(queue text)
    RETURNS boolean
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_resume_queue';
COMMENT ON FUNCTION concurrency.resume_queue(text) IS
    'lets workers claim from a paused queue again, waking its waiting dequeue calls at commit; returns false if it was not paused';

-- ---------------------------------------------------------------------------
-- Task queue: counts per queue (the view concurrency.queue_stats) and per
-- concurrency key (queue_keys).
-- ---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION concurrency_internal.queue_stats_rows()
    RETURNS TABLE (queue text, ready bigint, scheduled bigint, leased bigint, expired bigint, dead bigint,
                   oldest_ready_age interval, done bigint, cancelled bigint, blocked bigint, waiting bigint)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_queue_stats';
COMMENT ON FUNCTION concurrency_internal.queue_stats_rows() IS
    'rows of the view concurrency.queue_stats';

-- paused (pause_queue) comes from the catalog, which every role may read;
-- 0.3.0's columns come last, where an update adds them
CREATE OR REPLACE VIEW concurrency.queue_stats AS
    SELECT s.queue, s.ready, s.scheduled, s.leased, s.expired, s.dead, s.done, s.cancelled, s.blocked,
           s.oldest_ready_age, q.paused, s.waiting
      FROM concurrency_internal.queue_stats_rows() s
      LEFT JOIN concurrency.queue q ON q.name OPERATOR(pg_catalog.=) s.queue;
COMMENT ON VIEW concurrency.queue_stats IS
    'per queue: tasks ready, scheduled (run_at in the future), leased, expired (lease passed, not yet reclaimed), dead, done and cancelled (retained), blocked (held back by key_limit or max_leased now), the age of the oldest ready task, whether the queue is paused (pause_queue), and tasks waiting for their parents; counts are NULL for queues on which you lack permission read';
GRANT SELECT ON concurrency.queue_stats TO PUBLIC;

CREATE OR REPLACE FUNCTION concurrency.queue_keys(queue text)
    RETURNS TABLE (concurrency_key text, leased bigint, waiting bigint, oldest_waiting_age interval)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_queue_keys';
COMMENT ON FUNCTION concurrency.queue_keys(text) IS
    'per concurrency key with live tasks: how many are leased, how many wait (ready, scheduled or blocked) and since when the oldest waits';

-- ---------------------------------------------------------------------------
-- The names of a queue's relations (src/queue/relation_names.hpp), for the
-- SQL that needs them, so that they are built in one place: its tables
-- q_<queue>, k_, s_, r_, rk_<queue>, and their indexes and identity
-- sequence, named role first since 0.4.0 (ready_q_jobs, pkey_k_jobs,
-- id_seq_q_jobs: no such name is another queue's relation's) and table first
-- before (q_jobs_ready, kept by the queues made then).
-- ---------------------------------------------------------------------------

-- The name (unquoted) of table tbl (tasks, keys, slots, rate, key_rate) of a
-- queue, or with role, of that table's index or identity sequence of that
-- role (pkey, ready, scheduled, leased, dedupe, finished, waiting, dead,
-- keyed, fair, id_seq): the name it has, or, where the table has none
-- (yet), the name it gets. 22023 for a word it does not know.
CREATE OR REPLACE FUNCTION concurrency_internal.queue_relation_name(queue text, tbl text, role text DEFAULT NULL)
    RETURNS text
    LANGUAGE c STABLE PARALLEL SAFE
    AS 'MODULE_PATHNAME', 'concurrency_queue_relation_name';
COMMENT ON FUNCTION concurrency_internal.queue_relation_name(text, text, text) IS
    'the name of a table of a queue (tasks, keys, slots, rate, key_rate), or of its index or identity sequence of a role (pkey, ready, …, id_seq), as it is or will be (internal)';
-- ---------------------------------------------------------------------------
-- Task queue: schedules (docs/queue.md, "Schedules"). A schedule enqueues one
-- task per due time of a cron expression or an interval. There is no
-- scheduler process: dequeue on the schedule's queue turns the due times
-- that have passed into tasks (src/queue/time/schedule.cpp), under the schedule
-- row's lock and in the same transaction that advances last_due, so each
-- due time becomes exactly one task however many workers look at once.
-- ---------------------------------------------------------------------------

-- One row per schedule. last_due: every due time up to it was enqueued or
-- skipped (catch_up); next_run_at: the first due time after it. Extension
-- configuration (pg_dump keeps the rows, and with them last_due, so that a
-- restored database enqueues no due time again); its queue's drop drops it.
CREATE TABLE IF NOT EXISTS concurrency.schedule (
    name            text        PRIMARY KEY CHECK (octet_length(name) BETWEEN 1 AND 200),
    queue           text        NOT NULL REFERENCES concurrency.queue (name) ON DELETE CASCADE,
    cron            text,
    every           interval,
    payload         jsonb       NOT NULL DEFAULT '{}',
    time_zone       text        NOT NULL DEFAULT 'UTC',
    priority        integer     NOT NULL DEFAULT 0,
    concurrency_key text,
    catch_up        integer     NOT NULL DEFAULT 1 CHECK (catch_up BETWEEN 1 AND 1000),
    last_due        timestamptz NOT NULL,
    next_run_at     timestamptz,
    last_run_at     timestamptz,
    last_task_id    bigint,
    skipped         bigint      NOT NULL DEFAULT 0,
    enabled         boolean     NOT NULL DEFAULT true,
    CHECK ((cron IS NULL) <> (every IS NULL))
);
COMMENT ON TABLE concurrency.schedule IS
    'catalog of concurrency_ext schedules (schedule, unschedule; the view concurrency.schedules shows them)';
CREATE INDEX IF NOT EXISTS schedule_queue_next ON concurrency.schedule (queue, next_run_at);
SELECT pg_catalog.pg_extension_config_dump('concurrency.schedule', '');

-- Each backend caches the earliest next_run_at of a queue's schedules, so that
-- a dequeue with nothing due reads no table: this statement trigger (the
-- catalog's own function: it invalidates the relcache entry of the table it
-- fires on) tells every backend to read it again.
CREATE OR REPLACE TRIGGER schedule_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON concurrency.schedule
    FOR EACH STATEMENT EXECUTE FUNCTION concurrency_internal.queue_changed();

-- SECURITY DEFINER (they write the catalog); the caller needs permission
-- manage on the schedule's queue.
CREATE OR REPLACE FUNCTION concurrency.schedule(name text, queue text, cron text DEFAULT NULL, every interval DEFAULT NULL,
                                     payload jsonb DEFAULT '{}', time_zone text DEFAULT 'UTC',
                                     priority integer DEFAULT 0, concurrency_key text DEFAULT NULL,
                                     catch_up integer DEFAULT 1)
    RETURNS void
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_schedule';
COMMENT ON FUNCTION concurrency.schedule(text, text, text, interval, jsonb, text, integer, text, integer) IS
    'enqueues a task into the queue at each due time of cron (in time_zone) or every interval, its payload with "scheduled_for"; the same settings again is a no-op, other settings replace the schedule; needs manage on the queue';

CREATE OR REPLACE FUNCTION concurrency.unschedule(name text)
    RETURNS boolean
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_unschedule';
COMMENT ON FUNCTION concurrency.unschedule(text) IS
    'removes the schedule (its tasks already enqueued stay); false if there is none; needs manage on its queue';

CREATE OR REPLACE FUNCTION concurrency_internal.schedule_rows()
    RETURNS TABLE (name text, queue text, spec text, time_zone text, next_run_at timestamptz,
                   last_run_at timestamptz, last_task_id bigint, enabled boolean, skipped bigint)
    LANGUAGE c STABLE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_schedule_rows';
COMMENT ON FUNCTION concurrency_internal.schedule_rows() IS
    'rows of the view concurrency.schedules';

CREATE OR REPLACE VIEW concurrency.schedules AS
    SELECT s.name, s.queue, s.spec, s.time_zone, s.next_run_at, s.last_run_at, s.last_task_id, s.enabled,
           s.skipped
      FROM concurrency_internal.schedule_rows() s;
COMMENT ON VIEW concurrency.schedules IS
    'schedules on the queues you may read: the cron expression or interval, the next due time, the due time and id of the latest task enqueued, and how many due times were skipped (catch_up)';
GRANT SELECT ON concurrency.schedules TO PUBLIC;

-- ---------------------------------------------------------------------------
-- Queue counts over time: samples of concurrency.queue_stats kept in a table,
-- so that a chart of the last hours survives a page reload and a restart of
-- whatever draws it. Where the module is preloaded, the schedule runner of
-- each database (src/queue/time/stats_history.hpp) calls queue_stats_sample
-- every concurrency.stats_history_interval and drops the samples older than
-- concurrency.stats_history_retention. New in 0.4.0.
-- ---------------------------------------------------------------------------

-- One row per queue and sample. inserted: the rows inserted into the queue's
-- table since the server's statistics were reset (pg_stat_user_tables
-- .n_tup_ins), from which enqueued and finished per interval follow.
-- relid tells a re-created queue's series from the one before.
CREATE TABLE IF NOT EXISTS concurrency.queue_stats_sample (
    sampled_at timestamptz NOT NULL,
    queue      text        NOT NULL,
    relid      oid,
    ready      bigint, scheduled bigint, leased bigint, expired bigint, dead bigint,
    done       bigint, cancelled bigint, blocked bigint, waiting bigint,
    inserted   bigint,
    PRIMARY KEY (sampled_at, queue)
);
COMMENT ON TABLE concurrency.queue_stats_sample IS
    'samples of concurrency.queue_stats (queue_stats_sample); read them through the view concurrency.queue_stats_history';

-- Takes one sample of every queue (as the function's owner, who may read
-- every queue's counts) and deletes the samples older than `retain`.
-- Returns the rows inserted. (src/queue/time/stats_history.cpp: relid is the
-- queue's table, by the name src/queue/relation_names.hpp gives it.)
CREATE OR REPLACE FUNCTION concurrency.queue_stats_sample(retain interval DEFAULT '1 day')
    RETURNS bigint
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_queue_stats_sample';
COMMENT ON FUNCTION concurrency.queue_stats_sample(interval) IS
    'adds a sample of every queue''s counts to concurrency.queue_stats_sample and deletes the samples older than retain; the schedule runner calls it every concurrency.stats_history_interval';
REVOKE ALL ON FUNCTION concurrency.queue_stats_sample(interval) FROM PUBLIC;

-- The samples of the queues whose counts the reader may see now: a holder
-- of read on the queue (mirrored as SELECT on its table, whose name
-- concurrency_internal.queue_relation_name gives) or a member of
-- concurrency_monitor, as concurrency.queue_stats decides. A sample of a
-- queue that is gone (no such name in the catalog) only to the members.
CREATE OR REPLACE VIEW concurrency.queue_stats_history WITH (security_barrier) AS
    SELECT h.sampled_at, h.queue, h.relid, h.ready, h.scheduled, h.leased, h.expired, h.dead, h.done,
           h.cancelled, h.blocked, h.waiting, h.inserted
      FROM concurrency.queue_stats_sample h
     WHERE pg_catalog.pg_has_role('concurrency_monitor', 'USAGE')
        OR EXISTS (SELECT FROM concurrency.queue q
                    WHERE q.name OPERATOR(pg_catalog.=) h.queue
                      AND pg_catalog.has_table_privilege(
                              pg_catalog.to_regclass(pg_catalog.format('concurrency.%I',
                                  concurrency_internal.queue_relation_name(q.name, 'tasks')))::pg_catalog.oid,
                              'SELECT'));
COMMENT ON VIEW concurrency.queue_stats_history IS
    'samples of the counts of the queues you may read (queue_stats_sample), oldest first by sampled_at';
GRANT SELECT ON concurrency.queue_stats_history TO PUBLIC;
-- ---------------------------------------------------------------------------
-- Task queue: dependencies between tasks (docs/queue.md, "Dependencies").
-- A task enqueued with parents (enqueue(…, after), enqueue_graph) waits in
-- state 'waiting', its row counting the parents not done yet
-- (parents_open), until the last of them completes; a parent that ends dead
-- or cancelled cancels its waiting descendants, but for a finally-child
-- (enqueue_graph's after_ends, the queue table's column after_ends), which
-- counts any end of a parent as its end. An edge between two tasks of
-- one queue that one enqueue_graph made is kept in their rows (the columns
-- children and parents of the queue's table); every other edge is a row of
-- concurrency.task_dependency, which the queue functions read and write as
-- its owner (src/queue/graphs/dependencies.hpp): a role needs no privilege on it.
-- An edge lives until its child has finished, and keeps its parent (done,
-- with its result) from being purged until then, whatever the retention.
-- ---------------------------------------------------------------------------

-- Queue names compare bytewise ("C"): an edge is inserted into two indexes.
CREATE TABLE IF NOT EXISTS concurrency.task_dependency (
    parent_queue text COLLATE "C" NOT NULL,
    parent_id    bigint           NOT NULL,
    child_queue  text COLLATE "C" NOT NULL,
    child_id     bigint           NOT NULL,
    CONSTRAINT task_dependency_pkey PRIMARY KEY (parent_queue, parent_id, child_queue, child_id)
);
CREATE INDEX IF NOT EXISTS task_dependency_child ON concurrency.task_dependency (child_queue, child_id);
COMMENT ON TABLE concurrency.task_dependency IS
    'edges between concurrency_ext tasks: the child waits for the parent (internal: written by the queue functions)';
SELECT pg_catalog.pg_extension_config_dump('concurrency.task_dependency', '');
-- purge, run as a queue's owner, keeps the parents that a child still needs
GRANT SELECT ON concurrency.task_dependency TO PUBLIC;

CREATE OR REPLACE FUNCTION concurrency.enqueue_graph(queue text, tasks jsonb)
    RETURNS TABLE (ref text, task_id bigint)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_enqueue_graph';
COMMENT ON FUNCTION concurrency.enqueue_graph(text, jsonb) IS
    'adds a graph of tasks all or nothing: tasks is a JSON array of {ref, payload, after, after_ends, queue, run_at, priority, concurrency_key}, after naming refs of the graph, ids of tasks of the task''s queue or {queue, id}; a task waits until its parents are done (after) or have ended, whatever their end (after_ends); returns each task''s ref and id in order';

CREATE OR REPLACE FUNCTION concurrency.parent_results(queue text, id bigint)
    RETURNS TABLE (task_id bigint, parent_queue text, result jsonb)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_parent_results';
COMMENT ON FUNCTION concurrency.parent_results(text, bigint) IS
    'the results the parents of a task completed with (for its worker: permission work on the task''s queue)';

-- ---------------------------------------------------------------------------
-- Task queue: the outcomes of a task's parents (docs/queue.md,
-- "Dependencies"), what the worker of a finally-child (enqueue_graph's
-- after_ends: released when each of its parents has ended, whatever its end)
-- reads. parent_results keeps its columns, the results of the parents that
-- are done.
-- ---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION concurrency.parent_outcomes(queue text, id bigint)
    RETURNS TABLE (task_id bigint, parent_queue text, state text, result jsonb, last_error text)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_parent_outcomes';
COMMENT ON FUNCTION concurrency.parent_outcomes(text, bigint) IS
    'the state, result and last error of each parent of a task, whatever its end (for its worker: permission work on the task''s queue)';
-- ---------------------------------------------------------------------------
-- Lock diagnostics: who waits for whom, from one consistent snapshot of the
-- heavyweight lock manager (not LWLocks, not buffer pins).
-- ---------------------------------------------------------------------------

-- The raw edges, with pg_blocking_pids() semantics, from one snapshot.
CREATE OR REPLACE FUNCTION concurrency.lock_wait_edges(
    OUT snapshot_at timestamptz, OUT ord integer,
    OUT waiting_pid integer, OUT waiting_mode text, OUT lock_type text, OUT locked_object text,
    OUT waiting_since timestamptz,
    OUT blocking_pid integer, OUT blocking_xid xid, OUT blocking_mode text,
    OUT blocking_holds boolean, OUT blocking_waiting boolean)
    RETURNS SETOF record
    LANGUAGE c VOLATILE PARALLEL RESTRICTED
    AS 'MODULE_PATHNAME', 'concurrency_lock_wait_edges';
COMMENT ON FUNCTION concurrency.lock_wait_edges() IS
    'edges "waiting session -> session in its way" (pg_blocking_pids semantics) from one snapshot of the lock manager, without pg_stat_activity details';

-- The wait tree, from one snapshot.
CREATE OR REPLACE FUNCTION concurrency.lock_tree_nodes(
    OUT snapshot_at timestamptz, OUT ord integer,
    OUT pid integer, OUT xid xid, OUT root_pid integer, OUT depth integer,
    OUT path integer[], OUT blocked_by integer[],
    OUT blocks_direct integer, OUT blocks_total integer, OUT in_cycle boolean,
    OUT waiting_since timestamptz, OUT blocks_only_by_queue boolean)
    RETURNS SETOF record
    LANGUAGE c VOLATILE PARALLEL RESTRICTED
    AS 'MODULE_PATHNAME', 'concurrency_lock_tree_nodes';
COMMENT ON FUNCTION concurrency.lock_tree_nodes() IS
    'every session in a wait chain, placed under the blocker on its longest chain from a root, from one snapshot of the lock manager; blocks_only_by_queue: others wait for it only because its own request is queued ahead of theirs';

-- What a pg_locks row locks, in words: SELECT concurrency.locked_object(l) FROM pg_locks l.
CREATE OR REPLACE FUNCTION concurrency.locked_object(lock pg_catalog.pg_locks) RETURNS text
    LANGUAGE c STABLE STRICT PARALLEL RESTRICTED
    AS 'MODULE_PATHNAME', 'concurrency_locked_object';
COMMENT ON FUNCTION concurrency.locked_object(pg_catalog.pg_locks) IS
    'what a pg_locks row locks, readable: qualified relation name, tuple, transaction, or advisory lock by subsystem name and resource';

-- Session details come from pg_stat_get_activity(), the function behind
-- pg_stat_activity, read once per query and as the current user: other roles'
-- query text, state and transaction start show only to members of
-- pg_read_all_stats (or of the session's role), exactly as in pg_stat_activity.
-- (The function rather than the view: the view's joins cost as much again;
-- lock_waits reads it once for both sides of the edges.)
CREATE OR REPLACE VIEW concurrency.lock_waits AS
WITH activity AS MATERIALIZED (
    SELECT s.pid, s.usesysid, s.application_name, s.client_addr, s.state, s.query, s.xact_start
      FROM pg_catalog.pg_stat_get_activity(NULL) s
), prepared AS MATERIALIZED (
    SELECT p.transaction, p.gid, p.prepared, p.ownerid
      FROM pg_catalog.pg_prepared_xact() p
)
SELECT e.waiting_pid,
       pg_catalog.pg_get_userbyid(w.usesysid) AS waiting_user,
       w.application_name AS waiting_application,
       w.client_addr AS waiting_client_addr,
       w.query AS waiting_query,
       e.waiting_mode,
       e.lock_type,
       e.locked_object,
       e.waiting_since,
       e.snapshot_at - e.waiting_since AS waited,
       e.blocking_pid,
       pg_catalog.pg_get_userbyid(COALESCE(b.usesysid, p.ownerid)) AS blocking_user,
       b.application_name AS blocking_application,
       b.client_addr AS blocking_client_addr,
       CASE WHEN e.blocking_xid IS NOT NULL THEN 'prepared' ELSE b.state END AS blocking_state,
       b.query AS blocking_query,
       e.snapshot_at - COALESCE(b.xact_start, p.prepared) AS blocking_xact_age,
       e.blocking_mode,
       e.blocking_holds,
       e.blocking_waiting,
       p.gid AS blocking_gid,
       e.snapshot_at
  FROM concurrency.lock_wait_edges() e
  LEFT JOIN activity w ON w.pid = e.waiting_pid
  LEFT JOIN activity b ON b.pid = e.blocking_pid AND e.blocking_xid IS NULL
  LEFT JOIN prepared p ON p.transaction OPERATOR(pg_catalog.=) e.blocking_xid
 ORDER BY e.ord;
COMMENT ON VIEW concurrency.lock_waits IS
    'one row per edge "waiting session -> session it waits for" (pg_blocking_pids semantics), from one snapshot of the lock manager';
GRANT SELECT ON concurrency.lock_waits TO PUBLIC;

-- concurrency.lock_tree: src/sql/30_diagnostics.sql

-- ---------------------------------------------------------------------------
-- concurrency.lock_tree (0.4.0: an install part of its own, CREATE OR REPLACE,
-- so that the update from 0.3.0 takes it as it is).
--
-- The action: for a root, what ends its transaction or statement; for a
-- session that holds others up only by its place in the lock queue (a DDL
-- waiting behind an idle or prepared transaction, with readers queued behind
-- it), cancelling its statement — but only where that frees someone: a
-- session waits for it and for nobody else. The readers then go on at once
-- and the root keeps its transaction (a DDL's xid says nothing here: ALTER
-- TABLE has one while it waits). A waiting UPDATE queued behind another on
-- the same row gets no action: the sessions behind it also wait for the
-- first, and cancelling it would lose its write and free nobody. Only for
-- sessions whose state you may see. The root's own action stays.
-- ---------------------------------------------------------------------------
CREATE OR REPLACE VIEW concurrency.lock_tree AS
WITH nodes AS MATERIALIZED (
    SELECT * FROM concurrency.lock_tree_nodes()
), activity AS MATERIALIZED (
    SELECT s.pid, s.usesysid, s.application_name, s.client_addr, s.state, s.query, s.xact_start
      FROM pg_catalog.pg_stat_get_activity(NULL) s
)
SELECT t.pid,
       pg_catalog.pg_get_userbyid(COALESCE(a.usesysid, p.ownerid)) AS usename,
       a.application_name,
       a.client_addr,
       t.root_pid,
       t.depth,
       t.path,
       t.blocked_by,
       t.blocks_direct,
       t.blocks_total,
       t.in_cycle,
       CASE WHEN t.xid IS NOT NULL THEN 'prepared' ELSE a.state END AS state,
       a.query,
       t.snapshot_at - t.waiting_since AS waited,
       t.snapshot_at - COALESCE(a.xact_start, p.prepared) AS xact_age,
       CASE WHEN t.depth = 0 THEN
           CASE WHEN t.xid IS NOT NULL THEN pg_catalog.format('ROLLBACK PREPARED %L', p.gid)
                WHEN a.state IN ('active', 'fastpath function call')
                    THEN pg_catalog.format('SELECT pg_cancel_backend(%s)', t.pid)
                WHEN a.state IN ('idle in transaction', 'idle in transaction (aborted)', 'idle')
                    THEN pg_catalog.format('SELECT pg_terminate_backend(%s)', t.pid)
           END
            WHEN t.blocks_only_by_queue AND t.xid IS NULL AND a.state IS NOT NULL
                 AND (t.root_pid OPERATOR(pg_catalog.=) 0
                      OR r.state IN ('idle in transaction', 'idle in transaction (aborted)'))
                 AND EXISTS (SELECT FROM nodes w WHERE w.blocked_by OPERATOR(pg_catalog.=) ARRAY[t.pid])
                THEN pg_catalog.format('SELECT pg_cancel_backend(%s)', t.pid)
       END AS action,
       p.gid,
       t.snapshot_at
  FROM nodes t
  LEFT JOIN activity a ON a.pid OPERATOR(pg_catalog.=) t.pid AND t.xid IS NULL
  LEFT JOIN activity r ON r.pid OPERATOR(pg_catalog.=) t.root_pid
  LEFT JOIN pg_catalog.pg_prepared_xact() p ON p.transaction OPERATOR(pg_catalog.=) t.xid
 ORDER BY t.ord;
COMMENT ON VIEW concurrency.lock_tree IS
    'every session in a wait chain with its user, application and client, its root blocker, depth, path and transitive blocked count, and the statement that frees the chain (never executed): for roots, and for a DDL that holds readers up behind an idle or prepared root only by its place in the lock queue, where cancelling it frees them';
GRANT SELECT ON concurrency.lock_tree TO PUBLIC;

-- ---------------------------------------------------------------------------
-- Lock-wait history: episodes "one root blocker blocking at least one
-- session", sampled by a background worker into a shared-memory ring. Needs
-- concurrency_ext in shared_preload_libraries; without it these raise 55000.
-- New in 0.2.0.
-- ---------------------------------------------------------------------------

-- The episodes in the ring, oldest first, masked for the current user.
CREATE OR REPLACE FUNCTION concurrency.lock_history_episodes(
    OUT episode_id bigint, OUT database name,
    OUT started_at timestamptz, OUT ended_at timestamptz, OUT duration interval,
    OUT root_pid integer, OUT root_user name, OUT root_application text,
    OUT root_client_addr inet, OUT root_state text, OUT root_query text,
    OUT root_xact_start timestamptz,
    OUT max_waiters integer, OUT max_depth integer, OUT longest_wait interval,
    OUT waiter_seconds double precision,
    OUT locked_objects text[], OUT waiting_queries text[],
    OUT ended_by text, OUT in_cycle boolean)
    RETURNS SETOF record
    LANGUAGE c VOLATILE PARALLEL RESTRICTED
    AS 'MODULE_PATHNAME', 'concurrency_lock_history_episodes';
COMMENT ON FUNCTION concurrency.lock_history_episodes() IS
    'the lock-wait episodes kept in shared memory, oldest first; query text masked as in pg_stat_activity';

CREATE OR REPLACE VIEW concurrency.lock_history AS
SELECT h.episode_id, h.database, h.started_at, h.ended_at, h.duration,
       h.root_pid, h.root_user, h.root_application, h.root_client_addr,
       h.root_state, h.root_query, h.root_xact_start,
       h.max_waiters, h.max_depth, h.longest_wait, h.waiter_seconds,
       h.locked_objects, h.waiting_queries, h.ended_by, h.in_cycle
  FROM concurrency.lock_history_episodes() h
 ORDER BY h.episode_id;
COMMENT ON VIEW concurrency.lock_history IS
    'lock-wait episodes (one root blocker blocking others, from the first to the last sample that saw it), kept in memory; needs shared_preload_libraries';
GRANT SELECT ON concurrency.lock_history TO PUBLIC;

-- Clears the history (for administrators, as pg_stat_statements_reset).
CREATE OR REPLACE FUNCTION concurrency.lock_history_reset() RETURNS void
    LANGUAGE c VOLATILE PARALLEL UNSAFE
    AS 'MODULE_PATHNAME', 'concurrency_lock_history_reset';
COMMENT ON FUNCTION concurrency.lock_history_reset() IS
    'clears the lock-wait history; episodes still going on start again at the next sample';
REVOKE ALL ON FUNCTION concurrency.lock_history_reset() FROM PUBLIC;

-- The sampler: its pid, interval, samples taken and the CPU time they cost.
CREATE OR REPLACE FUNCTION concurrency.lock_history_status(
    OUT sampler_pid integer, OUT interval_ms integer, OUT samples bigint,
    OUT sampler_cpu_seconds double precision, OUT last_sample_at timestamptz,
    OUT episodes_recorded bigint, OUT history_size integer)
    RETURNS SETOF record
    LANGUAGE c VOLATILE PARALLEL RESTRICTED
    AS 'MODULE_PATHNAME', 'concurrency_lock_history_status';
COMMENT ON FUNCTION concurrency.lock_history_status() IS
    'the lock-history sampler: pid (NULL when not running), interval, samples taken, their CPU time, last sample, episodes recorded since the last reset, ring size';
-- ---------------------------------------------------------------------------
-- Citus: what this server is in a Citus cluster, what the diagnostics cover
-- there, and waits across the cluster's nodes (docs/scaling-out.md).
-- ---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION concurrency.citus_node_role() RETURNS text
    LANGUAGE c VOLATILE PARALLEL SAFE
    AS 'MODULE_PATHNAME', 'concurrency_citus_node_role';
COMMENT ON FUNCTION concurrency.citus_node_role() IS
    'this server in a Citus cluster: none (Citus not loaded or not created in this database), coordinator, or worker';

-- One row per diagnostic: which part of the system it shows from here.
CREATE OR REPLACE VIEW concurrency.diagnostics_scope AS
WITH here AS (SELECT concurrency.citus_node_role() AS role)
SELECT d.diagnostic,
       CASE WHEN d.diagnostic = 'cluster_lock_waits' AND here.role <> 'none'
                THEN 'cluster'
            ELSE 'this node' END AS covers,
       CASE here.role
           WHEN 'none' THEN d.standalone
           WHEN 'coordinator' THEN d.coordinator
           ELSE d.worker END AS note
  FROM here, (VALUES
    ('lock_tree',
     'every wait chain of this server',
     'the coordinator''s own lock manager: every named lock of the cluster (they are taken here only), but not the waits inside worker nodes; see cluster_lock_waits',
     'this worker''s own lock manager only; see cluster_lock_waits'),
    ('lock_waits',
     'every wait of this server',
     'the coordinator''s own lock manager: every named lock of the cluster (they are taken here only), but not the waits inside worker nodes; see cluster_lock_waits',
     'this worker''s own lock manager only; see cluster_lock_waits'),
    ('held_locks',
     'every named lock of this server',
     'every named lock of the cluster: named locks are taken on the coordinator only',
     'none: named locks are refused on worker nodes'),
    ('cluster_lock_waits',
     'the waits of this server (no Citus here)',
     'this node''s waits (lock_waits) and the waits between distributed transactions on every node (citus_lock_waits)',
     'this node''s waits (lock_waits) and the waits between distributed transactions on every node (citus_lock_waits)')
  ) AS d(diagnostic, standalone, coordinator, worker);
COMMENT ON VIEW concurrency.diagnostics_scope IS
    'per diagnostic view: whether it covers this node or the Citus cluster, and what that means here';
GRANT SELECT ON concurrency.diagnostics_scope TO PUBLIC;

-- This node's wait edges (concurrency.lock_waits, scope 'node') and, on a
-- Citus node, citus_lock_waits' edges between distributed transactions on
-- every node (scope 'cluster') that the first part does not show already.
-- citus_lock_waits is read through EXECUTE: it exists only where Citus does.
-- One of the two functions of the install script still in PL/pgSQL (the
-- other: concurrency_internal.forget_events_on_shard,
-- 80_queue_workflows.sql): a read of two views, one of which is
-- Citus's, that names no relation of a queue; the view
-- concurrency.cluster_lock_waits is its only caller.
CREATE OR REPLACE FUNCTION concurrency_internal.cluster_lock_wait_rows(
        OUT scope text, OUT waiting_node text, OUT waiting_pid integer, OUT waiting_gpid bigint,
        OUT waiting_query text, OUT blocking_node text, OUT blocking_pid integer, OUT blocking_gpid bigint,
        OUT blocking_query text, OUT locked_object text)
    RETURNS SETOF record
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    citus boolean := concurrency.citus_node_role() <> 'none'
                     AND to_regclass('pg_catalog.citus_lock_waits') IS NOT NULL;
    here_id integer;
    here text := 'this node';
BEGIN
    IF citus THEN
        EXECUTE $q$SELECT (pg_catalog.citus_backend_gpid() / 10000000000)::integer$q$ INTO here_id;
        EXECUTE $q$SELECT pg_catalog.format('%s:%s', nodename, nodeport) FROM pg_catalog.pg_dist_node
                    WHERE nodeid = $1$q$ INTO here USING here_id;
        here := coalesce(here, 'this node');
    END IF;
    RETURN QUERY
        SELECT 'node', here, w.waiting_pid, NULL::bigint, w.waiting_query,
               here, w.blocking_pid, NULL::bigint, w.blocking_query, w.locked_object
          FROM concurrency.lock_waits w;
    IF citus THEN
        RETURN QUERY EXECUTE $q$
            SELECT 'cluster',
                   pg_catalog.format('%s:%s', wn.nodename, wn.nodeport),
                   (c.waiting_gpid % 10000000000)::integer, c.waiting_gpid, c.blocked_statement,
                   pg_catalog.format('%s:%s', bn.nodename, bn.nodeport),
                   (c.blocking_gpid % 10000000000)::integer, c.blocking_gpid,
                   c.current_statement_in_blocking_process, NULL::text
              FROM pg_catalog.citus_lock_waits c
              LEFT JOIN pg_catalog.pg_dist_node wn ON wn.nodeid = c.waiting_nodeid
              LEFT JOIN pg_catalog.pg_dist_node bn ON bn.nodeid = c.blocking_nodeid
             WHERE NOT (c.waiting_nodeid = $1 AND c.blocking_nodeid = $1
                        AND EXISTS (SELECT FROM concurrency.lock_waits w
                                     WHERE w.waiting_pid = (c.waiting_gpid % 10000000000)::integer
                                       AND w.blocking_pid = (c.blocking_gpid % 10000000000)::integer))$q$
            USING here_id;
    END IF;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.cluster_lock_wait_rows() IS
    'rows of the view concurrency.cluster_lock_waits';

CREATE OR REPLACE VIEW concurrency.cluster_lock_waits AS
    SELECT scope, waiting_node, waiting_pid, waiting_gpid, waiting_query,
           blocking_node, blocking_pid, blocking_gpid, blocking_query, locked_object
      FROM concurrency_internal.cluster_lock_wait_rows();
COMMENT ON VIEW concurrency.cluster_lock_waits IS
    'wait edges of this node (scope node) and, on Citus, between distributed transactions on every node from citus_lock_waits (scope cluster)';
GRANT SELECT ON concurrency.cluster_lock_waits TO PUBLIC;

-- ---------------------------------------------------------------------------
-- Distributed queues served by every node (docs/scaling-out.md).
--
-- Every node of the cluster serves a distributed queue: a call on a node that
-- holds shards of the queue runs the queue's C++ code on those shards' tables
-- (src/queue/distributed/distributed.hpp), and sends the rest to the node of the shard
-- it concerns, where the same C++ serves it. For that, every node knows the
-- queue: its row of concurrency.queue, of concurrency.distributed_queue and
-- its permissions are copied to every other node in the transaction that
-- changes them on the coordinator (distributed_sync_catalog). And every node
-- makes task ids and lease tokens of its own without asking another: a
-- number from its own lease_token sequence with its Citus group in the low
-- 10 bits (QueueSql::new_id).
--
-- The transaction that distributes a queue may use it at once: its shards
-- are made with citus.multi_shard_modify_mode = 'sequential', so that each
-- node's shards, Citus's metadata and the catalog copy are written on one
-- connection per node, the one that the calls of the rest of the
-- transaction use for those shards.
-- ---------------------------------------------------------------------------

-- Runs a command on every other node of the Citus cluster, as the current
-- user, inside this transaction (Citus commits it with two-phase commit).
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_send(command text) RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_distributed_send';
COMMENT ON FUNCTION concurrency_internal.distributed_send(text) IS
    'runs a command on every other node of the Citus cluster, in this transaction (internal)';
REVOKE ALL ON FUNCTION concurrency_internal.distributed_send(text) FROM PUBLIC;

-- The functions that make a queue distributed and copy its catalog to the
-- other nodes (distributed_sync_catalog, distribute_key_rate_slots,
-- distribute_queue) are in 41_queue_distributed.sql.
-- ---------------------------------------------------------------------------
-- Distributed queues on Citus (docs/scaling-out.md).
--
-- distribute_queue(queue) makes an empty queue's table a Citus distributed
-- table with a column shard_key as its distribution column. The queue
-- functions (enqueue, dequeue, heartbeat, complete, fail, retry_dead, the
-- batch acknowledgements, cancel, purge, task_status) keep their names and
-- meaning: on a distributed queue the C++ entry points serve the call on this
-- node's shards, or send it to the node of the shard it concerns, whose C++
-- serves it there (one Citus router query carries the call).
--
-- Placement: shard_keys holds one shard_key value per shard (found with
-- get_shard_id_for_distribution_column), in shard order. A task id carries
-- its shard's position in its low 10 bits (id = n * 1024 + position), so
-- that every call about given tasks finds their shards from the ids alone
-- (task_position in src/queue/distributed/distributed.hpp). A task
-- with a concurrency_key or a dedupe_key goes to the shard chosen by a hash
-- of the key, so that the key's limit and uniqueness (an index on (shard_key,
-- dedupe_key)) hold across the queue; other tasks go to a shard of the node
-- that enqueues them, round-robin. Ids and lease tokens come from each
-- node's concurrency.lease_token with the node's Citus group in their low 10
-- bits (40_citus.sql).
-- ---------------------------------------------------------------------------

CREATE TABLE IF NOT EXISTS concurrency.distributed_queue (
    queue          text        PRIMARY KEY REFERENCES concurrency.queue (name) ON DELETE CASCADE,
    shard_keys     integer[]   NOT NULL CHECK (pg_catalog.cardinality(shard_keys) BETWEEN 1 AND 1024),
    dedupe_holder  text        NOT NULL,  -- the predicate of the dedupe index: a task that holds its key
    distributed_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp()
);
COMMENT ON TABLE concurrency.distributed_queue IS
    'queues whose table is a Citus distributed table, with one shard_key value per shard (in shard order)';
SELECT pg_catalog.pg_extension_config_dump('concurrency.distributed_queue', '');
GRANT SELECT ON concurrency.distributed_queue TO PUBLIC;

-- ---------------------------------------------------------------------------
-- The SQL helpers of distributed queues (see above for
-- the placement they follow). Every queue function is served by the C++ on
-- each node (40_citus.sql); the helpers of the resizing of
-- the lease slots of max_leased (run by alter_queue on the coordinator:
-- distributed_resize_slots, distributed_leased and
-- distributed_queue_settings) are further below. Here are the
-- declarations of the C++ functions that one node calls on another's
-- shards: distributed_lease_end (a lease slot whose lease end passed),
-- distributed_rebalance (key_limit changed) and distributed_purge_chunk
-- (from a node without shards). Internal: they
-- live in schema concurrency_internal, which PUBLIC cannot use; the owner of
-- each distributed queue's table gets USAGE on it from distribute_queue (the
-- queue functions run these as that owner), so that \df concurrency.* lists
-- the public API only.
-- ---------------------------------------------------------------------------

-- ---------------------------------------------------------------------------
-- key_limit on a distributed queue, kept as on a local queue (the design:
-- src/queue/flow/keys_sql.hpp; for users: docs/queue.md, "Keys and limits"): at
-- most key_limit tasks of a key are admitted (ready, scheduled or leased),
-- the others wait in state 'blocked', which a claim never takes, and a task
-- enters or leaves the admitted set only with its key's row locked (enqueue,
-- complete, fail for good, a lease expiring for good, cancel, retry_dead);
-- blocked tasks are admitted in enqueue (id) order. The key table k_<queue>
-- is distributed co-located with the queue's table: a key's row and all its
-- tasks are on the shard the hash of the key names, so that every statement
-- about a key is a router query to that shard.
--
-- The lock is an UPDATE of the key's row, not a FOR UPDATE: under REPEATABLE
-- READ a call whose snapshot misses another call's change of the key then
-- fails with 40001 instead of deciding on an old picture. The key_limit is
-- read from the catalog after the key's lock is granted: alter_queue locks
-- the whole key table (distributed_rebalance), so a call either ran before it
-- (and the rebalance sees its tasks) or waits for it and reads the new limit.
-- ---------------------------------------------------------------------------

-- The shard position of a concurrency_key (or a dedupe_key) among n shards
-- (NULL for n below 1).
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_key_position(n integer, key text) RETURNS integer
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, pg_temp
    AS $fn$ SELECT ((hashtext(key)::bigint + 2147483648) % CASE WHEN n >= 1 THEN n END)::integer $fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_key_position(integer, text) IS
    'the shard position (0 .. n-1) of the tasks of a concurrency_key (or dedupe_key) on a distributed queue';

-- ---------------------------------------------------------------------------
-- max_leased on a distributed queue: the queue's max_leased slot rows
-- s_<queue> are a table on the coordinator, where every claim runs. A claim
-- locks free slots (FOR UPDATE SKIP LOCKED: it never waits for another
-- claim), claims at most as many tasks as it holds slots, and writes each
-- task's id, lease token and lease end into its slot, in its transaction.
-- complete, fail and cancel empty the slots of their tasks first (before
-- they touch a shard, so that they never hold a task's row while waiting
-- for a slot). A slot whose lease end has passed is free once the task is no
-- longer leased under it: the claim that finds it reclaims the task on its
-- shard if its lease is still there and expired (ready again, or dead), and
-- takes the slot; a task heartbeated meanwhile keeps it (its new lease end,
-- which a heartbeat may have left in lease_extended_to, is written into the
-- slot). The claim itself and the acknowledgements are the queue's C++
-- (src/queue/lifecycle/claim.cpp, src/queue/distributed/distributed.hpp: decide_lease_slots);
-- these functions (and distributed_resize_slots with distributed_leased, in
-- this part) keep the slots.
-- ---------------------------------------------------------------------------

-- For a lease slot of a queue with max_leased whose lease end has passed
-- (the coordinator's claim, when no slot is empty): on the node of the
-- task's shard, wakes that shard as a claim does (an expired lease
-- reclaimed: ready again, or dead with its key's next task admitted and its
-- waiting descendants cancelled), then returns when the lease `lease_token`
-- on the task ends, NULL when it is no longer held. Needs permission work;
-- 55000 where the shard is not on this node.
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_lease_end(queue text, task_id bigint, lease_token bigint,
                                                           now timestamptz)
    RETURNS timestamptz
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_distributed_lease_end';
COMMENT ON FUNCTION concurrency_internal.distributed_lease_end(text, bigint, bigint, timestamptz) IS
    'wakes the shard of a task of a distributed queue and returns when its lease ends (NULL: not held); for the lease slots of max_leased';

-- After alter_queue changed key_limit, on each node that holds shards of the
-- queue (called by the coordinator): admits and holds back the tasks of
-- every key on this node's shards, each with its key table's shard locked,
-- as a local queue's alter_queue does. The limit travels with the call (0:
-- none). Needs permission manage.
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_rebalance(queue text, key_limit integer, now timestamptz)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_distributed_rebalance';
COMMENT ON FUNCTION concurrency_internal.distributed_rebalance(text, integer, timestamptz) IS
    'after key_limit changed: admits and holds back the tasks of every key of a distributed queue on this node''s shards';

-- One chunk of the purge that queue calls do, for a node without shards of
-- the queue, on the node of the shard at `shard_position`: up to `chunk`
-- finished tasks of that shard past their retention. Returns how many were deleted
-- (0 where the shard is not on this node). Needs permission work.
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_purge_chunk(queue text, chunk integer, shard_position integer)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_distributed_purge_chunk';
COMMENT ON FUNCTION concurrency_internal.distributed_purge_chunk(text, integer, integer) IS
    'deletes up to chunk finished tasks past their retention from the shard at shard_position of a distributed queue, on its node';

-- Dependencies between shards (the design: src/queue/graphs/dependencies.hpp): the
-- messages about tasks of one shard, delivered on its node by the node that
-- made the top-level call (an int8[] of (kind, a, b) triples), and the
-- messages that a call routed to this node posted, taken by the last column
-- of the routed statement. For the owner of the queue's table.
CREATE OR REPLACE FUNCTION concurrency_internal.dependency_messages(queue text, messages bigint[])
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_dependency_messages';
COMMENT ON FUNCTION concurrency_internal.dependency_messages(text, bigint[]) IS
    'delivers messages between tasks of a distributed queue in different shards (a parent done, dead or cancelled; a child enqueued or ended) to their shard on this node';
CREATE OR REPLACE FUNCTION concurrency_internal.dependency_outbox()
    RETURNS bigint[]
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_dependency_outbox';
COMMENT ON FUNCTION concurrency_internal.dependency_outbox() IS
    'the messages between shards of a distributed queue that this backend''s calls posted and did not deliver (taken)';

-- ---------------------------------------------------------------------------
-- The SQL that makes a queue distributed (docs/scaling-out.md) and keeps
-- its catalog and lease slots on every node: distribute_queue,
-- distribute_key_rate_slots, distributed_sync_catalog,
-- distributed_queue_settings, distributed_leased and
-- distributed_resize_slots (see the top of this part for the placement
-- and 40_citus.sql for the nodes). Their C++ is
-- src/queue/distributed/ddl.cpp, which names a queue's relations as the
-- local queue's statements do (src/queue/relation_names.hpp; a queue made
-- before 0.4.0 keeps its index names of the older rule). CREATE OR REPLACE:
-- the update from 0.3.0 replaces that version's PL/pgSQL functions in
-- place, with their privileges.
-- ---------------------------------------------------------------------------

-- The settings and shard keys of a distributed queue; 42704 when the queue is
-- not distributed (or does not exist).
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_queue_settings(queue text,
        OUT relation text, OUT lease interval, OUT max_attempts integer, OUT shard_keys integer[],
        OUT dedupe_holder text, OUT retain interval, OUT key_limit integer, OUT max_leased integer)
    LANGUAGE c STABLE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_distributed_queue_settings';
COMMENT ON FUNCTION concurrency_internal.distributed_queue_settings(text) IS
    'table, lease, max_attempts and shard keys of a distributed queue (42704 if it is not one)';

-- The leased tasks of a distributed queue (a query over every shard).
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_leased(queue text)
    RETURNS TABLE (id bigint, lease_token bigint, lease_expires_at timestamptz)
    LANGUAGE c VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_distributed_leased';
COMMENT ON FUNCTION concurrency_internal.distributed_leased(text) IS
    'the leased tasks of a distributed queue (id, lease token, lease end)';

-- After alter_queue set max_leased (0: none): slots 1..max_leased, the leases
-- running now written into the empty ones.
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_resize_slots(queue text, max_leased integer) RETURNS void
    LANGUAGE c VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_distributed_resize_slots';
COMMENT ON FUNCTION concurrency_internal.distributed_resize_slots(text, integer) IS
    'gives a distributed queue max_leased lease slots, the running leases written into them (0: none)';

-- Copies what the coordinator knows of a queue (its row of concurrency.queue,
-- of concurrency.distributed_queue and its permissions) to every other node,
-- replacing what they had, in this transaction; a queue that is gone is
-- removed there. Nothing on a server that is not a Citus coordinator. Runs
-- as the owner of the catalog (Citus sends the command as that user).
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_sync_catalog(queue text) RETURNS void
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_distributed_sync_catalog';
COMMENT ON FUNCTION concurrency_internal.distributed_sync_catalog(text) IS
    'copies a distributed queue''s settings, shard keys and permissions to every other Citus node, in this transaction (internal)';
REVOKE ALL ON FUNCTION concurrency_internal.distributed_sync_catalog(text) FROM PUBLIC;

-- The slots of key_rate_limit of distributed queue `queue` (rk_<queue>)
-- distributed beside its tasks: a key's slots on the shard of its tasks,
-- where the claims of that shard take them. By distribute_queue, and by
-- alter_queue where it adds the limit to a distributed queue (as the owner of
-- the queue's table). Slots still there are forgotten: a key's first claims
-- make them again. Nothing where they are distributed already; 55000 for a
-- queue that is not distributed or has no such slots.
CREATE OR REPLACE FUNCTION concurrency_internal.distribute_key_rate_slots(queue text) RETURNS void
    LANGUAGE c VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_distribute_key_rate_slots';
COMMENT ON FUNCTION concurrency_internal.distribute_key_rate_slots(text) IS
    'distributes the slot table of key_rate_limit of a distributed queue beside its tasks'' shards (internal)';

-- Makes an empty queue distributed. The caller must own the queue's table
-- (ALTER TABLE) and run it on the coordinator.
CREATE OR REPLACE FUNCTION concurrency.distribute_queue(queue text, shard_count integer DEFAULT NULL)
    RETURNS void
    LANGUAGE c VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_distribute_queue';
COMMENT ON FUNCTION concurrency.distribute_queue(text, integer) IS
    'makes an empty queue a Citus distributed table (shard_count shards, default citus.shard_count); run on the coordinator';
REVOKE ALL ON FUNCTION concurrency.distribute_queue(text, integer) FROM PUBLIC;
-- ---------------------------------------------------------------------------
-- Transactions that retry: run_transaction (serialization failures and
-- deadlocks) and run_ddl (schema changes that never stall the application).
-- Both are procedures: each attempt commits, so they refuse to run inside a
-- transaction block (25001). No SET search_path clause: a procedure with SET
-- clauses cannot commit, and the statements must run with the caller's
-- search_path; the C code qualifies every name of its own SQL.
-- ---------------------------------------------------------------------------

CREATE OR REPLACE PROCEDURE concurrency.run_transaction(statements text, isolation text DEFAULT 'read committed',
                                             max_attempts integer DEFAULT 5)
    LANGUAGE c AS 'MODULE_PATHNAME', 'concurrency_run_transaction';
COMMENT ON PROCEDURE concurrency.run_transaction(text, text, integer) IS
    'runs the statements in a transaction of their own at that isolation level and commits; retries serialization failures (40001) and deadlocks (40P01) with a jittered, growing wait, up to max_attempts';

-- One row per run_ddl call: what ran, when, how many attempts, how long it
-- waited, how it ended, and which sessions it terminated or cancelled. Written
-- by run_ddl as the table's owner; each role reads its own rows (row security).
CREATE TABLE IF NOT EXISTS concurrency.ddl_log (
    id                  bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_by              name        NOT NULL,
    statements          text        NOT NULL,
    started             timestamptz NOT NULL,
    finished            timestamptz NOT NULL,
    attempts            integer     NOT NULL,
    waited              interval    NOT NULL,
    outcome             text        NOT NULL CHECK (outcome IN ('done', 'failed', 'gave up')),
    error               text,
    blockers_terminated integer[]   NOT NULL DEFAULT '{}'
);
COMMENT ON TABLE concurrency.ddl_log IS
    'one row per run_ddl call: statements, started, finished, attempts, time waited, outcome, error, pids of the blockers it terminated or cancelled; each role sees its own rows';
-- The log is the operators' record of what changed the schema and whom it
-- stopped: user data, so pg_dump keeps its rows, and the position of its id
-- sequence, so that a restored log goes on without reusing ids.
SELECT pg_catalog.pg_extension_config_dump('concurrency.ddl_log', '');
SELECT pg_catalog.pg_extension_config_dump('concurrency.ddl_log_id_seq', '');
ALTER TABLE concurrency.ddl_log ENABLE ROW LEVEL SECURITY;
DROP POLICY IF EXISTS ddl_log_own_rows ON concurrency.ddl_log;
CREATE POLICY ddl_log_own_rows ON concurrency.ddl_log FOR SELECT USING (run_by = current_user);
GRANT SELECT ON concurrency.ddl_log TO PUBLIC;

CREATE OR REPLACE PROCEDURE concurrency.run_ddl(statements text, lock_timeout interval DEFAULT '1 s',
                                     max_duration interval DEFAULT '10 min',
                                     terminate_blockers_after interval DEFAULT NULL)
    LANGUAGE c AS 'MODULE_PATHNAME', 'concurrency_run_ddl';
COMMENT ON PROCEDURE concurrency.run_ddl(text, interval, interval, interval) IS
    'runs schema changes in a transaction of their own, taking their locks without queueing behind (or stalling others behind) a conflicting holder: waits outside the lock queue, queues for at most lock_timeout per attempt, names who is in the way, gives up after max_duration (55P03)';
-- ---------------------------------------------------------------------------
-- Counters (src/counters, docs/counters.md): one value that many transactions
-- change at once, split into slot rows so that writers take different rows
-- (SKIP LOCKED) instead of queueing on one. The value is the sum of the
-- slots. Optional bounds are never crossed (the escrow method): each slot
-- has a floor and a ceiling of its own, the floors sum to min_value and the
-- ceilings to max_value, and no slot ever leaves its range.
--
-- All three tables are extension configuration: pg_dump / pg_restore keep
-- them. Nobody but the extension's owner touches them directly; the
-- functions (SECURITY INVOKER, C) check the caller's permission and run
-- their statements as the tables' owner.
-- ---------------------------------------------------------------------------
CREATE TABLE IF NOT EXISTS concurrency.counter (
    name      text    PRIMARY KEY CHECK (name <> '' AND pg_catalog.length(name) <= 200),
    slots     integer NOT NULL CHECK (slots BETWEEN 1 AND 1024),
    min_value numeric,
    max_value numeric,
    owner     regrole NOT NULL,
    CHECK (min_value <= max_value)
);
COMMENT ON TABLE concurrency.counter IS
    'counters of concurrency_ext (create_counter, alter_counter, drop_counter); their values are in counter_slot';
SELECT pg_catalog.pg_extension_config_dump('concurrency.counter', '');

-- One row per slot. floor / ceiling: the slot's share of min_value /
-- max_value (NULL: no bound on that side); value stays between them.
CREATE TABLE IF NOT EXISTS concurrency.counter_slot (
    counter text    NOT NULL REFERENCES concurrency.counter (name) ON DELETE CASCADE,
    slot    integer NOT NULL CHECK (slot >= 0),
    value   numeric NOT NULL DEFAULT 0,
    floor   numeric,
    ceiling numeric,
    PRIMARY KEY (counter, slot),
    CHECK (value >= floor AND value <= ceiling)
);
COMMENT ON TABLE concurrency.counter_slot IS
    'the slots of each counter: its value is their sum; each slot stays between its floor and ceiling';
SELECT pg_catalog.pg_extension_config_dump('concurrency.counter_slot', '');

-- Who may use or read a counter besides its owner (and superusers): 'use'
-- adds and reads, 'read' reads. Grantee 0 (shown as '-') is PUBLIC.
CREATE TABLE IF NOT EXISTS concurrency.counter_permission (
    counter    text    NOT NULL REFERENCES concurrency.counter (name) ON DELETE CASCADE,
    grantee    regrole NOT NULL,
    permission text    NOT NULL CHECK (permission IN ('use', 'read')),
    PRIMARY KEY (counter, grantee, permission)
);
COMMENT ON TABLE concurrency.counter_permission IS
    'permissions on concurrency_ext counters (grantee - is PUBLIC); change them with grant_counter and revoke_counter';
SELECT pg_catalog.pg_extension_config_dump('concurrency.counter_permission',
    'WHERE grantee OPERATOR(pg_catalog.=) 0 OR EXISTS (SELECT FROM pg_catalog.pg_roles AS r '
    'WHERE r.oid OPERATOR(pg_catalog.=) grantee::pg_catalog.oid)');
-- Who holds what is no secret (as for queues); changing it goes through the functions.
GRANT SELECT ON concurrency.counter_permission TO PUBLIC;

CREATE OR REPLACE FUNCTION concurrency.create_counter(name text, slots integer DEFAULT 16,
                                           min_value numeric DEFAULT NULL, max_value numeric DEFAULT NULL)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_create_counter';
COMMENT ON FUNCTION concurrency.create_counter(text, integer, numeric, numeric) IS
    'creates a counter of value 0 split into slots rows, optionally bounded (min_value <= 0 <= max_value); the caller owns it';
-- Creating counters is for roles an administrator chose.
REVOKE EXECUTE ON FUNCTION concurrency.create_counter(text, integer, numeric, numeric) FROM PUBLIC;

CREATE OR REPLACE FUNCTION concurrency.drop_counter(name text)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_drop_counter';
COMMENT ON FUNCTION concurrency.drop_counter(text) IS
    'drops a counter with its value and permissions; for its owner';

CREATE OR REPLACE FUNCTION concurrency.alter_counter(name text, slots integer)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_alter_counter';
COMMENT ON FUNCTION concurrency.alter_counter(text, integer) IS
    'changes the number of slots of a counter, keeping its value exactly; for its owner';

CREATE OR REPLACE FUNCTION concurrency.compact_counter(name text)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_compact_counter';
COMMENT ON FUNCTION concurrency.compact_counter(text) IS
    'folds a counter''s slots back (into slot 0, or spread evenly within its bounds), keeping its value exactly; for its owner';

CREATE OR REPLACE FUNCTION concurrency.counter_add(name text, delta numeric)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_counter_add';
COMMENT ON FUNCTION concurrency.counter_add(text, numeric) IS
    'adds delta to a counter in the caller''s transaction, on a slot nobody holds; a bound it would cross raises 23514 and changes nothing; needs use';

CREATE OR REPLACE FUNCTION concurrency.counter_value(name text)
    RETURNS numeric
    LANGUAGE c STABLE
    AS 'MODULE_PATHNAME', 'concurrency_counter_value';
COMMENT ON FUNCTION concurrency.counter_value(text) IS
    'the value of a counter as of the caller''s snapshot (the sum of its slots); needs read or use';

CREATE OR REPLACE FUNCTION concurrency.grant_counter(counter text, role name, permission text)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_grant_counter';
COMMENT ON FUNCTION concurrency.grant_counter(text, name, text) IS
    'grants use (add and read) or read on a counter to a role (''public'': everyone); for its owner';

CREATE OR REPLACE FUNCTION concurrency.revoke_counter(counter text, role name, permission text)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_revoke_counter';
COMMENT ON FUNCTION concurrency.revoke_counter(text, name, text) IS
    'revokes use or read on a counter from a role (''public'': everyone); for its owner';

-- The counters the current user may read, with their values as of the
-- statement's snapshot. The view runs as its owner (the extension's), and
-- shows only rows whose counter the caller holds read or use on.
CREATE OR REPLACE VIEW concurrency.counters WITH (security_barrier) AS
SELECT c.name,
       (SELECT pg_catalog.sum(s.value) FROM concurrency.counter_slot AS s
         WHERE s.counter OPERATOR(pg_catalog.=) c.name) AS value,
       c.slots, c.min_value, c.max_value
  FROM concurrency.counter AS c
 WHERE pg_catalog.pg_has_role(CURRENT_USER, c.owner::pg_catalog.oid, 'USAGE')
    OR EXISTS (SELECT FROM concurrency.counter_permission AS p
                WHERE p.counter OPERATOR(pg_catalog.=) c.name
                  AND (p.grantee::pg_catalog.oid OPERATOR(pg_catalog.=) 0
                       OR pg_catalog.pg_has_role(CURRENT_USER, p.grantee::pg_catalog.oid, 'USAGE')));
COMMENT ON VIEW concurrency.counters IS
    'counters the current user may read: name, value (as of the statement''s snapshot), slots, bounds';
GRANT SELECT ON concurrency.counters TO PUBLIC;
-- ---------------------------------------------------------------------------
-- Durable workflows (src/queue/workflows, docs/workflows.md): a task keeps
-- the results of its steps in its own row (column steps), under its lease;
-- it can sleep without a worker (sleep_task), park until an event
-- (await_event / emit_event), and a producer can wait for its end
-- (await_task). The functions are SECURITY INVOKER and check the caller's
-- permission on the queue as the other task functions do.
--
-- Events live in two extension tables, kept by pg_dump: concurrency.event
-- (one row per event name: its payload once emitted) and
-- concurrency.event_wait (the tasks parked for an event). Nobody but the
-- extension's owner touches them directly: emit_event is for the roles
-- granted EXECUTE on it.
-- ---------------------------------------------------------------------------
CREATE TABLE IF NOT EXISTS concurrency.event (
    name       text        PRIMARY KEY CHECK (name <> '' AND pg_catalog.octet_length(name) <= 1000),
    payload    jsonb,
    emitted_at timestamptz,
    touched_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS event_touched ON concurrency.event (touched_at);
COMMENT ON TABLE concurrency.event IS
    'events of durable workflows (emit_event): the payload an await_event takes, kept for concurrency.event_retention; emitted_at NULL: awaited, not emitted yet';
SELECT pg_catalog.pg_extension_config_dump('concurrency.event', '');

CREATE TABLE IF NOT EXISTS concurrency.event_wait (
    event   text        NOT NULL,
    queue   text        NOT NULL,
    task_id bigint      NOT NULL,
    since   timestamptz NOT NULL,
    PRIMARY KEY (event, queue, task_id)
);
COMMENT ON TABLE concurrency.event_wait IS
    'tasks parked by await_event until their event is emitted (emit_event wakes them)';
SELECT pg_catalog.pg_extension_config_dump('concurrency.event_wait', '');

CREATE OR REPLACE FUNCTION concurrency.record_step(queue text, task_id bigint, lease_token bigint, step text,
                                        result jsonb DEFAULT NULL)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_record_step';
COMMENT ON FUNCTION concurrency.record_step(text, bigint, bigint, text, jsonb) IS
    'keeps the result of a step of a task held with lease_token (SQLSTATE CE001 if the lease was lost); recorded again, the step''s result is replaced';

CREATE OR REPLACE FUNCTION concurrency.step_result(queue text, task_id bigint, lease_token bigint, step text)
    RETURNS jsonb
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_step_result';
COMMENT ON FUNCTION concurrency.step_result(text, bigint, bigint, text) IS
    'the result recorded for a step of a task held with lease_token (jsonb null for a step recorded without one), or NULL when not recorded';

CREATE OR REPLACE FUNCTION concurrency.task_steps(queue text, task_id bigint)
    RETURNS TABLE(step text, result jsonb, recorded_at timestamptz)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_task_steps';
COMMENT ON FUNCTION concurrency.task_steps(text, bigint) IS
    'the steps a task has recorded, in the order recorded (permission read)';

CREATE OR REPLACE FUNCTION concurrency.sleep_task(queue text, task_id bigint, lease_token bigint, until timestamptz)
    RETURNS timestamptz
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_sleep_task';
COMMENT ON FUNCTION concurrency.sleep_task(text, bigint, bigint, timestamptz) IS
    'a durable sleep: the task held with lease_token leaves its worker (no attempt spent, the token fenced off, its steps kept) and is claimable again at until; returns when';

CREATE OR REPLACE FUNCTION concurrency.sleep_task_for(queue text, task_id bigint, lease_token bigint, duration interval)
    RETURNS timestamptz
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_sleep_task_for';
COMMENT ON FUNCTION concurrency.sleep_task_for(text, bigint, bigint, interval) IS
    'sleep_task for a duration from now (a negative one: claimable now)';

CREATE OR REPLACE FUNCTION concurrency.await_event(queue text, task_id bigint, lease_token bigint, event text,
                                        timeout interval DEFAULT NULL)
    RETURNS TABLE(status text, payload jsonb)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_await_event';
COMMENT ON FUNCTION concurrency.await_event(text, bigint, bigint, text, interval) IS
    'for a task held with lease_token: ''received'' and the payload of event (emitted before, or while the task waited), or ''waiting'' (the task is parked, without a lease, until the event is emitted or timeout passes), or ''timed_out'' (claimed again after the timeout)';

CREATE OR REPLACE FUNCTION concurrency.emit_event(event text, payload jsonb DEFAULT NULL)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_emit_event';
COMMENT ON FUNCTION concurrency.emit_event(text, jsonb) IS
    'emits event with payload: the tasks parked for it become claimable with it (returns how many), and later awaits take it for concurrency.event_retention';
REVOKE ALL ON FUNCTION concurrency.emit_event(text, jsonb) FROM PUBLIC;

CREATE OR REPLACE FUNCTION concurrency.await_task(queue text, task_id bigint, wait interval DEFAULT NULL)
    RETURNS TABLE(state text, result jsonb, last_error text)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_await_task';
COMMENT ON FUNCTION concurrency.await_task(text, bigint, interval) IS
    'the end of a task (done, dead or cancelled, with its result or last error) as soon as it ends, or its state when wait has passed; no row when there is no such task (permission read)';

-- ---------------------------------------------------------------------------
-- Durable workflows on distributed queues (docs/workflows.md, "Distributed
-- queues"; src/queue/workflows). A task's steps and the mark of the event it
-- awaits are in its own row, so in its shard. The events are reached from
-- every node: once a queue is distributed, concurrency.event and
-- concurrency.event_wait become Citus distributed tables, distributed by the
-- event's name and co-located, so that an emit or an await of one event is a
-- router statement on one shard (the event's), whichever node makes it, and
-- no node (the coordinator included) sees the events of every emit.
-- await_event runs on the node it is called on: the task's part (its steps,
-- parking it) on the task's shard through the routed function
-- await_event_task, the event's part on the event's shard; emit_event hands
-- each task parked for the event to its shard's node (deliver_event), where
-- the task becomes claimable and that node's waiting claims are woken.
-- ---------------------------------------------------------------------------

-- Makes the event tables distributed (a no-op where they are already).
-- Runs as the extension's owner, who owns them; on the coordinator.
CREATE OR REPLACE FUNCTION concurrency_internal.distribute_events() RETURNS void
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_distribute_events';
COMMENT ON FUNCTION concurrency_internal.distribute_events() IS
    'makes the event tables of durable workflows Citus distributed tables, by event name (internal)';
REVOKE ALL ON FUNCTION concurrency_internal.distribute_events() FROM PUBLIC;

-- The first queue distributed distributes the event tables, when the
-- transaction that distributed it commits (distribute_queue writes the
-- queue's row of concurrency.distributed_queue on the coordinator). At
-- commit, not at once: in the update from 0.3.0 (below), Citus runs the
-- update on the other nodes after this one, and the tables must exist there
-- before they are distributed.
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_queue_added() RETURNS trigger
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_distributed_queue_added';
COMMENT ON FUNCTION concurrency_internal.distributed_queue_added() IS
    'after a queue is distributed: the event tables too (internal)';
DROP TRIGGER IF EXISTS distribute_events ON concurrency.distributed_queue;
CREATE CONSTRAINT TRIGGER distribute_events AFTER INSERT OR UPDATE ON concurrency.distributed_queue
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION concurrency_internal.distributed_queue_added();

-- The task's part of await_event, on the node of its shard.
-- op: 'look' (the event's step and the task's awaiting), 'receive' (the
-- payload recorded as the event's step, the wait ended), 'time_out' (the
-- await's timeout recorded), 'park' (parked until `at`).
CREATE OR REPLACE FUNCTION concurrency_internal.await_event_task(queue text, task_id bigint, lease_token bigint, event text,
                                                      op text, payload jsonb, at timestamptz)
    RETURNS TABLE(taken jsonb, timed_out boolean, awaiting text)
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_await_event_task';
COMMENT ON FUNCTION concurrency_internal.await_event_task(text, bigint, bigint, text, text, jsonb, timestamptz) IS
    'the part of await_event on the task''s shard (internal)';

-- An emitted event handed to a task parked for it, on the node of its shard.
CREATE OR REPLACE FUNCTION concurrency_internal.deliver_event(queue text, task_id bigint, event text, payload jsonb)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_deliver_event';
COMMENT ON FUNCTION concurrency_internal.deliver_event(text, bigint, text, jsonb) IS
    'the part of emit_event on a parked task''s shard: the task claimable with the payload as its step (internal)';

-- Up to 100 events of the shard of event `event` last touched before
-- `cutoff` and awaited by no task, forgotten: on the node of that shard, on
-- its tables (a statement of emit_event sends it there). The events of
-- other shards are left to the emits of their names.
-- One of the two functions of the install script still in PL/pgSQL (the
-- other: concurrency_internal.cluster_lock_wait_rows, 40_citus.sql): Citus runs it on
-- the node of the event's shard, where it names that node's shard tables
-- with Citus's own shard_name; it builds no name of a queue's relation, and
-- reads Citus's catalog, which exists only where Citus does.
CREATE OR REPLACE FUNCTION concurrency_internal.forget_events_on_shard(event text, cutoff timestamptz)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    distributed boolean := false;
    events text;
    waits text;
    n bigint;
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT EXISTS (SELECT FROM pg_catalog.pg_dist_partition
                                 WHERE logicalrelid OPERATOR(pg_catalog.=) $1)'
           INTO distributed USING 'concurrency.event'::regclass;
    END IF;
    IF NOT distributed THEN
        RAISE EXCEPTION 'the event tables are not distributed'
            USING ERRCODE = '55000', HINT = 'forget_events_on_shard serves distributed queues on a Citus cluster.';
    END IF;
    events := shard_name('concurrency.event'::regclass,
                         get_shard_id_for_distribution_column('concurrency.event', event));
    waits := shard_name('concurrency.event_wait'::regclass,
                        get_shard_id_for_distribution_column('concurrency.event_wait', event));
    EXECUTE format($sql$DELETE FROM %1$s WHERE name OPERATOR(pg_catalog.=) ANY (ARRAY(
                            SELECT e.name FROM %1$s AS e
                             WHERE e.touched_at OPERATOR(pg_catalog.<) $1
                               AND NOT EXISTS (SELECT FROM %2$s AS w WHERE w.event OPERATOR(pg_catalog.=) e.name)
                             ORDER BY e.touched_at LIMIT 100 FOR UPDATE SKIP LOCKED))$sql$,
                   events, waits) USING cutoff;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.forget_events_on_shard(text, timestamptz) IS
    'forgets old events of the shard of an event, on its node (internal)';
REVOKE ALL ON FUNCTION concurrency_internal.forget_events_on_shard(text, timestamptz) FROM PUBLIC;
-- An installation whose queues were distributed before (the update from
-- 0.3.0): its event tables, new and empty, distributed when the update
-- commits (the trigger above, on the coordinator).
DO $distribute$
BEGIN
    IF concurrency.citus_node_role() = 'coordinator' THEN
        UPDATE concurrency.distributed_queue SET queue = queue;
    END IF;
END
$distribute$;
