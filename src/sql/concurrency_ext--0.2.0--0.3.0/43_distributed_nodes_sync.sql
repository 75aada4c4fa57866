-- ---------------------------------------------------------------------------
-- Distributed queues 0.2.0 -> 0.3.0: every node serves them now
-- (42_distributed_nodes.sql), so every node must know them. On the
-- coordinator, each distributed queue's catalog rows are copied to the other
-- nodes in this transaction; elsewhere (a worker node, where Citus runs this
-- update too, or a server without Citus) there is none to copy.
-- ---------------------------------------------------------------------------

SELECT concurrency.distributed_sync_catalog(d.queue) FROM concurrency.distributed_queue d ORDER BY d.queue;

-- Task ids and lease tokens of 0.2.0 were the coordinator's lease_token
-- numbers (ids n * 1024 + position); those of 0.3.0 carry the node's group
-- (ids (n * 1024 + group) * 1024 + position, tokens n * 1024 + group). So that
-- no new id or token can equal an old one, every other node's lease_token is
-- moved past the coordinator's.
DO $upgrade$
BEGIN
    -- (two IFs: Citus's catalog exists only where the first one holds)
    IF concurrency.citus_node_role() = 'coordinator' THEN
        IF EXISTS (SELECT FROM pg_catalog.pg_dist_node WHERE groupid OPERATOR(pg_catalog.<>) 0) THEN
            PERFORM concurrency.distributed_send(pg_catalog.format(
                'SELECT pg_catalog.setval(''concurrency.lease_token'', '
                'GREATEST((SELECT last_value FROM concurrency.lease_token), %s))',
                (SELECT last_value FROM concurrency.lease_token)));
        END IF;
    END IF;
END
$upgrade$;
