-- concurrency.named_lock: the one decoder of the advisory-lock tags of named
-- locks (src/locks/lock_keys.hpp), which held_locks and the diagnostics use.
SELECT concurrency.register_subsystem('t11_billing', 11000001);
-- a slot above 32767, which pg_locks shows as a negative objsubid
INSERT INTO concurrency.subsystem (name, key, slot) VALUES ('t11_high', 11000002, 40000);

-- the subsystem lock: classid/objid are the key's halves, objsubid 1
SELECT * FROM concurrency.named_lock(0, 11000001, 1::int2);
-- a resource lock: the slot, and the resource in classid/objid
SELECT n.* FROM concurrency.subsystem s, concurrency.named_lock(4294967295, 4294967254, s.slot::int2) n
 WHERE s.name = 't11_billing';
-- slot 40000 arrives as the smallint -25536
SELECT * FROM concurrency.named_lock(0, 7, (40000 - 65536)::int2);
-- no row: an unregistered key, pg_advisory_lock(int, int), a free slot, NULLs
SELECT count(*) FROM concurrency.named_lock(0, 11000003, 1::int2);
SELECT count(*) FROM concurrency.named_lock(0, 11000001, 2::int2);
SELECT count(*) FROM concurrency.named_lock(0, 11000001, (-1)::int2); -- slot 65535
SELECT count(*) FROM concurrency.named_lock(NULL, 1, 1::int2);

-- the locks a session takes are decoded back to what it asked for
BEGIN;
SELECT concurrency.xact_lock('t11_billing');
SELECT concurrency.xact_lock('t11_billing', -42);
SELECT concurrency.xact_lock('t11_high', 9000000000);
SELECT n.subsystem, n.resource, l.mode
  FROM pg_locks l, concurrency.named_lock(l.classid, l.objid, l.objsubid) n
 WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid()
 ORDER BY 1, 2 NULLS FIRST;
SELECT subsystem, resource, mode FROM concurrency.held_locks
 WHERE pid = pg_backend_pid() ORDER BY 1, 2 NULLS FIRST;
COMMIT;

-- an object lock of a class that getObjectDescription does not know is shown
-- with its raw identifiers (no error to swallow)
SELECT concurrency.locked_object(jsonb_populate_record(NULL::pg_locks, jsonb_build_object(
         'locktype', 'object', 'database', 0, 'classid', 'pg_statistic'::regclass::oid,
         'objid', 1, 'objsubid', 0))) AS unknown_class;

SELECT concurrency.unregister_subsystem('t11_billing'), concurrency.unregister_subsystem('t11_high');
