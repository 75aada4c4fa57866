'use strict';
const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const { enqueue, enqueueBatch, enqueueGraph, parentResults, QueueError, LeaseLostError } = require('..');
const { pool, freshQueue, until } = require('./helpers');

const db = pool();
after(() => db.end());

const payloadOf = async (queue, id) =>
  (await db.query(`SELECT payload FROM concurrency."q_${queue}" WHERE id = $1`, [id])).rows[0].payload;

test('enqueue keeps payloads of every JSON type, arrays included', async () => {
  const queue = await freshQueue(db, 'producer');
  const values = [{ a: 1 }, [1, 'two', { three: 3 }], [], 'it\'s a "string" \\ with \n escapes \u00e9', 42, 1.5, true, null];
  for (const value of values) {
    const id = await enqueue(db, queue, value);
    assert.match(id, /^[0-9]+$/);
    assert.deepEqual(await payloadOf(queue, id), value);
  }
  assert.deepEqual(await payloadOf(queue, await enqueue(db, queue)), {}, 'no payload is {}');
});

test('enqueue passes its options and leaves the others to the server', async () => {
  const queue = await freshQueue(db, 'producer');
  const runAt = new Date(Date.now() + 3600 * 1000);
  const id = await enqueue(db, queue, { n: 1 }, { runAt, priority: 7, dedupeKey: 'order-1', concurrencyKey: 'customer-9' });
  const { rows } = await db.query('SELECT * FROM concurrency.task_status($1, $2)', [queue, id]);
  assert.equal(rows[0].state, 'scheduled');
  assert.equal(rows[0].priority, 7);
  assert.equal(rows[0].dedupe_key, 'order-1');
  assert.equal(rows[0].concurrency_key, 'customer-9');
  assert.equal(rows[0].run_at.getTime(), runAt.getTime());
  assert.equal(await enqueue(db, queue, { n: 2 }, { dedupeKey: 'order-1' }), id, 'the dedupe key returns the holder');
});

test('enqueue with onConflict replace gives the dedupe key\'s holder the new payload and priority', async () => {
  const queue = await freshQueue(db, 'producer');
  const id = await enqueue(db, queue, { rev: 1 }, { dedupeKey: 'doc-7' });
  assert.equal(await enqueue(db, queue, { rev: 2 }, { dedupeKey: 'doc-7', priority: 4, onConflict: 'replace' }), id);
  assert.deepEqual(await payloadOf(queue, id), { rev: 2 });
  assert.equal(await enqueue(db, queue, { rev: 3 }, { dedupeKey: 'doc-7', onConflict: 'ignore' }), id);
  assert.deepEqual(await payloadOf(queue, id), { rev: 2 }, 'ignore leaves it');
  await assert.rejects(enqueue(db, queue, { rev: 4 }, { dedupeKey: 'doc-7', onConflict: 'merge' }),
    (e) => e instanceof QueueError && e.code === '22023');
});

const statusOf = async (queue, id) =>
  (await db.query('SELECT state, parents_open, last_error FROM concurrency.task_status($1, $2)', [queue, id])).rows[0];
// claims the next task of the queue and completes it with `result`; returns its id
const runOne = async (queue, result = null) =>
  (
    await db.query(
      'SELECT t.task_id::text AS id, concurrency.complete($1, t.task_id, t.lease_token, $2::jsonb) FROM concurrency.dequeue($1) AS t',
      [queue, JSON.stringify(result)],
    )
  ).rows[0]?.id;

test('enqueue with after waits until every parent is done', async () => {
  const queue = await freshQueue(db, 'producer');
  const a = await enqueue(db, queue, { step: 'a' });
  const b = await enqueue(db, queue, { step: 'b' });
  const c = await enqueue(db, queue, { step: 'c' }, { after: [a, BigInt(b)], priority: 9 });
  assert.deepEqual(await statusOf(queue, c), { state: 'waiting', parents_open: 2, last_error: null });
  assert.equal(await runOne(queue, { from: 'a' }), a, 'the waiting child is not claimed, whatever its priority');
  assert.equal((await statusOf(queue, c)).parents_open, 1);
  assert.equal(await runOne(queue, { from: 'b' }), b);
  assert.equal((await statusOf(queue, c)).state, 'ready');
  assert.deepEqual(await parentResults(db, queue, c), [
    { taskId: a, parentQueue: queue, result: { from: 'a' } },
    { taskId: b, parentQueue: queue, result: { from: 'b' } },
  ]);
  assert.equal(await runOne(queue), c);
  assert.equal(await enqueue(db, queue, {}, { after: [] }).then((id) => statusOf(queue, id)).then((s) => s.state), 'ready', 'no parent');
  await assert.rejects(enqueue(db, queue, {}, { after: ['424242'] }), (e) => e instanceof QueueError && e.code === '22023');
  await assert.rejects(enqueue(db, queue, {}, { after: a }), TypeError);
});

