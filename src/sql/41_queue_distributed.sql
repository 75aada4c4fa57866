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
-- (task_position in src/queue/distributed/distributed.hpp). A task
-- with a concurrency_key or a dedupe_key goes to the shard chosen by a hash
-- of the key, so that the key's limit and uniqueness (an index on (shard_key,
-- dedupe_key)) hold across the queue; other tasks go to a shard of the node
-- that enqueues them, round-robin. Ids and lease tokens come from each
-- node's concurrency.lease_token with the node's Citus group in their low 10
-- bits (40_citus.sql).
-- ---------------------------------------------------------------------------

CREATE TABLE IF NOT EXISTS concurrency.distributed_queue (
    queue          text        PRIMARY KEY REFERENCES concurrency.queue (name) ON DELETE CASCADE,
    shard_keys     integer[]   NOT NULL CHECK (pg_catalog.cardinality(shard_keys) BETWEEN 1 AND 1024),
    dedupe_holder  text        NOT NULL,  -- the predicate of the dedupe index: a task that holds its key
    distributed_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp()
);
COMMENT ON TABLE concurrency.distributed_queue IS
    'queues whose table is a Citus distributed table, with one shard_key value per shard (in shard order)';
SELECT pg_catalog.pg_extension_config_dump('concurrency.distributed_queue', '');
GRANT SELECT ON concurrency.distributed_queue TO PUBLIC;

-- ---------------------------------------------------------------------------
-- The SQL helpers of distributed queues (see above for
-- the placement they follow). Every queue function is served by the C++ on
-- each node (40_citus.sql); the helpers of the resizing of
-- the lease slots of max_leased (run by alter_queue on the coordinator:
-- distributed_resize_slots, distributed_leased and
-- distributed_queue_settings) are further below. Here are the
-- declarations of the C++ functions that one node calls on another's
-- shards: distributed_lease_end (a lease slot whose lease end passed),
-- distributed_rebalance (key_limit changed) and distributed_purge_chunk
-- (from a node without shards). Internal: they
-- live in schema concurrency_internal, which PUBLIC cannot use; the owner of
-- each distributed queue's table gets USAGE on it from distribute_queue (the
-- queue functions run these as that owner), so that \df concurrency.* lists
-- the public API only.
-- ---------------------------------------------------------------------------

-- ---------------------------------------------------------------------------
-- key_limit on a distributed queue, kept as on a local queue (the design:
-- src/queue/flow/keys_sql.hpp; for users: docs/queue.md, "Keys and limits"): at
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
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_key_position(n integer, key text) RETURNS integer
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
-- (src/queue/lifecycle/claim.cpp, src/queue/distributed/distributed.hpp: decide_lease_slots);
-- these functions (and distributed_resize_slots with distributed_leased, in
-- this part) keep the slots.
-- ---------------------------------------------------------------------------

-- For a lease slot of a queue with max_leased whose lease end has passed
-- (the coordinator's claim, when no slot is empty): on the node of the
-- task's shard, wakes that shard as a claim does (an expired lease
-- reclaimed: ready again, or dead with its key's next task admitted and its
-- waiting descendants cancelled), then returns when the lease `lease_token`
-- on the task ends, NULL when it is no longer held. Needs permission work;
-- 55000 where the shard is not on this node.
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_lease_end(queue text, task_id bigint, lease_token bigint,
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
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_rebalance(queue text, key_limit integer, now timestamptz)
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_distributed_rebalance';
COMMENT ON FUNCTION concurrency_internal.distributed_rebalance(text, integer, timestamptz) IS
    'after key_limit changed: admits and holds back the tasks of every key of a distributed queue on this node''s shards';

-- One chunk of the purge that queue calls do, for a node without shards of
-- the queue, on the node of the shard at `shard_position`: up to `chunk`
-- finished tasks of that shard past their retention. Returns how many were deleted
-- (0 where the shard is not on this node). Needs permission work.
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_purge_chunk(queue text, chunk integer, shard_position integer)
    RETURNS bigint
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_distributed_purge_chunk';
COMMENT ON FUNCTION concurrency_internal.distributed_purge_chunk(text, integer, integer) IS
    'deletes up to chunk finished tasks past their retention from the shard at shard_position of a distributed queue, on its node';

-- Dependencies between shards (the design: src/queue/graphs/dependencies.hpp): the
-- messages about tasks of one shard, delivered on its node by the node that
-- made the top-level call (an int8[] of (kind, a, b) triples), and the
-- messages that a call routed to this node posted, taken by the last column
-- of the routed statement. For the owner of the queue's table.
CREATE OR REPLACE FUNCTION concurrency_internal.dependency_messages(queue text, messages bigint[])
    RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_dependency_messages';
COMMENT ON FUNCTION concurrency_internal.dependency_messages(text, bigint[]) IS
    'delivers messages between tasks of a distributed queue in different shards (a parent done, dead or cancelled; a child enqueued or ended) to their shard on this node';
CREATE OR REPLACE FUNCTION concurrency_internal.dependency_outbox()
    RETURNS bigint[]
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_dependency_outbox';
COMMENT ON FUNCTION concurrency_internal.dependency_outbox() IS
    'the messages between shards of a distributed queue that this backend''s calls posted and did not deliver (taken)';

-- ---------------------------------------------------------------------------
-- The SQL that makes a queue distributed (docs/scaling-out.md) and keeps
-- its catalog and lease slots on every node: distribute_queue,
-- distribute_key_rate_slots, distributed_sync_catalog,
-- distributed_queue_settings, distributed_leased and
-- distributed_resize_slots (see the top of this part for the placement
-- and 40_citus.sql for the nodes). Their C++ is
-- src/queue/distributed/ddl.cpp, which names a queue's relations as the
-- local queue's statements do (src/queue/relation_names.hpp; a queue made
-- before 0.4.0 keeps its index names of the older rule). CREATE OR REPLACE:
-- the update from 0.3.0 replaces that version's PL/pgSQL functions in
-- place, with their privileges.
-- ---------------------------------------------------------------------------

