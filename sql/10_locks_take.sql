-- Named locks: taking and releasing them in one session — the lock tags they
-- use, re-entrancy, the views, and every error. What needs two sessions
-- (blocking, timeouts, ordering) is in the isolation specs test/isolation/specs/locks_*.

SELECT concurrency.register_subsystem('t10_relay', 8001);
SELECT concurrency.register_subsystem('t10_neg', -8002);
SELECT concurrency.register_subsystem('t10_big', 9223372036854775807);
SELECT concurrency.register_subsystem('t10_pooled', 8004, xact_only => true);
SELECT name, slot - (SELECT min(slot) FROM concurrency.subsystem WHERE name LIKE 't10_%') AS slot_offset
  FROM concurrency.subsystem WHERE name LIKE 't10_%' ORDER BY slot;

-- A subsystem lock is exactly pg_advisory_xact_lock(key): the same row in
-- pg_locks (classid/objid = high/low half of the key, objsubid 1).
CREATE TEMP TABLE tags (how text, classid oid, objid oid, objsubid smallint, mode text);
CREATE FUNCTION pg_temp.my_advisory_tags(how text) RETURNS void LANGUAGE sql AS $$
  INSERT INTO tags SELECT how, classid, objid, objsubid, mode FROM pg_locks
   WHERE locktype = 'advisory' AND pid = pg_backend_pid()
     AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) $$;
BEGIN; SELECT concurrency.xact_lock('t10_neg'); SELECT pg_temp.my_advisory_tags('named'); COMMIT;
BEGIN; SELECT pg_advisory_xact_lock(-8002); SELECT pg_temp.my_advisory_tags('raw'); COMMIT;
BEGIN; SELECT concurrency.xact_lock('t10_big'); SELECT pg_temp.my_advisory_tags('named'); COMMIT;
BEGIN; SELECT pg_advisory_xact_lock(9223372036854775807); SELECT pg_temp.my_advisory_tags('raw'); COMMIT;
SELECT how, classid, objid, objsubid, mode FROM tags ORDER BY classid, how;
SELECT count(DISTINCT (classid, objid, objsubid, mode)) AS distinct_tags, count(*) AS rows FROM tags;
TRUNCATE tags;

-- Session level likewise is pg_advisory_lock(key); shared is ShareLock.
SELECT concurrency.session_lock('t10_relay', shared => true);
SELECT pg_temp.my_advisory_tags('named');
SELECT concurrency.session_unlock('t10_relay', shared => true);
SELECT pg_advisory_lock_shared(8001);
SELECT pg_temp.my_advisory_tags('raw');
SELECT pg_advisory_unlock_shared(8001);
SELECT how, classid, objid, objsubid, mode FROM tags ORDER BY how;
TRUNCATE tags;

-- A resource lock: classid/objid = high/low half of the resource, objsubid =
-- the subsystem's slot. Extreme and negative resources included.
BEGIN;
SELECT concurrency.xact_lock('t10_relay', r) FROM unnest(ARRAY[0, 1, -1, 4294967296, -4294967296,
    9223372036854775807, -9223372036854775808]::bigint[]) r;
SELECT l.classid, l.objid, l.objsubid = s.slot AS objsubid_is_slot,
       (l.classid::bigint << 32) | l.objid::bigint AS resource
  FROM pg_locks l, concurrency.subsystem s
 WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid() AND s.name = 't10_relay'
 ORDER BY resource;
-- held_locks decodes them back, with the subsystem's name
SELECT subsystem, resource, mode, granted FROM concurrency.held_locks
 WHERE pid = pg_backend_pid() ORDER BY resource;
COMMIT;

-- try_xact_lock: true, and re-entrant within the transaction
BEGIN;
SELECT concurrency.try_xact_lock('t10_relay'), concurrency.try_xact_lock('t10_relay'),
       concurrency.try_xact_lock('t10_relay', 5, shared => true);
SELECT name, resource, level, mode, count FROM concurrency.my_locks ORDER BY name, resource NULLS FIRST;
COMMIT;
-- transaction locks are gone at commit
SELECT count(*) FROM concurrency.my_locks;
SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();

