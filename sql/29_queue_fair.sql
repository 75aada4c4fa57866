-- Fair claims: alter_queue(…, fair => true). Claims rotate among the keys
-- that have ready tasks (the tasks without a key count as one more key,
-- first): with k keys ready, a key's first ready task is claimed within the
-- next k claims, whatever the other keys hold. That two sessions share the
-- rotation is in the isolation spec queue_fair.

CREATE FUNCTION pg_temp.error_of(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
-- the key of each task claimed by one dequeue of `batch`, in key order
CREATE FUNCTION pg_temp.claim_keys(queue text, batch integer DEFAULT 1) RETURNS text LANGUAGE sql AS $$
    SELECT string_agg(coalesce(d.payload ->> 'k', '-') || (d.payload ->> 'i'), ' ' ORDER BY d.payload ->> 'k' NULLS FIRST, d.payload ->> 'i')
      FROM concurrency.dequeue(queue, batch) d
$$;

SELECT concurrency.create_queue('fq', lease => '1 hour');
SELECT name, fair FROM concurrency.queue WHERE name = 'fq';
SELECT concurrency.alter_queue('fq', fair => true);
SELECT name, fair FROM concurrency.queue WHERE name = 'fq';
-- the index the fair claim walks
SELECT indexrelid::regclass AS fair_index FROM pg_index WHERE indrelid = 'concurrency.q_fq'::regclass AND indexrelid::regclass::text LIKE '%fair%';

-- key a holds 5 tasks, b 2, c 1, and 2 have no key; enqueued a first
SELECT count(*) FROM (
    SELECT concurrency.enqueue('fq', jsonb_build_object('k', 'a', 'i', i), concurrency_key => 'a') FROM generate_series(1, 5) i
    UNION ALL SELECT concurrency.enqueue('fq', jsonb_build_object('k', 'b', 'i', i), concurrency_key => 'b') FROM generate_series(1, 2) i
    UNION ALL SELECT concurrency.enqueue('fq', jsonb_build_object('k', 'c', 'i', 1), concurrency_key => 'c')
    UNION ALL SELECT concurrency.enqueue('fq', jsonb_build_object('i', i)) FROM generate_series(1, 2) i) e;
-- one at a time: the rotation -, a, b, c, then -, a, b, then a alone
SELECT n, pg_temp.claim_keys('fq') AS claimed FROM generate_series(1, 11) n;

-- a batch takes one task of each key in turn, and goes round again while
-- the batch is not full
SELECT count(*) FROM (
    SELECT concurrency.enqueue('fq', jsonb_build_object('k', k, 'i', i), concurrency_key => k)
      FROM unnest(ARRAY['x', 'y', 'z']) k, generate_series(1, 3) i) e;
SELECT pg_temp.claim_keys('fq', 2) AS claimed;
SELECT pg_temp.claim_keys('fq', 5) AS claimed;
SELECT pg_temp.claim_keys('fq', 10) AS claimed;

-- a lone task behind another key's backlog: claimed within 2 claims
SELECT count(*) FROM (
    SELECT concurrency.enqueue('fq', jsonb_build_object('k', 'heavy', 'i', i), concurrency_key => 'heavy')
      FROM generate_series(1, 500) i) e;
SELECT pg_temp.claim_keys('fq') AS claimed FROM generate_series(1, 3);
SELECT concurrency.enqueue('fq', '{"k": "lone", "i": 1}', concurrency_key => 'lone') > 0 AS enqueued;
SELECT pg_temp.claim_keys('fq') AS claimed FROM generate_series(1, 2);
-- and one whose key sorts before the position of the rotation
SELECT concurrency.enqueue('fq', '{"k": "early", "i": 1}', concurrency_key => 'early') > 0 AS enqueued;
SELECT pg_temp.claim_keys('fq') AS claimed FROM generate_series(1, 2);

-- within a key, claim order: the highest priority, then the earliest run_at
DELETE FROM concurrency.q_fq;
SELECT count(*) FROM (
    SELECT concurrency.enqueue('fq', jsonb_build_object('k', 'p', 'i', i), priority => i, concurrency_key => 'p')
      FROM generate_series(1, 3) i) e;
SELECT pg_temp.claim_keys('fq') AS claimed FROM generate_series(1, 3);

-- keys of any text: the empty key, quotes, a key of 1024 bytes (fair =>
-- true again starts the rotation from its beginning)
SELECT concurrency.alter_queue('fq', fair => true);
SELECT count(*) FROM (
    SELECT concurrency.enqueue('fq', jsonb_build_object('k', k, 'i', i), concurrency_key => k)
      FROM unnest(ARRAY['', 'it''s', repeat('z', 1024)]) k, generate_series(1, 2) i) e;
SELECT left(payload ->> 'k', 4) AS key, payload ->> 'i' AS i
  FROM generate_series(1, 6) n, LATERAL concurrency.dequeue('fq', batch => 1 + 0 * n) ORDER BY n;

-- tasks held back by key_limit are not ready: the rotation skips them
DELETE FROM concurrency.q_fq;
SELECT concurrency.alter_queue('fq', key_limit => 1);
SELECT count(*) FROM (
    SELECT concurrency.enqueue('fq', jsonb_build_object('k', k, 'i', i), concurrency_key => k)
      FROM unnest(ARRAY['a', 'b']) k, generate_series(1, 3) i) e;
SELECT pg_temp.claim_keys('fq', 10) AS claimed;
SELECT concurrency.alter_queue('fq', key_limit => 0);

-- a waiting dequeue takes the same turn
SELECT pg_temp.claim_keys('fq', 10) AS claimed;
SELECT count(*) AS claimed FROM concurrency.dequeue('fq', wait => '10 ms');

-- fair => false: the index goes, claims take the queue's claim order again
SELECT concurrency.alter_queue('fq', fair => false);
SELECT fair, (SELECT count(*) FROM pg_class WHERE relname = 'fair_q_fq') AS fair_index FROM concurrency.queue WHERE name = 'fq';
DELETE FROM concurrency.q_fq;
SELECT count(*) FROM (
    SELECT concurrency.enqueue('fq', jsonb_build_object('k', k, 'i', i), concurrency_key => k)
      FROM unnest(ARRAY['a', 'b']) k, generate_series(1, 2) i) e;
SELECT payload ->> 'k' AS key, payload ->> 'i' AS i FROM generate_series(1, 4) n, LATERAL concurrency.dequeue('fq', batch => 1 + 0 * n) ORDER BY n;
-- NULL keeps it; true again makes the index again
SELECT concurrency.alter_queue('fq', fair => NULL);
SELECT fair FROM concurrency.queue WHERE name = 'fq';
SELECT concurrency.alter_queue('fq', fair => true);
SELECT concurrency.alter_queue('fq', fair => true);
SELECT count(*) AS fair_index FROM pg_class WHERE relname = 'fair_q_fq';

-- a role with work claims from a fair queue; only manage may change it
DELETE FROM concurrency.q_fq;
CREATE ROLE regress_fair_worker;
SELECT concurrency.grant_queue('fq', 'regress_fair_worker', ARRAY['work']);
SELECT count(*) FROM (
    SELECT concurrency.enqueue('fq', jsonb_build_object('k', k, 'i', 1), concurrency_key => k)
      FROM unnest(ARRAY['a', 'b']) k) e;
SET ROLE regress_fair_worker;
SELECT pg_temp.claim_keys('fq', 5) AS claimed;
SELECT pg_temp.error_of($$SELECT concurrency.alter_queue('fq', fair => false)$$);
RESET ROLE;
SELECT fair FROM concurrency.queue WHERE name = 'fq';

-- errors
SELECT pg_temp.error_of($$SELECT concurrency.alter_queue('no_such_queue', fair => true)$$);

-- drop_queue takes the index along
SELECT concurrency.drop_queue('fq');
SELECT count(*) AS left_behind FROM pg_class WHERE relname LIKE 'q\_fq%';
DROP ROLE regress_fair_worker;