-- The settings and shard keys of a distributed queue; 42704 when the queue is
-- not distributed (or does not exist).
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_queue_settings(queue text,
        OUT relation text, OUT lease interval, OUT max_attempts integer, OUT shard_keys integer[],
        OUT dedupe_holder text, OUT retain interval, OUT key_limit integer, OUT max_leased integer)
    LANGUAGE c STABLE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_distributed_queue_settings';
COMMENT ON FUNCTION concurrency_internal.distributed_queue_settings(text) IS
    'table, lease, max_attempts and shard keys of a distributed queue (42704 if it is not one)';

-- The leased tasks of a distributed queue (a query over every shard).
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_leased(queue text)
    RETURNS TABLE (id bigint, lease_token bigint, lease_expires_at timestamptz)
    LANGUAGE c VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_distributed_leased';
COMMENT ON FUNCTION concurrency_internal.distributed_leased(text) IS
    'the leased tasks of a distributed queue (id, lease token, lease end)';

-- After alter_queue set max_leased (0: none): slots 1..max_leased, the leases
-- running now written into the empty ones.
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_resize_slots(queue text, max_leased integer) RETURNS void
    LANGUAGE c VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_distributed_resize_slots';
COMMENT ON FUNCTION concurrency_internal.distributed_resize_slots(text, integer) IS
    'gives a distributed queue max_leased lease slots, the running leases written into them (0: none)';

-- Copies what the coordinator knows of a queue (its row of concurrency.queue,
-- of concurrency.distributed_queue and its permissions) to every other node,
-- replacing what they had, in this transaction; a queue that is gone is
-- removed there. Nothing on a server that is not a Citus coordinator. Runs
-- as the owner of the catalog (Citus sends the command as that user).
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_sync_catalog(queue text) RETURNS void
    LANGUAGE c VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_distributed_sync_catalog';
COMMENT ON FUNCTION concurrency_internal.distributed_sync_catalog(text) IS
    'copies a distributed queue''s settings, shard keys and permissions to every other Citus node, in this transaction (internal)';
REVOKE ALL ON FUNCTION concurrency_internal.distributed_sync_catalog(text) FROM PUBLIC;

-- The slots of key_rate_limit of distributed queue `queue` (rk_<queue>)
-- distributed beside its tasks: a key's slots on the shard of its tasks,
-- where the claims of that shard take them. By distribute_queue, and by
-- alter_queue where it adds the limit to a distributed queue (as the owner of
-- the queue's table). Slots still there are forgotten: a key's first claims
-- make them again. Nothing where they are distributed already; 55000 for a
-- queue that is not distributed or has no such slots.
CREATE OR REPLACE FUNCTION concurrency_internal.distribute_key_rate_slots(queue text) RETURNS void
    LANGUAGE c VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_distribute_key_rate_slots';
COMMENT ON FUNCTION concurrency_internal.distribute_key_rate_slots(text) IS
    'distributes the slot table of key_rate_limit of a distributed queue beside its tasks'' shards (internal)';

-- Makes an empty queue distributed. The caller must own the queue's table
-- (ALTER TABLE) and run it on the coordinator.
CREATE OR REPLACE FUNCTION concurrency.distribute_queue(queue text, shard_count integer DEFAULT NULL)
    RETURNS void
    LANGUAGE c VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS 'MODULE_PATHNAME', 'concurrency_distribute_queue';
COMMENT ON FUNCTION concurrency.distribute_queue(text, integer) IS
    'makes an empty queue a Citus distributed table (shard_count shards, default citus.shard_count); run on the coordinator';
REVOKE ALL ON FUNCTION concurrency.distribute_queue(text, integer) FROM PUBLIC;
