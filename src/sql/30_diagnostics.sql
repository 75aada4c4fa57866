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
