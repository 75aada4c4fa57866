-- ---------------------------------------------------------------------------
-- Distributed queues served by every node (docs/scaling-out.md).
--
-- Every node of the cluster serves a distributed queue: a call on a node that
-- holds shards of the queue runs the queue's C++ code on those shards' tables
-- (src/queue/distributed.hpp), and hands the rest to the routed functions of
-- 41_distributed_routed.sql. For that, every node knows the queue: its row of
-- concurrency.queue, of concurrency.distributed_queue and its permissions are
-- copied to every other node in the transaction that changes them on the
-- coordinator (distributed_sync_catalog). And every node makes task ids and
-- lease tokens of its own without asking another: a number from its own
-- lease_token sequence with its Citus group in the low 10 bits
-- (distributed_new_number; the C++ makes the same, QueueSql::new_id).
-- ---------------------------------------------------------------------------

-- Runs a command on every other node of the Citus cluster, as the current
-- user, inside this transaction (Citus commits it with two-phase commit).
CREATE FUNCTION concurrency_internal.distributed_send(command text) RETURNS void
    LANGUAGE c VOLATILE
    AS 'MODULE_PATHNAME', 'concurrency_distributed_send';
COMMENT ON FUNCTION concurrency_internal.distributed_send(text) IS
    'runs a command on every other node of the Citus cluster, in this transaction (internal)';
REVOKE ALL ON FUNCTION concurrency_internal.distributed_send(text) FROM PUBLIC;

-- A number no other node makes: this node's next lease_token number with its
-- Citus group in the low 10 bits. A lease token of a distributed queue; times
-- 1024 plus a shard position, a task id.
CREATE FUNCTION concurrency_internal.distributed_new_number() RETURNS bigint
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
BEGIN
    IF concurrency.citus_node_role() = 'none' THEN
        RAISE EXCEPTION 'distributed_new_number needs a Citus node' USING ERRCODE = '0A000';
    END IF;
    RETURN nextval('concurrency.lease_token') * 1024 + (SELECT groupid FROM pg_dist_local_group);
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_new_number() IS
    'a number unique across the Citus cluster, for task ids and lease tokens of distributed queues (internal)';

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
                        AND (p.grantee::oid = 0 OR EXISTS (SELECT FROM pg_roles r WHERE r.oid = p.grantee::oid))), '');
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
    PERFORM create_distributed_table(rel, 'shard_key', shard_count => n, colocate_with => 'none');
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
END
$fn$;
COMMENT ON FUNCTION concurrency.distribute_queue(text, integer) IS
    'makes an empty queue a Citus distributed table (shard_count shards, default citus.shard_count); run on the coordinator';
REVOKE ALL ON FUNCTION concurrency.distribute_queue(text, integer) FROM PUBLIC;

CREATE OR REPLACE FUNCTION concurrency_internal.distributed_enqueue(queue text, payload jsonb DEFAULT '{}', run_at timestamptz DEFAULT NULL,
                                                priority integer DEFAULT 0, dedupe_key text DEFAULT NULL,
                                                concurrency_key text DEFAULT NULL)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    n integer := cardinality(s.shard_keys);
    pos integer;
    now timestamptz := clock_timestamp();
    new_id bigint;
    held_back boolean := false;
    key_limit integer;
