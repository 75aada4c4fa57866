'use strict';
// The Node.js runtime of concurrency_ext (clients/node) against
// graphile-worker and pg-boss on one server, and against the raw SQL loop
// that the runtime wraps. Each row runs every side in turn (the order
// alternates from round to round), draining JOBS jobs, and checks that every
// job was handled exactly once. Each run is a Node.js process of its own
// (as each system's workers are in use), which first runs the same row
// with WARMUP jobs, untimed: the figures are those of a worker that has run
// a while, not of V8 compiling its code, nor of code that another side's
// run left tuned to another side's calls. Run by peers.sh, which installs
// the peers and starts the server; PG* variables say where.
//
//   node peers.js JOBS DEPS_DIR [ROWS]   (ROWS: e.g. "a b c d e f g latency")
//   node peers.js JOBS DEPS_DIR --run ROW SIDE   (one run: its result as JSON)

const path = require('node:path');
const { performance } = require('node:perf_hooks');

const [TOTAL, DEPS, ROWS] = [Number(process.argv[2] || 20000), process.argv[3], (process.argv[4] || 'a b c d e latency').split(/\s+/)];
// PEERS_WARMUP: the untimed jobs each run handles first (0: none; by
// default as many as it times: V8 compiles a process's hot code over its
// first thousands of calls, a batched drain's 2,000 jobs are 200 claims)
const WARMUP = Math.max(0, Number(process.env.PEERS_WARMUP ?? TOTAL));
// PEERS_WARMUP_RUNS: the runs the warm-up's jobs are split into (default 2).
// The end of a run takes paths its busy part never did (claims that find
// nothing, commits on their own, the stop): V8 drops the code it optimised
// without them and optimises it again in the next run. A timed drain of
// 20,000 jobs in row (b)'s shape spent 588 ms of TurboFan compiling on the
// runtime's side and 365 ms on the raw loop's after one warm-up run of
// 20,000; 52 and 53 ms after two of 10,000 (node --trace-opt).
const WARMUP_RUNS = Math.max(1, Math.floor(Number(process.env.PEERS_WARMUP_RUNS || 2)));
// the jobs of the drain or enqueue under way (the warm-up's, then TOTAL)
let JOBS = TOTAL;
const need = (name) => require(require.resolve(name, { paths: [DEPS] }));
const pg = need('pg');
const { run: graphileRun, makeWorkerUtils } = need('graphile-worker');
const PgBoss = need('pg-boss');
const ours = require(path.join(__dirname, '..', '..', 'clients', 'node'));

process.env.NO_LOG_SUCCESS = '1';
const quiet = { debug() {}, info() {}, warn() {}, error: (m) => console.error(m) };
const graphileLogger = new (need('graphile-worker').Logger)(() => quiet.debug);
const db = new pg.Pool({ max: 20 });
const { spawn } = require('node:child_process');
db.on('error', (e) => console.error('pool:', e.message));
const CHUNK = 1000;
const KEYS = 100;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Wall time, and CPU time of the whole machine (/proc/stat: user, nice,
// system, irq, softirq of every core) and of this Node.js process (the
// clients of every side run in it), over a run: what a job costs the
// server is the difference.
const fs = require('node:fs');
function machineBusy() {
  const [, ...ticks] = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).map(Number);
  return ((ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6]) * 1000) / 100; // ms, USER_HZ = 100
}
const clock = () => ({ t: performance.now(), busy: machineBusy(), own: process.cpuUsage() });
function since(c) {
  const own = process.cpuUsage(c.own);
  const client = (own.user + own.system) / 1000;
  return { seconds: (performance.now() - c.t) / 1000, cpu: { client, server: machineBusy() - c.busy - client } };
}
const chunks = (n) => Array.from({ length: Math.ceil(n / CHUNK) }, (_, c) => Array.from({ length: Math.min(CHUNK, n - c * CHUNK) }, (_, i) => c * CHUNK + i));

