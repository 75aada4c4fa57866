'use strict';
// Through PgBouncer in transaction mode (started by run.sh): every
// statement of a transaction may land on another server connection, and
// named prepared statements and LISTEN do not survive that.
const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const { Worker, enqueue, enqueueBatch, awaitTask, emitEvent } = require('..');
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

test('a durable workflow through PgBouncer: steps, a sleep, an event, awaitTask', { skip: pooled ? false : 'pgbouncer is not installed' }, async () => {
  const queue = await freshQueue(direct, 'bouncer', "lease => '30 seconds'");
  const event = `bouncer-reply-${process.pid}`;
  const ids = await enqueueBatch(pooled, queue, [{ n: 1 }, { n: 2 }, { n: 3 }]);
  let charged = 0;
  const worker = new Worker({
    pool: pooled,
    queue,
    concurrency: 3,
    handler: async (task) => {
      const charge = await task.step('charge', () => ++charged);
      await task.step('write', (tx) => tx.query(`INSERT INTO "r_${queue}" VALUES ($1, $2, '{}')`, [task.id, task.attempt]).then(() => null), { transaction: true });
      await task.sleep(200);
      const reply = await task.waitForEvent(event, '1 minute');
      return { charge, reply };
    },
  });
  const problems = [];
  let waiting = 0;
  worker.on('suspended', (t, reason) => reason.event && waiting++);
  worker.on('error', (e) => problems.push(e));
  worker.on('leaseLost', (t, e) => problems.push(e));
  worker.on('failed', (t, e) => problems.push(e));
  await worker.start();
  const ends = [];
  try {
    await until(async () => waiting === 3, 'three tasks waiting for the event');
    assert.equal(await emitEvent(pooled, event, { ok: true }), 3);
    // one at a time: each holds a server connection of PgBouncer's pool
    // (of 6, 3 of which the slots' transactions hold) while it waits
    for (const id of ids) ends.push(await awaitTask(pooled, queue, id, { timeout: 20000 }));
  } finally {
    await worker.stop();
  }
  assert.deepEqual(problems, []);
  assert.equal(charged, 3, 'each charge once');
  assert.deepEqual(ends.map((e) => [e.state, e.result.reply]), Array(3).fill(['done', { ok: true }]));
  const { rows } = await direct.query(`SELECT count(*)::int AS n, count(DISTINCT task_id)::int AS d FROM "r_${queue}"`);
  assert.deepEqual(rows[0], { n: 3, d: 3 });
});