BEGIN
    IF payload IS NULL THEN
        RAISE EXCEPTION 'payload must not be null' USING ERRCODE = '22004';
    ELSIF priority IS NULL THEN
        RAISE EXCEPTION 'priority must not be null' USING ERRCODE = '22004';
    ELSIF NOT isfinite(run_at) THEN
        RAISE EXCEPTION 'run_at must be a finite time' USING ERRCODE = '22023', HINT = 'Use NULL to run the task now.';
    END IF;
    -- a key's tasks on one shard: the concurrency_key's shard, else the
    -- dedupe_key's, else the next shard of this backend
    pos := CASE WHEN coalesce(concurrency_key, dedupe_key) IS NULL THEN concurrency_internal.distributed_next_position(n)
                ELSE concurrency_internal.distributed_key_position(n, coalesce(concurrency_key, dedupe_key)) END;
    -- on a queue with key_limit a task of a key is blocked when its key is
    -- full or already has blocked tasks, decided under the key's lock
    IF concurrency_key IS NOT NULL AND s.key_limit IS NOT NULL THEN
        PERFORM concurrency_internal.distributed_lock_key(queue, s.shard_keys, concurrency_key);
        key_limit := concurrency_internal.distributed_key_limit(queue);
        IF key_limit IS NOT NULL THEN
            EXECUTE format($q$SELECT count(*) FILTER (WHERE state = 'blocked') > 0
                                     OR count(*) FILTER (WHERE state <> 'blocked') >= $3
                                FROM %s
                               WHERE shard_key = $1 AND concurrency_key = $2
                                 AND state IN ('ready', 'scheduled', 'leased', 'blocked')$q$, s.relation)
              INTO held_back USING s.shard_keys[pos + 1], concurrency_key, key_limit;
        END IF;
    END IF;
    FOR attempt IN 1..5 LOOP
        new_id := concurrency_internal.distributed_new_number() * 1024 + pos;
        EXECUTE format($q$INSERT INTO %s (id, shard_key, state, priority, run_at, payload, dedupe_key,
                                          concurrency_key, enqueued_at)
                          VALUES ($1, $2, CASE WHEN $9 THEN 'blocked' WHEN $3 > $4 THEN 'scheduled' ELSE 'ready' END,
                                  $5, coalesce($3, $4), $6, $7, $8, $4)
                          ON CONFLICT (shard_key, dedupe_key) WHERE %s
                          DO NOTHING RETURNING id$q$, s.relation, s.dedupe_holder)
          INTO new_id USING new_id, s.shard_keys[pos + 1], run_at, now, priority, payload, dedupe_key, concurrency_key,
                            held_back;
        IF new_id IS NULL THEN -- the task holding dedupe_key
            EXECUTE format($q$SELECT id FROM %s WHERE shard_key = $1 AND dedupe_key = $2 AND %s$q$,
                           s.relation, s.dedupe_holder)
              INTO new_id USING s.shard_keys[pos + 1], dedupe_key;
        END IF;
        IF new_id IS NOT NULL THEN
            PERFORM pg_notify('concurrency_' || queue, '');
            RETURN new_id;
        END IF;
    END LOOP;
    RAISE EXCEPTION 'the task holding dedupe_key "%" kept disappearing', dedupe_key USING ERRCODE = '40001',
        HINT = 'Retry the transaction.';
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_enqueue(text, jsonb, timestamptz, integer, text, text) IS
    'enqueue on a distributed queue (called by concurrency.enqueue)';

-- A claim visits one shard at a time (a router query each), starting after
-- the shard this backend visited last, until it has its batch or has visited
-- every shard once. A visit wakes the shard's expired leases and due tasks
-- first on every 16th call of the backend, and whenever the claim found
-- fewer tasks than asked for.
CREATE OR REPLACE FUNCTION concurrency_internal.distributed_dequeue(queue text, batch integer DEFAULT 1, lease interval DEFAULT NULL,
                                                worker text DEFAULT NULL)
    RETURNS TABLE (task_id bigint, lease_token bigint, attempt integer, payload jsonb,
                   enqueued_at timestamptz, lease_expires_at timestamptz)
    LANGUAGE plpgsql VOLATILE ROWS 1
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    n integer := cardinality(s.shard_keys);
    start integer := concurrency_internal.distributed_next_position(n);
    pos integer;
    key integer;
    now timestamptz;
    token bigint;
    got integer := 0;
    claim text;
    t record;
    slots integer[];
    rate record;
    rate_slots integer[];
    rate_before timestamptz[];
    rate_table text := format('concurrency.%I', 'r_' || queue);
    ids bigint[] := '{}';
    tokens bigint[] := '{}';
    ends timestamptz[] := '{}';