// Every handler records its job here; a run passes when each of the JOBS
// jobs appears exactly once and its system holds no job afterwards.
async function resetResults() {
  await db.query('DROP TABLE IF EXISTS peers_results');
  await db.query('CREATE UNLOGGED TABLE peers_results (job text NOT NULL)');
}
async function verify(label, leftSql) {
  const { rows } = await db.query('SELECT count(*)::int AS n, count(DISTINCT job)::int AS d FROM peers_results');
  const left = leftSql ? Number((await db.query(leftSql)).rows[0].n) : 0;
  const ok = rows[0].n === JOBS && rows[0].d === JOBS && left === 0;
  if (!ok) console.error(`${label}: ${rows[0].n} handled, ${rows[0].d} distinct, ${left} left: NOT exactly once`);
  return ok;
}

// --- concurrency_ext -------------------------------------------------------
const keyOf = (i) => `k${i % KEYS}`;
async function oursQueue(keyed, empty = false) {
  await db.query("SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name = 'peers'");
  await db.query(`SELECT concurrency.create_queue('peers'${keyed ? ', key_limit => 1' : ''})`);
  if (!empty)
    for (const c of chunks(JOBS))
      await ours.enqueueBatch(db, 'peers', c.map((i) => ({ i })), keyed ? { concurrencyKeys: c.map(keyOf) } : {});
}

// Row (f): `producers` connections enqueue the JOBS jobs one by one, each in
// a transaction (a commit) of its own, while the workers drain; `add(client, i)`
// enqueues job i. Resolves when every job is enqueued.
// enqueues job i (`own`: through the system's own pool, no client of ours).
// Resolves when every job is enqueued.
async function produce(producers, add, { own = false } = {}) {
  if (!producers) return;
  const pool = own ? null : new pg.Pool({ max: producers });
  let next = 0;
  const loop = async () => {
    const c = pool && (await pool.connect());
    try {
      for (let i = next++; i < JOBS; i = next++) await add(c, i);
    } finally {
      if (c) c.release();
    }
  };
  await Promise.all(Array.from({ length: producers }, loop));
  if (pool) await pool.end();
}
const PRODUCERS = 32;
const oursAdd = (c, i) => ours.enqueue(c, 'peers', { i });
const rawAdd = (c, i) => c.query('SELECT concurrency.enqueue($1, $2)', ['peers', JSON.stringify({ i })]);
const graphileAdd = (c, i) => c.query("SELECT graphile_worker.add_job('job', $1)", [JSON.stringify({ i })]);
const bossAdd = (c, i) => boss.send('peers', { i });
const pgmqAdd = (c, i) => c.query("SELECT pgmq.send('peers_mq', $1::jsonb)", [JSON.stringify({ i })]);
const oursLeft = "SELECT (ready + scheduled + leased + expired + dead)::int AS n FROM concurrency.queue_stats WHERE queue = 'peers'";

async function runtimeDrain({ concurrency = 1, batch = 1, keyed = false, producers = 0 }) {
  await oursQueue(keyed, producers > 0);
  await resetResults();
  const pool = new pg.Pool({ max: concurrency + 2 });
  let done = 0;
  let finish;
  const finished = new Promise((r) => (finish = r));
  const handler =
    batch > 1
      ? async (tasks, client) => {
          await client.query('INSERT INTO peers_results SELECT unnest($1::text[])', [tasks.map((t) => t.id)]);
        }
      : async (task, client) => {
          await client.query('INSERT INTO peers_results VALUES ($1)', [task.id]);
        };
  const worker = new ours.Worker({ pool, queue: 'peers', concurrency, batch, handler });
  worker.on('completed', () => ++done === JOBS && finish());
  worker.on('error', (e) => console.error('runtime:', e.message));
  const t0 = clock();
  await worker.start();
  await Promise.all([finished, produce(producers, oursAdd)]);
  const { seconds, cpu } = since(t0);
  await worker.stop();
  await pool.end();
  return { seconds, cpu, ok: await verify('runtime', oursLeft), features: worker.features };
}

