-- After the update from 0.3.0 (names.before.sql): queue legacy keeps the
-- names 0.3.0 gave its relations, and works
SELECT c.relname, c.relkind FROM pg_class c
 WHERE c.relnamespace = 'concurrency'::regnamespace AND c.relname LIKE '%legacy%' ORDER BY 1;
SELECT payload ->> 'n' AS n, concurrency.complete('legacy', task_id, lease_token) FROM names_held;
SELECT count(*) FROM concurrency.enqueue('legacy', '{"n": 4}', concurrency_key => 'k');
-- key k's tasks one at a time (key_limit 1)
SELECT payload ->> 'n' AS n, concurrency.complete('legacy', task_id, lease_token)
  FROM concurrency.dequeue('legacy', 5) ORDER BY 1;
SELECT payload ->> 'n' AS n, concurrency.complete('legacy', task_id, lease_token)
  FROM concurrency.dequeue('legacy', 5) ORDER BY 1;
SELECT payload ->> 'n' AS n, concurrency.complete('legacy', task_id, lease_token)
  FROM concurrency.dequeue('legacy', 5) ORDER BY 1;
SELECT ready, scheduled, leased, blocked FROM concurrency.queue_stats WHERE queue = 'legacy';
-- a queue whose tables would have the names of legacy's index, sequence or
-- key table's primary key is refused, naming queue legacy
SELECT concurrency.create_queue('legacy_keyed');
SELECT concurrency.create_queue('legacy_id_seq');
SELECT concurrency.create_queue('legacy_pkey');
-- a new queue's are role first, beside it
SELECT concurrency.create_queue('legacy_ready_2', key_limit => 1);
SELECT string_agg(c.relname, ' ' ORDER BY c.relname) AS names FROM pg_class c
 WHERE c.relnamespace = 'concurrency'::regnamespace AND c.relname LIKE '%legacy\_ready\_2';
SELECT count(*) FROM concurrency.enqueue('legacy_ready_2', '{}', concurrency_key => 'k');
SELECT count(concurrency.complete('legacy_ready_2', task_id, lease_token)) FROM concurrency.dequeue('legacy_ready_2');
-- both sampled into the queue counts' history, each with its table, and
-- shown to a role that may read it
BEGIN;
SELECT concurrency.queue_stats_sample() >= 2 AS sampled;
SELECT queue, ready, relid = format('concurrency.%I', 'q_' || queue)::regclass AS relid_of_its_table,
       inserted IS NOT NULL AS has_inserted
  FROM concurrency.queue_stats_sample WHERE sampled_at = now() AND queue LIKE 'legacy%' ORDER BY queue;
COMMIT;
CREATE ROLE names_reader;
SELECT concurrency.grant_queue(q, 'names_reader', '{read}') FROM unnest(ARRAY['legacy', 'legacy_ready_2']) AS q;
SET ROLE names_reader;
SELECT DISTINCT queue FROM concurrency.queue_stats_history WHERE queue LIKE 'legacy%' ORDER BY queue;
RESET ROLE;
DELETE FROM concurrency.queue_stats_sample WHERE queue LIKE 'legacy%';
-- legacy's fair index, made by 0.3.0, goes with its key_rate_limit
SELECT concurrency.alter_queue('legacy', key_rate_limit => 0);
SELECT to_regclass('concurrency.q_legacy_fair') AS fair_index;
SELECT concurrency.drop_queue('legacy');
SELECT concurrency.drop_queue('legacy_ready_2');
SELECT count(*) AS left_over FROM pg_class c
 WHERE c.relnamespace = 'concurrency'::regnamespace AND c.relname LIKE '%legacy%';
DROP TABLE names_held;
DROP ROLE names_reader;
