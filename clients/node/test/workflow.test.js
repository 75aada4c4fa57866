'use strict';
// Durable workflows: memoised steps, durable sleeps, events, awaitTask.
const { test } = require('node:test');
const assert = require('node:assert/strict');
const { Worker, enqueue, awaitTask, emitEvent, AwaitTimeoutError, LeaseLostError, TaskSuspended } = require('..');
const { freshQueue, until, gate, workerPool } = require('./helpers');

const { db, collect } = workerPool({ max: 20 });
const status = async (queue, id) =>
  (await db.query('SELECT state, attempt, last_error, result, run_at FROM concurrency.task_status($1, $2)', [queue, id])).rows[0];
const steps = async (queue, id) =>
  Object.fromEntries((await db.query('SELECT step, result FROM concurrency.task_steps($1, $2)', [queue, id])).rows.map((r) => [r.step, r.result]));
const rows = async (queue) => (await db.query(`SELECT task_id, attempt, payload FROM "r_${queue}" ORDER BY attempt`)).rows;
let events = 0;
const eventName = (what) => `${what}-${process.pid}-${++events}`;

test('a memoised step is not run again when its task is claimed again after a crash', async () => {
  const queue = await freshQueue(db, 'wf', "lease => '500 milliseconds'");
  const id = await enqueue(db, queue, { order: 7 });
  let charges = 0;
  const hang = gate();
  const started = gate();
  const handler = async (task) => {
    const charge = await task.step('charge', async () => ({ charge: ++charges, key: task.stepKey('charge') }));
    if (task.attempt === 1) {
      started.open();
      await hang.promise; // the worker "crashes" here: its lease lapses
    }
    return { charge };
  };
  const first = new Worker({ pool: db, queue, handler });
  collect(first);
  await first.start();
  await started.promise;
  assert.equal(await first.stop({ timeout: 50 }), 1, 'the handler was left running, its lease to lapse');
  assert.deepEqual(await steps(queue, id), { charge: { charge: 1, key: `${queue}:${id}:charge` } }, 'recorded at once, not at the end');

  const second = new Worker({ pool: db, queue, handler });
  const seen = collect(second);
  await second.start();
  await until(async () => seen.completed.length === 1, 'the second run');
  await second.stop();
  hang.open();
  assert.equal(charges, 1, 'the step ran once');
  const s = await status(queue, id);
  assert.equal(s.attempt, 2, 'the lapsed lease spent an attempt');
  assert.deepEqual(seen.results[0], { charge: { charge: 1, key: `${queue}:${id}:charge` } });
  assert.deepEqual(seen.errors, []);
});

test('a step recorded under a lease that was then released is not run again', async () => {
  const queue = await freshQueue(db, 'wf');
  const id = await enqueue(db, queue, {});
  const claimed = (await db.query('SELECT task_id, lease_token FROM concurrency.dequeue($1)', [queue])).rows[0];
  await db.query(`SELECT concurrency.record_step($1, $2, $3, 'fetch', '[1, "two", null]')`, [queue, claimed.task_id, claimed.lease_token]);
  await db.query(`SELECT concurrency.record_step($1, $2, $3, 'nothing')`, [queue, claimed.task_id, claimed.lease_token]);
  await db.query('SELECT concurrency.release($1, $2, $3)', [queue, claimed.task_id, claimed.lease_token]);
  const ran = [];
  const worker = new Worker({
    pool: db,
    queue,
    handler: async (task) => {
      const fetched = await task.step('fetch', () => ran.push('fetch'));
      const nothing = await task.step('nothing', () => ran.push('nothing'));
      const fresh = await task.step('fresh', () => (ran.push('fresh'), undefined));
      const notJson = await task.step('function', () => () => 1).catch((e) => e.constructor.name);
      return { fetched, nothing, fresh, notJson, attempt: task.attempt };
    },
  });
  const seen = collect(worker);
  await worker.start();
  await until(async () => seen.completed.length === 1, 'the run');
  await worker.stop();
  assert.deepEqual(ran, ['fresh']);
  assert.deepEqual(seen.results[0], { fetched: [1, 'two', null], nothing: null, fresh: null, notJson: 'TypeError', attempt: 1 });
  assert.deepEqual(Object.keys(await steps(queue, id)).sort(), ['fetch', 'fresh', 'nothing'], 'a result that is no JSON is not recorded');
  assert.equal(seen.completed[0].id, String(id));
});

