-- dequeue claims without the executor where it can (src/queue/claim_direct.cpp):
-- every index of the queue's table, also one added by hand while the backend
-- already claims from it, gets the claimed rows' entries, and a table with
-- what the direct claim does not reproduce (a trigger, a CHECK constraint)
-- is claimed by the statement, whose effects show.
CREATE EXTENSION IF NOT EXISTS amcheck;
SELECT concurrency.create_queue('direct');
SELECT count(*) FROM concurrency.enqueue_batch('direct',
    (SELECT array_agg(jsonb_build_object('n', i)) FROM generate_series(1, 40) AS i));
-- a read-only transaction: the statement's 25006 (naming the UPDATE), nothing claimed
BEGIN READ ONLY;
\set VERBOSITY terse
SELECT count(*) FROM concurrency.dequeue('direct');
\set VERBOSITY default
ROLLBACK;
-- the first claims describe the table's indexes to this backend
SELECT array_agg((payload->>'n')::int ORDER BY task_id) AS claimed FROM concurrency.dequeue('direct', 3, worker => 'w1');
-- indexes of the user's own, added now: a partial one on columns the claim
-- writes, an expression index, a unique one
CREATE INDEX direct_by_worker ON concurrency."q_direct" (worker, attempt) WHERE state = 'leased';
CREATE INDEX direct_by_n ON concurrency."q_direct" (((payload->>'n')::int));
CREATE UNIQUE INDEX direct_by_token ON concurrency."q_direct" (lease_token);
-- claims in claim order, a batch and single ones
SELECT array_agg((payload->>'n')::int) AS claimed FROM concurrency.dequeue('direct', 7, worker => 'w1');
SELECT (payload->>'n')::int AS claimed, attempt, lease_expires_at > now() AS leased
  FROM concurrency.dequeue('direct', worker => 'w2');
-- a worker's loop: complete one task and claim the next in one transaction
SELECT task_id AS t, lease_token AS k FROM concurrency.dequeue('direct', worker => 'w2') \gset
BEGIN;
SELECT concurrency.complete('direct', :t, :k);
SELECT (payload->>'n')::int AS claimed FROM concurrency.dequeue('direct', worker => 'w2');
COMMIT;
-- every index holds exactly the entries it should (amcheck, heapallindexed)
SELECT c.relname, bt_index_check(c.oid, true) IS NOT NULL AS checked
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE i.indrelid = 'concurrency."q_direct"'::regclass ORDER BY c.relname;
-- and they find the claimed rows
SET enable_seqscan = off;
SET enable_bitmapscan = off;
SELECT worker, count(*) AS leased FROM concurrency."q_direct"
 WHERE state = 'leased' AND worker IN ('w1', 'w2') GROUP BY worker ORDER BY worker;
SELECT (payload->>'n')::int AS n, state FROM concurrency."q_direct" WHERE (payload->>'n')::int IN (12, 13) ORDER BY 1;
RESET enable_seqscan;
RESET enable_bitmapscan;