-- session locks are re-entrant: n locks need n unlocks; one more unlock
-- returns false with a WARNING
SELECT concurrency.session_lock('t10_relay');
SELECT concurrency.try_session_lock('t10_relay');
SELECT concurrency.session_lock('t10_relay', timeout => '1s');
SELECT name, resource, level, mode, count FROM concurrency.my_locks;
SELECT concurrency.session_unlock('t10_relay');
SELECT concurrency.session_unlock('t10_relay');
SELECT name, level, count FROM concurrency.my_locks;
SELECT concurrency.session_unlock('t10_relay');
SELECT concurrency.session_unlock('t10_relay');
SELECT count(*) FROM concurrency.my_locks;
-- a shared hold is not an exclusive one
SELECT concurrency.session_lock('t10_relay', 9, shared => true);
SELECT concurrency.session_unlock('t10_relay', 9);
SELECT concurrency.session_unlock('t10_relay', 9, shared => true);

-- session and transaction holds of the same lock are counted apart; the
-- transaction's go at commit, the session's stay
BEGIN;
SELECT concurrency.session_lock('t10_neg');
SELECT concurrency.xact_lock('t10_neg');
SELECT concurrency.xact_lock('t10_neg');
SELECT name, level, count FROM concurrency.my_locks ORDER BY level;
COMMIT;
SELECT name, level, count FROM concurrency.my_locks;
-- a raw pg_advisory_unlock_all() releases it behind our back: my_locks
-- follows the lock manager, and counting starts afresh
SELECT pg_advisory_unlock_all();
SELECT count(*) FROM concurrency.my_locks;
SELECT concurrency.session_lock('t10_neg');
SELECT name, level, count FROM concurrency.my_locks;
SELECT concurrency.session_unlock('t10_neg');

-- a rollback to savepoint releases the transaction locks taken after it, in
-- the lock manager and in my_locks alike; a released savepoint keeps them
BEGIN;
SELECT concurrency.xact_lock('t10_relay');
SAVEPOINT a;
SELECT concurrency.xact_lock('t10_relay');
SELECT concurrency.xact_lock('t10_relay', 1);
SELECT name, resource, count FROM concurrency.my_locks ORDER BY resource NULLS FIRST;
ROLLBACK TO SAVEPOINT a;
SELECT name, resource, count FROM concurrency.my_locks;
SELECT count(*) AS advisory_rows FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
SAVEPOINT b;
SELECT concurrency.xact_lock('t10_relay', 2);
RELEASE SAVEPOINT b;
SAVEPOINT c;
SELECT concurrency.xact_lock('t10_relay', 3);
ROLLBACK TO SAVEPOINT c;
SELECT name, resource, count FROM concurrency.my_locks ORDER BY resource NULLS FIRST;
-- a session lock taken in a subtransaction survives its rollback
SAVEPOINT d;
SELECT concurrency.session_lock('t10_relay', 4);
ROLLBACK TO SAVEPOINT d;
COMMIT;
SELECT name, resource, level, count FROM concurrency.my_locks;
SELECT concurrency.session_unlock('t10_relay', 4);

-- many distinct resources: counted one by one, and forgotten after the
-- transaction (the backend keeps only a few empty entries for reuse)
BEGIN;
SELECT count(concurrency.xact_lock('t10_relay', r)) FROM generate_series(1, 1000) r;
SAVEPOINT many;
SELECT count(concurrency.try_xact_lock('t10_relay', r)) FROM generate_series(501, 1500) r;
SELECT count(*), sum(count) FROM concurrency.my_locks;
ROLLBACK TO SAVEPOINT many;
SELECT count(*), sum(count) FROM concurrency.my_locks;
COMMIT;
SELECT count(*) FROM concurrency.my_locks;
SELECT count(concurrency.session_lock('t10_relay', r)) FROM generate_series(1, 200) r;
SELECT count(*), min(level), sum(count) FROM concurrency.my_locks;
SELECT bool_and(concurrency.session_unlock('t10_relay', r)) FROM generate_series(1, 200) r;
SELECT count(*) FROM concurrency.my_locks;

-- the ordered multi-lock takes every subsystem lock, duplicates once
BEGIN;
SELECT concurrency.xact_lock(ARRAY['t10_relay', 't10_neg', 't10_big', 't10_relay'], timeout => '1s');
SELECT name, resource, level, mode, count FROM concurrency.my_locks ORDER BY name;
COMMIT;
BEGIN;
SELECT concurrency.xact_lock('{}'::text[]);
SELECT count(*) FROM concurrency.my_locks;
COMMIT;
-- a one-dimensional array of any lower bound, or a multi-dimensional one, is just its elements
BEGIN;
SELECT concurrency.xact_lock('[5:6]={t10_relay,t10_neg}'::text[]);
SELECT concurrency.xact_lock('{{t10_big},{t10_pooled}}'::text[]);
SELECT name FROM concurrency.my_locks ORDER BY name;
COMMIT;

