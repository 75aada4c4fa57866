'use strict';
// Diagnostic, not a test: many short drains by one Worker of the Node.js
// runtime (bench/peers/peers.js row (b)'s shape: every job enqueued before
// the worker starts, concurrency 8), each drain's wall time recorded, and
// the drains that took longer than FACTOR times the median counted. A slot
// that slept in a waiting claim while work was left, or a task held
// somewhere, shows as a drain about the worker's `wait` long. PG* variables
// say where; pg is taken from clients/node (`npm ci` there first):
//
//   node bench/stall_drains.js [DRAINS] [JOBS] [WAIT_MS] [FACTOR]
//
// Before the claim stopped locking tasks it did not claim (CHANGELOG 0.4.0),
// 300 drains of 200 jobs with a wait of 2 s had one of 2.3 s (median 0.3 s):
// the last task's complete waited for a slot's waiting claim, which held a
// lock on that task (log_lock_waits showed it); after it, none in 600.
const path = require('node:path');
const { performance } = require('node:perf_hooks');
const node = path.join(__dirname, '..', 'clients', 'node');
const pg = require(require.resolve('pg', { paths: [node] }));
const ours = require(node);

const [DRAINS, JOBS, WAIT, FACTOR] = [200, 200, 2000, 5].map((d, i) => Number(process.argv[2 + i] || d));
const CONCURRENCY = 8;

async function drain(db) {
  await db.query("SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name = 'stall'");
  await db.query("SELECT concurrency.create_queue('stall')");
  await ours.enqueueBatch(db, 'stall', Array.from({ length: JOBS }, (_, i) => ({ i })));
  const pool = new pg.Pool({ max: CONCURRENCY + 2 });
  let done = 0;
  let finish;
  const finished = new Promise((r) => (finish = r));
  const handler = async (task, client) => {
    await client.query('SELECT $1::bigint', [task.id]);
  };
  const worker = new ours.Worker({ pool, queue: 'stall', concurrency: CONCURRENCY, handler, wait: WAIT });
  worker.on('completed', () => ++done === JOBS && finish());
  worker.on('error', (e) => console.error('worker:', e.message));
  const t0 = performance.now();
  await worker.start();
  await finished;
  const ms = performance.now() - t0;
  await worker.stop();
  await pool.end();
  return ms;
}

(async () => {
  const db = new pg.Pool({ max: 2 });
  const times = [];
  for (let i = 0; i < DRAINS; i++) times.push(await drain(db));
  await db.end();
  const sorted = [...times].sort((a, b) => a - b);
  const median = sorted[Math.floor(sorted.length / 2)];
  const slow = times.filter((t) => t > FACTOR * median);
  console.log(JSON.stringify({ drains: DRAINS, jobs: JOBS, wait_ms: WAIT, median_ms: Math.round(median),
    max_ms: Math.round(sorted[sorted.length - 1]), slow: slow.length, slow_ms: slow.map(Math.round) }));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
