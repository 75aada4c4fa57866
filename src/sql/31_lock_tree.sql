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
