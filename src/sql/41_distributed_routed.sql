-- ---------------------------------------------------------------------------
-- The routed functions of distributed queues (see 41_distributed_queue.sql
-- for the placement they follow): what the C++ queue functions hand on when a
-- call cannot be served by this node's shards (a queue with max_leased, whose
-- lease slots are a table on the coordinator; a queue distributed by the
-- running transaction). Internal: they live in schema concurrency_internal,
-- which PUBLIC cannot use; the owner of each distributed queue's table gets
-- USAGE on it from distribute_queue (the queue functions run these as that
-- owner), so that \df concurrency.* lists the public API only.
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

-- The next shard position of this backend, round-robin over n shards; the
-- position is kept in a session setting (start: the backend's pid).
CREATE FUNCTION concurrency_internal.distributed_next_position(n integer) RETURNS integer
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    cursor bigint := coalesce(nullif(current_setting('concurrency_ext.shard_cursor', true), '')::bigint,
                              pg_backend_pid());
BEGIN
    IF n IS NULL OR n < 1 THEN
        RAISE EXCEPTION 'n must be at least 1' USING ERRCODE = '22023';
    END IF;
    cursor := (cursor + 1) % 1073741824;
    PERFORM set_config('concurrency_ext.shard_cursor', cursor::text, false);
    RETURN (cursor % n)::integer;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_next_position(integer) IS
    'round-robin shard position of this backend for distributed queues';



-- The shard key of the shard a task id names: the id's low 10 bits are the
-- shard's position. NULL when the id names no shard of these (no task of the
-- queue). The one place that reads a shard from an id: distributed_task_route
-- and the batch routing below use it.
CREATE FUNCTION concurrency_internal.distributed_task_shard(shard_keys integer[], task_id bigint) RETURNS integer
    LANGUAGE sql IMMUTABLE
    SET search_path = pg_catalog, pg_temp
    AS $fn$ SELECT shard_keys[(task_id % 1024) + 1] $fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_task_shard(integer[], bigint) IS
    'the shard key of the shard a task id of a distributed queue names (NULL if it names none of shard_keys)';

-- CE001 for a task after a statement under its lease token found nothing,
-- with the DETAIL a local queue gives.
CREATE FUNCTION concurrency_internal.distributed_lease_lost(queue text, shard_key integer, task_id bigint)
    RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    relation text := (concurrency_internal.distributed_queue_settings(queue)).relation;
    t record;
    hint text := 'Roll back the work done under this lease: the task is no longer yours.';