test('a database step in a transaction happens once: a failure after its write rolls the write back with it', async () => {
  const queue = await freshQueue(db, 'wf');
  const id = await enqueue(db, queue, { order: 1 });
  const worker = new Worker({
    pool: db,
    queue,
    handler: async (task) => {
      const receipt = await task.step(
        'receipt',
        async (tx) => {
          await tx.query(`INSERT INTO "r_${queue}" VALUES ($1, $2, '{}')`, [task.id, task.attempt]);
          if (task.attempt === 1) throw new Error('the transaction fails after the write');
          return { attempt: task.attempt };
        },
        { transaction: true },
      );
      // committed with its record: a failure of the handler after it does not repeat it
      if (task.attempt === 2) throw new Error('fails after the step');
      return receipt;
    },
  });
  const seen = collect(worker);
  await worker.start();
  await until(async () => seen.completed.length === 1, 'the third run', 20000);
  await worker.stop();
  assert.deepEqual(seen.failed.map(([, e]) => e.message), ['the transaction fails after the write', 'fails after the step']);
  assert.deepEqual(await rows(queue), [{ task_id: id, attempt: 2, payload: {} }], 'one write, from the second run');
  assert.deepEqual(seen.results[0], { attempt: 2 });
  assert.deepEqual((await status(queue, id)).result, { attempt: 2 });
});

test('a database step whose lease is lost before it records rolls its write back', async () => {
  const queue = await freshQueue(db, 'wf', "lease => '200 milliseconds'");
  const id = await enqueue(db, queue, {});
  const wrote = gate();
  const go = gate();
  const worker = new Worker({
    pool: db,
    queue,
    heartbeat: false,
    handler: async (task) => {
      await task.step(
        'write',
        async (tx) => {
          await tx.query(`INSERT INTO "r_${queue}" VALUES ($1, $2, '{}')`, [task.id, task.attempt]);
          wrote.open();
          await go.promise;
        },
        { transaction: true },
      );
    },
  });
  const seen = collect(worker);
  await worker.start();
  await wrote.promise;
  const other = await until(async () => (await db.query('SELECT task_id::text FROM concurrency.dequeue($1)', [queue])).rows[0], 'the reclaim');
  assert.equal(other.task_id, id);
  go.open();
  await until(async () => seen.leaseLost.length === 1, 'the lost lease');
  await worker.stop();
  assert.ok(seen.leaseLost[0][1] instanceof LeaseLostError);
  assert.deepEqual(await rows(queue), [], 'the write rolled back with the failed record');
  assert.deepEqual(await steps(queue, id), {});
  assert.deepEqual(seen.failed, []);
});

test('sleep suspends the task: it comes back after the duration, its steps kept, no attempt spent, not failed', async () => {
  // a short lease: a heartbeat sent after the sleep would be a lost lease
  const queue = await freshQueue(db, 'wf', "lease => '600 milliseconds'");
  const id = await enqueue(db, queue, {});
  let prepared = 0;
  const runs = [];
  const worker = new Worker({
    pool: db,
    queue,
    handler: async (task) => {
      runs.push({ attempt: task.attempt, at: Date.now() });
      const n = await task.step('prepare', () => ++prepared);
      await task.sleep(1500);
      await task.sleep('300 milliseconds');
      return { n };
    },
  });
  const seen = collect(worker);
  await worker.start();
  await until(async () => seen.suspended.length === 1, 'the first sleep');
  const asleep = await status(queue, id);
  assert.equal(asleep.state, 'scheduled');
  assert.equal(asleep.attempt, 0, 'the attempt given back');
  assert.ok(seen.suspended[0][1].until instanceof Date);
  assert.equal(seen.suspended[0][1].until.getTime(), asleep.run_at.getTime());
  await assert.rejects(awaitTask(db, queue, id, { timeout: 200 }), (e) => e instanceof AwaitTimeoutError && e.state === 'scheduled');
  await until(async () => seen.completed.length === 1, 'the end', 20000);
  await worker.stop();
  assert.equal(runs.length, 3, 'a run for each sleep and one to the end');
  assert.ok(runs[1].at - runs[0].at >= 1400, `woken after the duration (${runs[1].at - runs[0].at} ms)`);
  assert.ok(runs[2].at - runs[1].at >= 250);
  assert.deepEqual(runs.map((r) => r.attempt), [1, 1, 1]);
  assert.equal(prepared, 1, 'the step ran once');
  assert.deepEqual(seen.results[0], { n: 1 });
  assert.deepEqual(Object.keys(await steps(queue, id)), ['prepare', 'sleep:1', 'sleep:2']);
  assert.equal(seen.suspended.length, 2);
  assert.deepEqual(seen.failed, []);
  assert.deepEqual(seen.leaseLost, [], 'no heartbeat after a sleep');
  assert.deepEqual(seen.errors, []);
});

