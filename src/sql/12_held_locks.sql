-- ---------------------------------------------------------------------------
-- Which registered subsystem each advisory lock of pg_locks belongs to.
-- ---------------------------------------------------------------------------

-- Which named lock an advisory lock of pg_locks is: the subsystem, and the
-- resource for a resource lock; no row when it is no registered subsystem's.
-- The tag is decoded by the same C++ code that encodes it for the lock calls
-- (src/locks/lock_keys.hpp), against the same registry cache; pg_locks shows
-- objsubid as a signed smallint (slots above 32767 appear negative), which it
-- takes as the 16-bit field it is.
CREATE FUNCTION concurrency.named_lock(classid oid, objid oid, objsubid smallint)
    RETURNS TABLE (subsystem text, resource bigint) LANGUAGE c STABLE ROWS 1
    AS 'MODULE_PATHNAME', 'concurrency_named_lock';
COMMENT ON FUNCTION concurrency.named_lock(oid, oid, smallint) IS
    'the registered subsystem (and resource) that an advisory lock of pg_locks belongs to; no row when none';

-- Every advisory lock of the current database that belongs to a registered
-- subsystem, held or awaited. OR REPLACE because this part is also the
-- 0.1.0 -> 0.2.0 update's (src/sql/concurrency_ext--0.1.0--0.2.0/INSTALL_PARTS),
-- which replaces 0.1.0's view in place, with the same columns, keeping its
-- grants and any view built on it. In a fresh install nothing can be there to
-- replace: the schema was created by this script (00_schema.sql).
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
