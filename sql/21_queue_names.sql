-- A queue's relations are named after it: its tables q_<queue>, k_, s_, r_
-- and rk_<queue>, and their indexes and identity sequence role first
-- (ready_q_<queue>, pkey_k_<queue>, id_seq_q_<queue>), so that no queue's
-- relation has the name of another queue's. Before 0.4.0 those were table
-- first (q_<queue>_ready, k_<queue>_pkey, q_<queue>_id_seq), and queue jobs's
-- index q_jobs_keyed was the table of a queue jobs_keyed: a queue made then
-- keeps its names, and create_queue refuses a queue whose tables would have
-- them, naming the queue that has them (42P07 with DETAIL and HINT).

-- enqueue, claim and complete a keyed task, its key's next one, and one
-- without a key, under key_limit, rate_limit and key_rate_limit
CREATE FUNCTION pg_temp.exercise(q text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    t record;
    claimed integer[] := '{}';
BEGIN
    PERFORM concurrency.enqueue_batch(q, ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[],
                                      concurrency_keys => ARRAY['k', 'k', NULL]);
    FOR pass IN 1 .. 2 LOOP
        FOR t IN SELECT * FROM concurrency.dequeue(q, 5) ORDER BY payload ->> 'n' LOOP
            PERFORM concurrency.complete(q, t.task_id, t.lease_token);
            claimed := claimed || (t.payload ->> 'n')::integer;
        END LOOP;
    END LOOP;
    RETURN format('claimed %s, left %s', claimed,
                  (SELECT count(*) FROM concurrency.queue_stats WHERE queue = q AND ready + scheduled + leased + blocked > 0));
END $$;
CREATE FUNCTION pg_temp.create_all(queues text[]) RETURNS void LANGUAGE sql AS $$
    SELECT concurrency.create_queue(q, key_limit => 1, rate_limit => 100, rate_period => '1 hour',
                                    key_rate_limit => 10, key_rate_period => '1 hour')
      FROM unnest(queues) AS q;
$$;

-- names that were each other's derived names: q_jobs_keyed (an index of
-- jobs, the table of jobs_keyed), k_a_pkey (an index of a, the key table of
-- a_pkey), q_jobs_id_seq (the sequence of jobs, the table of jobs_id_seq);
-- and in the other order
SELECT pg_temp.create_all(ARRAY['jobs', 'jobs_keyed', 'a', 'a_pkey', 'jobs_id_seq']);
SELECT pg_temp.create_all(ARRAY['b_pkey', 'b', 'x_id_seq', 'x_keyed', 'x']);
SELECT q, pg_temp.exercise(q)
  FROM unnest(ARRAY['jobs', 'jobs_keyed', 'a', 'a_pkey', 'jobs_id_seq', 'b_pkey', 'b', 'x_id_seq', 'x_keyed', 'x']) AS q;
-- the relations of jobs and a
SELECT c.relname, c.relkind
  FROM pg_class c
 WHERE c.relnamespace = 'concurrency'::regnamespace
   AND c.relname ~ '^([a-z_]+_)?(q|k|s|r|rk)_(jobs|a)$'
 ORDER BY 1;
SELECT concurrency.drop_queue(q)
  FROM unnest(ARRAY['jobs', 'jobs_keyed', 'a', 'a_pkey', 'jobs_id_seq', 'b_pkey', 'b', 'x_id_seq', 'x_keyed', 'x']) AS q;

-- A queue made before 0.4.0 (its relations named as 0.3.0 named them; the
-- upgrade check makes one with 0.3.0's own code): it works as it is, and a
-- queue whose tables would have the names of its relations is refused
SELECT pg_temp.create_all(ARRAY['old']);
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT c.relname AS name, c.relkind AS kind, m[1] AS role, m[2] AS tbl
               FROM pg_class c, regexp_match(c.relname, '^([a-z_]+)_((?:q|k|s|r|rk)_old)$') AS m
              WHERE c.relnamespace = 'concurrency'::regnamespace AND m IS NOT NULL
    LOOP
        EXECUTE format('ALTER %s concurrency.%I RENAME TO %I', CASE r.kind WHEN 'S' THEN 'SEQUENCE' ELSE 'INDEX' END,
                       r.name, r.tbl || '_' || r.role);
    END LOOP;
END $$;
SELECT string_agg(relname, ' ' ORDER BY relname) AS old_names
  FROM pg_class WHERE relnamespace = 'concurrency'::regnamespace AND relname ~ '_old_';
SELECT pg_temp.exercise('old');
-- its index q_old_keyed would be the table of a queue old_keyed, its
-- sequence q_old_id_seq that of old_id_seq, its key table's primary key
-- k_old_pkey the key table of old_pkey
SELECT concurrency.create_queue('old_keyed');
SELECT concurrency.create_queue('old_id_seq');
SELECT concurrency.create_queue('old_pkey');
DO $$ BEGIN PERFORM concurrency.create_queue('old_keyed');
EXCEPTION WHEN duplicate_table THEN RAISE NOTICE 'duplicate_table (42P07)'; END $$;
SELECT count(*) AS created FROM concurrency.queue WHERE name LIKE 'old\_%';
-- its fair index (key_rate_limit) is found under its name: dropped with the
-- limit, made again (under the name of 0.4.0) for fair => true
SELECT concurrency.alter_queue('old', key_rate_limit => 0);
SELECT to_regclass('concurrency.q_old_fair') AS fair_index;
SELECT concurrency.alter_queue('old', fair => true);
SELECT to_regclass('concurrency.fair_q_old') AS fair_index;
SELECT pg_temp.exercise('old');
-- the HINT's way: the index renamed as since 0.4.0 frees the name, and the
-- queue finds it under its new name
ALTER INDEX concurrency.q_old_keyed RENAME TO keyed_q_old;
SELECT pg_temp.create_all(ARRAY['old_keyed']);
SELECT q, pg_temp.exercise(q) FROM unnest(ARRAY['old', 'old_keyed']) AS q;
SELECT concurrency.drop_queue(q) FROM unnest(ARRAY['old', 'old_keyed']) AS q;
SELECT count(*) AS relations_left FROM pg_class WHERE relnamespace = 'concurrency'::regnamespace AND relname ~ 'old';

-- names that clash with nobody: create_queue stays idempotent
SELECT concurrency.create_queue('jobs');
SELECT concurrency.create_queue('jobs');
SELECT concurrency.drop_queue('jobs');

-- the names, as the SQL of distributed queues asks for them
SELECT concurrency.create_queue('names');
SELECT t, r, concurrency_internal.queue_relation_name('names', t, r)
  FROM (VALUES ('tasks', NULL), ('tasks', 'ready'), ('tasks', 'id_seq'), ('keys', 'pkey'), ('key_rate', NULL),
               ('key_rate', 'pkey'), ('slots', 'pkey')) AS v(t, r);
ALTER INDEX concurrency.ready_q_names RENAME TO q_names_ready;
SELECT concurrency_internal.queue_relation_name('names', 'tasks', 'ready') AS renamed;
SELECT concurrency_internal.queue_relation_name('names', 'keys', 'ready');
SELECT concurrency_internal.queue_relation_name('names', 'queue');
SELECT concurrency.drop_queue('names');