test('a task claimed again before its sleep is over sleeps again until then', async () => {
  const queue = await freshQueue(db, 'wf');
  const id = await enqueue(db, queue, {});
  // a first run that recorded its sleep, and the task back before its time
  const claimed = (await db.query('SELECT task_id, lease_token FROM concurrency.dequeue($1)', [queue])).rows[0];
  const { rows: [{ wake }] } = await db.query(
    `SELECT u AS wake, concurrency.record_step($1, $2, $3, 'sleep:1', to_jsonb(u)) FROM (SELECT clock_timestamp() + interval '1500 milliseconds' AS u) s`,
    [queue, claimed.task_id, claimed.lease_token],
  );
  await db.query('SELECT concurrency.release($1, $2, $3)', [queue, claimed.task_id, claimed.lease_token]);
  const runs = [];
  const worker = new Worker({
    pool: db,
    queue,
    handler: async (task) => {
      runs.push(Date.now());
      await task.sleep(1500);
      return 'slept';
    },
  });
  const seen = collect(worker);
  await worker.start();
  await until(async () => seen.suspended.length === 1, 'the sleep again');
  assert.equal(seen.suspended[0][1].until.getTime(), wake.getTime(), 'until the recorded time');
  await until(async () => seen.completed.length === 1, 'the end', 20000);
  await worker.stop();
  assert.equal(runs.length, 2);
  assert.ok(runs[1] >= wake.getTime() - 50, 'not before the recorded time');
  assert.equal((await status(queue, id)).state, 'done');
  assert.deepEqual(seen.results, ['slept']);
});

test('waitForEvent takes an event emitted before the wait, without suspending', async () => {
  const queue = await freshQueue(db, 'wf');
  const event = eventName('early');
  assert.equal(await emitEvent(db, event, { answer: 42 }), 0, 'nobody waited');
  await enqueue(db, queue, {});
  const worker = new Worker({ pool: db, queue, handler: async (task) => ({ got: await task.waitForEvent(event) }) });
  const seen = collect(worker);
  await worker.start();
  await until(async () => seen.completed.length === 1, 'the run');
  await worker.stop();
  assert.deepEqual(seen.results[0], { got: { answer: 42 } });
  assert.deepEqual(seen.suspended, []);
});

test('waitForEvent suspends the task until the event is emitted; steps before it are not run again', async () => {
  const queue = await freshQueue(db, 'wf', "lease => '600 milliseconds'");
  const event = eventName('late');
  const id = await enqueue(db, queue, {});
  let before = 0;
  const worker = new Worker({
    pool: db,
    queue,
    handler: async (task) => {
      await task.step('before', () => ++before);
      const reply = await task.waitForEvent(event, '1 hour');
      return { reply, attempt: task.attempt };
    },
  });
  const seen = collect(worker);
  await worker.start();
  await until(async () => seen.suspended.length === 1, 'the wait');
  assert.deepEqual(seen.suspended[0][1], { event });
  assert.equal((await status(queue, id)).state, 'scheduled');
  await new Promise((r) => setTimeout(r, 700)); // past the lease: a heartbeat would show as a lost lease
  assert.equal(await emitEvent(db, event, ['yes']), 1, 'it woke the task');
  assert.deepEqual(await awaitTask(db, queue, id, { timeout: 10000 }), { state: 'done', result: { reply: ['yes'], attempt: 1 }, lastError: null });
  await until(async () => seen.completed.length === 1, 'the completion event');
  await worker.stop();
  assert.equal(before, 1);
  assert.deepEqual(seen.failed, []);
  assert.deepEqual(seen.leaseLost, []);
  assert.deepEqual(seen.errors, []);
});

test('waitForEvent returns null after its timeout, and keeps returning it in later runs, even once the event came', async () => {
  const queue = await freshQueue(db, 'wf');
  const event = eventName('never');
  const id = await enqueue(db, queue, {});
  const got = [];
  const worker = new Worker({
    pool: db,
    queue,
    handler: async (task) => {
      const reply = await task.waitForEvent(event, 400);
      got.push(reply);
      await task.sleep(500);
      return { reply };
    },
  });
  const seen = collect(worker);
  const started = Date.now();
  await worker.start();
  await until(async () => seen.suspended.length === 2, 'the wait, then the sleep');
  assert.ok(Date.now() - started >= 350, 'the wait lasted its timeout');
  assert.deepEqual(got, [null]);
  assert.equal(await emitEvent(db, event, { late: true }), 0, 'the task no longer waits');
  await until(async () => seen.completed.length === 1, 'the end');
  await worker.stop();
  assert.equal((await steps(queue, id))[`event-timeout:${event}`], null);
  assert.deepEqual(got, [null, null], 'the run after the sleep timed out as the first did');
  assert.deepEqual(seen.results[0], { reply: null });
  assert.deepEqual(seen.failed, []);
});

