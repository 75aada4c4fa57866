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
