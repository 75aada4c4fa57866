'use strict';
// Worker processes killed and stopped by signals.
const { test, after } = require('node:test');
const assert = require('node:assert/strict');
const { spawn } = require('node:child_process');
const path = require('node:path');
const { enqueueBatch } = require('..');
const { pool, freshQueue, until } = require('./helpers');

const db = pool();
after(() => db.end());
const child = (queue, concurrency) => {
  const proc = spawn(process.execPath, [path.join(__dirname, 'fixtures', 'child-worker.js'), queue, String(concurrency)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  proc.exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  return proc;
};
const count = async (sql, values) => (await db.query(sql, values)).rows[0].n;

test('a worker SIGKILLed mid-task and started again: every task done exactly once', async () => {
  const queue = await freshQueue(db, 'crash', "lease => '1 second'");
  // 60 tasks of 150 ms on 3 slots take 3 s: the kill comes with most left
  await enqueueBatch(db, queue, Array.from({ length: 60 }, (_, i) => ({ i, sleep: 150 })));
  const first = child(queue, 3);
  await until(async () => (await count(`SELECT count(*)::int AS n FROM "r_${queue}"`)) >= 10, 'ten tasks done');
  await until(
    async () => (await count('SELECT leased::int AS n FROM concurrency.queue_stats WHERE queue = $1', [queue])) > 0,
    'a task in hand',
  );
  first.kill('SIGKILL');
  assert.equal((await first.exited).signal, 'SIGKILL');
  assert.ok(
    (await count('SELECT (ready + leased + expired)::int AS n FROM concurrency.queue_stats WHERE queue = $1', [queue])) > 0,
    'tasks were left for the second worker',
  );
  const second = child(queue, 3);
  await until(
    async () => (await count('SELECT (ready + scheduled + leased + expired)::int AS n FROM concurrency.queue_stats WHERE queue = $1', [queue])) === 0,
    'the queue drained',
  );
  second.kill('SIGTERM');
  assert.deepEqual(await second.exited, { code: 0, signal: null }, 'SIGTERM stops the worker and it exits 0');
  const { rows } = await db.query(`SELECT count(*)::int AS n, count(DISTINCT task_id)::int AS d FROM "r_${queue}"`);
  assert.deepEqual(rows[0], { n: 60, d: 60 }, 'sixty tasks, each recorded once');
  assert.equal(await count('SELECT dead::int AS n FROM concurrency.queue_stats WHERE queue = $1', [queue]), 0);
});

test('SIGTERM mid-task: the task in hand finishes, the rest stay unclaimed', async () => {
  const queue = await freshQueue(db, 'sigterm');
  await enqueueBatch(db, queue, Array.from({ length: 20 }, (_, i) => ({ i, sleep: 1500 })));
  const proc = child(queue, 2);
  await until(async () => (await count(`SELECT count(*)::int AS n FROM concurrency."q_${queue}" WHERE state = 'leased'`)) === 2, 'two tasks in hand');
  proc.kill('SIGTERM');
  assert.deepEqual(await proc.exited, { code: 0, signal: null });
  const { rows } = await db.query(`SELECT state, attempt, count(*)::int AS n FROM concurrency."q_${queue}" GROUP BY 1, 2`);
  assert.deepEqual(rows, [{ state: 'ready', attempt: 0, n: 18 }], 'nothing left leased, no attempt spent on the rest');
  assert.equal(await count(`SELECT count(DISTINCT task_id)::int AS n FROM "r_${queue}"`), 2, 'the two in hand were done');
});
