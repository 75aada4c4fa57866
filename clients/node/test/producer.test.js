'use strict';
const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const { enqueue, enqueueBatch, QueueError, LeaseLostError } = require('..');
const { pool, freshQueue } = require('./helpers');

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
