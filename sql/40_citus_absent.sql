-- Without Citus (this server does not load it), the Citus awareness says so:
-- the node role is none, every diagnostic covers this node, and
-- cluster_lock_waits shows this node's waits only.
SELECT concurrency.citus_node_role();
SELECT diagnostic, covers, note FROM concurrency.diagnostics_scope ORDER BY diagnostic;
SELECT count(*) AS edges FROM concurrency.cluster_lock_waits WHERE waiting_pid IN (SELECT pid FROM pg_stat_activity WHERE datname = current_database());
SELECT attname, format_type(atttypid, atttypmod)
  FROM pg_attribute WHERE attrelid = 'concurrency.cluster_lock_waits'::regclass AND attnum > 0 ORDER BY attnum;
-- named locks work as on any server
SELECT concurrency.register_subsystem('citus_absent', 9191);
BEGIN;
SELECT concurrency.xact_lock('citus_absent');
SELECT name, level FROM concurrency.my_locks;
COMMIT;
SELECT concurrency.unregister_subsystem('citus_absent');
-- distributed queues need a Citus coordinator; a local queue is not one
SELECT concurrency.create_queue('citus_absent_q');
\set VERBOSITY default
\set SHOW_CONTEXT never
SELECT concurrency.distribute_queue('citus_absent_q');
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency_internal.distributed_rebalance('citus_absent_q', 1, now());
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.distribute_queue('no_such_queue');
\echo :LAST_ERROR_SQLSTATE
-- create_queue(…, distributed => true) is refused before it creates anything,
-- for a new queue and for an existing one; NULL is not a choice
SELECT concurrency.create_queue('citus_absent_new', distributed => true);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.create_queue('citus_absent_q', distributed => true);
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency.create_queue('citus_absent_new', distributed => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT name FROM concurrency.queue WHERE name LIKE 'citus_absent%' ORDER BY name;
SELECT to_regclass('concurrency.q_citus_absent_new') AS new_table;
-- distributed => false is the default: a local queue
SELECT concurrency.create_queue('citus_absent_q', distributed => false);
\set VERBOSITY terse
SELECT count(*) FROM concurrency.distributed_queue;
-- the queue functions work on it as on any local queue
SELECT concurrency.enqueue('citus_absent_q', '{"a": 1}') > 0 AS enqueued;
SELECT payload FROM concurrency.dequeue('citus_absent_q');
SELECT ready, leased FROM concurrency.queue_stats WHERE queue = 'citus_absent_q';
SELECT concurrency.drop_queue('citus_absent_q');
-- The SQL helpers of distributed queues are internal: schema
-- concurrency holds the public API only (\df concurrency.* lists no helper),
-- and PUBLIC cannot use schema concurrency_internal.
SELECT p.proname FROM pg_proc p
 WHERE p.pronamespace = 'concurrency'::regnamespace AND p.proname ~ '^distributed'
 ORDER BY 1;
SELECT count(*) >= 6 AS helpers_inside FROM pg_proc p
 WHERE p.pronamespace = 'concurrency_internal'::regnamespace AND p.proname ~ '^distributed_';
SELECT has_schema_privilege('public', 'concurrency_internal', 'USAGE') AS public_usage;
CREATE ROLE citus_absent_plain;
SET ROLE citus_absent_plain;
SELECT concurrency_internal.distributed_rebalance('citus_absent_q', 1, now());
\echo :LAST_ERROR_SQLSTATE
SELECT concurrency_internal.distributed_purge_chunk('citus_absent_q', 1, 0);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP ROLE citus_absent_plain;