test('enqueueGraph adds tasks with refs, ids and other queues\' tasks as parents, in order', async () => {
  const queue = await freshQueue(db, 'producer');
  const other = await freshQueue(db, 'producer');
  const old = await enqueue(db, other, { old: true });
  const runAt = new Date(Date.now() + 3600 * 1000);
  const rows = await enqueueGraph(db, queue, [
    { ref: 'fetch', payload: [1, 2], priority: 5 },
    { ref: 'parse', after: ['fetch'], queue: other, concurrencyKey: 'k' },
    { ref: 'store', after: ['parse', { queue: other, id: old }], runAt },
    { after: ['fetch'] },
  ]);
  assert.deepEqual(rows.map((r) => r.ref), ['fetch', 'parse', 'store', null]);
  const [fetch, parse, store, last] = rows.map((r) => r.taskId);
  for (const id of [fetch, parse, store, last]) assert.match(id, /^[0-9]+$/);
  assert.deepEqual(await payloadOf(queue, fetch), [1, 2]);
  const { rows: task } = await db.query('SELECT priority FROM concurrency.task_status($1, $2)', [queue, fetch]);
  assert.equal(task[0].priority, 5);
  const { rows: keyed } = await db.query('SELECT concurrency_key FROM concurrency.task_status($1, $2)', [other, parse]);
  assert.equal(keyed[0].concurrency_key, 'k');
  assert.deepEqual(await statusOf(queue, store), { state: 'waiting', parents_open: 2, last_error: null });
  assert.equal(await runOne(queue, 'fetched'), fetch);
  assert.equal((await statusOf(queue, last)).state, 'ready');
  assert.equal((await statusOf(other, parse)).state, 'ready');
  assert.equal(await runOne(other), old);
  assert.equal(await runOne(other, 'parsed'), parse);
  const { rows: scheduled } = await db.query('SELECT state, run_at FROM concurrency.task_status($1, $2)', [queue, store]);
  assert.deepEqual(scheduled[0], { state: 'scheduled', run_at: runAt }, 'released to its runAt');
  assert.deepEqual(await enqueueGraph(db, queue, []), []);
});

test('enqueueGraph is all or nothing; its errors carry their SQLSTATE', async () => {
  const queue = await freshQueue(db, 'producer');
  const count = async () => (await db.query(`SELECT count(*)::int AS n FROM concurrency."q_${queue}"`)).rows[0].n;
  await assert.rejects(enqueueGraph(db, queue, [{ ref: 'a', after: ['b'] }, { ref: 'b', after: ['a'] }]), (e) => e instanceof QueueError && e.code === '22023');
  await assert.rejects(enqueueGraph(db, queue, [{ ref: 'a' }, { ref: 'b', after: ['a', 999999] }]), (e) => e instanceof QueueError && e.code === '22023');
  await assert.rejects(enqueueGraph(db, queue, [{ ref: 'a' }, { queue: 'nosuchqueue' }]), (e) => e instanceof QueueError && e.code === '42704');
  assert.equal(await count(), 0);
  await assert.rejects(enqueueGraph(db, queue, [{ ref: 'a', run_at: new Date() }]), TypeError, 'the fields are the client\'s');
  await assert.rejects(enqueueGraph(db, queue, { ref: 'a' }), TypeError);
});

