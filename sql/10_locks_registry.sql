-- Named locks: the subsystem registry (register_subsystem, unregister_subsystem),
-- its rules and errors, who may change it, and that pg_dump keeps it.

-- register: a new name gets its key and the lowest free slot (16 upwards;
-- computed here, in case other suites left subsystems registered)
CREATE FUNCTION pg_temp.lowest_free_slot() RETURNS integer LANGUAGE sql AS $$
  SELECT min(s) FROM generate_series(16, 65535) s
   WHERE NOT EXISTS (SELECT FROM concurrency.subsystem WHERE slot = s) $$;
SELECT pg_temp.lowest_free_slot() AS expected_slot \gset
SELECT concurrency.register_subsystem('t10_relay', 7001, 'outbox relay');
SELECT slot = :expected_slot AS lowest_free FROM concurrency.subsystem WHERE name = 't10_relay';
SELECT pg_temp.lowest_free_slot() AS expected_slot \gset
SELECT concurrency.register_subsystem('t10_report', -7002);
SELECT slot = :expected_slot AS lowest_free FROM concurrency.subsystem WHERE name = 't10_report';
SELECT name, key, description, xact_only, registered_at <= now() AS stamped, registered_by = current_user AS by_me
  FROM concurrency.subsystem WHERE name LIKE 't10_%' ORDER BY slot;

-- the same name with the same key again: no error (migrations re-run); the
-- description is updated when given, kept when not; xact_only likewise
SELECT concurrency.register_subsystem('t10_relay', 7001);
SELECT concurrency.register_subsystem('t10_relay', 7001, 'relays the outbox', xact_only => true);
SELECT concurrency.register_subsystem('t10_relay', 7001);
SELECT name, key, description, xact_only FROM concurrency.subsystem WHERE name = 't10_relay';
SELECT concurrency.register_subsystem('t10_relay', 7001, xact_only => false);
SELECT name, description, xact_only FROM concurrency.subsystem WHERE name = 't10_relay';

-- the same name with another key, or the key of another name: 23505 naming the owner
SELECT concurrency.register_subsystem('t10_relay', 7999);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.register_subsystem('t10_other', -7002);
\echo :LAST_ERROR_SQLSTATE
-- and nothing was written by the failed calls
SELECT name, key FROM concurrency.subsystem WHERE name LIKE 't10_%' ORDER BY slot;

