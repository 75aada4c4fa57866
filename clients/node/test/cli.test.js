'use strict';
// The command line (bin/concurrency-ext.js) as a script runs it: a child
// process, its exit code, its --json output. doctor is run against a
// database of its own with each problem it names set up for real.
const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const path = require('node:path');
const { execFile } = require('node:child_process');
const pg = require('pg');
const { pool, freshQueue, freshDatabase, until } = require('./helpers');

const db = pool();
after(() => db.end());

const BIN = path.join(__dirname, '..', 'bin', 'concurrency-ext.js');

// Runs the command line; resolves to { code, stdout, stderr, json }.
function cli(args, { database, env: extra = {} } = {}) {
  const env = { ...process.env, ...(database ? { PGDATABASE: database } : {}), ...extra };
  if (!('DATABASE_URL' in extra)) delete env.DATABASE_URL;
  return new Promise((resolve) => {
    execFile(process.execPath, [BIN, ...args], { env, timeout: 60000 }, (err, stdout, stderr) => {
      let json;
      try {
        json = JSON.parse(stdout);
      } catch {
        json = undefined;
      }
      resolve({ code: err ? err.code : 0, stdout, stderr, json });
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// fsync is a reload setting: the cluster's own (off, as scripts/cluster.sh
// starts test clusters) or the one a test gives it for a while
async function setFsync(value) {
  await db.query(value === null ? 'ALTER SYSTEM RESET fsync' : `ALTER SYSTEM SET fsync = ${value ? 'on' : 'off'}`);
  await db.query('SELECT pg_reload_conf()');
  const want = value === null ? null : value ? 'on' : 'off';
  if (want) await until(async () => (await db.query('SHOW fsync')).rows[0].fsync === want, `fsync = ${want}`);
}

test('doctor --json names each problem set up: fsync off, a pinned horizon, a prepared transaction, '
  + 'a stuck lease, a lock wait, a schedule behind, a bloated queue table and its indexes', async () => {
  const fresh = await freshDatabase(db, 'cli_doctor');
  const own = fresh.pool;
  const clients = [];
  const connect = async () => {
    const c = new pg.Client({ database: fresh.name });
    c.on('error', () => {});
    await c.connect();
    clients.push(c);
    return c;
  };
  const gid = `cli_doctor_${process.pid}`;
  try {
    await setFsync(false);
    // a stuck lease: claimed with a short lease, never heartbeated
    await own.query(`SELECT concurrency.create_queue('stuck')`);
    await own.query(`SELECT concurrency.enqueue('stuck', '{}')`);
    const claimed = await own.query(`SELECT task_id FROM concurrency.dequeue('stuck', lease => '100 milliseconds')`);
    assert.equal(claimed.rows.length, 1);
    // a schedule nothing runs (no preload, no worker on its queue)
    await own.query(`SELECT concurrency.create_queue('reports')`);
    await own.query(`SELECT concurrency.schedule('every-second', 'reports', every => '1 second')`);
    // a queue table full of dead rows that autovacuum may not clean, with
    // indexes of 11 MB that the rows left behind
    await own.query(`SELECT concurrency.create_queue('bloated')`);
    await own.query(`ALTER TABLE concurrency.q_bloated SET (autovacuum_enabled = false)`);
    const churn = await connect();
    await churn.query(`SELECT concurrency.enqueue_batch('bloated', array_fill('{}'::jsonb, ARRAY[180000]))`);
    await churn.query('DELETE FROM concurrency.q_bloated');
    await churn.query('SELECT pg_stat_force_next_flush()');
    // a transaction holding an xid and a snapshot: the pinned horizon
    const pinner = await connect();
    await pinner.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    const pinnerPid = (await pinner.query('SELECT pg_backend_pid() AS pid, txid_current()')).rows[0].pid;
    // a prepared transaction nobody finishes
    await own.query('CREATE TABLE t (x int)');
    const preparer = await connect();
    await preparer.query('BEGIN');
    await preparer.query('INSERT INTO t VALUES (1)');
    await preparer.query(`PREPARE TRANSACTION '${gid}'`);
    // a statement waiting for a lock
    const holder = await connect();
    await holder.query('SELECT pg_advisory_lock(62)');
    const holderPid = (await holder.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    const waiter = await connect();
    const waiterPid = (await waiter.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
    const waiting = waiter.query('SELECT pg_advisory_lock(62)');
    await until(async () => (await own.query('SELECT 1 FROM concurrency.lock_waits WHERE waiting_pid = $1',
      [waiterPid])).rows.length, 'the waiter to wait');
    await sleep(1200);

    const r = await cli(['doctor', '--json', '--xact-age', '1', '--lock-wait', '1', '--schedule-lag', '0'],
      { database: fresh.name });
    assert.equal(r.code, 1, r.stderr);
    const found = (check, pred = () => true) => r.json.findings.filter((f) => f.check === check && pred(f));
    assert.equal(r.json.ok, false);
    assert.equal(found('fsync').length, 1);
    assert.equal(found('fsync')[0].severity, 'warning');
    assert.equal(found('long_transaction', (f) => f.pid === pinnerPid).length, 1, JSON.stringify(r.json));
    assert.equal(found('prepared_transaction', (f) => f.gid === gid).length, 1);
    assert.deepEqual(found('expired_leases').map((f) => [f.queue, f.tasks]), [['stuck', 1]]);
    assert.deepEqual(found('schedule_behind').map((f) => f.name), ['every-second']);
    assert.deepEqual(found('table_bloat').map((f) => [f.queue, f.dead_rows]), [['bloated', 180000]]);
    assert.deepEqual(found('index_bloat').map((f) => [f.queue, f.live_rows]), [['bloated', 0]]);
    const waits = found('lock_wait', (f) => f.waiting_pid === waiterPid);
    assert.equal(waits.length, 1);
    assert.deepEqual(waits[0].blocking_pids, [holderPid]);
    assert.equal(found('preload')[0].severity, 'info', 'the test cluster does not preload the module');
    assert.equal(found('check_failed').length, 0);
    assert.equal(r.json.problems, r.json.findings.filter((f) => f.severity === 'warning').length);

    // the text for a person names the same problems
    const text = await cli(['doctor', '--xact-age', '1', '--lock-wait', '1', '--schedule-lag', '0'],
      { database: fresh.name });
    assert.equal(text.code, 1);
    for (const check of ['fsync', 'long_transaction', 'prepared_transaction', 'expired_leases', 'schedule_behind',
      'table_bloat', 'index_bloat', 'lock_wait']) assert.match(text.stdout, new RegExp(`PROBLEM ${check}: `));

    await holder.query('SELECT pg_advisory_unlock(62)');
    await waiting;
  } finally {
    await own.query(`ROLLBACK PREPARED '${gid}'`).catch(() => {});
    await setFsync(null);
    for (const c of clients) await c.end().catch(() => {});
    await fresh.drop();
  }
});

test('doctor exits 0 on a healthy server, and 1 where the extension is missing', async () => {
  const fresh = await freshDatabase(db, 'cli_healthy');
  const bare = await freshDatabase(db, 'cli_bare', { extension: false });
  try {
    await setFsync(true);
    await fresh.pool.query(`SELECT concurrency.create_queue('emails')`);
    await fresh.pool.query(`SELECT concurrency.enqueue('emails', '{}')`);
    const r = await cli(['doctor', '--json'], { database: fresh.name });
    assert.equal(r.code, 0, r.stdout);
    assert.equal(r.json.ok, true);
    assert.deepEqual(r.json.findings.filter((f) => f.severity !== 'info'), []);

    const missing = await cli(['doctor', '--json'], { database: bare.name });
    assert.equal(missing.code, 1);
    assert.deepEqual(missing.json.findings.filter((f) => f.severity === 'warning').map((f) => f.check), ['extension']);
  } finally {
    await setFsync(null);
    await fresh.drop();
    await bare.drop();
  }
});

test('exit codes: 2 for a usage error, 3 for a connection or a statement that fails', async () => {
  const usage = [[], ['frobnicate'], ['stats', '--bogus'], ['retry', 'q'], ['retry', 'q', '1', '--all'],
    ['cancel', 'q'], ['cancel', 'q', '1;DROP'], ['drain'], ['drain', 'q', '--timeout', 'soon'], ['doctor', 'extra']];
  const results = await Promise.all(usage.map((args) => cli(args)));
  usage.forEach((args, i) => {
    assert.equal(results[i].code, 2, `${args.join(' ')}: ${results[i].stderr}`);
    assert.match(results[i].stderr, /usage: concurrency-ext/);
  });
  assert.equal((await cli(['--help'])).code, 0);

  const nodb = await cli(['stats', '--json'], { database: 'no_such_database' });
  assert.equal(nodb.code, 3);
  assert.equal(nodb.json.sqlstate, '3D000');
  const url = `postgresql://${process.env.PGUSER}@/no_such_database?host=${encodeURIComponent(process.env.PGHOST)}`
    + `&port=${process.env.PGPORT}`;
  for (const how of [{ args: ['--url', url] }, { env: { DATABASE_URL: url } }]) {
    const r = await cli(['stats', '--json', ...(how.args ?? [])], { env: how.env });
    assert.equal(r.json.sqlstate, '3D000', `${JSON.stringify(how)}: ${r.stderr}`);
  }
  const noQueue = await cli(['cancel', 'no_such_queue', '1', '--json']);
  assert.equal(noQueue.code, 3);
  assert.match(noQueue.json.error, /no_such_queue/);
  assert.equal((await cli(['stats', 'no_such_queue'])).code, 3);
});

test('stats, retry and cancel act on the queue named, whatever its name', async () => {
  // a name that would break SQL text built by pasting: the commands pass it as a parameter
  const queue = `cli'q"${process.pid}`;
  await db.query('SELECT concurrency.create_queue($1, max_attempts => 1)', [queue]);
  const ids = [];
  for (let i = 0; i < 3; i++) ids.push((await db.query('SELECT concurrency.enqueue($1, $2) AS id', [queue, { i }])).rows[0].id);
  // two dead tasks: claimed and failed with their one attempt
  const claimed = (await db.query('SELECT task_id, lease_token FROM concurrency.dequeue($1, batch => 2)', [queue])).rows;
  for (const t of claimed) await db.query('SELECT concurrency.fail($1, $2, $3)', [queue, t.task_id, t.lease_token]);

  let r = await cli(['stats', queue, '--json']);
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.json.length, 1);
  assert.equal(r.json[0].queue, queue);
  assert.equal(r.json[0].ready, 1);
  assert.equal(r.json[0].dead, 2);
  assert.equal(r.json[0].paused, false);
  assert.ok(r.json[0].oldest_ready_age_seconds >= 0);
  assert.ok((await cli(['stats', '--json'])).json.some((s) => s.queue === queue), 'every queue without a name');
  assert.match((await cli(['stats', queue])).stdout, /^queue +ready +scheduled/);

  r = await cli(['retry', queue, claimed[0].task_id, '--json']);
  assert.deepEqual(r.json, { queue, retried: 1 });
  r = await cli(['retry', queue, '--all', '--json']);
  assert.deepEqual(r.json, { queue, retried: 1 });
  r = await cli(['cancel', queue, ...ids, '999999999', '--json']);
  assert.equal(r.code, 0);
  assert.deepEqual(r.json, { queue, cancelled: 3 });
  r = await cli(['stats', queue, '--json']);
  assert.deepEqual([r.json[0].ready, r.json[0].dead], [0, 0]);
});

test('drain waits until no task is ready, leased or blocked, and exits 1 when its timeout passes first', async () => {
  const queue = await freshQueue(db, 'cli_drain');
  await db.query(`SELECT concurrency.enqueue($1, '{}', run_at => now() + interval '1 hour')`, [queue]);
  const empty = await cli(['drain', queue, '--json']);
  assert.equal(empty.code, 0, 'a task scheduled for later does not keep the queue from being drained');
  assert.equal(empty.json.drained, true);

  await db.query(`SELECT concurrency.enqueue($1, '{}')`, [queue]);
  const late = await cli(['drain', queue, '--timeout', '0.3', '--json']);
  assert.equal(late.code, 1);
  assert.equal(late.json.drained, false);
  assert.equal(late.json.ready, 1);

  // the task leased: drain waits for its holder to complete it
  const [task] = (await db.query('SELECT task_id, lease_token FROM concurrency.dequeue($1)', [queue])).rows;
  let finished = false;
  const draining = cli(['drain', queue, '--timeout', '30', '--json']).then((r) => { finished = true; return r; });
  // connected, it looks at once and then every half second
  await until(async () => (await db.query(`SELECT 1 FROM pg_stat_activity WHERE application_name = 'concurrency-ext'`))
    .rows.length, 'drain to connect');
  await sleep(600);
  assert.equal(finished, false, 'drain waits while a task is leased');
  await db.query('SELECT concurrency.complete($1, $2, $3)', [queue, task.task_id, task.lease_token]);
  const done = await draining;
  assert.equal(done.code, 0, done.stdout);
  assert.equal(done.json.drained, true);
  assert.equal(done.json.leased, 0);
});