BEGIN
    IF shard_key IS NOT NULL THEN
        EXECUTE format('SELECT state, attempt, worker, lease_token IS NOT NULL AS held, finished_at FROM %s
                         WHERE shard_key = $1 AND id = $2', relation)
          INTO t USING shard_key, task_id;
    END IF;
    IF t IS NULL OR t.state IS NULL THEN
        RAISE EXCEPTION 'task % of queue "%" does not exist', task_id, queue USING ERRCODE = 'CE001',
            DETAIL = 'It was completed already, or it never existed.', HINT = hint;
    ELSIF t.state IN ('cancelled', 'done') THEN
        RAISE EXCEPTION 'lease on task % of queue "%" was lost', task_id, queue USING ERRCODE = 'CE001',
            DETAIL = format('The task was %s at %s.', CASE t.state WHEN 'done' THEN 'completed' ELSE t.state END,
                            to_char(t.finished_at, 'YYYY-MM-DD HH24:MI:SS.USOF')),
            HINT = hint;
    ELSIF t.held THEN
        RAISE EXCEPTION 'lease on task % of queue "%" was lost', task_id, queue USING ERRCODE = 'CE001',
            DETAIL = format('The lease token does not match the task''s current lease: it is %s at attempt %s%s.',
                            t.state, t.attempt, coalesce(format(', worker "%s"', t.worker), '')),
            HINT = hint;
    ELSE
        RAISE EXCEPTION 'lease on task % of queue "%" was lost', task_id, queue USING ERRCODE = 'CE001',
            DETAIL = format('The task has no lease now: it is %s at attempt %s.', t.state, t.attempt),
            HINT = hint;
    END IF;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_lease_lost(text, integer, bigint) IS
    'raises CE001 for a task of a distributed queue whose lease was lost';

-- Where a statement about one leased task goes: the queue's table and
-- settings, and the shard key of the shard its id names (the id's low 10
-- bits are the shard's position), for heartbeat, complete and fail. An id
-- that names no shard of the queue is no task of it: CE001.
CREATE FUNCTION concurrency_internal.distributed_task_route(queue text, task_id bigint, lease_token bigint,
        OUT relation text, OUT shard_key integer, OUT lease interval, OUT max_attempts integer, OUT retain interval,
        OUT max_leased integer)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
BEGIN
    IF task_id IS NULL OR lease_token IS NULL THEN
        RAISE EXCEPTION 'task_id and lease_token must not be null' USING ERRCODE = '22004';
    END IF;
    shard_key := concurrency_internal.distributed_task_shard(s.shard_keys, task_id);
    IF shard_key IS NULL THEN
        PERFORM concurrency_internal.distributed_lease_lost(queue, NULL, task_id);
    END IF;
    relation := s.relation;
    lease := s.lease;
    max_attempts := s.max_attempts;
    retain := s.retain;
    max_leased := s.max_leased;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_task_route(text, bigint, bigint) IS
    'table, shard key and settings for a statement about one task of a distributed queue (CE001 if its id names no shard)';

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

-- Locks the row of a key in the key table (adding it first if missing) on
-- the key's shard; returns that shard's shard_key.
CREATE FUNCTION concurrency_internal.distributed_lock_key(queue text, shard_keys integer[], key text) RETURNS integer
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    keys_relation text := format('concurrency.%I', 'k_' || queue);
    shard integer := shard_keys[concurrency_internal.distributed_key_position(cardinality(shard_keys), key) + 1];
    locked integer;
BEGIN
    IF key IS NULL THEN
        RAISE EXCEPTION 'key must not be null' USING ERRCODE = '22004';
    ELSIF NOT EXISTS (SELECT FROM concurrency.distributed_queue d WHERE d.queue = distributed_lock_key.queue) THEN
        RAISE EXCEPTION 'distributed queue "%" does not exist', queue USING ERRCODE = '42704';
    ELSIF shard IS NULL THEN
        RAISE EXCEPTION 'shard_keys must name at least one shard' USING ERRCODE = '22023';
    END IF;
    FOR round IN 1 .. 3 LOOP
        EXECUTE format('UPDATE %s SET concurrency_key = concurrency_key WHERE shard_key = $1 AND concurrency_key = $2',
                       keys_relation)
          USING shard, key;
        GET DIAGNOSTICS locked = ROW_COUNT;
        IF locked = 1 THEN
            RETURN shard;
        END IF;
        EXECUTE format('INSERT INTO %s (shard_key, concurrency_key) VALUES ($1, $2) ON CONFLICT DO NOTHING',
                       keys_relation)
          USING shard, key;
    END LOOP;
    RAISE EXCEPTION 'could not lock concurrency key "%"', key USING ERRCODE = 'XX000';
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_lock_key(text, integer[], text) IS
    'locks the row of a concurrency key of a distributed queue on its shard (adding it if missing)';

-- Keys whose tasks left the admitted set: for each key once, in sorted order
-- (so that two callers cannot deadlock on them), admits its next blocked
-- tasks while it has room; a key with nothing left to admit loses its row
-- when no live task has it any more. Nothing on a queue without key_limit.
CREATE FUNCTION concurrency_internal.distributed_release_keys(queue text, keys text[]) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record;
    key text;
    shard integer;
    admitted integer;
BEGIN
    IF NOT EXISTS (SELECT FROM unnest(keys) AS k WHERE k IS NOT NULL) THEN
        RETURN;
    END IF;
    s := concurrency_internal.distributed_queue_settings(queue);
    IF s.key_limit IS NULL THEN
        RETURN;
    END IF;
    FOR key IN SELECT DISTINCT k FROM unnest(keys) AS k WHERE k IS NOT NULL ORDER BY 1 LOOP
        shard := concurrency_internal.distributed_lock_key(queue, s.shard_keys, key);
        EXECUTE format($q$UPDATE %1$s AS t
                             SET state = CASE WHEN t.run_at > $4 THEN 'scheduled' ELSE 'ready' END
                           WHERE t.shard_key = $1 AND t.state = 'blocked' AND t.id = ANY (ARRAY(
                                 SELECT id FROM %1$s
                                  WHERE shard_key = $1 AND concurrency_key = $2 AND state = 'blocked'
                                  ORDER BY id
                                  LIMIT greatest(0, $3 - (SELECT count(*) FROM %1$s
                                                           WHERE shard_key = $1 AND concurrency_key = $2
                                                             AND state IN ('ready', 'scheduled', 'leased')))))$q$,
                       s.relation)
          USING shard, key, coalesce(concurrency_internal.distributed_key_limit(queue), 2147483647), clock_timestamp();
        GET DIAGNOSTICS admitted = ROW_COUNT;
        IF admitted = 0 THEN
            EXECUTE format($q$DELETE FROM %1$s AS k
                               WHERE k.shard_key = $1 AND k.concurrency_key = $2
                                 AND NOT EXISTS (SELECT FROM %2$s AS t
                                                  WHERE t.shard_key = $1 AND t.concurrency_key = $2
                                                    AND t.state IN ('ready', 'scheduled', 'leased', 'blocked'))$q$,
                           format('concurrency.%I', 'k_' || queue), s.relation)
              USING shard, key;
        END IF;
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_release_keys(text, text[]) IS
    'admits the next blocked tasks of keys of a distributed queue whose tasks left the admitted set';

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


CREATE FUNCTION concurrency_internal.distributed_enqueue_batch(queue text, payloads jsonb[], run_at timestamptz DEFAULT NULL,
                                                      priority integer DEFAULT 0, dedupe_keys text[] DEFAULT NULL,
                                                      concurrency_keys text[] DEFAULT NULL)
    RETURNS SETOF bigint
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    key text;
BEGIN
    IF payloads IS NULL THEN
        RAISE EXCEPTION 'payloads must not be null' USING ERRCODE = '22004';
    ELSIF array_position(payloads, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'payloads must not contain null' USING ERRCODE = '22004';
    ELSIF cardinality(dedupe_keys) <> cardinality(payloads) OR cardinality(concurrency_keys) <> cardinality(payloads) THEN
        RAISE EXCEPTION 'dedupe_keys and concurrency_keys must have one element per payload' USING ERRCODE = '22023';
    END IF;
    -- the keys of the batch locked in sorted order first (two batches
    -- cannot deadlock on them); each enqueue below finds its key locked
    IF s.key_limit IS NOT NULL THEN
        FOR key IN SELECT DISTINCT k FROM unnest(concurrency_keys) AS k WHERE k IS NOT NULL ORDER BY 1 LOOP
            PERFORM concurrency_internal.distributed_lock_key(queue, s.shard_keys, key);
        END LOOP;
    END IF;
    FOR i IN 1 .. coalesce(array_length(payloads, 1), 0) LOOP
        RETURN NEXT concurrency_internal.distributed_enqueue(queue, payloads[i], run_at, priority, dedupe_keys[i],
                                                    concurrency_keys[i]);
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_enqueue_batch(text, jsonb[], timestamptz, integer, text[], text[]) IS
    'enqueue_batch on a distributed queue (called by concurrency.enqueue_batch)';

-- Expired leases and due scheduled tasks of one shard back to ready (or
-- dead after max_attempts), at most 100 per call; returns how many. A task
-- that died gives its key's place to the key's next task.
CREATE FUNCTION concurrency_internal.distributed_wake(queue text, shard_key integer, now timestamptz)
    RETURNS integer
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    woken integer := 0;
    t record;
    released text[] := '{}';
BEGIN
    FOR t IN EXECUTE format($q$UPDATE %1$s AS t
                         SET state = CASE WHEN t.state = 'scheduled' OR t.attempt < $3 THEN 'ready' ELSE 'dead' END,
                             last_error = CASE WHEN t.state = 'leased' THEN 'lease expired' ELSE t.last_error END
                       WHERE t.shard_key = $1 AND t.id = ANY (ARRAY(
                             SELECT id FROM %1$s
                              WHERE shard_key = $1
                                AND ((state = 'scheduled' AND run_at <= $2) OR (state = 'leased' AND lease_expires_at <= $2))
                              LIMIT 100 FOR UPDATE SKIP LOCKED))
                   RETURNING CASE WHEN t.state = 'dead' THEN t.concurrency_key END AS released$q$, s.relation)
      USING shard_key, now, s.max_attempts LOOP
        woken := woken + 1;
        IF t.released IS NOT NULL THEN
            released := released || t.released;
        END IF;
    END LOOP;
    IF cardinality(released) > 0 THEN
        PERFORM concurrency_internal.distributed_release_keys(queue, released);
    END IF;
    RETURN woken;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_wake(text, integer, timestamptz) IS
    'moves expired leases and due scheduled tasks of one shard of a distributed queue back to ready (or dead)';

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

-- Locks up to `wanted` free slots of a distributed queue -> their numbers.
CREATE FUNCTION concurrency_internal.distributed_take_slots(queue text, wanted integer, now timestamptz) RETURNS integer[]
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    slots_relation text := format('concurrency.%I', 's_' || queue);
    sl record;
    free integer[] := '{}';
    shard integer;
    dead_key text;
    held_until timestamptz;
BEGIN
    FOR sl IN EXECUTE format($q$SELECT slot, task_id, lease_token FROM %s
                                 WHERE task_id IS NULL OR lease_expires_at IS NULL OR lease_expires_at <= $1
                                 ORDER BY slot LIMIT $2 FOR UPDATE SKIP LOCKED$q$, slots_relation)
              USING now, greatest(wanted, 0) LOOP
        IF sl.task_id IS NULL THEN
            free := free || sl.slot;
            CONTINUE;
        END IF;
        shard := concurrency_internal.distributed_task_shard(s.shard_keys, sl.task_id);
        dead_key := NULL;
        EXECUTE format($q$UPDATE %1$s AS t
                             SET state = CASE WHEN t.attempt < $5 THEN 'ready' ELSE 'dead' END,
                                 last_error = 'lease expired', lease_extended_to = NULL
                           WHERE t.shard_key = $1 AND t.id = ANY (ARRAY(
                                 SELECT id FROM %1$s
                                  WHERE shard_key = $1 AND id = $2 AND lease_token = $3 AND state = 'leased'
                                    AND lease_expires_at <= $4 AND NOT coalesce(lease_extended_to > $4, false)
                                  FOR UPDATE SKIP LOCKED))
                       RETURNING CASE WHEN t.state = 'dead' THEN t.concurrency_key END$q$, s.relation)
          INTO dead_key USING shard, sl.task_id, sl.lease_token, now, s.max_attempts;
        IF dead_key IS NOT NULL THEN
            PERFORM concurrency_internal.distributed_release_keys(queue, ARRAY[dead_key]);
        END IF;
        EXECUTE format($q$SELECT greatest(lease_expires_at, lease_extended_to) FROM %s
                           WHERE shard_key = $1 AND id = $2 AND lease_token = $3 AND state = 'leased'$q$, s.relation)
          INTO held_until USING shard, sl.task_id, sl.lease_token;
        IF held_until IS NULL THEN
            free := free || sl.slot;
        ELSE -- heartbeated (or being acknowledged): still held
            EXECUTE format('UPDATE %s SET lease_expires_at = $2 WHERE slot = $1', slots_relation)
              USING sl.slot, held_until;
        END IF;
    END LOOP;
    RETURN free;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_take_slots(text, integer, timestamptz) IS
    'locks up to wanted free lease slots of a distributed queue with max_leased (reclaiming expired leases found in them)';

-- Empties the slots of the given tasks (complete, fail, cancel); nothing on
-- a queue without max_leased.
CREATE FUNCTION concurrency_internal.distributed_free_slots(queue text, task_ids bigint[]) RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
BEGIN
    IF (concurrency_internal.distributed_queue_settings(queue)).max_leased IS NOT NULL THEN
        EXECUTE format($q$UPDATE %s SET task_id = NULL, lease_token = NULL, lease_expires_at = NULL
                           WHERE task_id = ANY ($1)$q$, format('concurrency.%I', 's_' || queue))
          USING task_ids;
    END IF;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_free_slots(text, bigint[]) IS
    'empties the lease slots of tasks of a distributed queue that are acknowledged or cancelled';

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


CREATE FUNCTION concurrency_internal.distributed_heartbeat(queue text, task_id bigint, lease_token bigint,
                                                  extend interval DEFAULT NULL)
    RETURNS timestamptz
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    r record := concurrency_internal.distributed_task_route(queue, task_id, lease_token);
    deadline timestamptz;
BEGIN
    IF extend <= interval '0' THEN
        RAISE EXCEPTION 'extend must be positive' USING ERRCODE = '22023';
    END IF;
    EXECUTE format($q$UPDATE %s SET state = 'leased', lease_expires_at = $3, lease_extended_to = NULL
                       WHERE shard_key = $1 AND id = $2 AND lease_token = $4
                      RETURNING lease_expires_at$q$, r.relation)
      INTO deadline USING r.shard_key, task_id, clock_timestamp() + coalesce(extend, r.lease), lease_token;
    IF deadline IS NULL THEN
        PERFORM concurrency_internal.distributed_lease_lost(queue, r.shard_key, task_id);
    END IF;
    RETURN deadline;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_heartbeat(text, bigint, bigint, interval) IS
    'heartbeat on a distributed queue (called by concurrency.heartbeat)';

CREATE FUNCTION concurrency_internal.distributed_complete(queue text, task_id bigint, lease_token bigint, result jsonb DEFAULT NULL)
    RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    r record := concurrency_internal.distributed_task_route(queue, task_id, lease_token);
    done integer;
    key text;
BEGIN
    IF r.max_leased IS NOT NULL THEN -- its slot first (a lost lease rolls it back)
        PERFORM concurrency_internal.distributed_free_slots(queue, ARRAY[task_id]);
    END IF;
    IF r.retain IS NULL THEN
        EXECUTE format('DELETE FROM %s WHERE shard_key = $1 AND id = $2 AND lease_token = $3 RETURNING concurrency_key',
                       r.relation)
          INTO key USING r.shard_key, task_id, lease_token;
    ELSE -- kept as done, with its result, until purged
        EXECUTE format($q$UPDATE %s SET state = 'done', finished_at = $4, result = $5, lease_token = NULL,
                                        lease_expires_at = NULL, lease_extended_to = NULL
                           WHERE shard_key = $1 AND id = $2 AND lease_token = $3
                       RETURNING concurrency_key$q$, r.relation)
          INTO key USING r.shard_key, task_id, lease_token, clock_timestamp(), result;
    END IF;
    GET DIAGNOSTICS done = ROW_COUNT;
    IF done = 0 THEN
        PERFORM concurrency_internal.distributed_lease_lost(queue, r.shard_key, task_id);
    ELSIF key IS NOT NULL THEN
        PERFORM concurrency_internal.distributed_release_keys(queue, ARRAY[key]);
    END IF;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_complete(text, bigint, bigint, jsonb) IS
    'complete on a distributed queue (called by concurrency.complete)';

-- What a failed attempt makes of a task: dead once its attempts are used up,
-- else ready or scheduled at now + retry_in, or the queue's backoff:
-- min(1 hour, 2^(attempt-1) s), less up to half at random.
CREATE FUNCTION concurrency_internal.distributed_after_failure(attempt integer, max_attempts integer, retry_in interval,
        now timestamptz, OUT state text, OUT run_at timestamptz)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
BEGIN
    run_at := now;
    state := 'dead';
    IF attempt < max_attempts THEN
        run_at := now + coalesce(retry_in, (least(3600.0, 2.0 ^ (attempt - 1))::float8 * (1 - 0.5 * random()))
                                          * interval '1 second');
        state := CASE WHEN run_at > now THEN 'scheduled' ELSE 'ready' END;
    END IF;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_after_failure(integer, integer, interval, timestamptz) IS
    'the state and run_at a failed attempt gives a task of a distributed queue (dead, or a retry with backoff)';

CREATE FUNCTION concurrency_internal.distributed_fail(queue text, task_id bigint, lease_token bigint, error text DEFAULT NULL,
                                             retry_in interval DEFAULT NULL)
    RETURNS text
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    r record := concurrency_internal.distributed_task_route(queue, task_id, lease_token);
    tries integer;
    now timestamptz := clock_timestamp();
    next_run timestamptz;
    new_state text;
    key text;
BEGIN
    IF retry_in < interval '0' THEN
        RAISE EXCEPTION 'retry_in must not be negative' USING ERRCODE = '22023';
    END IF;
    IF r.max_leased IS NOT NULL THEN -- its slot first (a lost lease rolls it back)
        PERFORM concurrency_internal.distributed_free_slots(queue, ARRAY[task_id]);
    END IF;
    EXECUTE format('SELECT attempt, concurrency_key FROM %s WHERE shard_key = $1 AND id = $2 AND lease_token = $3 FOR UPDATE',
                   r.relation)
      INTO tries, key USING r.shard_key, task_id, lease_token;
    IF tries IS NULL THEN
        PERFORM concurrency_internal.distributed_lease_lost(queue, r.shard_key, task_id);
    END IF;
    SELECT a.state, a.run_at INTO new_state, next_run
      FROM concurrency_internal.distributed_after_failure(tries, r.max_attempts, retry_in, now) a;
    EXECUTE format($q$UPDATE %s SET state = $3, run_at = CASE WHEN $3 = 'dead' THEN run_at ELSE $4 END,
                                    lease_token = NULL, lease_expires_at = NULL, lease_extended_to = NULL,
                                    last_error = $5
                       WHERE shard_key = $1 AND id = $2$q$, r.relation)
      USING r.shard_key, task_id, new_state, next_run, error;
    -- a retry keeps its key's place; a dead task gives it to the next one
    IF new_state = 'dead' AND key IS NOT NULL THEN
        PERFORM concurrency_internal.distributed_release_keys(queue, ARRAY[key]);
    END IF;
    RETURN CASE WHEN new_state = 'dead' THEN 'dead' ELSE 'ready' END;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_fail(text, bigint, bigint, text, interval) IS
    'fail on a distributed queue (called by concurrency.fail)';

CREATE FUNCTION concurrency_internal.distributed_retry_dead(queue text, task_ids bigint[] DEFAULT NULL)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    revived bigint := 0;
    t record;
    keys text[] := '{}';
BEGIN
    -- on a queue with key_limit a revived task of a key comes back blocked,
    -- behind its key's tasks, and is admitted under its key's lock
    FOR t IN EXECUTE format($q$UPDATE %1$s AS t
                         SET state = CASE WHEN $3 AND t.concurrency_key IS NOT NULL THEN 'blocked' ELSE 'ready' END,
                             attempt = 0, run_at = $1,
                             lease_token = NULL, lease_expires_at = NULL, lease_extended_to = NULL
                       WHERE t.state = 'dead' AND ($2 IS NULL OR t.id = ANY ($2))
                         AND (t.dedupe_key IS NULL
                              OR NOT EXISTS (SELECT FROM %1$s AS o
                                              WHERE o.shard_key = t.shard_key AND o.dedupe_key = t.dedupe_key
                                                AND o.state NOT IN ('dead', 'cancelled')))
                   RETURNING t.concurrency_key$q$, s.relation)
      USING clock_timestamp(), task_ids, s.key_limit IS NOT NULL LOOP
        revived := revived + 1;
        IF t.concurrency_key IS NOT NULL THEN
            keys := keys || t.concurrency_key;
        END IF;
    END LOOP;
    IF s.key_limit IS NOT NULL AND cardinality(keys) > 0 THEN
        PERFORM concurrency_internal.distributed_release_keys(queue, keys);
    END IF;
    IF revived > 0 THEN
        PERFORM pg_notify('concurrency_' || queue, '');
    END IF;
    RETURN revived;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_retry_dead(text, bigint[]) IS
    'retry_dead on a distributed queue (called by concurrency.retry_dead)';

-- queue_stats' counts for a distributed queue (a query over every shard).
CREATE FUNCTION concurrency_internal.distributed_stats(queue text, now timestamptz,
        OUT ready bigint, OUT scheduled bigint, OUT leased bigint, OUT expired bigint, OUT dead bigint,
        OUT oldest_ready_age interval, OUT done bigint, OUT cancelled bigint, OUT blocked bigint)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
BEGIN
    EXECUTE format($q$SELECT count(*) FILTER (WHERE state = 'ready' OR (state = 'scheduled' AND run_at <= $1)),
                             count(*) FILTER (WHERE state = 'scheduled' AND run_at > $1),
                             count(*) FILTER (WHERE state = 'leased' AND coalesce(lease_extended_to, lease_expires_at) > $1),
                             count(*) FILTER (WHERE state = 'leased' AND coalesce(lease_extended_to, lease_expires_at) <= $1),
                             count(*) FILTER (WHERE state = 'dead'),
                             $1 - min(run_at) FILTER (WHERE state = 'ready' OR (state = 'scheduled' AND run_at <= $1)),
                             count(*) FILTER (WHERE state = 'done'),
                             count(*) FILTER (WHERE state = 'cancelled'),
                             count(*) FILTER (WHERE state = 'blocked')
                        FROM %s$q$, s.relation)
      INTO ready, scheduled, leased, expired, dead, oldest_ready_age, done, cancelled, blocked USING now;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_stats(text, timestamptz) IS
    'the counts of concurrency.queue_stats for a distributed queue';

-- queue_keys for a distributed queue (a query over every shard).
CREATE FUNCTION concurrency_internal.distributed_queue_keys(queue text)
    RETURNS TABLE (concurrency_key text, leased bigint, waiting bigint, oldest_waiting_age interval)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
BEGIN
    RETURN QUERY EXECUTE format(
        $q$SELECT concurrency_key, count(*) FILTER (WHERE state = 'leased'), count(*) FILTER (WHERE state <> 'leased'),
                  $1 - min(enqueued_at) FILTER (WHERE state <> 'leased')
             FROM %s
            WHERE concurrency_key IS NOT NULL AND state IN ('ready', 'scheduled', 'leased', 'blocked')
            GROUP BY concurrency_key
            ORDER BY concurrency_key$q$, (concurrency_internal.distributed_queue_settings(queue)).relation)
      USING clock_timestamp();
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_queue_keys(text) IS
    'queue_keys on a distributed queue (called by concurrency.queue_keys)';

-- ---------------------------------------------------------------------------
-- task_status, cancel, purge and the batch acknowledgements on a distributed
-- queue: each statement goes to one shard (a router query), a batch's tasks
-- grouped by the shard their ids name, the shards in shard order (one lock
-- order for every call). Argument checks are done by the C++ entry points
-- before they hand the call here, as for a local queue.
-- ---------------------------------------------------------------------------

-- The tasks of a batch (with the lease token at each one's position) grouped
-- by the shard their ids name, in shard order, each group's ids ascending;
-- the ids that name no shard of the queue last, with shard_key NULL.
CREATE FUNCTION concurrency_internal.distributed_batch_route(queue text, task_ids bigint[], lease_tokens bigint[] DEFAULT NULL,
        OUT shard_key integer, OUT ids bigint[], OUT tokens bigint[])
    RETURNS SETOF record
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
SELECT g.shard_key, g.ids, g.tokens
  FROM concurrency_internal.distributed_queue_settings(queue) AS s,
       LATERAL (SELECT concurrency_internal.distributed_task_shard(s.shard_keys, u.id) AS shard_key,
                       array_agg(u.id ORDER BY u.id) AS ids, array_agg(u.token ORDER BY u.id) AS tokens
                  FROM unnest(task_ids, lease_tokens) AS u(id, token)
                 GROUP BY 1) AS g
 ORDER BY array_position(s.shard_keys, g.shard_key)
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_batch_route(text, bigint[], bigint[]) IS
    'the tasks of a batch on a distributed queue grouped by shard, in shard order';

-- After the statements of a batch found the leases of the tasks `held`: CE001 for the
-- first task of task_ids (in argument order) that is not among them.
CREATE FUNCTION concurrency_internal.distributed_batch_lost(queue text, task_ids bigint[], held bigint[])
    RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    keys integer[] := (concurrency_internal.distributed_queue_settings(queue)).shard_keys;
BEGIN
    FOR i IN 1 .. coalesce(cardinality(task_ids), 0) LOOP
        IF array_position(held, task_ids[i]) IS NULL THEN
            PERFORM concurrency_internal.distributed_lease_lost(queue, concurrency_internal.distributed_task_shard(keys, task_ids[i]),
                                                       task_ids[i]);
        END IF;
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_batch_lost(text, bigint[], bigint[]) IS
    'raises CE001 for the first task of a batch on a distributed queue whose lease was not found';

CREATE FUNCTION concurrency_internal.distributed_task_status(queue text, id bigint)
    RETURNS TABLE (task_id bigint, state text, attempt integer, priority integer, run_at timestamptz,
                   enqueued_at timestamptz, lease_expires_at timestamptz, worker text, last_error text,
                   finished_at timestamptz, result jsonb, dedupe_key text, concurrency_key text)
    LANGUAGE plpgsql VOLATILE ROWS 1
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    key integer := concurrency_internal.distributed_task_shard(s.shard_keys, id);
BEGIN
    IF key IS NULL THEN -- the id names no shard: no task of this queue
        RETURN;
    END IF;
    RETURN QUERY EXECUTE format(
        $q$SELECT id, CASE WHEN state = 'scheduled' AND run_at <= $3 THEN 'ready' ELSE state END,
                  attempt, priority, run_at, enqueued_at,
                  CASE WHEN state = 'leased' THEN coalesce(lease_extended_to, lease_expires_at) END,
                  worker, last_error, finished_at, result, dedupe_key, concurrency_key
             FROM %s WHERE shard_key = $1 AND id = $2$q$, s.relation)
      USING key, id, clock_timestamp();
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_task_status(text, bigint) IS
    'task_status on a distributed queue (called by concurrency.task_status)';

-- As on a local queue: a cancelled task keeps its holder's deadline, so that
-- the holder learns at its next call that it was cancelled; on a queue that
-- retains nothing the cancelled tasks no holder needs to learn about go at once.
-- Blocked tasks first: they hold no place of their key, so cancelling them
-- locks no key row (as on a local queue, so that a cancel cannot deadlock
-- with a complete of the key's head); then the others, whose key's place
-- goes to the key's next task.
CREATE FUNCTION concurrency_internal.distributed_cancel(queue text, task_ids bigint[])
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    now timestamptz := clock_timestamp();
    g record;
    t record;
    n bigint := 0;
    k bigint;
    keys text[] := '{}';
    cancel constant text := $q$UPDATE %s
                                 SET state = 'cancelled', finished_at = $3, lease_token = NULL,
                                     lease_expires_at = CASE WHEN state = 'leased'
                                                             THEN coalesce(lease_extended_to, lease_expires_at) END,
                                     lease_extended_to = NULL
                               WHERE shard_key = $1 AND id = ANY ($2) AND %s
                              RETURNING concurrency_key$q$;
BEGIN
    IF s.max_leased IS NOT NULL THEN -- their slots first
        PERFORM concurrency_internal.distributed_free_slots(queue, task_ids);
    END IF;
    FOR g IN SELECT * FROM concurrency_internal.distributed_batch_route(queue, task_ids) r WHERE r.shard_key IS NOT NULL LOOP
        EXECUTE format(cancel, s.relation, $q$state = 'blocked'$q$) USING g.shard_key, g.ids, now;
        GET DIAGNOSTICS k = ROW_COUNT;
        n := n + k;
    END LOOP;
    FOR g IN SELECT * FROM concurrency_internal.distributed_batch_route(queue, task_ids) r WHERE r.shard_key IS NOT NULL LOOP
        FOR t IN EXECUTE format(cancel, s.relation, $q$state NOT IN ('done', 'cancelled', 'blocked')$q$)
                 USING g.shard_key, g.ids, now LOOP
            n := n + 1;
            IF t.concurrency_key IS NOT NULL THEN
                keys := keys || t.concurrency_key;
            END IF;
        END LOOP;
    END LOOP;
    IF s.key_limit IS NOT NULL AND cardinality(keys) > 0 THEN
        PERFORM concurrency_internal.distributed_release_keys(queue, keys);
    END IF;
    IF s.retain IS NULL AND n > 0 THEN
        FOR g IN SELECT * FROM concurrency_internal.distributed_batch_route(queue, task_ids) r WHERE r.shard_key IS NOT NULL LOOP
            EXECUTE format($q$DELETE FROM %s
                               WHERE shard_key = $1 AND id = ANY ($2) AND state = 'cancelled'
                                 AND (lease_expires_at IS NULL OR lease_expires_at <= $3)$q$, s.relation)
              USING g.shard_key, g.ids, now;
        END LOOP;
    END IF;
    RETURN n;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_cancel(text, bigint[]) IS
    'cancel on a distributed queue (called by concurrency.cancel)';

-- The statement of a batch acknowledgement, once per shard of the batch
-- (in shard order): op 'complete' (removes the tasks, or keeps them done
-- without a result on a queue that retains tasks), 'heartbeat' (the leases
-- run until `at`) or 'lock' (FOR UPDATE, by id). Each statement names the
-- leases pairwise: the token at the task's position in its shard's group,
-- ($3)[array_position($2, id)]. Returns (task_id, attempt) of every task it
-- found under its lease; CE001 for the first task in argument order it did
-- not find (the error takes the statements' changes with it). The keys of
-- completed tasks give their places to their keys' next tasks.
CREATE FUNCTION concurrency_internal.distributed_batch_leases(queue text, task_ids bigint[], lease_tokens bigint[], op text,
                                                     at timestamptz)
    RETURNS TABLE (task_id bigint, attempt integer)
    LANGUAGE plpgsql VOLATILE ROWS 10
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    leases constant text := 'shard_key = $1 AND id = ANY ($2) AND lease_token = ($3)[array_position($2, id)]';
    statement text;
    g record;
    t record;
    held bigint[] := '{}';
    attempts integer[] := '{}';
    keys text[] := '{}';
BEGIN
    IF op IN ('complete', 'lock') AND s.max_leased IS NOT NULL THEN -- their slots first
        PERFORM concurrency_internal.distributed_free_slots(queue, task_ids);
    END IF;
    IF op = 'complete' AND s.retain IS NULL THEN
        statement := format('DELETE FROM %s WHERE %s RETURNING id, attempt, concurrency_key', s.relation, leases);
    ELSIF op = 'complete' THEN
        statement := format($q$UPDATE %s SET state = 'done', finished_at = $4, result = NULL, lease_token = NULL,
                                             lease_expires_at = NULL, lease_extended_to = NULL
                                WHERE %s RETURNING id, attempt, concurrency_key$q$, s.relation, leases);
    ELSIF op = 'heartbeat' THEN
        statement := format($q$UPDATE %s SET state = 'leased', lease_expires_at = $4, lease_extended_to = NULL
                                WHERE %s RETURNING id, attempt, concurrency_key$q$, s.relation, leases);
    ELSIF op = 'lock' THEN
        statement := format('SELECT id, attempt, concurrency_key FROM %s WHERE %s ORDER BY id FOR UPDATE',
                            s.relation, leases);
    ELSE
        RAISE EXCEPTION 'op must be complete, heartbeat or lock' USING ERRCODE = '22023';
    END IF;
    FOR g IN SELECT * FROM concurrency_internal.distributed_batch_route(queue, task_ids, lease_tokens) r
              WHERE r.shard_key IS NOT NULL LOOP
        FOR t IN EXECUTE statement USING g.shard_key, g.ids, g.tokens, at LOOP
            held := held || t.id;
            attempts := attempts || t.attempt;
            IF op = 'complete' AND t.concurrency_key IS NOT NULL THEN
                keys := keys || t.concurrency_key;
            END IF;
        END LOOP;
    END LOOP;
    IF cardinality(held) < coalesce(cardinality(task_ids), 0) THEN
        PERFORM concurrency_internal.distributed_batch_lost(queue, task_ids, held);
    END IF;
    IF s.key_limit IS NOT NULL AND cardinality(keys) > 0 THEN
        PERFORM concurrency_internal.distributed_release_keys(queue, keys);
    END IF;
    RETURN QUERY SELECT * FROM unnest(held, attempts);
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_batch_leases(text, bigint[], bigint[], text, timestamptz) IS
    'runs a batch acknowledgement on a distributed queue shard by shard; CE001 naming the first lost lease';

CREATE FUNCTION concurrency_internal.distributed_complete_batch(queue text, task_ids bigint[], lease_tokens bigint[])
    RETURNS bigint
    LANGUAGE sql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
SELECT count(*) FROM concurrency_internal.distributed_batch_leases(queue, task_ids, lease_tokens, 'complete', clock_timestamp())
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_complete_batch(text, bigint[], bigint[]) IS
    'complete_batch on a distributed queue (called by concurrency.complete_batch)';

CREATE FUNCTION concurrency_internal.distributed_heartbeat_batch(queue text, task_ids bigint[], lease_tokens bigint[],
                                                        extend interval DEFAULT NULL)
    RETURNS timestamptz
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    deadline timestamptz := clock_timestamp() + coalesce(extend, s.lease);
BEGIN
    IF extend <= interval '0' THEN
        RAISE EXCEPTION 'extend must be positive' USING ERRCODE = '22023';
    ELSIF coalesce(cardinality(task_ids), 0) = 0 THEN
        RETURN NULL;
    END IF;
    PERFORM concurrency_internal.distributed_batch_leases(queue, task_ids, lease_tokens, 'heartbeat', deadline);
    RETURN deadline;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_heartbeat_batch(text, bigint[], bigint[], interval) IS
    'heartbeat_batch on a distributed queue (called by concurrency.heartbeat_batch)';

-- Every task is locked (distributed_batch_leases: shard by shard, by id
-- within a shard, one order for every batch, so that two batches cannot
-- deadlock) and a lost lease raises CE001 before anything is written.
CREATE FUNCTION concurrency_internal.distributed_fail_batch(queue text, task_ids bigint[], lease_tokens bigint[],
                                                   error text DEFAULT NULL, retry_in interval DEFAULT NULL)
    RETURNS TABLE (task_id bigint, state text)
    LANGUAGE plpgsql VOLATILE ROWS 10
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency_internal.distributed_queue_settings(queue);
    now timestamptz := clock_timestamp();
    a record;
    held bigint[];
    attempts integer[];
    states text[] := '{}';
    key text;
    released text[] := '{}';
BEGIN
    IF retry_in < interval '0' THEN
        RAISE EXCEPTION 'retry_in must not be negative' USING ERRCODE = '22023';
    END IF;
    SELECT array_agg(l.task_id), array_agg(l.attempt) INTO held, attempts
      FROM concurrency_internal.distributed_batch_leases(queue, task_ids, lease_tokens, 'lock', now) AS l;
    -- each task's next state in argument order, each backoff with its own
    -- jitter; one router statement per task (an UPDATE per shard that takes
    -- each row's values from array parameters by position crashes Citus 14)
    FOR i IN 1 .. coalesce(cardinality(task_ids), 0) LOOP
        a := concurrency_internal.distributed_after_failure(attempts[array_position(held, task_ids[i])], s.max_attempts,
                                                   retry_in, now);
        states := states || a.state;
        EXECUTE format($q$UPDATE %s
                             SET state = $3, run_at = CASE WHEN $3 = 'dead' THEN run_at ELSE $4 END,
                                 lease_token = NULL, lease_expires_at = NULL, lease_extended_to = NULL,
                                 last_error = $5
                           WHERE shard_key = $1 AND id = $2
                          RETURNING concurrency_key$q$, s.relation)
          INTO key
          USING concurrency_internal.distributed_task_shard(s.shard_keys, task_ids[i]), task_ids[i], a.state, a.run_at, error;
        IF a.state = 'dead' AND key IS NOT NULL THEN -- a retry keeps its key's place
            released := released || key;
        END IF;
    END LOOP;
    IF s.key_limit IS NOT NULL AND cardinality(released) > 0 THEN
        PERFORM concurrency_internal.distributed_release_keys(queue, released);
    END IF;
    -- a retry waiting for its run_at is 'ready' to the caller, as with fail
    RETURN QUERY SELECT u.id, CASE WHEN u.next_state = 'dead' THEN 'dead' ELSE 'ready' END
                   FROM unnest(task_ids, states) WITH ORDINALITY AS u(id, next_state, n)
                  ORDER BY u.n;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_fail_batch(text, bigint[], bigint[], text, interval) IS
    'fail_batch on a distributed queue (called by concurrency.fail_batch)';

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

-- purge: every shard, in chunks of 10,000.
CREATE FUNCTION concurrency_internal.distributed_purge(queue text)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    chunk constant integer := 10000;
    key integer;
    total bigint := 0;
    k bigint;
BEGIN
    FOREACH key IN ARRAY (concurrency_internal.distributed_queue_settings(queue)).shard_keys LOOP
        LOOP
            k := concurrency_internal.distributed_purge_chunk(queue, chunk, key);
            total := total + k;
            EXIT WHEN k < chunk;
        END LOOP;
    END LOOP;
    RETURN total;
END
$fn$;
COMMENT ON FUNCTION concurrency_internal.distributed_purge(text) IS
    'purge on a distributed queue (called by concurrency.purge)';