// The loop the runtime wraps, written by hand: a claim on its own when the
// slot has nothing, then BEGIN; after the handler's insert one message
// completes the task, claims the next one in the same transaction, commits
// and begins the next transaction (complete; dequeue; COMMIT; BEGIN), so
// that a busy slot spends two round trips a job.
// With `columns`, its claim returns what the runtime's does (every column of
// dequeue: the attempt, payload and timestamps a handler is given, read by
// node-postgres as it reads them by default), which shows how much of the
// runtime's cost is the data a task carries.
async function rawDrain({ concurrency = 1, batch = 1, keyed = false, columns = false, producers = 0 }) {
  await oursQueue(keyed, producers > 0);
  await resetResults();
  const pool = new pg.Pool({ max: concurrency });
  let done = 0;
  const claim = columns
    ? `SELECT * FROM concurrency.dequeue('peers', ${batch})`
    : `SELECT task_id::text AS id, lease_token::text AS token FROM concurrency.dequeue('peers', ${batch})`;
  const id = columns ? (r) => r.task_id : (r) => r.id;
  const token = columns ? (r) => r.lease_token : (r) => r.token;
  const loop = async () => {
    const c = await pool.connect();
    try {
      let rows = [];
      for (;;) {
        if (rows.length === 0) {
          if (done >= JOBS) break;
          rows = (await c.query(claim)).rows;
          if (rows.length === 0) {
            await sleep(1);
            continue;
          }
          await c.query('BEGIN');
        }
        let complete;
        if (batch > 1) {
          await c.query('INSERT INTO peers_results SELECT unnest($1::text[])', [rows.map(id)]);
          complete = `SELECT concurrency.complete_batch('peers', '{${rows.map(id)}}', '{${rows.map(token)}}')`;
        } else {
          await c.query('INSERT INTO peers_results VALUES ($1)', [id(rows[0])]);
          complete = `SELECT concurrency.complete('peers', ${id(rows[0])}, ${token(rows[0])})`;
        }
        const results = await c.query(`${complete}; ${claim}; COMMIT; BEGIN`);
        done += rows.length;
        rows = results[1].rows;
        if (rows.length === 0) await c.query('COMMIT');
      }
    } finally {
      c.release();
    }
  };
  const t0 = clock();
  await Promise.all([...Array.from({ length: concurrency }, loop), produce(producers, rawAdd)]);
  const { seconds, cpu } = since(t0);
  await pool.end();
  return { seconds, cpu, ok: await verify('raw SQL', oursLeft) };
}

// --- graphile-worker ----------------------------------------------------------
const graphileLeft = 'SELECT count(*)::int AS n FROM graphile_worker._private_jobs';
async function graphileJobs(keyed, empty = false) {
  await db.query('DELETE FROM graphile_worker._private_jobs');
  if (empty) return;
  const utils = await makeWorkerUtils({ pgPool: db, logger: graphileLogger });
  for (const c of chunks(JOBS))
    await utils.addJobs(c.map((i) => ({ identifier: 'job', payload: { i }, ...(keyed ? { queueName: keyOf(i) } : {}) })));
  await utils.release();
}

async function graphileDrain({ concurrency = 1, batch = 1, keyed = false, producers = 0 }) {
  await graphileJobs(keyed, producers > 0);
  await resetResults();
  let done = 0;
  let finish;
  const finished = new Promise((r) => (finish = r));
  const t0 = clock();
  const runner = await graphileRun({
    connectionString: connString(),
    concurrency,
    noHandleSignals: true,
    pollInterval: 1000,
    logger: graphileLogger,
    preset: { worker: batch > 1 ? { localQueue: { size: batch }, completeJobBatchDelay: 0 } : {} },
    taskList: {
      job: async (payload, helpers) => {
        await helpers.query('INSERT INTO peers_results VALUES ($1)', [helpers.job.id]);
      },
    },
  });
  runner.events.on('job:complete', () => ++done === JOBS && finish());
  await Promise.all([finished, produce(producers, graphileAdd)]);
  // its completions are sent after job:complete: wait until they are all in
  while (Number((await db.query(graphileLeft)).rows[0].n) > 0) await sleep(1);
  const { seconds, cpu } = since(t0);
  await runner.stop();
  return { seconds, cpu, ok: await verify('graphile-worker', graphileLeft) };
}

