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

-- Copies what the coordinator knows of a queue (its row of concurrency.queue,
-- of concurrency.distributed_queue and its permissions) to every other node,
-- replacing what they had, in this transaction; a queue that is gone is
-- removed there. Nothing on a server that is not a Citus coordinator. Runs
-- as the owner of the catalog (Citus sends the command as that user).
CREATE FUNCTION concurrency_internal.distributed_sync_catalog(queue text) RETURNS void
    LANGUAGE plpgsql VOLATILE SECURITY DEFINER
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    command text;
BEGIN
    IF queue IS NULL THEN
        RAISE EXCEPTION 'queue must not be null' USING ERRCODE = '22004';
    END IF;
    -- (two IFs: Citus's catalog exists only where the first one fails)
    IF concurrency.citus_node_role() <> 'coordinator' THEN
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_dist_node WHERE groupid <> 0) THEN
        RETURN;
    END IF;
    command := format('DELETE FROM concurrency.queue WHERE name = %L;', queue)
        || coalesce((SELECT string_agg(format('INSERT INTO concurrency.queue SELECT * FROM '
                                              'jsonb_populate_record(NULL::concurrency.queue, %L);', to_jsonb(q)), '')
                       FROM concurrency.queue q WHERE q.name = distributed_sync_catalog.queue), '')
        || coalesce((SELECT string_agg(format('INSERT INTO concurrency.distributed_queue SELECT * FROM '
                                              'jsonb_populate_record(NULL::concurrency.distributed_queue, %L);',
                                              to_jsonb(d)), '')
                       FROM concurrency.distributed_queue d WHERE d.queue = distributed_sync_catalog.queue), '')
        || coalesce((SELECT string_agg(format('INSERT INTO concurrency.queue_permission VALUES (%L, %L::regrole, %L);',
                                              p.queue, p.grantee::text, p.permission), '')
                       FROM concurrency.queue_permission p
                      WHERE p.queue = distributed_sync_catalog.queue
                        AND (p.grantee::oid = 0 OR EXISTS (SELECT FROM pg_roles r WHERE r.oid = p.grantee::oid))), '')
        -- the owner of the queue's table makes the routed calls on every node
        -- (schema concurrency_internal), as distribute_queue let it here
        || coalesce((SELECT format('GRANT USAGE ON SCHEMA concurrency_internal TO %I;', r.rolname)
                       FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner
                      WHERE c.oid = to_regclass(format('concurrency.%I', 'q_' || distributed_sync_catalog.queue))
                        AND NOT r.rolsuper
                        AND EXISTS (SELECT FROM concurrency.distributed_queue d
                                     WHERE d.queue = distributed_sync_catalog.queue)), '');
    PERFORM concurrency_internal.distributed_send(command);
END
$fn$;
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
CREATE FUNCTION concurrency_internal.distribute_key_rate_slots(queue text) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    rkrel text := format('concurrency.%I', 'rk_' || queue);
BEGIN
    IF queue IS NULL THEN
        RAISE EXCEPTION 'queue must not be null' USING ERRCODE = '22004';
    END IF;
    IF NOT EXISTS (SELECT FROM concurrency.distributed_queue d WHERE d.queue = distribute_key_rate_slots.queue) THEN
        RAISE EXCEPTION 'queue "%" is not a distributed queue', queue USING ERRCODE = '55000';
    END IF;
    IF to_regclass(rkrel) IS NULL THEN
        RAISE EXCEPTION 'queue "%" has no slots of key_rate_limit', queue USING ERRCODE = '55000',
            HINT = 'alter_queue(queue, key_rate_limit => …, key_rate_period => …) makes them.';
    END IF;
    IF EXISTS (SELECT FROM pg_attribute a
                WHERE a.attrelid = to_regclass(rkrel) AND a.attname = 'shard_key' AND NOT a.attisdropped) THEN
        RETURN;
    END IF;
    EXECUTE format('DELETE FROM %s', rkrel);
    EXECUTE format('ALTER TABLE %1$s ADD COLUMN shard_key integer NOT NULL DEFAULT 0,
                        DROP CONSTRAINT %2$I,
                        ADD CONSTRAINT %2$I PRIMARY KEY (shard_key, concurrency_key, slot)',
                   rkrel, 'rk_' || queue || '_pkey');
    PERFORM create_distributed_table(rkrel, 'shard_key', colocate_with => format('concurrency.%I', 'q_' || queue));
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distribute_key_rate_slots(text) IS
    'distributes the slot table of key_rate_limit of a distributed queue beside its tasks'' shards (internal)';

