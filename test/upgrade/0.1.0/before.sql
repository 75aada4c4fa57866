-- Live tasks of a 0.1.0 installation, run by scripts/upgrade-check.sh right
-- after CREATE EXTENSION concurrency_ext VERSION '0.1.0' (the 0.1.0 objects,
-- under the current module). The 0.1.0 functions cannot run here, because
-- the installed module is the current one: the queue tables are made by
-- 0.1.0's own code instead, the program :create_table that upgrade-check.sh
-- builds from create_table.cpp and the release commit's QueueSql, which
-- prints the DDL 0.1.0's create_queue ran. Two queues, one with a name that
-- needs quoting; tasks in every 0.1.0 state, with dedupe keys, and lease
-- tokens from the sequence, as workers hold them when the package is
-- upgraded.
INSERT INTO concurrency.queue (name, lease, max_attempts) VALUES ('live', '30 seconds', 5), ('Mixed"Q', '1 minute', 3);
\set queue_tables `:create_table live 'Mixed"Q'`
:queue_tables

DO $$
DECLARE
    q text;
BEGIN
    FOREACH q IN ARRAY ARRAY['live', 'Mixed"Q'] LOOP
        -- 1 ready, 2 scheduled, 3 leased (lease running), 4 leased (lease
        -- expired, not yet reclaimed), 5 dead
        EXECUTE format($rows$
INSERT INTO concurrency.%1$I (state, run_at, lease_token, lease_expires_at, attempt, worker, dedupe_key, last_error, payload)
VALUES ('ready',     clock_timestamp() - interval '1 minute', NULL, NULL, 0, NULL, 'ready-key', NULL, '{"n": 1}'),
       ('scheduled', clock_timestamp() + interval '1 hour', NULL, NULL, 1, NULL, 'sched-key', 'boom', '{"n": 2}'),
       ('leased',    clock_timestamp() - interval '1 minute', nextval('concurrency.lease_token'),
                     clock_timestamp() + interval '1 hour', 1, 'w-old', 'lease-key', NULL, '{"n": 3}'),
       ('leased',    clock_timestamp() - interval '1 minute', nextval('concurrency.lease_token'),
                     clock_timestamp() - interval '1 second', 1, 'w-old', NULL, NULL, '{"n": 4}'),
       ('dead',      clock_timestamp() - interval '1 minute', NULL, NULL, 5, NULL, 'dead-key', 'gave up', '{"n": 5}')
$rows$, 'q_' || q);
    END LOOP;
END $$;

-- the tokens the workers hold
CREATE TABLE public.held (queue text, task_id bigint, lease_token bigint);
INSERT INTO public.held SELECT 'live', id, lease_token FROM concurrency."q_live" WHERE lease_token IS NOT NULL;
INSERT INTO public.held SELECT 'Mixed"Q', id, lease_token FROM concurrency."q_Mixed""Q" WHERE lease_token IS NOT NULL;

-- a privilege on a function whose argument list grows in 0.2.0
DROP ROLE IF EXISTS concurrency_upgrade_check;
CREATE ROLE concurrency_upgrade_check;
GRANT EXECUTE ON FUNCTION concurrency.create_queue(text, interval, integer) TO concurrency_upgrade_check;
REVOKE EXECUTE ON FUNCTION concurrency.enqueue(text, jsonb, timestamptz, integer, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION concurrency.enqueue(text, jsonb, timestamptz, integer, text) TO concurrency_upgrade_check;
