-- Lock diagnostics in one session: the SQL surface, readable lock names, and
-- who may read what. Waits need several sessions: see test/isolation/specs/diag_*.spec.

-- the views' columns, in order
SELECT attname, format_type(atttypid, atttypmod)
  FROM pg_attribute WHERE attrelid = 'concurrency.lock_waits'::regclass AND attnum > 0 ORDER BY attnum;
SELECT attname, format_type(atttypid, atttypmod)
  FROM pg_attribute WHERE attrelid = 'concurrency.lock_tree'::regclass AND attnum > 0 ORDER BY attnum;

-- nobody waits in this database: no edge, no tree (other databases of the
-- server may be busy: leave them out)
SELECT count(*) AS edges FROM concurrency.lock_waits WHERE waiting_pid IN (SELECT pid FROM pg_stat_activity WHERE datname = current_database());
SELECT count(*) AS sessions FROM concurrency.lock_tree WHERE pid IN (SELECT pid FROM pg_stat_activity WHERE datname = current_database());
SELECT count(*) AS raw_edges FROM concurrency.lock_wait_edges() WHERE waiting_pid IN (SELECT pid FROM pg_stat_activity WHERE datname = current_database());
SELECT count(*) AS raw_nodes FROM concurrency.lock_tree_nodes() WHERE pid IN (SELECT pid FROM pg_stat_activity WHERE datname = current_database());

-- locked_object: what a pg_locks row locks, in words
CREATE SCHEMA "Diag ""Schema""";
CREATE TABLE "Diag ""Schema""".accounts (id int PRIMARY KEY);
BEGIN;
LOCK TABLE "Diag ""Schema""".accounts IN SHARE MODE;
SELECT mode, concurrency.locked_object(l) FROM pg_locks l
 WHERE pid = pg_backend_pid() AND locktype = 'relation' AND relation = '"Diag ""Schema""".accounts'::regclass;
SELECT concurrency.locked_object(l) = 'virtual transaction ' || virtualxid AS vxid_readable
  FROM pg_locks l WHERE pid = pg_backend_pid() AND locktype = 'virtualxid';
SELECT pg_current_xact_id() IS NOT NULL AS has_xid;
SELECT concurrency.locked_object(l) = 'transaction ' || transactionid AS xid_readable
  FROM pg_locks l WHERE pid = pg_backend_pid() AND locktype = 'transactionid';
COMMIT;

-- rows that pg_locks shows while somebody waits, built by hand
SELECT concurrency.locked_object(jsonb_populate_record(NULL::pg_locks, jsonb_build_object(
         'locktype', 'tuple', 'database', (SELECT oid FROM pg_database WHERE datname = current_database()),
         'relation', '"Diag ""Schema""".accounts'::regclass::oid, 'page', 3, 'tuple', 7))) AS tuple_lock;
SELECT concurrency.locked_object(jsonb_populate_record(NULL::pg_locks, jsonb_build_object(
         'locktype', 'page', 'database', (SELECT oid FROM pg_database WHERE datname = current_database()),
         'relation', '"Diag ""Schema""".accounts'::regclass::oid, 'page', 3))) AS page_lock;
SELECT concurrency.locked_object(jsonb_populate_record(NULL::pg_locks, jsonb_build_object(
         'locktype', 'extend', 'database', (SELECT oid FROM pg_database WHERE datname = current_database()),
         'relation', '"Diag ""Schema""".accounts'::regclass::oid))) AS extend_lock;
-- a shared catalog (database 0) and a relation that does not exist
SELECT concurrency.locked_object(jsonb_populate_record(NULL::pg_locks, jsonb_build_object(
         'locktype', 'relation', 'database', 0, 'relation', 'pg_database'::regclass::oid))) AS shared;
SELECT concurrency.locked_object(jsonb_populate_record(NULL::pg_locks, jsonb_build_object(
         'locktype', 'relation', 'database', (SELECT oid FROM pg_database WHERE datname = current_database()),
         'relation', 4000000000::oid))) AS missing;