-- Makes an empty queue distributed. The caller must own the queue's table
-- (ALTER TABLE) and run it on the coordinator.
CREATE OR REPLACE FUNCTION concurrency.distribute_queue(queue text, shard_count integer DEFAULT NULL)
    RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    rel text;
    n integer;
    nonempty boolean;
    keys integer[];
    shards bigint[];
    holder text;
    filled integer := 0;
    v integer := 0;
    idx integer;
    krel text;
    mode text;
    citus_error text;
BEGIN
    IF queue IS NULL THEN
        RAISE EXCEPTION 'queue must not be null' USING ERRCODE = '22004';
    END IF;
    IF NOT EXISTS (SELECT FROM concurrency.queue q WHERE q.name = distribute_queue.queue) THEN
        RAISE EXCEPTION 'queue "%" does not exist', queue USING ERRCODE = '42704';
    END IF;
    IF concurrency.citus_node_role() <> 'coordinator' THEN
        RAISE EXCEPTION 'cannot distribute queue "%": this server is not a Citus coordinator', queue
            USING ERRCODE = '0A000',
                  DETAIL = format('Its Citus node role is %s.', concurrency.citus_node_role()),
                  HINT = 'Run distribute_queue on the coordinator of a Citus cluster.';
    END IF;
    IF EXISTS (SELECT FROM concurrency.distributed_queue d WHERE d.queue = distribute_queue.queue) THEN
        RETURN; -- already distributed
    END IF;
    IF EXISTS (SELECT FROM concurrency.queue q
                WHERE q.name = distribute_queue.queue AND q.key_rate_limit IS NOT NULL
                  AND q.rate_limit IS NOT NULL) THEN
        RAISE EXCEPTION 'key_rate_limit with rate_limit is not supported on distributed queue "%"', queue
            USING ERRCODE = '0A000',
                  DETAIL = 'The claims of a distributed queue with rate_limit are made on the coordinator, those under key_rate_limit on each key''s shard.',
                  HINT = 'Remove one of them first (alter_queue(queue, rate_limit => 0) or key_rate_limit => 0).';
    END IF;
    n := coalesce(shard_count, current_setting('citus.shard_count')::integer);
    IF n < 1 OR n > 1024 THEN
        RAISE EXCEPTION 'shard_count must be between 1 and 1024' USING ERRCODE = '22023';
    END IF;
    rel := format('concurrency.%I', 'q_' || queue);
    krel := format('concurrency.%I', 'k_' || queue);
    EXECUTE format('LOCK TABLE %s, %s IN ACCESS EXCLUSIVE MODE', rel, krel);
    EXECUTE format('SELECT EXISTS (SELECT FROM %s)', rel) INTO nonempty;
    IF nonempty THEN
        RAISE EXCEPTION 'cannot distribute queue "%": it has tasks', queue USING ERRCODE = '55000',
            DETAIL = 'A task id names its shard, and the ids of existing tasks do not.',
            HINT = 'Distribute a queue right after create_queue, or drain it first.';
    END IF;
    -- every index and constraint includes the distribution column shard_key:
    -- the primary key becomes (shard_key, id), the dedupe index (shard_key,
    -- dedupe_key); ids are set by enqueue (they carry the shard position)
    EXECUTE format('ALTER TABLE %1$s ADD COLUMN shard_key integer NOT NULL DEFAULT 0,
                        ALTER COLUMN id DROP IDENTITY,
                        DROP CONSTRAINT %2$I,
                        ADD CONSTRAINT %2$I PRIMARY KEY (shard_key, id)',
                   rel, 'q_' || queue || '_pkey');
    SELECT pg_get_expr(i.indpred, i.indrelid) INTO holder
      FROM pg_index i WHERE i.indexrelid = format('concurrency.%I', 'q_' || queue || '_dedupe')::regclass;
    EXECUTE format('DROP INDEX concurrency.%1$I', 'q_' || queue || '_dedupe');
    EXECUTE format('CREATE UNIQUE INDEX %1$I ON %2$s (shard_key, dedupe_key) WHERE %3$s',
                   'q_' || queue || '_dedupe', rel, holder);
    -- one connection per node for the shards, metadata and catalog copy
    -- that the rest of this transaction may use (see the top of this file);
    -- after a parallel query in this transaction Citus cannot, and the
    -- queue functions leave the queue alone until the transaction commits
    mode := current_setting('citus.multi_shard_modify_mode');
    BEGIN
        PERFORM set_config('citus.multi_shard_modify_mode', 'sequential', true);
        PERFORM create_distributed_table(rel, 'shard_key', shard_count => n, colocate_with => 'none');
    EXCEPTION WHEN internal_error THEN
        GET STACKED DIAGNOSTICS citus_error = MESSAGE_TEXT;
        IF citus_error NOT LIKE '%in sequential mode because a parallel query was executed%' THEN
            RAISE;
        END IF;
        PERFORM set_config('concurrency_ext.distributed_in_parallel', 'on', true);
        PERFORM create_distributed_table(rel, 'shard_key', shard_count => n, colocate_with => 'none');
    END;
    -- the key table (key_limit) beside it: a key's row on the shard of its
    -- tasks, primary key (shard_key, concurrency_key); a key row is only
    -- there while the key has live tasks, and the queue has none
    EXECUTE format('DELETE FROM %s', krel);
    EXECUTE format('ALTER TABLE %1$s ADD COLUMN shard_key integer NOT NULL DEFAULT 0,
                        DROP CONSTRAINT %2$I,
                        ADD CONSTRAINT %2$I PRIMARY KEY (shard_key, concurrency_key)',
                   krel, 'k_' || queue || '_pkey');
    PERFORM create_distributed_table(krel, 'shard_key', colocate_with => rel);
    -- the lease slots (max_leased) stay a table on the coordinator, where
    -- every claim runs; a slot also keeps when the lease written in it ends
    -- (the rate slots of rate_limit, r_<queue>, stay there as they are)
    EXECUTE format('ALTER TABLE concurrency.%I ADD COLUMN lease_expires_at timestamptz', 's_' || queue);
    -- one shard_key value per shard, in shard order: the smallest value
    -- that hashes into each shard
    SELECT array_agg(shardid ORDER BY shardid) INTO shards
      FROM pg_dist_shard WHERE logicalrelid = rel::regclass;
    keys := array_fill(NULL::integer, ARRAY[n]);
    WHILE filled < n AND v < 100000000 LOOP
        idx := array_position(shards, get_shard_id_for_distribution_column(rel::regclass, v));
        IF keys[idx] IS NULL THEN
            keys[idx] := v;
            filled := filled + 1;
        END IF;
        v := v + 1;
    END LOOP;
    IF filled < n OR cardinality(shards) IS DISTINCT FROM n THEN
        RAISE EXCEPTION 'could not find a shard key value for each of the % shards of queue "%"', n, queue
            USING ERRCODE = 'XX000';
    END IF;
    INSERT INTO concurrency.distributed_queue (queue, shard_keys, dedupe_holder)
    VALUES (distribute_queue.queue, keys, holder);
    -- the slots of key_rate_limit (where the queue has the limit) beside the
    -- tasks too
    IF to_regclass(format('concurrency.%I', 'rk_' || queue)) IS NOT NULL THEN
        PERFORM concurrency_internal.distribute_key_rate_slots(queue);
    END IF;
    -- the queue functions hand what this node cannot serve to the routed
    -- functions of schema concurrency_internal, as the owner of the queue's table
    EXECUTE format('GRANT USAGE ON SCHEMA concurrency_internal TO %s',
                   (SELECT c.relowner::regrole FROM pg_class c WHERE c.oid = rel::regclass));
    -- every node serves the queue: its settings, shard keys and permissions
    -- on every node, in this transaction
    PERFORM concurrency_internal.distributed_sync_catalog(distribute_queue.queue);
    PERFORM set_config('citus.multi_shard_modify_mode', mode, true);
END
$fn$;
COMMENT ON FUNCTION concurrency.distribute_queue(text, integer) IS
    'makes an empty queue a Citus distributed table (shard_count shards, default citus.shard_count); run on the coordinator';
REVOKE ALL ON FUNCTION concurrency.distribute_queue(text, integer) FROM PUBLIC;
