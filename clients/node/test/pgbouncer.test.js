'use strict';
// Through PgBouncer in transaction mode (started by run.sh): every
// statement of a transaction may land on another server connection, and
// named prepared statements and LISTEN do not survive that.
const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const { Worker, enqueue, enqueueBatch } = require('..');
const { pool, bouncerPool, freshQueue, until } = require('./helpers');

const direct = pool();
const pooled = bouncerPool({ max: 8 });
after(async () => {
  await direct.end();
  if (pooled) await pooled.end();
});

test('producer and worker through PgBouncer in transaction mode', { skip: pooled ? false : 'pgbouncer is not installed' }, async () => {
  const queue = await freshQueue(direct, 'bouncer', "lease => '1 second'");
  await enqueueBatch(pooled, queue, Array.from({ length: 150 }, (_, i) => [i, 'array payload']));
  await enqueue(pooled, queue, { one: 1 });
  const worker = new Worker({
    pool: pooled,
    queue,
    concurrency: 4,
    handler: async (task, client) => {
      await client.query(`INSERT INTO "r_${queue}" VALUES ($1, $2, $3)`, [task.id, task.attempt, JSON.stringify(task.payload)]);
      // long enough for a heartbeat (every third of the lease) now and then
      if (task.payload.one) await new Promise((r) => setTimeout(r, 800));
    },
  });
  let completed = 0;
  const problems = [];
  worker.on('completed', () => completed++);
  worker.on('error', (e) => problems.push(e));
  worker.on('leaseLost', (t, e) => problems.push(e));
  worker.on('failed', (t, e) => problems.push(e));
  await worker.start();
  await until(async () => completed === 151, '151 completions');
  await worker.stop();
  assert.deepEqual(problems, []);
  const { rows } = await direct.query(`SELECT count(*)::int AS n, count(DISTINCT task_id)::int AS d FROM "r_${queue}"`);
  assert.deepEqual(rows[0], { n: 151, d: 151 });
});

test('stop() cancels a waiting claim through PgBouncer (CancelRequest with its key)', { skip: pooled ? false : 'pgbouncer is not installed' }, async (t) => {
  const features = await require('..').serverFeatures(direct);
  if (!features.wait) return t.skip('the server has no waiting dequeue');
  const queue = await freshQueue(direct, 'bouncer');
  // PgBouncer sets the client's application_name on the server connection it lends
  const own = bouncerPool({ max: 2, application_name: `cancel_${queue}` });
  t.after(() => own.end());
  const worker = new Worker({ pool: own, queue, concurrency: 1, wait: 600000, handler: async () => {} });
  const problems = [];
  worker.on('error', (e) => problems.push(e));
  await worker.start();
  const waiting = async () => (await direct.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND query LIKE '%concurrency.dequeue(%' AND state = 'active'", [`cancel_${queue}`])).rows[0].n;
  await until(async () => (await waiting()) === 1, 'a claim waiting in the server');
  assert.equal(await worker.stop(), 0);
  await until(async () => (await waiting()) === 0, 'the claim cancelled, not left to its ten minutes');
  assert.deepEqual(problems, []);
});
