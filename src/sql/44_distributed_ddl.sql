-- ---------------------------------------------------------------------------
-- The SQL that makes a queue distributed (docs/scaling-out.md) and keeps
-- its catalog and lease slots on every node: distribute_queue,
-- distribute_key_rate_slots, distributed_sync_catalog,
-- distributed_queue_settings and distributed_resize_slots (see
-- 41_distributed_queue.sql for the placement and 42_distributed_nodes.sql
-- for the nodes). They ask the module for the names of the queue's
-- relations (concurrency_internal.queue_relation_name, 43_*), which a queue
-- made before 0.4.0 has under its older rule. CREATE OR REPLACE: the update
-- from 0.3.0 replaces that version's functions in place, with their
-- privileges.
-- ---------------------------------------------------------------------------

-- The settings and shard keys of a distributed queue; 42704 when the queue is
-- not distributed (or does not exist).
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_queue_settings(queue text,
        OUT relation text, OUT lease interval, OUT max_attempts integer, OUT shard_keys integer[],
        OUT dedupe_holder text, OUT retain interval, OUT key_limit integer, OUT max_leased integer)
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
BEGIN
    IF queue IS NULL THEN
        RAISE EXCEPTION 'queue must not be null' USING ERRCODE = '22004';
    END IF;
    SELECT format('concurrency.%I', concurrency_internal.queue_relation_name(q.name, 'tasks')), q.lease, q.max_attempts, d.shard_keys,
           d.dedupe_holder, q.retain, q.key_limit, q.max_leased
      INTO relation, lease, max_attempts, shard_keys, dedupe_holder, retain, key_limit, max_leased
      FROM concurrency.queue q JOIN concurrency.distributed_queue d ON d.queue = q.name
     WHERE q.name = distributed_queue_settings.queue;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'distributed queue "%" does not exist', queue USING ERRCODE = '42704',
            HINT = 'Create it with concurrency.create_queue, then concurrency.distribute_queue.';
    END IF;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_queue_settings(text) IS
    'table, lease, max_attempts and shard keys of a distributed queue (42704 if it is not one)';

-- After alter_queue set max_leased (0: none): slots 1..max_leased, the leases
-- running now written into the empty ones.
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_resize_slots(queue text, max_leased integer) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    slots_relation text := format('concurrency.%I', concurrency_internal.queue_relation_name(queue, 'slots'));
BEGIN
    IF max_leased IS NULL OR max_leased < 0 THEN
        RAISE EXCEPTION 'max_leased must not be negative' USING ERRCODE = '22023';
    END IF;
    EXECUTE format('DELETE FROM %s WHERE slot > $1', slots_relation) USING max_leased;
    EXECUTE format('INSERT INTO %s (slot) SELECT g FROM generate_series(1, $1) AS g ON CONFLICT (slot) DO NOTHING',
                   slots_relation) USING max_leased;
    EXECUTE format($q$WITH running AS (SELECT r.id, r.lease_token, r.lease_expires_at,
                                              row_number() OVER (ORDER BY r.id) AS n
                                         FROM unnest($1, $2, $3) AS r(id, lease_token, lease_expires_at)
                                        WHERE r.id NOT IN (SELECT task_id FROM %1$s WHERE task_id IS NOT NULL)),
                           empty AS (SELECT slot, row_number() OVER (ORDER BY slot) AS n
                                       FROM %1$s WHERE task_id IS NULL)
                       UPDATE %1$s AS sl SET task_id = running.id, lease_token = running.lease_token,
                                             lease_expires_at = running.lease_expires_at
                         FROM running JOIN empty USING (n)
                        WHERE sl.slot = empty.slot$q$, slots_relation)
      USING ARRAY(SELECT l.id FROM concurrency_internal.distributed_leased(queue) l ORDER BY l.id),
            ARRAY(SELECT l.lease_token FROM concurrency_internal.distributed_leased(queue) l ORDER BY l.id),
            ARRAY(SELECT l.lease_expires_at FROM concurrency_internal.distributed_leased(queue) l ORDER BY l.id);
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_resize_slots(text, integer) IS
    'gives a distributed queue max_leased lease slots, the running leases written into them (0: none)';

-- Copies what the coordinator knows of a queue (its row of concurrency.queue,
-- of concurrency.distributed_queue and its permissions) to every other node,
-- replacing what they had, in this transaction; a queue that is gone is
-- removed there. Nothing on a server that is not a Citus coordinator. Runs
-- as the owner of the catalog (Citus sends the command as that user).
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_sync_catalog(queue text) RETURNS void
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
                      WHERE c.oid = to_regclass(format('concurrency.%I',
                                                       concurrency_internal.queue_relation_name(distributed_sync_catalog.queue, 'tasks')))
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
CREATE OR REPLACE FUNCTION concurrency_internal.distribute_key_rate_slots(queue text) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    rkrel text := format('concurrency.%I', concurrency_internal.queue_relation_name(queue, 'key_rate'));
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
                   rkrel, concurrency_internal.queue_relation_name(queue, 'key_rate', 'pkey'));
    PERFORM create_distributed_table(rkrel, 'shard_key',
                                     colocate_with => format('concurrency.%I', concurrency_internal.queue_relation_name(queue, 'tasks')));
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
    pkey_name text;
    dedupe_name text;
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
    rel := format('concurrency.%I', concurrency_internal.queue_relation_name(queue, 'tasks'));
    krel := format('concurrency.%I', concurrency_internal.queue_relation_name(queue, 'keys'));
    -- the names its indexes have (made before 0.4.0, table first)
    pkey_name := concurrency_internal.queue_relation_name(queue, 'tasks', 'pkey');
    dedupe_name := concurrency_internal.queue_relation_name(queue, 'tasks', 'dedupe');
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
                   rel, pkey_name);
    SELECT pg_get_expr(i.indpred, i.indrelid) INTO holder
      FROM pg_index i WHERE i.indexrelid = format('concurrency.%I', dedupe_name)::regclass;
    EXECUTE format('DROP INDEX concurrency.%1$I', dedupe_name);
    EXECUTE format('CREATE UNIQUE INDEX %1$I ON %2$s (shard_key, dedupe_key) WHERE %3$s',
                   dedupe_name, rel, holder);
    -- one connection per node for the shards, metadata and catalog copy
    -- that the rest of this transaction may use (see the top of
    -- 42_distributed_nodes.sql);
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
                   krel, concurrency_internal.queue_relation_name(queue, 'keys', 'pkey'));
    PERFORM create_distributed_table(krel, 'shard_key', colocate_with => rel);
    -- the lease slots (max_leased) stay a table on the coordinator, where
    -- every claim runs; a slot also keeps when the lease written in it ends
    -- (the rate slots of rate_limit, r_<queue>, stay there as they are)
    EXECUTE format('ALTER TABLE concurrency.%I ADD COLUMN lease_expires_at timestamptz',
                   concurrency_internal.queue_relation_name(queue, 'slots'));
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
    IF to_regclass(format('concurrency.%I', concurrency_internal.queue_relation_name(queue, 'key_rate'))) IS NOT NULL THEN
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