BEGIN
    IF batch IS NULL THEN
        RAISE EXCEPTION 'batch must not be null' USING ERRCODE = '22004';
    ELSIF batch < 1 THEN
        RAISE EXCEPTION 'batch must be at least 1' USING ERRCODE = '22023';
    ELSIF lease <= interval '0' THEN
        RAISE EXCEPTION 'lease must be positive' USING ERRCODE = '22023';
    END IF;
    -- rate_limit: at most as many tasks as this claim takes free rate slots
    -- (as a claim on one server takes them, src/queue/rate_sql.hpp: a slot
    -- serves one claim in any window of rate_period), those it does not use
    -- given back at the end with the time of their use before (never "free":
    -- a claim whose clock is behind may see them still in use, and must); the
    -- coordinator is their one place of decision
    SELECT q.rate_limit, q.rate_period INTO rate FROM concurrency.queue q WHERE q.name = distributed_dequeue.queue;
    IF rate.rate_limit IS NOT NULL THEN
        now := clock_timestamp();
        EXECUTE format($q$WITH free AS (
                              SELECT slot, used_at FROM %1$s WHERE used_at <= $1
                               LIMIT $2 FOR UPDATE SKIP LOCKED),
                          taken AS (
                              UPDATE %1$s AS r SET used_at = $3 FROM free WHERE r.slot = free.slot
                              RETURNING r.slot, free.used_at AS before)
                          SELECT coalesce(array_agg(slot), '{}'), coalesce(array_agg(before), '{}')
                            FROM taken$q$, rate_table)
          INTO rate_slots, rate_before USING now - rate.rate_period, least(batch, rate.rate_limit), now;
        batch := cardinality(rate_slots);
        IF batch = 0 THEN
            RETURN;
        END IF;
    END IF;
    -- max_leased: at most as many tasks as this claim holds free slots (a
    -- claim never checks a key: tasks that key_limit holds back wait
    -- blocked, and a claim takes only ready ones)
    IF s.max_leased IS NOT NULL THEN
        slots := concurrency_internal.distributed_take_slots(queue, batch, clock_timestamp());
        batch := cardinality(slots);
    END IF;
    IF batch = 0 THEN
        IF rate_slots IS NOT NULL THEN
            EXECUTE format($q$UPDATE %s AS r SET used_at = b.before FROM unnest($1, $2) AS b(slot, before)
                               WHERE r.slot = b.slot$q$, rate_table)
              USING rate_slots, rate_before;
        END IF;
        RETURN;
    END IF;
    claim := format($q$UPDATE %1$s AS t
                          SET state = 'leased', attempt = t.attempt + 1, lease_token = $3,
                              lease_expires_at = $4 + $5, lease_extended_to = NULL, worker = $6
                        WHERE t.shard_key = $1 AND t.id = ANY (ARRAY(
                              SELECT id FROM %1$s
                               WHERE shard_key = $1 AND state = 'ready'
                               ORDER BY (-(priority::int8)), run_at, id
                               LIMIT $2 FOR UPDATE SKIP LOCKED))
                    RETURNING t.id, t.lease_token, t.attempt, t.payload, t.enqueued_at, t.lease_expires_at$q$,
                    s.relation);
    FOR k IN 0 .. n - 1 LOOP
        pos := (start + k) % n;
        key := s.shard_keys[pos + 1];
        now := clock_timestamp();
        IF k = 0 AND start % 16 = 0 THEN
            PERFORM concurrency_internal.distributed_wake(queue, key, now);
        END IF;
        token := concurrency_internal.distributed_new_number();
        FOR round IN 1 .. 2 LOOP
            -- the second round only after a wake-up made tasks ready
            EXIT WHEN round = 2 AND (got >= batch OR concurrency_internal.distributed_wake(queue, key, now) = 0);
            FOR t IN EXECUTE claim USING key, batch - got, token, now, coalesce(lease, s.lease), worker LOOP
                task_id := t.id;
                lease_token := t.lease_token;
                attempt := t.attempt;
                payload := t.payload;
                enqueued_at := t.enqueued_at;
                lease_expires_at := t.lease_expires_at;
                RETURN NEXT;
                got := got + 1;
                ids := ids || t.id;
                tokens := tokens || t.lease_token;
                ends := ends || t.lease_expires_at;
            END LOOP;
        END LOOP;
        EXIT WHEN got >= batch;
    END LOOP;
    IF s.max_leased IS NOT NULL AND got > 0 THEN
        -- (each shard's tasks have a lease token of their own)
        EXECUTE format($q$UPDATE %s AS sl SET task_id = u.id, lease_token = u.token, lease_expires_at = u.ends
                            FROM unnest($1, $2, $3, $4) AS u(slot, id, ends, token)
                           WHERE sl.slot = u.slot$q$, format('concurrency.%I', 's_' || queue))
          USING slots[1:got], ids, ends, tokens;
    END IF;
    IF got < cardinality(rate_slots) THEN -- rate slots not used: given back
        EXECUTE format($q$UPDATE %s AS r SET used_at = b.before FROM unnest($1, $2) AS b(slot, before)
                           WHERE r.slot = b.slot$q$, rate_table)
          USING rate_slots[got + 1:], rate_before[got + 1:];
    END IF;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_dequeue(text, integer, interval, text) IS
    'dequeue on a distributed queue (called by concurrency.dequeue): one shard at a time, round-robin per backend';
