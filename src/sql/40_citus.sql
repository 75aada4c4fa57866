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