// --- pg-boss -------------------------------------------------------------------
// Its work() loop sleeps pollingIntervalSeconds (at least 0.5 s) between
// fetches, so the drains call its fetch() and complete() in a loop instead.
let boss;
const bossLeft = "SELECT count(*)::int AS n FROM pgboss.job WHERE name = 'peers' AND state < 'completed'";
async function bossEmpty() {
  await boss.deleteQueue('peers').catch(() => {});
  await db.query("DELETE FROM pgboss.job WHERE name = 'peers'");
  await db.query("DELETE FROM pgboss.archive WHERE name = 'peers'").catch(() => {});
}
async function bossJobs(keyed, empty = false) {
  await bossEmpty();
  await boss.createQueue('peers', { name: 'peers', policy: keyed ? 'singleton' : 'standard' });
  if (!empty)
    for (const c of chunks(JOBS)) await boss.insert(c.map((i) => ({ name: 'peers', data: { i }, ...(keyed ? { singletonKey: keyOf(i) } : {}) })));
}

async function bossDrain({ concurrency = 1, batch = 1, keyed = false, producers = 0 }) {
  await bossJobs(keyed, producers > 0);
  await resetResults();
  let done = 0;
  let errors = 0;
  const loop = async () => {
    while (done < JOBS) {
      let jobs;
      try {
        jobs = await boss.fetch('peers', { batchSize: batch });
      } catch (e) {
        errors++; // a singleton queue's fetch can hit its own unique index
        continue;
      }
      if (!jobs || jobs.length === 0) {
        await sleep(1);
        continue;
      }
      await db.query('INSERT INTO peers_results SELECT unnest($1::text[])', [jobs.map((j) => j.id)]);
      await boss.complete('peers', jobs.map((j) => j.id));
      done += jobs.length;
    }
  };
  // its producers call send() as an application does, through pg-boss's own
  // pool (PeerBoss opens it with room for them)
  const t0 = clock();
  await Promise.all([...Array.from({ length: concurrency }, loop), produce(producers, bossAdd, { own: true })]);
  const { seconds, cpu } = since(t0);
  return { seconds, cpu, ok: await verify('pg-boss', bossLeft), errors };
}

// --- enqueueing -----------------------------------------------------------------
// bulk: enqueue_batch and the like, CHUNK jobs a call; producers: that many
// connections at once, one job a commit (row (g)); otherwise one by one on
// one connection.
async function enqueueRow(side, bulk, producers = 0) {
  if (producers) {
    const empty = { runtime: oursEmpty, 'raw SQL': oursEmpty, 'graphile-worker': () => graphileJobs(false, true), 'pg-boss': () => bossJobs(false, true), pgmq: pgmqEmpty }[side];
    const add = { runtime: oursAdd, 'raw SQL': rawAdd, 'graphile-worker': graphileAdd, 'pg-boss': bossAdd, pgmq: pgmqAdd }[side];
    await empty();
    const t0 = clock();
    await produce(producers, add, { own: side === 'pg-boss' });
    const { seconds, cpu } = since(t0);
    return { seconds, cpu, ok: await enqueued(side) };
  }
  const t0 = clock();
  if (side === 'runtime') {
    await oursEmpty();
    if (bulk) for (const c of chunks(JOBS)) await ours.enqueueBatch(db, 'peers', c.map((i) => ({ i })));
    else for (let i = 0; i < JOBS; i++) await ours.enqueue(db, 'peers', { i });
  } else if (side.startsWith('raw SQL')) {
    await oursEmpty();
    if (bulk) for (const c of chunks(JOBS)) await db.query('SELECT concurrency.enqueue_batch($1, $2::jsonb[])', ['peers', c.map((i) => JSON.stringify({ i }))]);
    else for (let i = 0; i < JOBS; i++) await db.query('SELECT concurrency.enqueue($1, $2)', ['peers', JSON.stringify({ i })]);
  } else if (side === 'graphile-worker') {
    await db.query('DELETE FROM graphile_worker._private_jobs');
    const utils = await makeWorkerUtils({ pgPool: db, logger: graphileLogger });
    if (bulk) for (const c of chunks(JOBS)) await utils.addJobs(c.map((i) => ({ identifier: 'job', payload: { i } })));
    else for (let i = 0; i < JOBS; i++) await utils.addJob('job', { i });
    await utils.release();
  } else {
    await bossEmpty();
    await boss.createQueue('peers', { name: 'peers' });
    if (bulk) for (const c of chunks(JOBS)) await boss.insert(c.map((i) => ({ name: 'peers', data: { i } })));
    else for (let i = 0; i < JOBS; i++) await boss.send('peers', { i });
  }
  const { seconds, cpu } = since(t0);
  return { seconds, cpu, ok: await enqueued(side) };
}
// whether the side's queue holds JOBS jobs
async function enqueued(side) {
  const counts = {
    runtime: oursCount,
    'raw SQL': oursCount,
    'raw SQL, task columns': oursCount,
    'graphile-worker': 'SELECT count(*)::int AS n FROM graphile_worker._private_jobs',
    'pg-boss': "SELECT count(*)::int AS n FROM pgboss.job WHERE name = 'peers'",
    pgmq: 'SELECT count(*)::int AS n FROM pgmq.q_peers_mq',
  };
  const n = Number((await db.query(counts[side])).rows[0].n);
  if (n !== JOBS) console.error(`${side}: ${n} jobs enqueued, not ${JOBS}`);
  return n === JOBS;
}
// pgmq (PEERS_PGMQ=1, peers.sh installs it from PGMQ_DIR): enqueue only. Its
// queue has a name of its own: pgmq.create finds its table by name in every
// schema, and concurrency.q_peers is there too.
async function pgmqEmpty() {
  await db.query("SELECT pgmq.drop_queue('peers_mq')").catch(() => {});
  await db.query("SELECT pgmq.create('peers_mq')");
}
const oursCount = "SELECT ready::int AS n FROM concurrency.queue_stats WHERE queue = 'peers'";
async function oursEmpty() {
  await db.query("SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name = 'peers'");
  await db.query("SELECT concurrency.create_queue('peers')");
}