-- a relation of another database is not looked up in this one's catalogs
SELECT concurrency.locked_object(jsonb_populate_record(NULL::pg_locks, jsonb_build_object(
         'locktype', 'relation', 'database', (SELECT oid FROM pg_database WHERE datname = 'template1'),
         'relation', 1259))) AS other_database;
SELECT concurrency.locked_object(jsonb_populate_record(NULL::pg_locks, jsonb_build_object(
         'locktype', 'object', 'database', 0, 'classid', 'pg_database'::regclass::oid,
         'objid', (SELECT oid FROM pg_database WHERE datname = 'template1'), 'objsubid', 0))) AS object_lock;
SELECT concurrency.locked_object(jsonb_populate_record(NULL::pg_locks, jsonb_build_object(
         'locktype', 'spectoken', 'database', 1234, 'classid', 5, 'objid', 0, 'objsubid', 0))) AS spectoken;
SELECT concurrency.locked_object(jsonb_populate_record(NULL::pg_locks, jsonb_build_object(
         'locktype', 'frozenid', 'database', (SELECT oid FROM pg_database WHERE datname = 'template1')))) AS frozenid;
-- unknown lock types and NULL give NULL
SELECT concurrency.locked_object(jsonb_populate_record(NULL::pg_locks, '{"locktype": "no such type"}')) IS NULL AS unknown;
SELECT concurrency.locked_object(NULL) IS NULL AS null_row;

-- advisory locks: registered subsystems by name, everything else by raw key
INSERT INTO concurrency.subsystem (name, key, slot) VALUES ('diag_relay', 4242, 16017), ('diag_billing', -2, 16018);
SELECT pg_advisory_lock(4242), pg_advisory_lock(-2), pg_advisory_lock(77), pg_advisory_lock(-1, 5);
SELECT concurrency.locked_object(l) FROM pg_locks l
 WHERE pid = pg_backend_pid() AND locktype = 'advisory' ORDER BY objsubid, classid, objid;
SELECT pg_advisory_unlock_all();
-- resource locks carry the subsystem's slot in objsubid and the resource in classid << 32 | objid
SELECT concurrency.locked_object(jsonb_populate_record(NULL::pg_locks, jsonb_build_object(
         'locktype', 'advisory', 'database', (SELECT oid FROM pg_database WHERE datname = current_database()),
         'classid', 4294967295, 'objid', 4294967295, 'objsubid', 16018))) AS resource_lock;
SELECT concurrency.locked_object(jsonb_populate_record(NULL::pg_locks, jsonb_build_object(
         'locktype', 'advisory', 'database', (SELECT oid FROM pg_database WHERE datname = current_database()),
         'classid', 0, 'objid', 99, 'objsubid', 16019))) AS unregistered_slot;
-- the registry belongs to this database: another database's advisory lock stays raw
SELECT concurrency.locked_object(jsonb_populate_record(NULL::pg_locks, jsonb_build_object(
         'locktype', 'advisory', 'database', (SELECT oid FROM pg_database WHERE datname = 'template1'),
         'classid', 0, 'objid', 4242, 'objsubid', 1))) AS other_database_advisory;
DELETE FROM concurrency.subsystem WHERE name IN ('diag_relay', 'diag_billing');

-- any role may read the views and call the functions, as with pg_locks
CREATE ROLE regress_diag_nobody;
SET ROLE regress_diag_nobody;
SELECT count(*) AS edges FROM concurrency.lock_waits WHERE waiting_pid IN (SELECT pid FROM pg_stat_activity WHERE datname = current_database());
SELECT count(*) AS sessions FROM concurrency.lock_tree WHERE pid IN (SELECT pid FROM pg_stat_activity WHERE datname = current_database());
SELECT count(*) >= 0 AS readable FROM pg_locks l WHERE concurrency.locked_object(l) IS NOT NULL;
RESET ROLE;
DROP ROLE regress_diag_nobody;

DROP SCHEMA "Diag ""Schema""" CASCADE;
