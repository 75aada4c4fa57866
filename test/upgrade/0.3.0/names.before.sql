-- A queue of 0.3.0 whose relations are named as 0.3.0 named them (table
-- first: q_legacy_ready, k_legacy_pkey, q_legacy_id_seq), made by 0.3.0's own
-- code (:create_queue, from create_queue.cpp and the release commit's
-- sources), with key_limit, rate_limit and key_rate_limit; a keyed task leased
-- and its key's next one blocked, and one without a key, leased, its lease
-- held across the update. names.after.sql checks that the update keeps the
-- names and the queue works, and that a queue whose tables would have them
-- is refused with the name of queue legacy.
INSERT INTO concurrency.queue (name, lease, max_attempts, key_limit, rate_limit, rate_period, key_rate_limit,
                               key_rate_period)
VALUES ('legacy', '1 hour', 5, 1, 100, '1 hour', 10, '1 hour');
\set legacy_ddl `:create_queue legacy`
:legacy_ddl
INSERT INTO concurrency."r_legacy" (slot) SELECT generate_series(1, 100);

SELECT count(*) FROM concurrency.enqueue_batch('legacy', ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}']::jsonb[],
                                                concurrency_keys => ARRAY['k', 'k', NULL]);
-- the claim takes the task without a key first (key_rate_limit's claims
-- walk the keys, the tasks without one first)
CREATE TABLE names_held AS SELECT task_id, lease_token, payload FROM concurrency.dequeue('legacy');