// --- enqueue-to-start latency with an idle worker ---------------------------------
const SAMPLES = Number(process.env.PEERS_LATENCY_SAMPLES || 200);
// PEERS_ROUNDS: each row this many times (the table shows the round of median time)
const ROUNDS = Math.max(1, Number(process.env.PEERS_ROUNDS || 1));
const percentile = (xs, p) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))];
async function latency(side) {
  let started;
  const startedAt = () => started && started(performance.now());
  let stop;
  if (side === 'runtime') {
    await oursEmpty();
    const pool = new pg.Pool({ max: 3 });
    const worker = new ours.Worker({ pool, queue: 'peers', handler: async () => startedAt() });
    await worker.start();
    stop = async () => (await worker.stop(), pool.end());
  } else if (side === 'graphile-worker') {
    await db.query('DELETE FROM graphile_worker._private_jobs');
    const runner = await graphileRun({ connectionString: connString(), concurrency: 1, noHandleSignals: true, logger: graphileLogger, taskList: { job: async () => startedAt() } });
    stop = () => runner.stop();
  } else {
    await bossEmpty();
    await boss.createQueue('peers', { name: 'peers' });
    await boss.work('peers', { pollingIntervalSeconds: 0.5 }, async () => startedAt());
    stop = () => boss.offWork('peers');
  }
  await sleep(300); // the worker is idle, waiting
  const add = {
    runtime: () => ours.enqueue(db, 'peers', {}),
    'graphile-worker': () => db.query("SELECT graphile_worker.add_job('job', '{}')"),
    'pg-boss': () => boss.send('peers', {}),
  }[side];
  const ms = [];
  const samples = side === 'pg-boss' ? Math.min(SAMPLES, 40) : SAMPLES;
  for (let i = 0; i < samples; i++) {
    const begun = new Promise((r) => (started = r));
    const t0 = performance.now();
    await add();
    ms.push((await begun) - t0);
    await sleep(5); // idle again before the next one
  }
  await stop();
  return { p50: percentile(ms, 50), p99: percentile(ms, 99), samples };
}

function connString() {
  const host = process.env.PGHOST;
  return `postgres://${encodeURIComponent(process.env.PGUSER || 'postgres')}@/${encodeURIComponent(process.env.PGDATABASE || 'postgres')}?host=${encodeURIComponent(host)}&port=${process.env.PGPORT}`;
}

