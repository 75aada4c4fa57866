-- queue_stats.expired counts a lease as expired only past its current
-- deadline: a heartbeat that extends a lease far enough writes only
-- lease_extended_to (src/queue/queue_sql.cpp, lease_extension), and such a
-- lease, past its first deadline (lease_expires_at) but not past the extended
-- one, is leased, not expired, and no dequeue reclaims it. Checked on every
-- kind of local queue: plain, retaining finished tasks, with key_limit (a
-- second task of the key blocked behind the leased one), each claimed
-- without the executor and with the claim statement (concurrency.direct_claim
-- off). The clock is moved by moving the leases' times back, as 61 minutes
-- passing would: no test waits.
SELECT concurrency.create_queue(q || d, retain => CASE WHEN q = 'ex_retained_' THEN interval '1 day' END,
                                key_limit => CASE WHEN q = 'ex_keyed_' THEN 1 END)
  FROM unnest(ARRAY['ex_plain_', 'ex_retained_', 'ex_keyed_']) q, unnest(ARRAY['direct', 'statement']) d;
SELECT count(concurrency.enqueue(name, '{}', concurrency_key => CASE WHEN name LIKE 'ex\_keyed\_%' THEN 'k' END))
  FROM concurrency.queue, generate_series(1, CASE WHEN name LIKE 'ex\_keyed\_%' THEN 2 ELSE 1 END)
 WHERE name LIKE 'ex\_%';
-- each queue's claim with its claim path, a lease of one hour
CREATE FUNCTION pg_temp.claim(q text, lease interval DEFAULT NULL) RETURNS SETOF bigint[] LANGUAGE sql AS $$
    SELECT pg_catalog.set_config('concurrency.direct_claim', (q NOT LIKE '%statement')::text, true);
    SELECT ARRAY[task_id, lease_token] FROM concurrency.dequeue(q, lease => lease) $$;
CREATE TEMP TABLE held AS
SELECT name AS q, c[1] AS id, c[2] AS token
  FROM concurrency.queue, pg_temp.claim(name, '1 hour') c WHERE name LIKE 'ex\_%';
SELECT q, count(*) AS claimed FROM held GROUP BY q ORDER BY q;
-- extended by 90 minutes: the indexed deadline is more than half of that
-- away, so only lease_extended_to moves
SELECT q, concurrency.heartbeat(q, id, token, extend => '90 minutes') > now() + interval '89 minutes' AS extended
  FROM held ORDER BY q;
-- 61 minutes later: past the first deadline, 29 minutes before the extended one
SELECT format('UPDATE concurrency.%I SET lease_expires_at = lease_expires_at - interval ''61 minutes'',
                   lease_extended_to = lease_extended_to - interval ''61 minutes''
                WHERE id = %s AND lease_extended_to > lease_expires_at', 'q_' || q, id) FROM held ORDER BY q \gexec
SELECT queue, leased, expired FROM concurrency.queue_stats WHERE queue LIKE 'ex\_%' ORDER BY queue;
SELECT q, count(c) AS reclaimed FROM held LEFT JOIN pg_temp.claim(q) c ON true GROUP BY q ORDER BY q;
SELECT queue, leased, expired FROM concurrency.queue_stats WHERE queue LIKE 'ex\_%' ORDER BY queue;
SELECT q, concurrency.heartbeat(q, id, token, extend => '1 hour') IS NOT NULL AS holder_keeps_its_lease
  FROM held ORDER BY q;
-- past the extended deadline too (moved back again): expired, and reclaimed
SELECT format('UPDATE concurrency.%I SET lease_expires_at = now() - interval ''2 minutes'',
                   lease_extended_to = now() - interval ''1 minute'' WHERE id = %s', 'q_' || q, id) FROM held ORDER BY q \gexec
SELECT queue, leased, expired FROM concurrency.queue_stats WHERE queue LIKE 'ex\_%' ORDER BY queue;
SELECT q, count(c) AS reclaimed FROM held LEFT JOIN pg_temp.claim(q) c ON true GROUP BY q ORDER BY q;
SELECT count(concurrency.drop_queue(name)) FROM concurrency.queue WHERE name LIKE 'ex\_%';
