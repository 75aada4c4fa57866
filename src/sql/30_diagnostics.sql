-- ---------------------------------------------------------------------------
-- Lock diagnostics: who waits for whom, from one consistent snapshot of the
-- heavyweight lock manager (not LWLocks, not buffer pins).
-- ---------------------------------------------------------------------------

-- The raw edges, with pg_blocking_pids() semantics, from one snapshot.
CREATE FUNCTION concurrency.lock_wait_edges(
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
CREATE FUNCTION concurrency.lock_tree_nodes(
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
CREATE FUNCTION concurrency.locked_object(lock pg_catalog.pg_locks) RETURNS text
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
CREATE VIEW concurrency.lock_waits AS
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

-- concurrency.lock_tree: src/sql/31_lock_tree.sql
