'use strict';
// concurrency-ext doctor: the questions an operator asks when a queue is
// slow or stuck, each one query. A finding is { check, severity, message,
// ...details }: severity "warning" is a problem (exit code 1), "info" is
// worth knowing and nothing to fix. A check whose query fails is reported
// as "check_failed" and the others still run (exit code 3).

// Dead rows of a queue table that count as bloat: at least this many, and
// more than its live rows (autovacuum would have run long before).
const BLOAT_MIN_DEAD = 10000;
// A queue table's indexes count as bloated when they are over this size and
// over four times what their live rows could fill (every index holding
// every live row at 64 bytes an entry, plus two pages each).
const INDEX_BLOAT_MIN_BYTES = 8 * 1024 * 1024;
const INDEX_ENTRY_BYTES = 64;
// A replication slot whose horizon is this many transactions old pins it
// even while it is active.
const SLOT_MAX_XID_AGE = 1000000;

const mb = (bytes) => `${(bytes / 1024 / 1024).toFixed(1)} MB`;
const secs = (s) => (s >= 120 ? `${Math.round(s / 60)} min` : `${s.toFixed(1)} s`);

const CHECKS = [
  {
    name: 'preload',
    async run(s) {
      const [{ libs }] = await s.rows(`SELECT pg_catalog.current_setting('shared_preload_libraries') AS libs`);
      const preloaded = libs.split(',').map((l) => l.trim().replace(/^"|"$/g, '').replace(/^\$libdir\//, ''))
        .some((l) => l === 'concurrency_ext' || l === 'concurrency_ext.so');
      if (preloaded) return [];
      return [{
        check: 'preload', severity: 'info', shared_preload_libraries: libs,
        message: "concurrency_ext is not in shared_preload_libraries: schedules run only when a worker dequeues, "
          + 'waiting dequeues poll instead of being woken at commit, and there is no lock history '
          + "(add shared_preload_libraries = 'concurrency_ext' and restart)",
      }];
    },
  },
  {
    name: 'settings',
    async run(s) {
      const rows = await s.rows(`SELECT name, setting FROM pg_catalog.pg_settings
                                  WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes')`);
      const setting = Object.fromEntries(rows.map((r) => [r.name, r.setting]));
      const out = [];
      if (setting.fsync === 'off') {
        out.push({ check: 'fsync', severity: 'warning', setting: 'off',
          message: 'fsync is off: a crash of the machine can corrupt the database and lose committed tasks' });
      }
      if (setting.synchronous_commit === 'off') {
        out.push({ check: 'synchronous_commit', severity: 'warning', setting: 'off',
          message: 'synchronous_commit is off: a crash loses the last commits (enqueued tasks vanish, '
            + 'completed ones run again)' });
      }
      if (setting.full_page_writes === 'off') {
        out.push({ check: 'full_page_writes', severity: 'warning', setting: 'off',
          message: 'full_page_writes is off: a crash can leave torn pages' });
      }
      return out;
    },
  },
  {
    name: 'long_transaction',
    async run(s, o) {
      const rows = await s.rows(`
        SELECT pid, datname, usename, application_name, state, backend_xid::text AS xid,
               backend_xmin::text AS xmin, pg_catalog.age(backend_xmin) AS xmin_age,
               extract(epoch FROM pg_catalog.clock_timestamp() - xact_start)::float8 AS xact_seconds,
               pg_catalog.left(query, 200) AS query
          FROM pg_catalog.pg_stat_activity
         WHERE pid <> pg_catalog.pg_backend_pid()
           AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
           AND xact_start < pg_catalog.clock_timestamp() - pg_catalog.make_interval(secs => $1)
         ORDER BY xact_start`, [o.xactAge]);
      return rows.map((r) => ({
        check: 'long_transaction', severity: 'warning', ...r,
        message: `session ${r.pid} (${r.usename ?? '?'}${r.application_name ? `, ${r.application_name}` : ''}, `
          + `${r.state ?? '?'}) has had a transaction open for ${secs(r.xact_seconds)}: vacuum cannot remove `
          + 'the dead rows of queue tables meanwhile, so claims slow down (end it, or '
          + `SELECT pg_terminate_backend(${r.pid}))`,
      }));
    },
  },
  {
    name: 'prepared_transaction',
    async run(s, o) {
      const rows = await s.rows(`
        SELECT gid, owner, database, transaction::text AS xid, pg_catalog.age(transaction) AS xid_age,
               extract(epoch FROM pg_catalog.clock_timestamp() - prepared)::float8 AS prepared_seconds
          FROM pg_catalog.pg_prepared_xacts
         WHERE prepared < pg_catalog.clock_timestamp() - pg_catalog.make_interval(secs => $1)
         ORDER BY prepared`, [o.xactAge]);
      return rows.map((r) => ({
        check: 'prepared_transaction', severity: 'warning', ...r,
        message: `prepared transaction '${r.gid}' (database ${r.database}) has been waiting for COMMIT PREPARED `
          + `or ROLLBACK PREPARED for ${secs(r.prepared_seconds)}: it holds its locks and the xmin horizon`,
      }));
    },
  },
  {
    name: 'replication_slot',
    async run(s) {
      const rows = await s.rows(`
        SELECT slot_name, slot_type, database, active,
               pg_catalog.age(xmin) AS xmin_age, pg_catalog.age(catalog_xmin) AS catalog_xmin_age
          FROM pg_catalog.pg_replication_slots
         WHERE (xmin IS NOT NULL OR catalog_xmin IS NOT NULL)
           AND (NOT active OR GREATEST(pg_catalog.age(xmin), pg_catalog.age(catalog_xmin)) > $1)
         ORDER BY slot_name`, [SLOT_MAX_XID_AGE]);
      return rows.map((r) => ({
        check: 'replication_slot', severity: 'warning', ...r,
        message: `replication slot ${r.slot_name} (${r.active ? 'active' : 'inactive'}) holds the xmin horizon `
          + `${Math.max(r.xmin_age ?? 0, r.catalog_xmin_age ?? 0)} transactions back: vacuum cannot clean `
          + 'queue tables behind it (drop the slot if nothing consumes it)',
      }));
    },
  },
  {
    name: 'bloat',
    extension: true,
    async run(s) {
      const rows = await s.rows(`
        SELECT q.name AS queue, c.oid::regclass::text AS table_name,
               COALESCE(t.n_live_tup, 0) AS live_rows, COALESCE(t.n_dead_tup, 0) AS dead_rows,
               GREATEST(t.last_vacuum, t.last_autovacuum) AS last_vacuum,
               pg_catalog.pg_relation_size(c.oid) AS table_bytes,
               pg_catalog.pg_indexes_size(c.oid) AS index_bytes,
               (SELECT pg_catalog.count(*) FROM pg_catalog.pg_index i WHERE i.indrelid = c.oid) AS indexes
          FROM concurrency.queue q
          JOIN pg_catalog.pg_class c
            ON c.relnamespace = 'concurrency'::pg_catalog.regnamespace AND c.relname = 'q_' || q.name
          LEFT JOIN pg_catalog.pg_stat_all_tables t ON t.relid = c.oid
         ORDER BY q.name`);
      const out = [];
      for (const r of rows) {
        const live = Number(r.live_rows);
        const dead = Number(r.dead_rows);
        const tableBytes = Number(r.table_bytes);
        const indexBytes = Number(r.index_bytes);
        const indexes = Number(r.indexes);
        if (dead >= BLOAT_MIN_DEAD && dead > live) {
          out.push({ check: 'table_bloat', severity: 'warning', queue: r.queue, table: r.table_name,
            live_rows: live, dead_rows: dead, table_bytes: tableBytes, last_vacuum: r.last_vacuum,
            message: `queue "${r.queue}": ${dead} dead rows against ${live} live in ${r.table_name} (${mb(tableBytes)}): `
              + 'vacuum is not keeping up (a long transaction, autovacuum off or behind); claims scan them' });
        }
        const expected = indexes * (2 * 8192) + live * indexes * INDEX_ENTRY_BYTES;
        if (indexBytes > INDEX_BLOAT_MIN_BYTES && indexBytes > 4 * expected) {
          out.push({ check: 'index_bloat', severity: 'warning', queue: r.queue, table: r.table_name,
            live_rows: live, index_bytes: indexBytes, estimated_bytes: expected,
            message: `queue "${r.queue}": the indexes of ${r.table_name} take ${mb(indexBytes)} for ${live} live rows `
              + `(about ${mb(expected)} would do): REINDEX TABLE CONCURRENTLY ${r.table_name}` });
        }
      }
      return out;
    },
  },
  {
    name: 'expired_leases',
    extension: true,
    async run(s) {
      const rows = await s.rows(`SELECT queue, expired, paused FROM concurrency.queue_stats
                                  WHERE expired > 0 ORDER BY queue`);
      return rows.map((r) => ({
        check: 'expired_leases', severity: 'warning', queue: r.queue, tasks: Number(r.expired), paused: r.paused,
        message: `queue "${r.queue}": ${r.expired} task(s) leased past their lease, not heartbeated: their workers `
          + 'died or hang; the next dequeue of the queue reclaims them'
          + (r.paused ? ' (the queue is paused: resume it)' : ' (are any workers running?)'),
      }));
    },
  },
  {
    name: 'schedules',
    extension: true,
    async run(s, o) {
      const rows = await s.rows(`
        SELECT s.name, s.queue, s.spec, s.enabled, s.next_run_at,
               extract(epoch FROM pg_catalog.clock_timestamp() - s.next_run_at)::float8 AS behind_seconds
          FROM concurrency.schedules s
          JOIN concurrency.queue q ON q.name = s.queue
         WHERE NOT s.enabled
            OR (NOT q.paused AND s.next_run_at < pg_catalog.clock_timestamp() - pg_catalog.make_interval(secs => $1))
         ORDER BY s.name`, [o.scheduleLag]);
      return rows.map((r) => (r.enabled ? {
        check: 'schedule_behind', severity: 'warning', ...r,
        message: `schedule "${r.name}" (queue "${r.queue}", ${r.spec}) is ${secs(r.behind_seconds)} behind its next `
          + 'due time: nothing has enqueued it (a dequeue on the queue does, and with the module preloaded its '
          + 'schedule runner does)',
      } : {
        check: 'schedule_disabled', severity: 'warning', ...r,
        message: `schedule "${r.name}" (queue "${r.queue}") is disabled: its row holds settings schedule() refuses; `
          + 'call concurrency.schedule again to repair it',
      }));
    },
  },
  {
    name: 'lock_wait',
    extension: true,
    async run(s, o) {
      const rows = await s.rows(`
        SELECT waiting_pid, waiting_user, waiting_application, pg_catalog.left(waiting_query, 200) AS waiting_query,
               extract(epoch FROM waited)::float8 AS waited_seconds, locked_object,
               pg_catalog.array_agg(blocking_pid ORDER BY blocking_pid) AS blocking_pids
          FROM concurrency.lock_waits
         WHERE waited > pg_catalog.make_interval(secs => $1)
         GROUP BY 1, 2, 3, 4, 5, 6
         ORDER BY waited_seconds DESC`, [o.lockWait]);
      return rows.map((r) => ({
        check: 'lock_wait', severity: 'warning', ...r,
        message: `session ${r.waiting_pid} (${r.waiting_user ?? '?'}) has waited ${secs(r.waited_seconds)} for `
          + `${r.locked_object}, held up by ${r.blocking_pids.join(', ')}: SELECT * FROM concurrency.lock_tree `
          + 'shows the root and what to run',
      }));
    },
  },
];

// The extension's presence and version in this database: the checks that
// read its objects run only where it is installed.
async function extensionFindings(s) {
  const rows = await s.rows(`SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'concurrency_ext'`);
  if (rows.length === 0) {
    return { installed: false, findings: [{ check: 'extension', severity: 'warning',
      message: 'concurrency_ext is not installed in this database (CREATE EXTENSION concurrency_ext)' }] };
  }
  const [{ module }] = await s.rows('SELECT concurrency.version() AS module');
  const findings = module === rows[0].extversion ? [] : [{
    check: 'extension', severity: 'warning', installed_version: rows[0].extversion, module_version: module,
    message: `the extension's objects are version ${rows[0].extversion} but the module is ${module}: `
      + 'ALTER EXTENSION concurrency_ext UPDATE',
  }];
  return { installed: true, findings };
}

// options: { xactAge, lockWait, scheduleLag } in seconds
async function doctor(session, options) {
  const findings = [];
  const failed = [];
  const failure = (name, err) => {
    failed.push(name);
    findings.push({ check: 'check_failed', severity: 'warning', failed_check: name, sqlstate: err.sqlstate,
      message: `the ${name} check could not run: ${err.message}` });
  };
  let installed = false;
  try {
    const ext = await extensionFindings(session);
    installed = ext.installed;
    findings.push(...ext.findings);
  } catch (err) {
    failure('extension', err);
  }
  for (const check of CHECKS) {
    if (check.extension && !installed) continue;
    try {
      findings.push(...(await check.run(session, options)));
    } catch (err) {
      failure(check.name, err);
    }
  }
  const problems = findings.filter((f) => f.severity === 'warning').length;
  const exitCode = failed.length ? 3 : problems ? 1 : 0;
  const text = [
    problems ? `${problems} problem(s) found` : 'no problems found',
    ...findings.map((f) => `  ${f.severity === 'warning' ? 'PROBLEM' : 'note   '} ${f.check}: ${f.message}`),
  ].join('\n');
  return { result: { ok: problems === 0, problems, findings }, exitCode, text };
}

module.exports = { doctor, CHECKS };