test('awaitTask returns a done task\'s result, a dead task\'s last error, null for no task, and times out', async () => {
  const queue = await freshQueue(db, 'wf', "lease => '30 seconds', max_attempts => 1");
  const ok = await enqueue(db, queue, { ok: true });
  const bad = await enqueue(db, queue, { ok: false });
  const quiet = await enqueue(db, queue, { ok: true, quiet: true });
  const waiting = [awaitTask(db, queue, ok, { timeout: 20000 }), awaitTask(db, queue, bad), awaitTask(db, queue, quiet)];
  const worker = new Worker({
    pool: db,
    queue,
    handler: async (task) => {
      if (!task.payload.ok) throw new Error('the card was declined');
      if (task.payload.quiet) return undefined; // on a queue that keeps nothing: gone at once
      return { total: 12.5 };
    },
  });
  collect(worker);
  await worker.start();
  assert.deepEqual(await waiting[0], { state: 'done', result: { total: 12.5 }, lastError: null });
  assert.deepEqual(await waiting[1], { state: 'dead', result: null, lastError: 'the card was declined' });
  assert.equal(await waiting[2], null, 'completed without a result on a queue that keeps nothing: gone at once');
  assert.equal(await awaitTask(db, queue, quiet), null, 'gone: as if there never was one');
  await worker.stop();
  assert.equal(await awaitTask(db, queue, '999999999'), null);
  const later = await enqueue(db, queue, {});
  const t0 = Date.now();
  await assert.rejects(awaitTask(db, queue, later, { timeout: 300 }), (e) => e instanceof AwaitTimeoutError && e.state === 'ready');
  assert.ok(Date.now() - t0 >= 280);
});

test('the workflow calls refuse a batch, and a handler that goes on after a suspension', async () => {
  const batchQueue = await freshQueue(db, 'wf');
  await enqueue(db, batchQueue, {});
  await enqueue(db, batchQueue, {});
  const batched = new Worker({ pool: db, queue: batchQueue, batch: 2, handler: async (tasks) => tasks[0].step('s', () => 1) });
  const batchSeen = collect(batched);
  await batched.start();
  await until(async () => batchSeen.failed.length >= 1, 'the batch failing');
  await batched.stop();
  assert.ok(batchSeen.failed[0][1] instanceof TypeError);

  const queue = await freshQueue(db, 'wf');
  await enqueue(db, queue, {});
  let after;
  const worker = new Worker({
    pool: db,
    queue,
    handler: async (task) => {
      try {
        await task.sleep(60000);
      } catch (err) {
        assert.ok(err instanceof TaskSuspended);
      }
      // swallowed: the task is still suspended, and further calls refuse
      after = await task.step('late', () => 1).catch((e) => e);
      return 'done?';
    },
  });
  const seen = collect(worker);
  await worker.start();
  await until(async () => seen.suspended.length === 1, 'the suspension');
  await worker.stop();
  assert.ok(after instanceof TaskSuspended);
  assert.deepEqual(seen.completed, []);
  assert.deepEqual(seen.failed, []);
});

test('the order example of the README runs: charged once, a receipt, the reply awaited, shipped', async () => {
  const fs = require('node:fs');
  const os = require('node:os');
  const path = require('node:path');
  const { execFile } = require('node:child_process');
  // the example requires the package by its name, as an application does
  const modules = fs.mkdtempSync(path.join(os.tmpdir(), 'concurrency-ext-example-'));
  fs.symlinkSync(path.join(__dirname, '..'), path.join(modules, 'concurrency-ext'));
  const queue = `orders_${process.pid}`;
  const [stdout, stderr] = await new Promise((resolve, reject) =>
    execFile(process.execPath, [path.join(__dirname, '..', 'examples', 'order-workflow.js'), queue], { env: { ...process.env, NODE_PATH: modules }, timeout: 60000 }, (err, out, errOut) =>
      err ? reject(new Error(`${err.message}\n${errOut}`)) : resolve([out, errOut]),
    ),
  );
  assert.match(stderr, /waits for order-confirmed:/, 'the order waited for the reply');
  fs.rmSync(modules, { recursive: true });
  const out = JSON.parse(stdout.trim().split('\n').pop());
  assert.equal(out.state, 'done');
  assert.equal(out.result.status, 'shipped');
  assert.equal(out.charges, 1, 'charged once');
  const order = out.result.order;
  assert.equal((await db.query('SELECT count(*)::int AS n FROM receipts WHERE order_id = $1', [order])).rows[0].n, 1);
  const shipped = (await db.query('SELECT address FROM shipments WHERE order_id = $1', [order])).rows;
  assert.deepEqual(shipped, [{ address: '1 Harbour Street, Portsmouth' }]);
});