test('a dead parent cancels its waiting descendants', async () => {
  const queue = await freshQueue(db, 'producer', "lease => '30 seconds', max_attempts => 1, retain => '1 hour'");
  const [root, mid, leaf] = (await enqueueGraph(db, queue, [{ ref: 'root' }, { ref: 'mid', after: ['root'] }, { after: ['mid'] }])).map((r) => r.taskId);
  const { rows } = await db.query('SELECT task_id, lease_token FROM concurrency.dequeue($1)', [queue]);
  await db.query('SELECT concurrency.fail($1, $2, $3, $4)', [queue, rows[0].task_id, rows[0].lease_token, 'boom']);
  assert.equal((await statusOf(queue, root)).state, 'dead');
  for (const id of [mid, leaf]) assert.equal((await statusOf(queue, id)).state, 'cancelled');
  assert.match((await statusOf(queue, leaf)).last_error, /ended dead/);
});

test('enqueueBatch returns ids in payload order, with per-element keys', async () => {
  const queue = await freshQueue(db, 'producer');
  const payloads = [[1, 2], { b: '"quoted" {braces}, commas' }, 'text', [], null];
  const ids = await enqueueBatch(db, queue, payloads, { concurrencyKeys: ['k1', null, 'k2', null, 'k1'], priority: 3 });
  assert.equal(ids.length, payloads.length);
  for (let i = 0; i < ids.length; i++) assert.deepEqual(await payloadOf(queue, ids[i]), payloads[i]);
  const { rows } = await db.query('SELECT concurrency_key, priority FROM concurrency.task_status($1, $2)', [queue, ids[4]]);
  assert.deepEqual(rows[0], { concurrency_key: 'k1', priority: 3 });
  assert.deepEqual(await enqueueBatch(db, queue, []), []);
});

test('enqueue inside the producer\'s own transaction rolls back with it', async () => {
  const queue = await freshQueue(db, 'producer');
  const client = await db.connect();
  try {
    await client.query('BEGIN');
    await enqueue(client, queue, { n: 1 });
    await client.query('ROLLBACK');
  } finally {
    client.release();
  }
  const { rows } = await db.query('SELECT ready FROM concurrency.queue_stats WHERE queue = $1', [queue]);
  assert.equal(Number(rows[0].ready), 0);
});

test('errors carry their SQLSTATE', async () => {
  await assert.rejects(enqueue(db, 'nosuchqueue', {}), (err) => err instanceof QueueError && err.code === '42704' && !(err instanceof LeaseLostError));
  await assert.rejects(enqueueBatch(db, 'nosuchqueue', [{}]), (err) => err instanceof QueueError && err.code === '42704');
  const queue = await freshQueue(db, 'producer');
  await assert.rejects(enqueue(db, queue, {}, { priority: 'high' }), (err) => err instanceof QueueError && err.code === '22P02');
  await assert.rejects(enqueue(db, queue, () => 1), TypeError, 'a function is no JSON value');
});

test('schedule: a task at each due time for the queue\'s worker; the same again changes nothing; unschedule', async () => {
  const { schedule, unschedule, Worker } = require('..');
  const queue = await freshQueue(db, 'producer');
  const name = `tick_${queue}`;
  await schedule(db, name, queue, { every: 1000, payload: { kind: 'tick' }, priority: 3 });
  const spec = async () => (await db.query('SELECT spec, time_zone, enabled FROM concurrency.schedules WHERE name = $1', [name])).rows;
  const before = await spec();
  await schedule(db, name, queue, { every: '1 second', payload: { kind: 'tick' }, priority: 3 });
  assert.deepEqual(await spec(), before, 'the same settings again: no change');
  assert.equal(before.length, 1);
  const got = [];
  const worker = new Worker({ pool: db, queue, wait: 500, handler: async (task) => void got.push(task.payload) });
  await worker.start();
  await until(async () => got.length >= 1, 'a scheduled task');
  await worker.stop();
  assert.equal(got[0].kind, 'tick');
  assert.match(got[0].scheduled_for, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
  await assert.rejects(schedule(db, `typo_${queue}`, queue, { cron: '30 7 * * mon-fry' }), (err) => err instanceof QueueError && err.code === '22023');
  await assert.rejects(schedule(db, `x_${queue}`, queue, { every: 1000, cron: '@daily' }), (err) => err.code === '22023');
  await assert.rejects(schedule(db, `y_${queue}`, queue, { evry: 1000 }), TypeError);
  assert.equal(await unschedule(db, name), true);
  assert.equal(await unschedule(db, name), false);
  assert.deepEqual(await spec(), []);
});