-- xact_only subsystems refuse session locks (42501); transaction locks are fine
SELECT concurrency.session_lock('t10_pooled');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.try_session_lock('t10_pooled', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
BEGIN;
SELECT concurrency.xact_lock('t10_pooled'), concurrency.try_xact_lock('t10_pooled', 1);
COMMIT;
-- unlocking stays possible (e.g. a lock taken before xact_only was set)
SELECT concurrency.session_unlock('t10_pooled');

-- unknown names: 42704 with a hint; invalid names: 22023; NULL: 22004
SELECT concurrency.xact_lock('t10_unknown');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.try_session_lock('t10_unknown', 5);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.session_unlock('t10_unknown');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.xact_lock('');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.try_xact_lock(repeat('x', 100000));
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.try_xact_lock(E'bad\x01name');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.xact_lock(NULL::text);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.try_xact_lock(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.session_lock(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.try_session_lock(NULL, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.session_unlock(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.xact_lock('t10_relay', shared => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.try_session_lock('t10_relay', shared => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.xact_lock(NULL::text[]);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.xact_lock(ARRAY['t10_relay', NULL]);
\echo :LAST_ERROR_SQLSTATE
-- an unknown name in the array fails before anything is taken
BEGIN;
SELECT concurrency.xact_lock(ARRAY['t10_relay', 't10_unknown']);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
-- a NULL resource is the subsystem lock itself (stricter, never nothing);
-- an untyped NULL needs a cast or the argument name, because of the
-- xact_lock(text[], interval) overload
BEGIN;
SELECT concurrency.xact_lock('t10_relay', NULL::bigint);
SELECT concurrency.try_xact_lock('t10_relay', resource => NULL);
SELECT name, resource FROM concurrency.my_locks;
COMMIT;

-- timeouts: negative is 22023; zero means "do not wait"; a free lock is
-- taken at once whatever the timeout (huge ones included)
SELECT concurrency.xact_lock('t10_relay', timeout => '-1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.xact_lock(ARRAY['t10_relay'], timeout => '-1 month');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.session_lock('t10_relay', timeout => '-0.001 ms');
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT concurrency.xact_lock('t10_relay', timeout => '0');
SELECT concurrency.xact_lock('t10_relay', 1, timeout => '1 microsecond');
SELECT concurrency.xact_lock('t10_relay', 2, timeout => '178000000 years');
SELECT concurrency.xact_lock(ARRAY['t10_neg', 't10_big'], timeout => '1 mon -29 days');
SELECT count(*) FROM concurrency.my_locks;
COMMIT;
-- the caller's lock_timeout is restored after a call with its own timeout
SET lock_timeout = '7s';
SELECT concurrency.session_lock('t10_relay', timeout => '1 ms');
SHOW lock_timeout;
SELECT concurrency.session_unlock('t10_relay');
RESET lock_timeout;

-- a subsystem unregistered while this backend has it cached is unknown at
-- the next call, and a new registration is seen at once
SELECT concurrency.try_xact_lock('t10_neg');
SELECT concurrency.unregister_subsystem('t10_neg');
SELECT concurrency.try_xact_lock('t10_neg');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.register_subsystem('t10_neg', 8010);
BEGIN;
SELECT concurrency.xact_lock('t10_neg');
SELECT objid FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
COMMIT;

-- held_locks: a session lock of an idle session is a suspected leak; ours,
-- seen from our own active query, is not
SELECT concurrency.session_lock('t10_relay', 77);
SELECT subsystem, resource, mode, granted, state, application IS NOT NULL AS has_application,
       since <= now() AS since_ok, suspect_leak
  FROM concurrency.held_locks WHERE pid = pg_backend_pid();
SELECT concurrency.session_unlock('t10_relay', 77);
-- a subsystem lock taken with the raw function is a named lock too
BEGIN;
SELECT pg_advisory_xact_lock(8001);
SELECT subsystem, resource, mode FROM concurrency.held_locks WHERE pid = pg_backend_pid();
COMMIT;

-- the many inputs above did not disturb the backend
SELECT 1 AS still_alive;

-- clean up
DROP FUNCTION pg_temp.my_advisory_tags(text);
SELECT concurrency.unregister_subsystem(name) FROM concurrency.subsystem WHERE name LIKE 't10_%' ORDER BY name;
