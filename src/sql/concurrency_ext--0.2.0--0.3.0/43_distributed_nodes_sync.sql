-- ---------------------------------------------------------------------------
-- Distributed queues 0.2.0 -> 0.3.0: every node serves them now
-- (42_distributed_nodes.sql), so every node must know them. On the
-- coordinator, each distributed queue's catalog rows are copied to the other
-- nodes in this transaction; elsewhere (a worker node, where Citus runs this
-- update too, or a server without Citus) there is none to copy.
-- ---------------------------------------------------------------------------

SELECT concurrency_internal.distributed_sync_catalog(d.queue) FROM concurrency.distributed_queue d ORDER BY d.queue;

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
            PERFORM concurrency_internal.distributed_send(pg_catalog.format(
                'SELECT pg_catalog.setval(''concurrency.lease_token'', '
                'GREATEST((SELECT last_value FROM concurrency.lease_token), %s))',
                (SELECT last_value FROM concurrency.lease_token)));
        END IF;
    END IF;
END
$upgrade$;

-- The queue functions run the routed functions of a distributed queue as the
-- owner of its table, and those now live in schema concurrency_internal
-- (41_distributed_routed.sql): each such owner gets USAGE on it, as
-- distribute_queue gives it to the owners of queues distributed from now on.
DO $upgrade$
DECLARE
    owner regrole;
BEGIN
    FOR owner IN SELECT DISTINCT c.relowner::regrole
                   FROM concurrency.distributed_queue d
                   JOIN pg_catalog.pg_class c
                     ON c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(pg_catalog.format('concurrency.%I', 'q_' OPERATOR(pg_catalog.||) d.queue))
                  ORDER BY 1
    LOOP
        EXECUTE pg_catalog.format('GRANT USAGE ON SCHEMA concurrency_internal TO %s', owner);
    END LOOP;
END
$upgrade$;
