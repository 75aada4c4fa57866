-- ---------------------------------------------------------------------------
-- The SQL helpers of distributed queues (see 41_distributed_queue.sql for
-- the placement they follow). Every queue function is served by the C++ on
-- each node (42_distributed_nodes.sql); the helpers of the resizing of
-- the lease slots of max_leased (run by alter_queue on the coordinator:
-- distributed_resize_slots, distributed_leased and
-- distributed_queue_settings) are in 44_distributed_ddl.sql. Here are the
-- declarations of the C++ functions that one node calls on another's
-- shards: distributed_lease_end (a lease slot whose lease end passed),
-- distributed_rebalance (key_limit changed) and distributed_purge_chunk
-- (from a node without shards). Internal: they
-- live in schema concurrency_internal, which PUBLIC cannot use; the owner of
-- each distributed queue's table gets USAGE on it from distribute_queue (the
-- queue functions run these as that owner), so that \df concurrency.* lists
-- the public API only.
-- ---------------------------------------------------------------------------

CREATE SCHEMA concurrency_internal;
REVOKE ALL ON SCHEMA concurrency_internal FROM PUBLIC;
COMMENT ON SCHEMA concurrency_internal IS
    'internal functions of concurrency_ext (routed functions of distributed queues, trigger functions, the rows behind views); not an API: PUBLIC cannot use it';

-- ---------------------------------------------------------------------------
-- key_limit on a distributed queue, kept as on a local queue (the design:
-- src/queue/keys_sql.hpp; for users: docs/queue.md, "Keys and limits"): at
-- most key_limit tasks of a key are admitted (ready, scheduled or leased),
-- the others wait in state 'blocked', which a claim never takes, and a task
-- enters or leaves the admitted set only with its key's row locked (enqueue,
-- complete, fail for good, a lease expiring for good, cancel, retry_dead);
-- blocked tasks are admitted in enqueue (id) order. The key table k_<queue>
-- is distributed co-located with the queue's table: a key's row and all its
-- tasks are on the shard the hash of the key names, so that every statement
-- about a key is a router query to that shard.
--
-- The lock is an UPDATE of the key's row, not a FOR UPDATE: under REPEATABLE
-- READ a call whose snapshot misses another call's change of the key then
-- fails with 40001 instead of deciding on an old picture. The key_limit is
-- read from the catalog after the key's lock is granted: alter_queue locks
-- the whole key table (distributed_rebalance), so a call either ran before it
-- (and the rebalance sees its tasks) or waits for it and reads the new limit.
-- ---------------------------------------------------------------------------

-- The shard position of a concurrency_key (or a dedupe_key) among n shards
-- (NULL for n below 1).
CREATE FUNCTION concurrency_internal.distributed_key_position(n integer, key text) RETURNS integer
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, pg_temp
    AS $fn$ SELECT ((hashtext(key)::bigint + 2147483648) % CASE WHEN n >= 1 THEN n END)::integer $fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_key_position(integer, text) IS
    'the shard position (0 .. n-1) of the tasks of a concurrency_key (or dedupe_key) on a distributed queue';

-- ---------------------------------------------------------------------------
-- max_leased on a distributed queue: the queue's max_leased slot rows
-- s_<queue> are a table on the coordinator, where every claim runs. A claim
-- locks free slots (FOR UPDATE SKIP LOCKED: it never waits for another
-- claim), claims at most as many tasks as it holds slots, and writes each
-- task's id, lease token and lease end into its slot, in its transaction.
-- complete, fail and cancel empty the slots of their tasks first (before
-- they touch a shard, so that they never hold a task's row while waiting
-- for a slot). A slot whose lease end has passed is free once the task is no
-- longer leased under it: the claim that finds it reclaims the task on its
-- shard if its lease is still there and expired (ready again, or dead), and
-- takes the slot; a task heartbeated meanwhile keeps it (its new lease end,
-- which a heartbeat may have left in lease_extended_to, is written into the
-- slot). The claim itself and the acknowledgements are the queue's C++
-- (src/queue/claim.cpp, src/queue/distributed.hpp: decide_lease_slots);
-- these functions (and distributed_resize_slots with distributed_leased, in
-- 44_distributed_ddl.sql) keep the slots.
-- ---------------------------------------------------------------------------

-- For a lease slot of a queue with max_leased whose lease end has passed
-- (the coordinator's claim, when no slot is empty): on the node of the
-- task's shard, wakes that shard as a claim does (an expired lease
-- reclaimed: ready again, or dead with its key's next task admitted and its
-- waiting descendants cancelled), then returns when the lease `lease_token`
-- on the task ends, NULL when it is no longer held. Needs permission work;
-- 55000 where the shard is not on this node.
CREATE FUNCTION concurrency_internal.distributed_lease_end(queue text, task_id bigint, lease_token bigint,
                                                           now timestamptz)
    RETURNS timestamptz
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_distributed_lease_end';
COMMENT ON FUNCTION concurrency_internal.distributed_lease_end(text, bigint, bigint, timestamptz) IS
    'wakes the shard of a task of a distributed queue and returns when its lease ends (NULL: not held); for the lease slots of max_leased';

-- After alter_queue changed key_limit, on each node that holds shards of the
-- queue (called by the coordinator): admits and holds back the tasks of
-- every key on this node's shards, each with its key table's shard locked,
-- as a local queue's alter_queue does. The limit travels with the call (0:
-- none). Needs permission manage.
CREATE FUNCTION concurrency_internal.distributed_rebalance(queue text, key_limit integer, now timestamptz)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_distributed_rebalance';
COMMENT ON FUNCTION concurrency_internal.distributed_rebalance(text, integer, timestamptz) IS
    'after key_limit changed: admits and holds back the tasks of every key of a distributed queue on this node''s shards';

-- One chunk of the purge that queue calls do, for a node without shards of
-- the queue, on the node of the shard at `shard_position`: up to `chunk`
-- finished tasks of that shard past their retention. Returns how many were deleted
-- (0 where the shard is not on this node). Needs permission work.
CREATE FUNCTION concurrency_internal.distributed_purge_chunk(queue text, chunk integer, shard_position integer)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_distributed_purge_chunk';
COMMENT ON FUNCTION concurrency_internal.distributed_purge_chunk(text, integer, integer) IS
    'deletes up to chunk finished tasks past their retention from the shard at shard_position of a distributed queue, on its node';

-- Dependencies between shards (the design: src/queue/dependencies.hpp): the
-- messages about tasks of one shard, delivered on its node by the node that
-- made the top-level call (an int8[] of (kind, a, b) triples), and the
-- messages that a call routed to this node posted, taken by the last column
-- of the routed statement. For the owner of the queue's table.
CREATE FUNCTION concurrency_internal.dependency_messages(queue text, messages bigint[])
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_dependency_messages';
COMMENT ON FUNCTION concurrency_internal.dependency_messages(text, bigint[]) IS
    'delivers messages between tasks of a distributed queue in different shards (a parent done, dead or cancelled; a child enqueued or ended) to their shard on this node';
CREATE FUNCTION concurrency_internal.dependency_outbox()
    RETURNS bigint[]
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_dependency_outbox';
COMMENT ON FUNCTION concurrency_internal.dependency_outbox() IS
    'the messages between shards of a distributed queue that this backend''s calls posted and did not deliver (taken)';
