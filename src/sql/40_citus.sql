-- ---------------------------------------------------------------------------
-- Citus: what this server is in a Citus cluster, what the diagnostics cover
-- there, and waits across the cluster's nodes (docs/scaling-out.md).
-- ---------------------------------------------------------------------------

CREATE FUNCTION concurrency.citus_node_role() RETURNS text
    LANGUAGE c VOLATILE PARALLEL SAFE
    AS 'MODULE_PATHNAME', 'concurrency_citus_node_role';
COMMENT ON FUNCTION concurrency.citus_node_role() IS
    'this server in a Citus cluster: none (Citus not loaded or not created in this database), coordinator, or worker';

-- One row per diagnostic: which part of the system it shows from here.
CREATE VIEW concurrency.diagnostics_scope AS
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
-- 81_workflows_distributed.sql): a read of two views, one of which is
-- Citus's, that names no relation of a queue; the view
-- concurrency.cluster_lock_waits is its only caller.
CREATE FUNCTION concurrency.cluster_lock_wait_rows(
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
COMMENT ON FUNCTION concurrency.cluster_lock_wait_rows() IS
    'rows of the view concurrency.cluster_lock_waits';

CREATE VIEW concurrency.cluster_lock_waits AS
    SELECT scope, waiting_node, waiting_pid, waiting_gpid, waiting_query,
           blocking_node, blocking_pid, blocking_gpid, blocking_query, locked_object
      FROM concurrency.cluster_lock_wait_rows();
COMMENT ON VIEW concurrency.cluster_lock_waits IS
    'wait edges of this node (scope node) and, on Citus, between distributed transactions on every node from citus_lock_waits (scope cluster)';
GRANT SELECT ON concurrency.cluster_lock_waits TO PUBLIC;
