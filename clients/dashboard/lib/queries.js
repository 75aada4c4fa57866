'use strict';
// What the dashboard reads, as the role it logged in with. Everything comes
// from the extension's documented surface: concurrency.queue (settings,
// readable by everyone), the views queue_stats, lock_tree, lock_waits and
// lock_history, concurrency.queue_permission, and each queue's own table
// concurrency."q_<queue>" for the roles that hold read on it (read is
// mirrored as SELECT). Columns that later versions add (paused, progress,
// the schedules view) are found, not assumed: the page shows what exists.

const PAYLOAD_CHARS = 4000; // longer payloads are cut, and the page says so
const TASK_ROWS = 50; // per queue and list

// pg's own escaping; every identifier built into SQL goes through it
const { escapeIdentifier } = require('pg');

function queueTable(queue) {
  return `concurrency.${escapeIdentifier('q_' + queue)}`;
}

// Permission manage, as the queue functions decide it (docs/queue.md, "Who
// may do what"): the owner of the queue's table, anyone with the owner's
// privileges (superusers included), or a holder of manage directly, through
// a role it inherits, or through PUBLIC (grantee 0). It only decides whether
// the page offers the buttons; the functions themselves check again.
// may_select: the tasks can be listed (read is mirrored as SELECT on the
// table; concurrency_monitor gives the counts of every queue, not SELECT).
const QUEUES_SQL = `
SELECT q.*,
       c.oid AS relid,
       c.oid IS NOT NULL AND pg_catalog.has_table_privilege(c.oid, 'SELECT') AS may_select,
       c.oid IS NOT NULL AND (pg_catalog.pg_has_role(c.relowner, 'USAGE')
        OR EXISTS (SELECT FROM concurrency.queue_permission p
                    WHERE p.queue OPERATOR(pg_catalog.=) q.name
                      AND p.permission OPERATOR(pg_catalog.=) 'manage'
                      AND (p.grantee::pg_catalog.oid OPERATOR(pg_catalog.=) 0
                           OR pg_catalog.pg_has_role(p.grantee::pg_catalog.oid, 'USAGE')))) AS may_manage
  FROM concurrency.queue q
  LEFT JOIN pg_catalog.pg_class c
    ON c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(pg_catalog.format('concurrency.%I', 'q_' OPERATOR(pg_catalog.||) q.name))
 ORDER BY q.name`;

// queue_stats with what a throughput sample needs: the table's inserted
// tuples (pg_stat_get_tuples_inserted, as pg_stat_user_tables.n_tup_ins)
// and the clock of the sample.
const SAMPLE_SQL = `
SELECT s.*,
       c.oid AS relid,
       pg_catalog.pg_stat_get_tuples_inserted(c.oid) AS inserted,
       pg_catalog.clock_timestamp() AS sampled_at
  FROM concurrency.queue_stats s
  LEFT JOIN pg_catalog.pg_class c
    ON c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass(pg_catalog.format('concurrency.%I', 'q_' OPERATOR(pg_catalog.||) s.queue))`;

// Columns of the queue tables that not every version has.
const OPTIONAL_TASK_COLUMNS_SQL = `
SELECT attrelid::pg_catalog.int8 AS relid, attname::pg_catalog.text AS name
  FROM pg_catalog.pg_attribute
 WHERE attrelid OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.oid[]) AND attnum > 0 AND NOT attisdropped
   AND attname OPERATOR(pg_catalog.=) ANY ('{progress,lease_extended_to,steps,awaiting}'::pg_catalog.name[])`;

function payloadColumns() {
  return `pg_catalog.left(payload::pg_catalog.text, ${PAYLOAD_CHARS}) AS payload,
          pg_catalog.length(payload::pg_catalog.text) > ${PAYLOAD_CHARS} AS payload_cut`;
}

// Dead tasks, newest first (the table's partial index on state 'dead').
function deadTasksSql(queue) {
  return `SELECT id, state, attempt, priority, last_error, ${payloadColumns()}, enqueued_at, run_at, finished_at, worker
            FROM ${queueTable(queue)} WHERE state OPERATOR(pg_catalog.=) 'dead'
           ORDER BY id DESC LIMIT ${TASK_ROWS}`;
}

// Failed tasks waiting for their retry (scheduled, with an error), next due
// first (the partial index on state 'scheduled').
function retryingTasksSql(queue) {
  return `SELECT id, state, attempt, priority, last_error, ${payloadColumns()}, enqueued_at, run_at, finished_at, worker
            FROM ${queueTable(queue)} WHERE state OPERATOR(pg_catalog.=) 'scheduled' AND last_error IS NOT NULL
           ORDER BY run_at LIMIT ${TASK_ROWS}`;
}