// --- the table -------------------------------------------------------------------
const DRAINS = {
  a: ['(a) one worker, one job at a time', { concurrency: 1 }],
  b: ['(b) 8 concurrent', { concurrency: 8 }],
  c: ['(c) batched, 10 jobs per claim, one worker', { concurrency: 1, batch: 10 }],
  e: ['(e) keyed: one at a time per key, 100 keys, 8 workers', { concurrency: 8, keyed: true }],
  f: [`(f) ${PRODUCERS} producers, one job a commit, while 8 workers drain`, { concurrency: 8, producers: PRODUCERS }],
};
const ALL_SIDES = {
  runtime: runtimeDrain,
  'raw SQL': rawDrain,
  'raw SQL, task columns': (options) => rawDrain({ ...options, columns: true }),
  'graphile-worker': graphileDrain,
  'pg-boss': bossDrain,
};
// PEERS_SIDES="runtime raw" (words the names start with) runs only those
const SIDES = Object.fromEntries(
  Object.entries(ALL_SIDES).filter(([name]) => {
    const words = process.env.PEERS_SIDES ? process.env.PEERS_SIDES.split(/\s+/) : null;
    return !words || words.some((w) => name.startsWith(w));
  }),
);

// One run of a row ('a', 'b', 'c', 'e'; 'd1' enqueues one by one, 'dB' in
// bulk) by one side, in this process: WARMUP jobs first, untimed, in
// WARMUP_RUNS runs, then JOBS.
async function runOne(row, side) {
  if (side === 'pg-boss') {
    // room for row (f)'s and (g)'s producers beside the fetching loops
    boss = new PgBoss({ connectionString: connString(), supervise: false, schedule: false, migrate: false, max: PRODUCERS + 10 });
    boss.on('error', () => {});
    await boss.start();
  }
  const run = DRAINS[row] ? () => SIDES[side](DRAINS[row][1]) : () => enqueueRow(side, row === 'dB', row === 'g' ? PRODUCERS : 0);
  let warm = { ok: true };
  for (let i = 0; WARMUP > 0 && i < WARMUP_RUNS; i++) {
    // the jobs split as evenly as they go
    JOBS = Math.floor(WARMUP / WARMUP_RUNS) + (i < WARMUP % WARMUP_RUNS ? 1 : 0);
    if (JOBS === 0) continue;
    const r = await run();
    warm = { ok: warm.ok && r.ok };
  }
  JOBS = TOTAL;
  const result = await run();
  if (boss) await boss.stop({ graceful: false, wait: true }).catch(() => {});
  await db.end();
  return { ...result, ok: result.ok && warm.ok };
}

// The same in a process of its own: its result.
function child(row, side) {
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [__filename, String(TOTAL), DEPS, '--run', row, side], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.on('error', reject);
    p.on('close', (code) => {
      const last = out.trim().split('\n').pop();
      if (code !== 0 || !last) reject(new Error(`the run of row ${row} by ${side} ended with code ${code}`));
      else resolve(JSON.parse(last));
    });
  });
}

