-- ---------------------------------------------------------------------------
-- Named locks: held_locks decodes advisory lock tags with the C++ code that
-- encodes them (concurrency.named_lock), instead of re-deriving the encoding
-- in SQL. Same columns as in 0.1.0.
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