// Running tasks, the lease that runs out first on top (the partial index on
// state 'leased'). The deadline is the one heartbeats moved, as task_status
// reports it.
function runningTasksSql(queue, columns) {
  const deadline = columns.has('lease_extended_to')
    ? 'COALESCE(lease_extended_to, lease_expires_at)'
    : 'lease_expires_at';
  const progress = columns.has('progress') ? 'progress::pg_catalog.text AS progress' : 'NULL::pg_catalog.text AS progress';
  return `SELECT id, attempt, priority, worker, last_error, ${payloadColumns()}, enqueued_at,
                 ${deadline} AS lease_expires_at, ${progress},
                 ${deadline} <= pg_catalog.clock_timestamp() AS expired
            FROM ${queueTable(queue)} WHERE state OPERATOR(pg_catalog.=) 'leased'
           ORDER BY lease_expires_at LIMIT ${TASK_ROWS}`;
}

// Durable workflows (0.4.0, where the table has steps and awaiting): tasks
// parked until an event (awaiting, with their timeout as run_at) and tasks
// sleeping (scheduled, with steps recorded, awaiting nothing), next due
// first, with how many steps they have recorded.
function workflowTasksSql(queue) {
  return `SELECT id, state, attempt, awaiting, run_at, enqueued_at,
                 CASE WHEN awaiting IS NOT NULL THEN 'awaiting' ELSE 'sleeping' END AS waits_for,
                 (SELECT pg_catalog.count(*) FROM pg_catalog.jsonb_object_keys(steps)) AS steps,
                 ${payloadColumns()}
            FROM ${queueTable(queue)}
           WHERE state OPERATOR(pg_catalog.=) 'scheduled' AND (awaiting IS NOT NULL OR steps IS NOT NULL)
           ORDER BY run_at LIMIT ${TASK_ROWS}`;
}
const TASK_STEPS_SQL = `SELECT step, result::pg_catalog.text AS result, recorded_at FROM concurrency.task_steps($1, $2::pg_catalog.int8)`;
const COUNTERS_EXIST_SQL = `SELECT pg_catalog.to_regclass('concurrency.counters') IS NOT NULL AS present`;
const COUNTERS_SQL = `SELECT name, value::pg_catalog.text AS value, slots, min_value::pg_catalog.text AS min_value,
       max_value::pg_catalog.text AS max_value FROM concurrency.counters ORDER BY name`;

const SCHEDULES_EXIST_SQL = `SELECT pg_catalog.to_regclass('concurrency.schedules') IS NOT NULL AS present`;
const SCHEDULES_SQL = `SELECT * FROM concurrency.schedules`;

const LOCK_TREE_SQL = `SELECT * FROM concurrency.lock_tree`;
const LOCK_WAITS_SQL = `SELECT * FROM concurrency.lock_waits`;
const LOCK_HISTORY_SQL = `
SELECT * FROM concurrency.lock_history
 WHERE ended_at IS NULL OR ended_at > pg_catalog.now() - interval '1 hour'`;

const WHO_SQL = `
SELECT CURRENT_USER::pg_catalog.text AS role,
       pg_catalog.current_database()::pg_catalog.text AS database,
       pg_catalog.current_setting('server_version') AS server_version,
       (SELECT extversion FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'concurrency_ext') AS extension_version`;

const ACTIONS = {
  retry: 'SELECT concurrency.retry_dead($1, $2::pg_catalog.int8[]) AS count',
  cancel: 'SELECT concurrency.cancel($1, $2::pg_catalog.int8[]) AS count',
};
// on a whole queue (0.3.0's pause_queue): whether the flag changed
const QUEUE_ACTIONS = {
  pause: 'SELECT concurrency.pause_queue($1) AS changed',
  resume: 'SELECT concurrency.resume_queue($1) AS changed',
};

module.exports = {
  QUEUE_ACTIONS,
  PAYLOAD_CHARS,
  TASK_ROWS,
  queueTable,
  QUEUES_SQL,
  SAMPLE_SQL,
  OPTIONAL_TASK_COLUMNS_SQL,
  deadTasksSql,
  retryingTasksSql,
  runningTasksSql,
  workflowTasksSql,
  TASK_STEPS_SQL,
  COUNTERS_EXIST_SQL,
  COUNTERS_SQL,
  SCHEDULES_EXIST_SQL,
  SCHEDULES_SQL,
  LOCK_TREE_SQL,
  LOCK_WAITS_SQL,
  LOCK_HISTORY_SQL,
  WHO_SQL,
  ACTIONS,
};
