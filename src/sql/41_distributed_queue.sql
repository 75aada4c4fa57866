-- ---------------------------------------------------------------------------
-- Distributed queues on Citus (docs/scaling-out.md).
--
-- distribute_queue(queue) makes an empty queue's table a Citus distributed
-- table with a column shard_key as its distribution column. The queue
-- functions (enqueue, dequeue, heartbeat, complete, fail, retry_dead, the
-- batch acknowledgements, cancel, purge, task_status) keep their names and
-- meaning: on a distributed queue the C++ entry points serve the call on this
-- node's shards, or send it to the node of the shard it concerns, whose C++
-- serves it there (one Citus router query carries the call).
--
-- Placement: shard_keys holds one shard_key value per shard (found with
-- get_shard_id_for_distribution_column), in shard order. A task id carries
-- its shard's position in its low 10 bits (id = n * 1024 + position), so
-- that every call about given tasks finds their shards from the ids alone
-- (task_position in src/queue/distributed.hpp). A task
-- with a concurrency_key or a dedupe_key goes to the shard chosen by a hash
-- of the key, so that the key's limit and uniqueness (an index on (shard_key,
-- dedupe_key)) hold across the queue; other tasks go to a shard of the node
-- that enqueues them, round-robin. Ids and lease tokens come from each
-- node's concurrency.lease_token with the node's Citus group in their low 10
-- bits (42_distributed_nodes.sql).
-- ---------------------------------------------------------------------------

CREATE TABLE concurrency.distributed_queue (
    queue          text        PRIMARY KEY REFERENCES concurrency.queue (name) ON DELETE CASCADE,
    shard_keys     integer[]   NOT NULL CHECK (pg_catalog.cardinality(shard_keys) BETWEEN 1 AND 1024),
    dedupe_holder  text        NOT NULL,  -- the predicate of the dedupe index: a task that holds its key
    distributed_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp()
);
COMMENT ON TABLE concurrency.distributed_queue IS
    'queues whose table is a Citus distributed table, with one shard_key value per shard (in shard order)';
SELECT pg_catalog.pg_extension_config_dump('concurrency.distributed_queue', '');
GRANT SELECT ON concurrency.distributed_queue TO PUBLIC;
