-- ---------------------------------------------------------------------------
-- The SQL that makes a queue distributed (docs/scaling-out.md) and keeps
-- its catalog and lease slots on every node: distribute_queue,
-- distribute_key_rate_slots, distributed_sync_catalog,
-- distributed_queue_settings, distributed_leased and
-- distributed_resize_slots (see 41_distributed_queue.sql for the placement
-- and 42_distributed_nodes.sql for the nodes). Their C++ is
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
