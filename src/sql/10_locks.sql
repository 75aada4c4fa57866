-- ---------------------------------------------------------------------------
-- Named advisory locks: the registry of subsystems and their fixed keys.
-- ---------------------------------------------------------------------------

-- One row per subsystem. `key` is the bigint advisory-lock key of the
-- subsystem lock itself (exactly pg_advisory_lock(key)); `slot` is a small
-- number assigned at registration that identifies the subsystem's resource
-- locks in the lock manager (the 16-bit objsubid field of the advisory lock
-- tag, 16–65535: above PostgreSQL's 1 and 2 and Citus's 4–15).
CREATE TABLE concurrency.subsystem (
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
CREATE FUNCTION concurrency.subsystem_changed() RETURNS trigger
    LANGUAGE c AS 'MODULE_PATHNAME', 'concurrency_subsystem_changed';
COMMENT ON FUNCTION concurrency.subsystem_changed() IS
    'trigger: invalidates the backends'' subsystem name caches after a registry change';
REVOKE EXECUTE ON FUNCTION concurrency.subsystem_changed() FROM PUBLIC;
CREATE TRIGGER subsystem_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON concurrency.subsystem
    FOR EACH STATEMENT EXECUTE FUNCTION concurrency.subsystem_changed();

-- Registration: admin-only (the extension owner and superusers) by default.
-- To delegate, GRANT EXECUTE on both functions and INSERT, UPDATE, DELETE on
-- concurrency.subsystem.
CREATE FUNCTION concurrency.register_subsystem(name text, key bigint, description text DEFAULT NULL,
                                               xact_only boolean DEFAULT NULL)
    RETURNS void LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_register_subsystem';
COMMENT ON FUNCTION concurrency.register_subsystem(text, bigint, text, boolean) IS
    'registers a subsystem under a fixed advisory-lock key (again with the same key: no error, description and xact_only updated when given)';
REVOKE EXECUTE ON FUNCTION concurrency.register_subsystem(text, bigint, text, boolean) FROM PUBLIC;

CREATE FUNCTION concurrency.unregister_subsystem(name text) RETURNS boolean
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_unregister_subsystem';
COMMENT ON FUNCTION concurrency.unregister_subsystem(text) IS
    'removes a subsystem from the registry; false if it was not registered';
REVOKE EXECUTE ON FUNCTION concurrency.unregister_subsystem(text) FROM PUBLIC;

-- Taking locks: any role, as with pg_advisory_lock. Not STRICT: a NULL name
-- raises 22004 instead of silently skipping the lock. No SET search_path
-- clause (a GUC save/restore on every call): the lock path runs no SQL, and
-- the C code pins search_path around the SPI statements it runs elsewhere.
CREATE FUNCTION concurrency.xact_lock(name text, resource bigint DEFAULT NULL, timeout interval DEFAULT NULL,
                                      shared boolean DEFAULT false)
    RETURNS void LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_xact_lock';
COMMENT ON FUNCTION concurrency.xact_lock(text, bigint, interval, boolean) IS
    'takes the named lock (or the lock on one resource of the subsystem) until the end of the transaction; waits, at most timeout';

CREATE FUNCTION concurrency.try_xact_lock(name text, resource bigint DEFAULT NULL, shared boolean DEFAULT false)
    RETURNS boolean LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_try_xact_lock';
COMMENT ON FUNCTION concurrency.try_xact_lock(text, bigint, boolean) IS
    'takes the named lock until the end of the transaction if it is free; never waits';

CREATE FUNCTION concurrency.xact_lock(names text[], timeout interval DEFAULT NULL)
    RETURNS void LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_xact_lock_many';
COMMENT ON FUNCTION concurrency.xact_lock(text[], interval) IS
    'takes several subsystem locks until the end of the transaction, in ascending key order (no deadlock between callers); timeout bounds the whole call';

CREATE FUNCTION concurrency.session_lock(name text, resource bigint DEFAULT NULL, timeout interval DEFAULT NULL,
                                         shared boolean DEFAULT false)
    RETURNS void LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_session_lock';
COMMENT ON FUNCTION concurrency.session_lock(text, bigint, interval, boolean) IS
    'takes the named lock until session_unlock or the end of the session (dedicated connections only); re-entrant';

CREATE FUNCTION concurrency.try_session_lock(name text, resource bigint DEFAULT NULL, shared boolean DEFAULT false)
    RETURNS boolean LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_try_session_lock';
COMMENT ON FUNCTION concurrency.try_session_lock(text, bigint, boolean) IS
    'takes the named session-level lock if it is free; never waits';

CREATE FUNCTION concurrency.session_unlock(name text, resource bigint DEFAULT NULL, shared boolean DEFAULT false)
    RETURNS boolean LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_session_unlock';
COMMENT ON FUNCTION concurrency.session_unlock(text, bigint, boolean) IS
    'releases one hold of a named session-level lock; false (with a WARNING) if this session holds none';

-- ---------------------------------------------------------------------------
-- Seeing named locks.
-- ---------------------------------------------------------------------------

-- The hold counts this backend keeps for what it took through the named
-- functions, with the lock tag as pg_locks shows it (for the view below).
CREATE FUNCTION concurrency.my_named_locks(
        OUT name text, OUT resource bigint, OUT level text, OUT mode text, OUT count bigint,
        OUT lock_classid oid, OUT lock_objid oid, OUT lock_objsubid integer)
    RETURNS SETOF record LANGUAGE c VOLATILE ROWS 10
    AS 'MODULE_PATHNAME', 'concurrency_my_named_locks';
COMMENT ON FUNCTION concurrency.my_named_locks() IS
    'hold counts of the named locks taken by this backend (behind the view concurrency.my_locks)';

-- Only what the lock manager still shows as held: a raw pg_advisory_unlock_all()
-- releases named session locks without our functions knowing.
CREATE VIEW concurrency.my_locks AS
SELECT m.name, m.resource, m.level, m.mode, m.count
  FROM concurrency.my_named_locks() m
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