async function main() {
  const { rows } = await db.query("SELECT extversion FROM pg_extension WHERE extname = 'concurrency_ext'");
  boss = new PgBoss({ connectionString: connString(), supervise: false, schedule: false, migrate: true });
  boss.on('error', () => {});
  await boss.start();
  const gw = await makeWorkerUtils({ pgPool: db, logger: graphileLogger });
  await gw.migrate();
  await gw.release();
  if (process.env.PEERS_PGMQ === '1') await db.query('CREATE EXTENSION IF NOT EXISTS pgmq');
  const features = await ours.serverFeatures(db);
  console.log(
    `concurrency_ext ${rows[0].extversion}; runtime claims ${features.wait ? 'with the waiting dequeue' : 'by polling (no waiting dequeue on this server)'}; ${JOBS} jobs per run, each run a process of its own after ${WARMUP} jobs untimed in ${WARMUP_RUNS} run(s); ${ROUNDS} round(s) per row`,
  );
  console.log('');
  console.log('| row | side | seconds | jobs/s | exactly once | runtime ÷ side | client CPU ms/job | rest of the machine ms/job |');
  console.log('|---|---|---:|---:|---|---:|---:|---:|');
  let flip = false;
  const f2 = (x) => x.toFixed(2);
  // one side of a row over the rounds: the round of median time, the
  // jobs/s range, and runtime ÷ side as the median of each round's ratio
  // (the rounds pair the sides in time, so the ratio moves less than
  // either side with the machine's speed)
  const line = (row, side, runs, base) => {
    const sorted = [...runs].sort((x, y) => x.seconds - y.seconds);
    const r = sorted[Math.floor((sorted.length - 1) / 2)];
    const ratios = runs.map((x, i) => x.seconds / base[i].seconds).sort((x, y) => x - y);
    const ratio = ratios[Math.floor((ratios.length - 1) / 2)];
    const range = runs.length > 1 ? ` (${Math.round(JOBS / sorted[sorted.length - 1].seconds)}–${Math.round(JOBS / sorted[0].seconds)})` : '';
    const ratioRange = runs.length > 1 && side !== 'runtime' ? ` (${f2(ratios[0])}–${f2(ratios[ratios.length - 1])})` : '';
    const ok = runs.every((x) => x.ok);
    const errors = runs.reduce((n, x) => n + (x.errors || 0), 0);
    console.log(
      `| ${row} | ${side} | ${f2(r.seconds)} | ${Math.round(JOBS / r.seconds)}${range} | ${ok ? 'yes' : 'NO'}${errors ? ` (${errors} fetch errors)` : ''} | ${
        side === 'runtime' ? '' : f2(ratio) + '×' + ratioRange
      } | ${(r.cpu.client / JOBS).toFixed(3)} | ${(r.cpu.server / JOBS).toFixed(3)} |`,
    );
  };
  // every side of a row, ROUNDS times, the order alternating
  const rounds = async (label, run, sides = Object.keys(SIDES)) => {
    const got = Object.fromEntries(sides.map((side) => [side, []]));
    for (let i = 0; i < ROUNDS; i++) {
      const order = flip ? [...sides].reverse() : sides;
      flip = !flip;
      for (const side of order) {
        const r = await run(side);
        if (process.env.PEERS_VERBOSE) console.error(`round ${i + 1} ${side}: ${(r.seconds * 1000).toFixed(0)} ms, client ${(r.cpu.client / JOBS).toFixed(4)}, rest ${(r.cpu.server / JOBS).toFixed(4)} ms/job`);
        got[side].push(r);
      }
    }
    for (const side of sides) line(label, side, got[side], got.runtime);
  };
  for (const row of ROWS) {
    if (DRAINS[row]) {
      await rounds(DRAINS[row][0], (side) => child(row, side));
    } else if (row === 'd') {
      for (const bulk of [false, true]) {
        const label = bulk ? `(d) enqueue in bulk, ${CHUNK} per call` : '(d) enqueue one by one';
        // the raw loop with the task's columns enqueues as the raw loop
        const sides = Object.keys(SIDES).filter((side) => !side.endsWith('task columns'));
        await rounds(label, (side) => child(bulk ? 'dB' : 'd1', side), sides);
      }
    } else if (row === 'g') {
      const sides = Object.keys(SIDES).filter((side) => !side.endsWith('task columns'));
      if (process.env.PEERS_PGMQ === '1') sides.push('pgmq');
      await rounds(`(g) enqueue, ${PRODUCERS} producers, one job a commit`, (side) => child('g', side), sides);
    } else if (row === 'latency') {
      console.log('');
      console.log('| enqueue-to-start, idle worker | samples | p50 ms | p99 ms |');
      console.log('|---|---:|---:|---:|');
      for (const side of ['runtime', 'graphile-worker', 'pg-boss'].filter((x) => x in SIDES)) {
        const r = await latency(side);
        console.log(`| ${side} | ${r.samples} | ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)} |`);
      }
    }
  }
  await boss.stop({ graceful: false, wait: true }).catch(() => {});
  await db.end();
}

if (process.argv[4] === '--run') {
  runOne(process.argv[5], process.argv[6]).then(
    (result) => console.log(JSON.stringify(result)),
    (e) => {
      console.error(e);
      process.exit(1);
    },
  );
} else {
  main().catch((e) => {
    console.error(e);
    process.exit(1);
  });
}
