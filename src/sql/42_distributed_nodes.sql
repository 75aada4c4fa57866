-- ---------------------------------------------------------------------------
-- Distributed queues served by every node (docs/scaling-out.md).
--
-- Every node of the cluster serves a distributed queue: a call on a node that
-- holds shards of the queue runs the queue's C++ code on those shards' tables
-- (src/queue/distributed.hpp), and sends the rest to the node of the shard
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
CREATE FUNCTION concurrency_internal.distributed_send(command text) RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_distributed_send';
COMMENT ON FUNCTION concurrency_internal.distributed_send(text) IS
    'runs a command on every other node of the Citus cluster, in this transaction (internal)';
REVOKE ALL ON FUNCTION concurrency_internal.distributed_send(text) FROM PUBLIC;

-- The functions that make a queue distributed and copy its catalog to the
-- other nodes (distributed_sync_catalog, distribute_key_rate_slots,
-- distribute_queue) are in 44_distributed_ddl.sql.
