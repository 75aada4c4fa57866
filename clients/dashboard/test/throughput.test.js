'use strict';
// The throughput arithmetic on hand-made samples: enqueued from inserted
// tuples, finished = enqueued - growth of the live tasks, a re-created table
// or reset statistics start a queue's series again, the window is an hour.
const assert = require('node:assert/strict');
const { test } = require('node:test');
const { Throughput, liveColumns, WINDOW_MS } = require('../lib/throughput');

const FIELDS = ['queue', 'ready', 'scheduled', 'leased', 'expired', 'dead', 'done', 'cancelled', 'blocked', 'waiting']
  .map((name) => ({ name, dataTypeID: name === 'queue' ? 25 : 20 }))
  .concat([{ name: 'oldest_ready_age', dataTypeID: 1186 }, { name: 'paused', dataTypeID: 16 },
    { name: 'relid', dataTypeID: 26 }, { name: 'inserted', dataTypeID: 20 }, { name: 'sampled_at', dataTypeID: 1184 }]);

function sample(at, rows) {
  return {
    fields: FIELDS,
    rows: rows.map((r) => ({ queue: r.queue, relid: r.relid ?? 1, inserted: String(r.inserted), ready: String(r.ready ?? 0),
      scheduled: '0', leased: String(r.leased ?? 0), expired: '0', dead: String(r.dead ?? 0), done: '0', cancelled: '0',
      blocked: '0', waiting: '0', paused: false, oldest_ready_age: null, sampled_at: new Date(at).toISOString() })),
  };
}

test('live columns are the bigint counts but dead, done and cancelled, new states included', () => {
  assert.deepEqual(liveColumns(FIELDS), ['ready', 'scheduled', 'leased', 'expired', 'blocked', 'waiting']);
});

test('enqueued and finished per interval, per minute, and in total', () => {
  const t = new Throughput();
  const t0 = Date.UTC(2026, 0, 1);
  t.add(sample(t0, [{ queue: 'a', inserted: 100, ready: 10 }]));
  t.add(sample(t0 + 30000, [{ queue: 'a', inserted: 130, ready: 20, leased: 5 }])); // +30 in, live +15
  t.add(sample(t0 + 60000, [{ queue: 'a', inserted: 130, ready: 0, dead: 2 }])); // nothing in, live -25
  const s = t.series();
  assert.equal(s.samples, 3);
  assert.deepEqual(s.times, [(t0 + 30000) / 1000, (t0 + 60000) / 1000]);
  assert.deepEqual(s.queues.a.enqueued_per_min, [60, 0]);
  assert.deepEqual(s.queues.a.finished_per_min, [30, 50]);
  assert.deepEqual(s.queues.a.live, [25, 0]);
  assert.equal(s.queues.a.enqueued, 30);
  assert.equal(s.queues.a.finished, 40);
});

test('a re-created table or reset statistics give a gap, not a negative rate', () => {
  const t = new Throughput();
  t.add(sample(0, [{ queue: 'a', inserted: 50 }]));
  t.add(sample(10000, [{ queue: 'a', inserted: 5 }])); // statistics reset
  t.add(sample(20000, [{ queue: 'a', relid: 2, inserted: 7 }])); // dropped and created again
  t.add(sample(30000, [{ queue: 'a', relid: 2, inserted: 9 }]));
  const a = t.series().queues.a;
  assert.deepEqual(a.enqueued_per_min, [null, null, 12]);
  assert.equal(a.enqueued, 2);
});

test('queues without read (NULL counts) are not sampled; a new queue starts with a gap', () => {
  const t = new Throughput();
  t.add({ fields: FIELDS, rows: [{ ...sample(0, [{ queue: 'a', inserted: 1 }]).rows[0], ready: null }] });
  t.add(sample(10000, [{ queue: 'a', inserted: 3 }, { queue: 'b', inserted: 0 }]));
  t.add(sample(20000, [{ queue: 'a', inserted: 4 }, { queue: 'b', inserted: 6 }]));
  const s = t.series();
  assert.deepEqual(s.queues.a.enqueued_per_min, [null, 6]);
  assert.deepEqual(s.queues.b.enqueued_per_min, [null, 36]);
});

test('samples older than an hour leave the window, keeping one to start from', () => {
  const t = new Throughput();
  for (let i = 0; i <= 90; i++) t.add(sample(i * 60000, [{ queue: 'a', inserted: i }]));
  const s = t.series();
  assert.equal(s.samples, 61);
  assert.equal(new Date(s.since).getTime(), 90 * 60000 - WINDOW_MS);
  assert.equal(s.queues.a.enqueued, 60);
});
