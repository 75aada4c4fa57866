-- ---------------------------------------------------------------------------
-- Distributed queues on Citus (docs/scaling-out.md).
--
-- distribute_queue(queue) makes an empty queue's table a Citus distributed
-- table with a column shard_key as its distribution column. The queue
-- functions (enqueue, dequeue, heartbeat, complete, fail, retry_dead) keep
-- their names and meaning: on a distributed queue the C++ entry points hand
-- the call to the distributed_* functions below, which send every statement
-- about a task or a claim to one shard (a Citus router query).
--
-- Placement: shard_keys holds one shard_key value per shard (found with
-- get_shard_id_for_distribution_column), in shard order. A task id carries
-- its shard's position in its low 10 bits (id = n * 1024 + position), so
-- that heartbeat, complete and fail find the shard from the id alone. A task
-- with a dedupe_key goes to the shard chosen by a hash of the key, so that
-- the key's uniqueness (an index on (shard_key, dedupe_key)) holds across the
-- queue; other tasks go round-robin per backend. Ids and lease tokens come
-- from concurrency.lease_token on the coordinator, where these calls run.
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

-- The settings and shard keys of a distributed queue; 42704 when the queue is
-- not distributed (or does not exist).
CREATE FUNCTION concurrency.distributed_queue_settings(queue text,
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
COMMENT ON FUNCTION concurrency.distributed_queue_settings(text) IS
    'table, lease, max_attempts and shard keys of a distributed queue (42704 if it is not one)';

-- The next shard position of this backend, round-robin over n shards; the
-- position is kept in a session setting (start: the backend's pid).
CREATE FUNCTION concurrency.distributed_next_position(n integer) RETURNS integer
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
COMMENT ON FUNCTION concurrency.distributed_next_position(integer) IS
    'round-robin shard position of this backend for distributed queues';


-- Makes an empty queue distributed. The caller must own the queue's table
-- (ALTER TABLE) and run it on the coordinator.
CREATE FUNCTION concurrency.distribute_queue(queue text, shard_count integer DEFAULT NULL)
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
    n := coalesce(shard_count, current_setting('citus.shard_count')::integer);
    IF n < 1 OR n > 1024 THEN
        RAISE EXCEPTION 'shard_count must be between 1 and 1024' USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT FROM concurrency.queue q WHERE q.name = distribute_queue.queue
                AND (q.key_limit IS NOT NULL OR q.max_leased IS NOT NULL)) THEN
        RAISE EXCEPTION 'cannot distribute queue "%": it has key_limit or max_leased', queue USING ERRCODE = '0A000',
            DETAIL = 'Claims on a distributed queue do not enforce these limits yet.';
    END IF;
    rel := format('concurrency.%I', 'q_' || queue);
    EXECUTE format('LOCK TABLE %s IN ACCESS EXCLUSIVE MODE', rel);
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
END
$fn$;
COMMENT ON FUNCTION concurrency.distribute_queue(text, integer) IS
    'makes an empty queue a Citus distributed table (shard_count shards, default citus.shard_count); run on the coordinator';
REVOKE ALL ON FUNCTION concurrency.distribute_queue(text, integer) FROM PUBLIC;

-- CE001 for a task after a statement under its lease token found nothing.
CREATE FUNCTION concurrency.distributed_lease_lost(queue text, shard_key integer, task_id bigint)
    RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    relation text := (concurrency.distributed_queue_settings(queue)).relation;
    t record;
    hint text := 'Roll back the work done under this lease: the task is no longer yours.';
BEGIN
    IF shard_key IS NOT NULL THEN
        EXECUTE format('SELECT state, attempt, worker, lease_token IS NOT NULL AS held FROM %s
                         WHERE shard_key = $1 AND id = $2', relation)
          INTO t USING shard_key, task_id;
    END IF;
    IF t IS NULL OR t.state IS NULL THEN
        RAISE EXCEPTION 'task % of queue "%" does not exist', task_id, queue USING ERRCODE = 'CE001',
            DETAIL = 'It was completed already, or it never existed.', HINT = hint;
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
COMMENT ON FUNCTION concurrency.distributed_lease_lost(text, integer, bigint) IS
    'raises CE001 for a task of a distributed queue whose lease was lost';

-- Where a statement about one leased task goes: the queue's table and
-- settings, and the shard key of the shard its id names (the id's low 10
-- bits are the shard's position), for heartbeat, complete and fail. An id
-- that names no shard of the queue is no task of it: CE001.
CREATE FUNCTION concurrency.distributed_task_route(queue text, task_id bigint, lease_token bigint,
        OUT relation text, OUT shard_key integer, OUT lease interval, OUT max_attempts integer, OUT retain interval)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency.distributed_queue_settings(queue);
BEGIN
    IF task_id IS NULL OR lease_token IS NULL THEN
        RAISE EXCEPTION 'task_id and lease_token must not be null' USING ERRCODE = '22004';
    END IF;
    shard_key := s.shard_keys[(task_id % 1024) + 1];
    IF shard_key IS NULL THEN
        PERFORM concurrency.distributed_lease_lost(queue, NULL, task_id);
    END IF;
    relation := s.relation;
    lease := s.lease;
    max_attempts := s.max_attempts;
    retain := s.retain;
END
$fn$;
COMMENT ON FUNCTION concurrency.distributed_task_route(text, bigint, bigint) IS
    'table, shard key and settings for a statement about one task of a distributed queue (CE001 if its id names no shard)';

CREATE FUNCTION concurrency.distributed_enqueue(queue text, payload jsonb DEFAULT '{}', run_at timestamptz DEFAULT NULL,
                                                priority integer DEFAULT 0, dedupe_key text DEFAULT NULL,
                                                concurrency_key text DEFAULT NULL)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency.distributed_queue_settings(queue);
    n integer := cardinality(s.shard_keys);
    pos integer;
    now timestamptz := clock_timestamp();
    new_id bigint;
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
    pos := CASE WHEN coalesce(concurrency_key, dedupe_key) IS NULL THEN concurrency.distributed_next_position(n)
                ELSE ((hashtext(coalesce(concurrency_key, dedupe_key))::bigint + 2147483648) % n)::integer END;
    FOR attempt IN 1..5 LOOP
        new_id := nextval('concurrency.lease_token') * 1024 + pos;
        EXECUTE format($q$INSERT INTO %s (id, shard_key, state, priority, run_at, payload, dedupe_key,
                                          concurrency_key, enqueued_at)
                          VALUES ($1, $2, CASE WHEN $3 > $4 THEN 'scheduled' ELSE 'ready' END, $5,
                                  coalesce($3, $4), $6, $7, $8, $4)
                          ON CONFLICT (shard_key, dedupe_key) WHERE %s
                          DO NOTHING RETURNING id$q$, s.relation, s.dedupe_holder)
          INTO new_id USING new_id, s.shard_keys[pos + 1], run_at, now, priority, payload, dedupe_key, concurrency_key;
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
COMMENT ON FUNCTION concurrency.distributed_enqueue(text, jsonb, timestamptz, integer, text, text) IS
    'enqueue on a distributed queue (called by concurrency.enqueue)';

CREATE FUNCTION concurrency.distributed_enqueue_batch(queue text, payloads jsonb[], run_at timestamptz DEFAULT NULL,
                                                      priority integer DEFAULT 0, dedupe_keys text[] DEFAULT NULL,
                                                      concurrency_keys text[] DEFAULT NULL)
    RETURNS SETOF bigint
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
BEGIN
    IF payloads IS NULL THEN
        RAISE EXCEPTION 'payloads must not be null' USING ERRCODE = '22004';
    ELSIF array_position(payloads, NULL) IS NOT NULL THEN
        RAISE EXCEPTION 'payloads must not contain null' USING ERRCODE = '22004';
    ELSIF cardinality(dedupe_keys) <> cardinality(payloads) OR cardinality(concurrency_keys) <> cardinality(payloads) THEN
        RAISE EXCEPTION 'dedupe_keys and concurrency_keys must have one element per payload' USING ERRCODE = '22023';
    END IF;
    FOR i IN 1 .. coalesce(array_length(payloads, 1), 0) LOOP
        RETURN NEXT concurrency.distributed_enqueue(queue, payloads[i], run_at, priority, dedupe_keys[i],
                                                    concurrency_keys[i]);
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION concurrency.distributed_enqueue_batch(text, jsonb[], timestamptz, integer, text[], text[]) IS
    'enqueue_batch on a distributed queue (called by concurrency.enqueue_batch)';

-- Expired leases and due scheduled tasks of one shard back to ready (or
-- dead after max_attempts), at most 100 per call; returns how many.
CREATE FUNCTION concurrency.distributed_wake(queue text, shard_key integer, now timestamptz)
    RETURNS integer
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency.distributed_queue_settings(queue);
    woken integer;
BEGIN
    EXECUTE format($q$UPDATE %1$s AS t
                         SET state = CASE WHEN t.state = 'scheduled' OR t.attempt < $3 THEN 'ready' ELSE 'dead' END,
                             last_error = CASE WHEN t.state = 'leased' THEN 'lease expired' ELSE t.last_error END
                       WHERE t.shard_key = $1 AND t.id = ANY (ARRAY(
                             SELECT id FROM %1$s
                              WHERE shard_key = $1
                                AND ((state = 'scheduled' AND run_at <= $2) OR (state = 'leased' AND lease_expires_at <= $2))
                              LIMIT 100 FOR UPDATE SKIP LOCKED))$q$, s.relation)
      USING shard_key, now, s.max_attempts;
    GET DIAGNOSTICS woken = ROW_COUNT;
    RETURN woken;
END
$fn$;
COMMENT ON FUNCTION concurrency.distributed_wake(text, integer, timestamptz) IS
    'moves expired leases and due scheduled tasks of one shard of a distributed queue back to ready (or dead)';

-- A claim visits one shard at a time (a router query each), starting after
-- the shard this backend visited last, until it gets tasks or has visited
-- every shard once. A visit wakes the shard's expired leases and due tasks
-- first on every 16th call of the backend, and whenever the claim found
-- fewer tasks than asked for.
CREATE FUNCTION concurrency.distributed_dequeue(queue text, batch integer DEFAULT 1, lease interval DEFAULT NULL,
                                                worker text DEFAULT NULL)
    RETURNS TABLE (task_id bigint, lease_token bigint, attempt integer, payload jsonb,
                   enqueued_at timestamptz, lease_expires_at timestamptz)
    LANGUAGE plpgsql VOLATILE ROWS 1
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency.distributed_queue_settings(queue);
    n integer := cardinality(s.shard_keys);
    start integer := concurrency.distributed_next_position(n);
    pos integer;
    key integer;
    now timestamptz;
    token bigint;
    got bigint;
    claim text;
BEGIN
    IF batch IS NULL THEN
        RAISE EXCEPTION 'batch must not be null' USING ERRCODE = '22004';
    ELSIF batch < 1 THEN
        RAISE EXCEPTION 'batch must be at least 1' USING ERRCODE = '22023';
    ELSIF lease <= interval '0' THEN
        RAISE EXCEPTION 'lease must be positive' USING ERRCODE = '22023';
    END IF;
    -- claims here do not count leased tasks per key or per queue: refuse
    -- rather than exceed a limit
    IF s.key_limit IS NOT NULL OR s.max_leased IS NOT NULL THEN
        RAISE EXCEPTION 'queue "%" is distributed and has key_limit or max_leased', queue USING ERRCODE = '0A000',
            DETAIL = 'Claims on a distributed queue do not enforce these limits yet.',
            HINT = format('Remove them with concurrency.alter_queue(%L, key_limit => 0, max_leased => 0).', queue);
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
            PERFORM concurrency.distributed_wake(queue, key, now);
        END IF;
        token := nextval('concurrency.lease_token');
        RETURN QUERY EXECUTE claim USING key, batch, token, now, coalesce(lease, s.lease), worker;
        GET DIAGNOSTICS got = ROW_COUNT;
        IF got < batch AND concurrency.distributed_wake(queue, key, now) > 0 THEN
            RETURN QUERY EXECUTE claim USING key, batch - got, token, now, coalesce(lease, s.lease), worker;
            GET DIAGNOSTICS got = ROW_COUNT;
        END IF;
        IF got > 0 THEN
            RETURN;
        END IF;
    END LOOP;
END
$fn$;
COMMENT ON FUNCTION concurrency.distributed_dequeue(text, integer, interval, text) IS
    'dequeue on a distributed queue (called by concurrency.dequeue): one shard at a time, round-robin per backend';

CREATE FUNCTION concurrency.distributed_heartbeat(queue text, task_id bigint, lease_token bigint,
                                                  extend interval DEFAULT NULL)
    RETURNS timestamptz
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    r record := concurrency.distributed_task_route(queue, task_id, lease_token);
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
        PERFORM concurrency.distributed_lease_lost(queue, r.shard_key, task_id);
    END IF;
    RETURN deadline;
END
$fn$;
COMMENT ON FUNCTION concurrency.distributed_heartbeat(text, bigint, bigint, interval) IS
    'heartbeat on a distributed queue (called by concurrency.heartbeat)';

CREATE FUNCTION concurrency.distributed_complete(queue text, task_id bigint, lease_token bigint, result jsonb DEFAULT NULL)
    RETURNS void
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    r record := concurrency.distributed_task_route(queue, task_id, lease_token);
    done integer;
BEGIN
    IF r.retain IS NULL THEN
        EXECUTE format('DELETE FROM %s WHERE shard_key = $1 AND id = $2 AND lease_token = $3', r.relation)
          USING r.shard_key, task_id, lease_token;
    ELSE -- kept as done, with its result, until purged
        EXECUTE format($q$UPDATE %s SET state = 'done', finished_at = $4, result = $5, lease_token = NULL,
                                        lease_expires_at = NULL, lease_extended_to = NULL
                           WHERE shard_key = $1 AND id = $2 AND lease_token = $3$q$, r.relation)
          USING r.shard_key, task_id, lease_token, clock_timestamp(), result;
    END IF;
    GET DIAGNOSTICS done = ROW_COUNT;
    IF done = 0 THEN
        PERFORM concurrency.distributed_lease_lost(queue, r.shard_key, task_id);
    END IF;
END
$fn$;
COMMENT ON FUNCTION concurrency.distributed_complete(text, bigint, bigint, jsonb) IS
    'complete on a distributed queue (called by concurrency.complete)';

CREATE FUNCTION concurrency.distributed_fail(queue text, task_id bigint, lease_token bigint, error text DEFAULT NULL,
                                             retry_in interval DEFAULT NULL)
    RETURNS text
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    r record := concurrency.distributed_task_route(queue, task_id, lease_token);
    tries integer;
    now timestamptz := clock_timestamp();
    next_run timestamptz;
    new_state text := 'dead';
BEGIN
    IF retry_in < interval '0' THEN
        RAISE EXCEPTION 'retry_in must not be negative' USING ERRCODE = '22023';
    END IF;
    EXECUTE format('SELECT attempt FROM %s WHERE shard_key = $1 AND id = $2 AND lease_token = $3 FOR UPDATE',
                   r.relation)
      INTO tries USING r.shard_key, task_id, lease_token;
    IF tries IS NULL THEN
        PERFORM concurrency.distributed_lease_lost(queue, r.shard_key, task_id);
    END IF;
    next_run := now;
    IF tries < r.max_attempts THEN
        -- the queue's backoff: min(1 hour, 2^(attempt-1) s), less up to half at random
        next_run := now + coalesce(retry_in, (least(3600.0, 2.0 ^ (tries - 1))::float8 * (1 - 0.5 * random()))
                                              * interval '1 second');
        new_state := CASE WHEN next_run > now THEN 'scheduled' ELSE 'ready' END;
    END IF;
    EXECUTE format($q$UPDATE %s SET state = $3, run_at = CASE WHEN $3 = 'dead' THEN run_at ELSE $4 END,
                                    lease_token = NULL, lease_expires_at = NULL, lease_extended_to = NULL,
                                    last_error = $5
                       WHERE shard_key = $1 AND id = $2$q$, r.relation)
      USING r.shard_key, task_id, new_state, next_run, error;
    RETURN CASE WHEN new_state = 'dead' THEN 'dead' ELSE 'ready' END;
END
$fn$;
COMMENT ON FUNCTION concurrency.distributed_fail(text, bigint, bigint, text, interval) IS
    'fail on a distributed queue (called by concurrency.fail)';

CREATE FUNCTION concurrency.distributed_retry_dead(queue text, task_ids bigint[] DEFAULT NULL)
    RETURNS bigint
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency.distributed_queue_settings(queue);
    revived bigint;
BEGIN
    EXECUTE format($q$UPDATE %1$s AS t
                         SET state = 'ready', attempt = 0, run_at = $1,
                             lease_token = NULL, lease_expires_at = NULL, lease_extended_to = NULL
                       WHERE t.state = 'dead' AND ($2 IS NULL OR t.id = ANY ($2))
                         AND (t.dedupe_key IS NULL
                              OR NOT EXISTS (SELECT FROM %1$s AS o
                                              WHERE o.shard_key = t.shard_key AND o.dedupe_key = t.dedupe_key
                                                AND o.state NOT IN ('dead', 'cancelled')))$q$, s.relation)
      USING clock_timestamp(), task_ids;
    GET DIAGNOSTICS revived = ROW_COUNT;
    IF revived > 0 THEN
        PERFORM pg_notify('concurrency_' || queue, '');
    END IF;
    RETURN revived;
END
$fn$;
COMMENT ON FUNCTION concurrency.distributed_retry_dead(text, bigint[]) IS
    'retry_dead on a distributed queue (called by concurrency.retry_dead)';

-- queue_stats' counts for a distributed queue (a query over every shard).
CREATE FUNCTION concurrency.distributed_stats(queue text, now timestamptz,
        OUT ready bigint, OUT scheduled bigint, OUT leased bigint, OUT expired bigint, OUT dead bigint,
        OUT oldest_ready_age interval, OUT done bigint, OUT cancelled bigint, OUT blocked bigint)
    LANGUAGE plpgsql VOLATILE
    SET search_path = pg_catalog, pg_temp
    AS $fn$
DECLARE
    s record := concurrency.distributed_queue_settings(queue);
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
COMMENT ON FUNCTION concurrency.distributed_stats(text, timestamptz) IS
    'the counts of concurrency.queue_stats for a distributed queue';