-- a unique index that a claim would break: 23505 as from the statement, and
-- the task stays ready
CREATE UNIQUE INDEX direct_one_per_worker ON concurrency."q_direct" (worker) WHERE state = 'leased' AND worker = 'solo';
SELECT count(*) AS claimed FROM concurrency.dequeue('direct', worker => 'solo');
-- (the statement's error names the statement in its CONTEXT, the direct
-- claim's does not: concurrency.direct_claim = off shows the first)
\set SHOW_CONTEXT never
SELECT count(*) AS claimed FROM concurrency.dequeue('direct', worker => 'solo');
\set SHOW_CONTEXT errors
SELECT count(*) AS ready FROM concurrency."q_direct" WHERE state = 'ready';
DROP INDEX concurrency.direct_one_per_worker;

-- a trigger on the table: the claim is the statement, and the trigger fires
-- (the statement runs with search_path pg_catalog, pg_temp: the trigger
-- function names its table with its schema)
CREATE TABLE direct_log (task_id bigint, state text);
CREATE FUNCTION direct_log_claim() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.direct_log VALUES (NEW.id, NEW.state);
    RETURN NEW;
END $$;
CREATE TRIGGER direct_log AFTER UPDATE ON concurrency."q_direct" FOR EACH ROW EXECUTE FUNCTION direct_log_claim();
SELECT count(*) AS claimed FROM concurrency.dequeue('direct', 2);
SELECT count(*) AS logged, min(state) AS state FROM direct_log;
DROP TRIGGER direct_log ON concurrency."q_direct";

-- a CHECK constraint: the statement checks it (23514), nothing is claimed
UPDATE concurrency."q_direct" SET attempt = 1 WHERE state = 'ready';
ALTER TABLE concurrency."q_direct" ADD CONSTRAINT direct_first_attempts CHECK (attempt <= 1);
\set VERBOSITY terse
SELECT count(*) AS claimed FROM concurrency.dequeue('direct');
\set VERBOSITY default
ALTER TABLE concurrency."q_direct" DROP CONSTRAINT direct_first_attempts;
-- without them, claims go on (and the indexes stay whole)
SELECT count(*) AS claimed FROM concurrency.dequeue('direct', 100);
SELECT count(*) FILTER (WHERE NOT checked) AS broken_indexes
  FROM (SELECT bt_index_check(i.indexrelid, true) IS NOT NULL AS checked
          FROM pg_index i WHERE i.indrelid = 'concurrency."q_direct"'::regclass) AS c;

SELECT concurrency.drop_queue('direct');
DROP TABLE direct_log;
DROP FUNCTION direct_log_claim();

-- concurrency.direct_claim (on by default; a superuser's setting): off, the
-- claim is the statement's. The direct claim describes the table in a memory
-- context of its own, "concurrency_ext claim", at a backend's first claim
-- from a queue; the statement leaves none. Each side in a fresh backend.
SELECT concurrency.create_queue('switch');
SELECT count(*) FROM concurrency.enqueue_batch('switch',
    (SELECT array_agg(jsonb_build_object('n', i)) FROM generate_series(1, 4) AS i));
\c
SET concurrency.direct_claim = off;
SELECT count(*) AS claimed FROM concurrency.dequeue('switch', 2);
SELECT count(*) AS direct_contexts FROM pg_backend_memory_contexts WHERE name = 'concurrency_ext claim';
\c
SET concurrency.direct_claim = on;
SELECT count(*) AS claimed FROM concurrency.dequeue('switch', 2);
SELECT count(*) AS direct_contexts FROM pg_backend_memory_contexts WHERE name = 'concurrency_ext claim';
SELECT state, count(*) FROM concurrency."q_switch" GROUP BY state ORDER BY state;
RESET concurrency.direct_claim;
-- only a superuser may change it (42501 for anyone else)
CREATE ROLE direct_claim_user;
SET ROLE direct_claim_user;
\set VERBOSITY terse
SET concurrency.direct_claim = off;
\set VERBOSITY default
RESET ROLE;
DROP ROLE direct_claim_user;
SELECT concurrency.drop_queue('switch');

-- a fair queue (alter_queue(…, fair => true)) is claimed without the
-- executor too: one scan of its fair index per task, where the statement
-- makes two (the next key, then that key's first task); the same tasks in
-- the same turns either way, and its indexes stay whole
SELECT concurrency.create_queue('direct_fair');
SELECT concurrency.alter_queue('direct_fair', fair => true);
SELECT count(*) FROM concurrency.enqueue_batch('direct_fair',
    (SELECT array_agg(jsonb_build_object('n', i)) FROM generate_series(1, 8) AS i),
    concurrency_keys => ARRAY['a', 'a', 'b', 'b', NULL, NULL, 'c', 'c']);
CREATE FUNCTION pg_temp.fair_index_scans() RETURNS bigint LANGUAGE sql AS
    $$ SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = 'fair_q_direct_fair' $$;
CREATE TEMP TABLE fair_claims (seq serial, n int, direct boolean, scans_before bigint);
SET concurrency.direct_claim = on;
SELECT pg_stat_force_next_flush();
INSERT INTO fair_claims (n, direct, scans_before) SELECT (payload ->> 'n')::int, true, pg_temp.fair_index_scans() FROM concurrency.dequeue('direct_fair');
SELECT pg_stat_force_next_flush();
SET concurrency.direct_claim = off;
INSERT INTO fair_claims (n, direct, scans_before) SELECT (payload ->> 'n')::int, false, pg_temp.fair_index_scans() FROM concurrency.dequeue('direct_fair');
SELECT pg_stat_force_next_flush();
SET concurrency.direct_claim = on;
INSERT INTO fair_claims (n, direct, scans_before) SELECT (payload ->> 'n')::int, true, pg_temp.fair_index_scans() FROM concurrency.dequeue('direct_fair');
SELECT pg_stat_force_next_flush();
SELECT n, direct, coalesce(lead(scans_before) OVER (ORDER BY seq), pg_temp.fair_index_scans()) - scans_before AS fair_index_scans
  FROM fair_claims ORDER BY seq;
SELECT array_agg((payload->>'n')::int ORDER BY (payload->>'n')::int) AS claimed FROM concurrency.dequeue('direct_fair', 4);
SET concurrency.direct_claim = off;
SELECT array_agg((payload->>'n')::int ORDER BY (payload->>'n')::int) AS claimed FROM concurrency.dequeue('direct_fair', 4);
RESET concurrency.direct_claim;
SELECT count(*) FILTER (WHERE NOT checked) AS broken_indexes
  FROM (SELECT bt_index_check(i.indexrelid, true) IS NOT NULL AS checked
          FROM pg_index i WHERE i.indrelid = 'concurrency."q_direct_fair"'::regclass) AS c;
SELECT concurrency.drop_queue('direct_fair');
