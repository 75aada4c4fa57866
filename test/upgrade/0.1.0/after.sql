-- After ALTER EXTENSION concurrency_ext UPDATE from 0.1.0 with the live tasks
-- of before.sql: nothing lost, the old lease tokens still fenced, every queue
-- function working on the upgraded tables. Any failed check raises an error
-- (scripts/upgrade-check.sh runs this with ON_ERROR_STOP).
CREATE FUNCTION pg_temp.check(ok boolean, what text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF ok IS NOT TRUE THEN
        RAISE EXCEPTION 'upgrade check failed: %', what;
    END IF;
END $$;
CREATE FUNCTION pg_temp.sqlstate_of(statement text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE statement;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE;
END $$;

-- every task kept, with its state, attempts, tokens, keys and payload
SELECT pg_temp.check((SELECT array_agg(state || ':' || attempt || ':' || coalesce(dedupe_key, '-') || ':' || (payload ->> 'n')
                                       ORDER BY id) FROM concurrency."q_live")
                     = '{ready:0:ready-key:1,scheduled:1:sched-key:2,leased:1:lease-key:3,leased:1:-:4,dead:5:dead-key:5}',
                     'tasks of queue live');
SELECT pg_temp.check((SELECT count(*) FROM concurrency."q_Mixed""Q") = 5, 'tasks of queue Mixed"Q');
SELECT pg_temp.check((SELECT bool_and(t.lease_token = h.lease_token) FROM concurrency."q_live" t JOIN held h
                       ON h.queue = 'live' AND h.task_id = t.id), 'lease tokens');
SELECT pg_temp.check((SELECT retain IS NULL AND key_limit IS NULL AND max_leased IS NULL AND lease = '30 seconds'
                        FROM concurrency.queue WHERE name = 'live'), 'settings of queue live');
SELECT pg_temp.check((SELECT done = 0 AND cancelled = 0 AND leased = 1 AND expired = 1 AND dead = 1
                        FROM concurrency.queue_stats WHERE queue = 'live'), 'queue_stats of queue live');

-- the updated tables have the indexes and constraints of a table that 0.2.0's
-- create_queue makes (but for the indexes' names, which the queues made
-- since 0.4.0 have role first: ready_q_<queue>, where q_live keeps q_live_ready)
SELECT concurrency.create_queue('made_by_0_2_0');
SELECT pg_temp.check((SELECT array_agg(replace(d, 'q_live', 'q_X') ORDER BY replace(d, 'q_live', 'q_X'))
                        FROM (SELECT regexp_replace(indexdef, ' INDEX \S+ ON ', ' INDEX ON ') FROM pg_indexes WHERE schemaname = 'concurrency' AND tablename = 'q_live'
                              UNION ALL
                              SELECT pg_get_constraintdef(oid) FROM pg_constraint
                               WHERE conrelid = 'concurrency."q_live"'::regclass) AS i(d))
                     = (SELECT array_agg(replace(d, 'q_made_by_0_2_0', 'q_X') ORDER BY replace(d, 'q_made_by_0_2_0', 'q_X'))
                          FROM (SELECT regexp_replace(indexdef, ' INDEX \S+ ON ', ' INDEX ON ') FROM pg_indexes
                                 WHERE schemaname = 'concurrency' AND tablename = 'q_made_by_0_2_0'
                                UNION ALL
                                SELECT pg_get_constraintdef(oid) FROM pg_constraint
                                 WHERE conrelid = 'concurrency."q_made_by_0_2_0"'::regclass) AS i(d)),
                     'indexes and constraints of queue live');
SELECT concurrency.drop_queue('made_by_0_2_0');

-- the worker holding task 3 carries on with its 0.1.0 token: heartbeat, then
-- complete; a wrong token is refused
SELECT pg_temp.check(concurrency.heartbeat('live', 3, (SELECT lease_token FROM held WHERE queue = 'live' AND task_id = 3))
                     > clock_timestamp(), 'heartbeat with the old token');
SELECT pg_temp.check(pg_temp.sqlstate_of('SELECT concurrency.complete(''live'', 3, '
                     || (SELECT lease_token + 1000 FROM held WHERE queue = 'live' AND task_id = 3) || ')') = 'CE001',
                     'a wrong token is fenced');
SELECT concurrency.complete('live', 3, (SELECT lease_token FROM held WHERE queue = 'live' AND task_id = 3));
SELECT pg_temp.check(NOT EXISTS (SELECT FROM concurrency."q_live" WHERE id = 3), 'task 3 completed');
SELECT pg_temp.check(pg_temp.sqlstate_of('SELECT concurrency.complete(''live'', 3, '
                     || (SELECT lease_token FROM held WHERE queue = 'live' AND task_id = 3) || ')') = 'CE001',
                     'completing twice is fenced');

-- a claim takes the ready task and reclaims the expired lease of task 4: its
-- old holder is fenced from then on
CREATE TEMP TABLE claimed AS SELECT * FROM concurrency.dequeue('live', 10, worker => 'w-new');
SELECT pg_temp.check((SELECT array_agg(task_id ORDER BY task_id) FROM claimed) = '{1,4}', 'claims after the update');
SELECT pg_temp.check((SELECT bool_and(c.lease_token > h.lease_token) FROM claimed c, held h), 'new tokens are new');
SELECT pg_temp.check(pg_temp.sqlstate_of('SELECT concurrency.heartbeat(''live'', 4, '
                     || (SELECT lease_token FROM held WHERE queue = 'live' AND task_id = 4) || ')') = 'CE001',
                     'the old holder of a reclaimed task is fenced');

-- dedupe keys: held by the scheduled task, released by the dead one
SELECT pg_temp.check(concurrency.enqueue('live', '{}', dedupe_key => 'sched-key') = 2, 'dedupe key of a live task');
SELECT pg_temp.check(concurrency.enqueue('live', '{}', dedupe_key => 'dead-key') > 5, 'dedupe key of a dead task');

-- the 0.2.0 features on an upgraded table: retention, results, concurrency keys
SELECT concurrency.alter_queue('live', retain => '1 day');
SELECT concurrency.complete('live', 1, (SELECT lease_token FROM claimed WHERE task_id = 1), '{"ok": true}');
SELECT pg_temp.check((SELECT state = 'done' AND result = '{"ok": true}' AND finished_at IS NOT NULL
                        FROM concurrency."q_live" WHERE id = 1), 'a retained done task');
SELECT pg_temp.check(concurrency.enqueue('live', '{}', dedupe_key => 'ready-key') = 1, 'a done task keeps its key');
SELECT concurrency.enqueue('live', '{"keyed": true}', concurrency_key => 'k');
SELECT pg_temp.check((SELECT concurrency_key = 'k' FROM concurrency."q_live" WHERE payload ? 'keyed'), 'concurrency_key');
SELECT pg_temp.check((SELECT count(*) = 3 FROM concurrency.enqueue_batch('Mixed"Q', ARRAY['{}', '{}', '{}']::jsonb[],
                                                                         dedupe_keys => ARRAY['x', NULL, 'x'])),
                     'enqueue_batch on the other queue');
SELECT pg_temp.check((SELECT count(*) = 7 FROM concurrency."q_Mixed""Q"), 'tasks of queue Mixed"Q after enqueue_batch');

-- privileges of the replaced functions carried over
SELECT pg_temp.check(has_function_privilege('concurrency_upgrade_check',
                     'concurrency.create_queue(text, interval, integer, interval, integer, integer, boolean, integer, interval, integer, interval)', 'EXECUTE'),
                     'a GRANT on create_queue');
SELECT pg_temp.check(NOT has_function_privilege('public',
                     'concurrency.create_queue(text, interval, integer, interval, integer, integer, boolean, integer, interval, integer, interval)', 'EXECUTE'),
                     'create_queue stays revoked from PUBLIC');
SELECT pg_temp.check(has_function_privilege('concurrency_upgrade_check',
                     'concurrency.enqueue(text, jsonb, timestamptz, integer, text, text, text, bigint[])', 'EXECUTE')
                     AND NOT has_function_privilege('public',
                     'concurrency.enqueue(text, jsonb, timestamptz, integer, text, text, text, bigint[])', 'EXECUTE'),
                     'the privileges of enqueue');
SELECT pg_temp.check(has_table_privilege('public', 'concurrency.queue_stats', 'SELECT'), 'queue_stats readable');

-- DROP OWNED BY, not REVOKE: from PostgreSQL 17 on, GRANTs carried over by
-- the upgrade script are initial privileges, which only DROP OWNED removes
DROP OWNED BY concurrency_upgrade_check;
DROP ROLE concurrency_upgrade_check;

-- keyed concurrency on an upgraded queue: its side tables are there (not
-- members of the extension), a serial key holds back its second task
SELECT concurrency.alter_queue('live', key_limit => 1, max_leased => 10);
SELECT concurrency.enqueue('live', jsonb_build_object('n', 100), concurrency_key => 'upgraded');
SELECT concurrency.enqueue('live', jsonb_build_object('n', 101), concurrency_key => 'upgraded');
SELECT pg_temp.check((SELECT array_agg(state ORDER BY id) FROM concurrency."q_live" WHERE concurrency_key = 'upgraded')
                     = '{ready,blocked}', 'a serial key on an upgraded queue');
SELECT pg_temp.check((SELECT waiting FROM concurrency.queue_keys('live') WHERE concurrency_key = 'upgraded') = 2,
                     'queue_keys on an upgraded queue');
SELECT pg_temp.check((SELECT count(*) FROM pg_catalog.pg_depend
                       WHERE refclassid = 'pg_extension'::pg_catalog.regclass AND deptype = 'e'
                         AND objid IN ('concurrency.k_live'::pg_catalog.regclass, 'concurrency.s_live'::pg_catalog.regclass)) = 0,
                     'side tables are not members of the extension');
