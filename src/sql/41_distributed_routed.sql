-- ---------------------------------------------------------------------------
-- The SQL helpers of distributed queues (see 41_distributed_queue.sql for
-- the placement they follow). Every queue function is served by the C++ on
-- each node (42_distributed_nodes.sql); what is left here in SQL is
-- bookkeeping off the path of a task, run by the C++ on the coordinator:
-- resizing the lease slots of max_leased, the admission of every key after
-- key_limit changed, and a chunk of purge run from a node without shards;
-- beside them the declaration of a C++ function the coordinator calls on a
-- shard's node (distributed_lease_end). Internal: they live in schema
-- concurrency_internal, which PUBLIC cannot use; the owner of each
-- distributed queue's table gets USAGE on it from distribute_queue (the
-- queue functions run these as that owner), so that \df concurrency.* lists
-- the public API only.
-- ---------------------------------------------------------------------------

CREATE SCHEMA concurrency_internal;
REVOKE ALL ON SCHEMA concurrency_internal FROM PUBLIC;
COMMENT ON SCHEMA concurrency_internal IS
    'internal functions of concurrency_ext (routed functions of distributed queues, trigger functions, the rows behind views); not an API: PUBLIC cannot use it';

-- The settings and shard keys of a distributed queue; 42704 when the queue is
-- not distributed (or does not exist).
CREATE FUNCTION concurrency_internal.distributed_queue_settings(queue text,
        OUT relation text, OUT lease interval, OUT max_attempts integer, OUT shard_keys integer[],
        OUT dedupe_holder text, OUT retain interval, OUT key_limit integer, OUT max_leased integer)
    LANGUAGE plpgsql STABLE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
BEGIN
    IF queue IS NULL THEN
        RAISE EXCEPTION 'queue must not be null' USING ERRCODE = '22004';
    END IF;
    SELECT format('concurrency.%I', 'q_' || q.name), q.lease, q.max_attempts, d.shard_keys, d.dedupe_holder, q.retain,
           q.key_limit, q.max_leased
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

-- The queue's key_limit as the catalog has it now (NULL: none).
CREATE FUNCTION concurrency_internal.distributed_key_limit(queue text) RETURNS integer
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$ SELECT q.key_limit FROM concurrency.queue q WHERE q.name = distributed_key_limit.queue $fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_key_limit(text) IS
    'the key_limit of a queue read from the catalog at the time of the call (NULL: none)';

-- After alter_queue changed key_limit: every key at once (the key table
-- locked: no enqueue or release of a key runs meanwhile), shard by shard,
-- per key its tasks not leased in enqueue order, the first ones up to the
-- room the leased ones leave admitted, the rest blocked.
CREATE FUNCTION concurrency_internal.distributed_rebalance(queue text) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    key integer;
BEGIN
    EXECUTE format('LOCK TABLE %s IN EXCLUSIVE MODE', format('concurrency.%I', 'k_' || queue));
    FOREACH key IN ARRAY s.shard_keys LOOP
        EXECUTE format($q$UPDATE %1$s AS t
                             SET state = CASE WHEN r.place <= r.room
                                              THEN (CASE WHEN t.state = 'blocked'
                                                         THEN (CASE WHEN t.run_at > $3 THEN 'scheduled' ELSE 'ready' END)
                                                         ELSE t.state END)
                                              ELSE 'blocked' END
                            FROM (SELECT w.id,
                                         row_number() OVER (PARTITION BY w.concurrency_key ORDER BY w.id) AS place,
                                         $2 - (SELECT count(*) FROM %1$s AS l
                                                WHERE l.shard_key = $1 AND l.concurrency_key = w.concurrency_key
                                                  AND l.state = 'leased') AS room
                                    FROM %1$s AS w
                                   WHERE w.shard_key = $1 AND w.concurrency_key IS NOT NULL
                                     AND w.state IN ('ready', 'scheduled', 'blocked')) AS r
                           WHERE t.shard_key = $1 AND t.id = r.id AND t.state IN ('ready', 'scheduled', 'blocked')$q$,
                       s.relation)
          USING key, coalesce(concurrency_internal.distributed_key_limit(queue), 2147483647), clock_timestamp();
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_rebalance(text) IS
    'after key_limit changed: admits and holds back the tasks of every key of a distributed queue, shard by shard';

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
-- these functions keep the slots.
-- ---------------------------------------------------------------------------

-- After alter_queue set max_leased (0: none): slots 1..max_leased, the leases
-- running now written into the empty ones.
CREATE FUNCTION concurrency_internal.distributed_resize_slots(queue text, max_leased integer) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    slots_relation text := format('concurrency.%I', 's_' || queue);
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

-- The leased tasks of a distributed queue (a query over every shard).
CREATE FUNCTION concurrency_internal.distributed_leased(queue text)
    RETURNS TABLE (id bigint, lease_token bigint, lease_expires_at timestamptz)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
BEGIN
    RETURN QUERY EXECUTE format($q$SELECT id, lease_token, lease_expires_at FROM %s WHERE state = 'leased'$q$,
                                (concurrency_internal.distributed_queue_settings(queue)).relation);
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_leased(text) IS
    'the leased tasks of a distributed queue (id, lease token, lease end)';

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

-- One chunk of purge on one shard (a router statement): up to `chunk` done
-- and cancelled tasks whose retention has passed (every finished one when the
-- queue retains nothing), but not a cancelled task whose holder's lease still
-- runs. The shard: shard_key, or one at random when it is NULL (the purge
-- that queue calls do a chunk at a time). Returns how many were deleted.
CREATE FUNCTION concurrency_internal.distributed_purge_chunk(queue text, chunk integer, shard_key integer DEFAULT NULL)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    now timestamptz := clock_timestamp();
    key integer := coalesce(shard_key, s.shard_keys[1 + floor(random() * cardinality(s.shard_keys))::integer]);
    purged bigint;
BEGIN
    IF chunk IS NULL OR chunk < 1 THEN
        RAISE EXCEPTION 'chunk must be at least 1' USING ERRCODE = '22023';
    END IF;
    EXECUTE format($q$DELETE FROM %1$s
                       WHERE shard_key = $1 AND id = ANY (ARRAY(
                             SELECT id FROM %1$s
                              WHERE shard_key = $1 AND state IN ('done', 'cancelled') AND finished_at <= $2
                                AND (state = 'done' OR lease_expires_at IS NULL OR lease_expires_at <= $3)
                              ORDER BY finished_at
                              LIMIT $4 FOR UPDATE SKIP LOCKED))$q$, s.relation)
      USING key, now - coalesce(s.retain, interval '0'), now, chunk;
    GET DIAGNOSTICS purged = ROW_COUNT;
    RETURN purged;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_purge_chunk(text, integer, integer) IS
    'deletes up to chunk finished tasks past their retention from one shard of a distributed queue (at random if shard_key is NULL)';