-- NULL where a value is required: 22004 (nothing is registered)
SELECT concurrency.register_subsystem(NULL, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.register_subsystem('t10_nokey', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.unregister_subsystem(NULL);
\echo :LAST_ERROR_SQLSTATE

-- name rules: 1–63 bytes, no whitespace or control characters: 22023
SELECT concurrency.register_subsystem('', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.register_subsystem(repeat('x', 64), 1);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.register_subsystem('two words', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.register_subsystem(E'tab\there', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.register_subsystem(E'nl\n', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.register_subsystem(U&'nbsp\00A0x', 1);
\echo :LAST_ERROR_SQLSTATE
-- 63 bytes (multibyte characters count in bytes) is fine, and so are quotes
-- and SQL: a hostile name is just a name
SELECT concurrency.register_subsystem(repeat('é', 31) || 'x', 7003);
SELECT concurrency.register_subsystem('t10_x";DROP/**/TABLE/**/concurrency.subsystem;--', 7004);
SELECT octet_length(name), key FROM concurrency.subsystem WHERE key IN (7003, 7004) ORDER BY key;
SELECT concurrency.unregister_subsystem(repeat('é', 31) || 'x');
SELECT concurrency.unregister_subsystem('t10_x";DROP/**/TABLE/**/concurrency.subsystem;--');

-- any bigint is a key, the extremes included
SELECT concurrency.register_subsystem('t10_min', -9223372036854775808);
SELECT concurrency.register_subsystem('t10_max', 9223372036854775807);
SELECT concurrency.register_subsystem('t10_zero', 0);
SELECT name, key FROM concurrency.subsystem WHERE name IN ('t10_min', 't10_max', 't10_zero') ORDER BY key;

-- unregister: true once, then false
SELECT concurrency.unregister_subsystem('t10_zero');
SELECT concurrency.unregister_subsystem('t10_zero');
SELECT concurrency.unregister_subsystem('never_registered');

-- a freed slot is given out again (the lowest free slot, so the freed one
-- unless another suite left a lower gap)
SELECT slot AS freed_slot FROM concurrency.subsystem WHERE name = 't10_min' \gset
SELECT concurrency.unregister_subsystem('t10_min');
SELECT pg_temp.lowest_free_slot() <= :freed_slot AS freed_slot_is_free;
SELECT pg_temp.lowest_free_slot() AS expected_slot \gset
SELECT concurrency.register_subsystem('t10_refill', 7005);
SELECT slot = :expected_slot AS got_lowest_free FROM concurrency.subsystem WHERE name = 't10_refill';

-- when every slot is taken, registering fails with 54000 and writes nothing
BEGIN;
INSERT INTO concurrency.subsystem (name, key, slot)
  SELECT 't10_fill_' || s, 100000000 + s, s FROM generate_series(16, 65535) s
   WHERE s NOT IN (SELECT slot FROM concurrency.subsystem);
SAVEPOINT all_taken;
SELECT concurrency.register_subsystem('t10_one_too_many', 7006);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK TO SAVEPOINT all_taken;
SELECT count(*) FROM concurrency.subsystem WHERE name = 't10_one_too_many';
ROLLBACK;

-- a registration rolled back with its transaction leaves nothing behind, and
-- the name cache does not remember it
BEGIN;
SELECT concurrency.register_subsystem('t10_ghost', 7007);
SELECT concurrency.try_xact_lock('t10_ghost');
ROLLBACK;
SELECT count(*) FROM concurrency.subsystem WHERE name = 't10_ghost';
SELECT concurrency.try_xact_lock('t10_ghost');
\echo :LAST_ERROR_SQLSTATE

-- the registry is extension configuration: pg_dump dumps its rows
SELECT 'concurrency.subsystem'::regclass = ANY (extconfig) AS dumped_by_pg_dump
  FROM pg_extension WHERE extname = 'concurrency_ext';

-- privileges: registration is for the extension owner and superusers; any
-- role may read the registry and take locks
CREATE ROLE t10_plain;
SET ROLE t10_plain;
SELECT concurrency.register_subsystem('t10_mine', 7008);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.unregister_subsystem('t10_relay');
\echo :LAST_ERROR_SQLSTATE
INSERT INTO concurrency.subsystem (name, key, slot) VALUES ('t10_mine', 7008, 999);
\echo :LAST_ERROR_SQLSTATE
SELECT name, key FROM concurrency.subsystem WHERE name = 't10_relay';
BEGIN;
SELECT concurrency.xact_lock('t10_relay');
SELECT concurrency.try_xact_lock('t10_report', 5);
SELECT subsystem, resource, mode, granted, pid = pg_backend_pid() AS mine FROM concurrency.held_locks
 WHERE subsystem LIKE 't10_%' ORDER BY subsystem;
SELECT name, resource, level, mode, count FROM concurrency.my_locks ORDER BY name;
COMMIT;
SELECT concurrency.session_lock('t10_relay');
SELECT concurrency.session_unlock('t10_relay');
RESET ROLE;
-- the admin functions are not executable by PUBLIC
SELECT p.oid::regprocedure, has_function_privilege('public', p.oid, 'EXECUTE') AS public_may_execute
  FROM pg_proc p WHERE p.pronamespace IN ('concurrency'::regnamespace, 'concurrency_internal'::regnamespace)
   AND p.proname IN ('register_subsystem', 'unregister_subsystem', 'subsystem_changed', 'xact_lock', 'try_xact_lock',
                     'session_lock', 'try_session_lock', 'session_unlock', 'my_named_locks')
 ORDER BY p.oid::regprocedure::text COLLATE "C";
DROP ROLE t10_plain;

-- the trigger turns direct edits of the table into cache invalidations too:
-- after an UPDATE of the key the next lock uses the new key
BEGIN;
SELECT concurrency.xact_lock('t10_report');
UPDATE concurrency.subsystem SET key = 7010 WHERE name = 't10_report';
SELECT concurrency.xact_lock('t10_report');
SELECT classid, objid, objsubid, mode FROM pg_locks
 WHERE locktype = 'advisory' AND pid = pg_backend_pid() ORDER BY objid;
ROLLBACK;
-- and after the rollback the old key is back in use
BEGIN;
SELECT concurrency.xact_lock('t10_report');
SELECT classid, objid, objsubid FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid();
ROLLBACK;
-- TRUNCATE too (in a transaction that is rolled back)
BEGIN;
SELECT concurrency.try_xact_lock('t10_relay');
TRUNCATE concurrency.subsystem;
SAVEPOINT gone;
SELECT concurrency.try_xact_lock('t10_relay');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT concurrency.try_xact_lock('t10_relay');

-- the trigger function is only a trigger
SELECT concurrency_internal.subsystem_changed();
\echo :LAST_ERROR_SQLSTATE

-- clean up
DROP FUNCTION pg_temp.lowest_free_slot();
SELECT concurrency.unregister_subsystem(name) FROM concurrency.subsystem WHERE name LIKE 't10_%' ORDER BY name;
