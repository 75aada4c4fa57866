'use strict';
const { test } = require('node:test');
const assert = require('node:assert/strict');
const { Worker, enqueueBatch, enqueue, enqueueGraph, LeaseLostError } = require('..');
const { pool, freshQueue, until, gate, workerPool } = require('./helpers');

const { db, collect } = workerPool({ max: 20 });
const stats = async (queue) => (await db.query('SELECT * FROM concurrency.queue_stats WHERE queue = $1', [queue])).rows[0];
const results = async (queue) =>
  (await db.query(`SELECT count(*)::int AS n, count(DISTINCT task_id)::int AS distinct FROM "r_${queue}"`)).rows[0];
const record = (queue) => async (task, client) => {
  await client.query(`INSERT INTO "r_${queue}" VALUES ($1, $2, $3)`, [task.id, task.attempt, JSON.stringify(task.payload)]);
};

test('a worker does every task once, its writes in the completing transaction', async () => {
  const queue = await freshQueue(db, 'worker');
  await enqueueBatch(db, queue, Array.from({ length: 200 }, (_, i) => ({ i })));
  const worker = new Worker({ pool: db, queue, concurrency: 4, handler: record(queue) });
  const seen = collect(worker);
  await worker.start();
  await until(async () => seen.completed.length === 200, '200 completions');
  assert.equal(await worker.stop(), 0);
  assert.deepEqual(await results(queue), { n: 200, distinct: 200 });
  const s = await stats(queue);
  assert.equal(Number(s.ready) + Number(s.leased) + Number(s.dead), 0);
  assert.deepEqual(seen.errors, []);
});

test('array payloads reach the handler as arrays; a result is kept with the task', async () => {
  const queue = await freshQueue(db, 'worker', "lease => '30 seconds', retain => '1 hour'");
  const id = await enqueue(db, queue, [1, [2, 3], { four: 4 }]);
  let got;
  const worker = new Worker({ pool: db, queue, handler: async (task) => ((got = task.payload), { sum: 10 }) });
  const seen = collect(worker);
  await worker.start();
  await until(async () => seen.completed.length === 1, 'the completion');
  await worker.stop();
  assert.deepEqual(got, [1, [2, 3], { four: 4 }]);
  const { rows } = await db.query('SELECT state, result FROM concurrency.task_status($1, $2)', [queue, id]);
  assert.deepEqual(rows[0], { state: 'done', result: { sum: 10 } });
});

test('a throwing handler fails the task with its message; its writes roll back', async () => {
  const queue = await freshQueue(db, 'worker');
  const id = await enqueue(db, queue, { n: 1 });
  const worker = new Worker({
    pool: db,
    queue,
    handler: async (task, client) => {
      await record(queue)(task, client);
      throw new Error('the mail server said no');
    },
  });
  const seen = collect(worker);
  await worker.start();
  await until(async () => seen.failed.length === 1, 'the failure');
  await worker.stop();
  const { rows } = await db.query('SELECT state, attempt, last_error FROM concurrency.task_status($1, $2)', [queue, id]);
  assert.equal(rows[0].attempt, 1);
  assert.equal(rows[0].last_error, 'the mail server said no');
  assert.notEqual(rows[0].state, 'leased');
  assert.equal((await results(queue)).n, 0);
});

test('a child runs after its parents and reads their results with task.parentResults()', async () => {
  const queue = await freshQueue(db, 'worker', "lease => '30 seconds', retain => '1 hour'");
  const [a, b, child] = (
    await enqueueGraph(db, queue, [{ ref: 'a', payload: { n: 2 } }, { ref: 'b', payload: { n: 3 } }, { ref: 'sum', payload: { sum: true }, after: ['a', 'b'], priority: 10 }])
  ).map((r) => r.taskId);
  let parents;
  const worker = new Worker({
    pool: db,
    queue,
    concurrency: 2,
    handler: async (task) => {
      if (!task.payload.sum) return { n: task.payload.n };
      parents = await task.parentResults();
      return { sum: parents.reduce((s, p) => s + p.result.n, 0) };
    },
  });
  const seen = collect(worker);
  await worker.start();
  await until(async () => seen.completed.length === 3, '3 completions');
  await worker.stop();
  assert.equal(seen.completed[2].id, child, 'the child last, whatever its priority');
  assert.deepEqual(parents, [
    { taskId: a, parentQueue: queue, result: { n: 2 } },
    { taskId: b, parentQueue: queue, result: { n: 3 } },
  ]);
  const { rows } = await db.query('SELECT result FROM concurrency.task_status($1, $2)', [queue, child]);
  assert.deepEqual(rows[0].result, { sum: 5 });
  assert.deepEqual(seen.errors, []);
});

test('batches: the handler gets the claimed tasks, complete_batch finishes them', async () => {
  const queue = await freshQueue(db, 'worker');
  await enqueueBatch(db, queue, Array.from({ length: 50 }, (_, i) => ({ i })));
  const sizes = [];
  const worker = new Worker({
    pool: db,
    queue,
    batch: 10,
    handler: async (tasks, client) => {
      sizes.push(tasks.length);
      for (const t of tasks) await record(queue)(t, client);
    },
  });
  const seen = collect(worker);
  await worker.start();
  await until(async () => seen.completed.length === 50, '50 completions');
  await worker.stop();
  assert.ok(sizes.every((n) => n >= 1 && n <= 10) && Math.max(...sizes) === 10, `batch sizes ${sizes}`);
  assert.deepEqual(await results(queue), { n: 50, distinct: 50 });
  assert.deepEqual(seen.errors, []);
});

test('a batch whose completion meets one lost lease hands the others back unspent; they run again at once', async () => {
  const queue = await freshQueue(db, 'worker');
  const ids = await enqueueBatch(db, queue, [{ i: 0 }, { i: 1, cancel: true }, { i: 2 }]);
  const worker = new Worker({
    pool: db,
    queue,
    batch: 3,
    handler: async (tasks, client) => {
      for (const t of tasks) {
        await record(queue)(t, client);
        if (t.payload.cancel) await db.query('SELECT concurrency.cancel($1, ARRAY[$2::bigint])', [queue, t.id]);
      }
    },
  });
  const seen = collect(worker);
  await worker.start();
  await until(async () => seen.completed.length === 2, 'the two other tasks done');
  await worker.stop();
  assert.deepEqual(seen.leaseLost.map(([t, e]) => [t.id, e instanceof LeaseLostError]), [[ids[1], true]]);
  assert.deepEqual(seen.released.map((t) => t.id).sort(), [ids[0], ids[2]].sort());
  assert.deepEqual(seen.completed.map((t) => [t.id, t.attempt]).sort(), [[ids[0], 1], [ids[2], 1]].sort());
  // only the completing run's writes stay
  assert.deepEqual(await results(queue), { n: 2, distinct: 2 });
  assert.deepEqual(seen.failed, []);
  assert.deepEqual(seen.errors, []);
});

test('heartbeats keep a task longer than its lease', async () => {
  const queue = await freshQueue(db, 'worker', "lease => '300 milliseconds'");
  const long = await enqueue(db, queue, { long: true });
  const worker = new Worker({
    pool: db,
    queue,
    handler: async (task, client) => {
      // runs until three leases have passed since its claim
      await until(async () => Date.now() - task.leaseExpiresAt.getTime() > 600, 'the leases to pass');
      await record(queue)(task, client);
    },
  });
  const seen = collect(worker);
  await worker.start();
  await until(async () => seen.completed.length === 1, 'the completion');
  await worker.stop();
  assert.deepEqual(seen.leaseLost, []);
  assert.deepEqual(seen.errors, []);
  const { rows } = await db.query(`SELECT attempt FROM "r_${queue}" WHERE task_id = $1`, [long]);
  assert.deepEqual(rows, [{ attempt: 1 }], 'done once, at its first attempt');
});

test('the heartbeats of several slots, due at different times, keep every lease', async () => {
  // three slots whose claims come 150 ms apart, so that their heartbeats
  // fall due at different times on the worker's one timer
  const queue = await freshQueue(db, 'worker', "lease => '300 milliseconds'");
  const started = [];
  const worker = new Worker({
    pool: db,
    queue,
    concurrency: 3,
    handler: async (task, client) => {
      started.push(task.id);
      await until(async () => Date.now() - task.leaseExpiresAt.getTime() > 900, 'the leases to pass');
      await record(queue)(task, client);
    },
  });
  const seen = collect(worker);
  await worker.start();
  for (let i = 1; i <= 3; i++) {
    await enqueue(db, queue, { i });
    await until(async () => started.length === i, `task ${i} to start`);
    await new Promise((resolve) => setTimeout(resolve, 150));
  }
  await until(async () => seen.completed.length === 3, '3 completions');
  await worker.stop();
  assert.deepEqual(seen.leaseLost, []);
  assert.deepEqual(seen.errors, []);
  const { rows } = await db.query(`SELECT attempt FROM "r_${queue}" ORDER BY task_id`);
  assert.deepEqual(rows, [{ attempt: 1 }, { attempt: 1 }, { attempt: 1 }], 'each done once, at its first attempt');
});

test('no heartbeat races its own complete into a spurious CE001', async () => {
  // complete made slow (a trigger sleeps while it holds the task's row):
  // a heartbeat sent meanwhile would wait for the completing transaction,
  // then find the task gone. Heartbeats come every 100 ms, and each handler
  // also sends one, unawaited, as it returns; the worker must send none
  // once the handler has returned, and hold complete back until the one in
  // flight is answered.
  const queue = await freshQueue(db, 'worker', "lease => '300 milliseconds'");
  await db.query(`CREATE FUNCTION "slow_${queue}"() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN PERFORM pg_sleep(0.4); RETURN OLD; END$$`);
  await db.query(`CREATE TRIGGER slow BEFORE DELETE ON concurrency."q_${queue}" FOR EACH ROW EXECUTE FUNCTION "slow_${queue}"()`);
  await enqueueBatch(db, queue, Array.from({ length: 6 }, (_, i) => ({ i })));
  const beats = [];
  const worker = new Worker({
    pool: db,
    queue,
    concurrency: 3,
    handler: async (task, client) => {
      await record(queue)(task, client);
      beats.push(task.heartbeat().then(() => 'ok', (e) => e));
    },
  });
  const seen = collect(worker);
  await worker.start();
  await until(async () => seen.completed.length === 6, '6 completions');
  const last = Date.now();
  await worker.stop();
  // an answer to a stray heartbeat would come right after its task's
  // commit: give it a lease's time to show
  await until(async () => Date.now() - last > 300, 'a lease to pass');
  assert.deepEqual(await Promise.all(beats), Array(6).fill('ok'));
  assert.deepEqual(seen.leaseLost, []);
  assert.deepEqual(seen.errors, []);
  assert.deepEqual(await results(queue), { n: 6, distinct: 6 });
});

test('a handler that outlives its lease loses it: LeaseLostError, its writes rolled back', async () => {
  const queue = await freshQueue(db, 'worker', "lease => '200 milliseconds'");
  const id = await enqueue(db, queue, { n: 1 });
  const taken = gate();
  const started = gate();
  const worker = new Worker({
    pool: db,
    queue,
    heartbeat: false,
    handler: async (task, client) => {
      await record(queue)(task, client);
      started.open();
      await taken.promise;
    },
  });
  const seen = collect(worker);
  await worker.start();
  await started.promise;
  // another worker claims the task once the lease expired
  const other = await until(async () => (await db.query('SELECT task_id::text, lease_token FROM concurrency.dequeue($1)', [queue])).rows[0], 'the reclaim');
  assert.equal(other.task_id, id);
  taken.open();
  await until(async () => seen.leaseLost.length === 1, 'the lost lease');
  await worker.stop();
  const [task, err] = seen.leaseLost[0];
  assert.equal(task.id, id);
  assert.ok(err instanceof LeaseLostError);
  assert.equal(err.code, 'CE001');
  assert.match(err.reason, /lease token does not match/);
  assert.equal((await results(queue)).n, 0, 'the handler\'s insert rolled back');
  assert.deepEqual(seen.failed, [], 'the task was not failed');
});

test('a cancelled task: the heartbeat aborts task.signal with the reason', async () => {
  const queue = await freshQueue(db, 'worker', "lease => '300 milliseconds'");
  const id = await enqueue(db, queue, {});
  const started = gate();
  const worker = new Worker({
    pool: db,
    queue,
    handler: async (task, client) => {
      await record(queue)(task, client);
      started.open();
      await new Promise((resolve) => task.signal.addEventListener('abort', resolve));
    },
  });
  const seen = collect(worker);
  await worker.start();
  await started.promise;
  await db.query('SELECT concurrency.cancel($1, ARRAY[$2::bigint])', [queue, id]);
  await until(async () => seen.leaseLost.length === 1, 'the lost lease');
  await worker.stop();
  assert.match(seen.leaseLost[0][1].reason, /cancelled/);
  assert.equal((await results(queue)).n, 0);
});

test('stop(): no claim after it, running handlers finish, nothing failed, no attempt spent', async () => {
  const queue = await freshQueue(db, 'worker');
  const ids = await enqueueBatch(db, queue, Array.from({ length: 10 }, (_, i) => ({ i })));
  const go = gate();
  let running = 0;
  const worker = new Worker({
    pool: db,
    queue,
    concurrency: 3,
    handler: async (task, client) => {
      running++;
      await go.promise;
      await record(queue)(task, client);
    },
  });
  const seen = collect(worker);
  await worker.start();
  await until(async () => running === 3, 'three running handlers');
  const stopped = worker.stop({ timeout: 30000 });
  go.open();
  assert.equal(await stopped, 0, 'no handler was left running');
  assert.equal(seen.completed.length, 3);
  const { rows } = await db.query(
    `SELECT state, count(*)::int AS n, max(attempt) AS attempts FROM (SELECT (concurrency.task_status($1, id)).* FROM unnest($2::bigint[]) id) s GROUP BY state`,
    [queue, ids],
  );
  assert.deepEqual(rows, [{ state: 'ready', n: 7, attempts: 0 }], 'the seven others were never claimed');
  assert.deepEqual(seen.failed, []);
});

test('stop() past its deadline leaves the running handler\'s lease to lapse', async () => {
  const queue = await freshQueue(db, 'worker', "lease => '300 milliseconds'");
  const id = await enqueue(db, queue, {});
  const go = gate();
  const started = gate();
  const worker = new Worker({
    pool: db,
    queue,
    handler: async (task, client) => {
      started.open();
      await go.promise;
      await record(queue)(task, client);
    },
  });
  const seen = collect(worker);
  await worker.start();
  await started.promise;
  assert.equal(await worker.stop({ timeout: 50 }), 1, 'one handler still running');
  // no more heartbeats: another worker gets the task after its lease
  const other = await until(async () => (await db.query('SELECT task_id::text, attempt FROM concurrency.dequeue($1)', [queue])).rows[0], 'the reclaim');
  assert.deepEqual(other, { task_id: id, attempt: 2 });
  go.open();
  await until(async () => seen.leaseLost.length === 1, 'the stale handler\'s lost lease');
  assert.equal((await results(queue)).n, 0);
});

test('start() refuses a missing queue, and a pool too small for the concurrency', async () => {
  const worker = new Worker({ pool: db, queue: 'nosuchqueue', handler: async () => {} });
  await assert.rejects(worker.start(), (err) => err.code === '42704');
  assert.throws(() => new Worker({ pool: pool({ max: 4 }), queue: 'q', concurrency: 4, handler: async () => {} }), RangeError);
});

test('polling (wait: 0, as on a server without the waiting dequeue) drains the queue once', async () => {
  const queue = await freshQueue(db, 'worker');
  const worker = new Worker({ pool: db, queue, concurrency: 2, wait: 0, pollInterval: 200, handler: record(queue) });
  const seen = collect(worker);
  await worker.start();
  assert.equal(worker.waiting, false);
  // enqueued while the worker polls an empty queue
  await enqueueBatch(db, queue, Array.from({ length: 30 }, (_, i) => ({ i })));
  await until(async () => seen.completed.length === 30, '30 completions');
  await worker.stop();
  assert.deepEqual(await results(queue), { n: 30, distinct: 30 });
  assert.deepEqual(seen.errors, []);
});

test('stop() cancels the claims that wait for work: it returns long before their wait, nothing leased, no error', async (t) => {
  const features = await require('..').serverFeatures(db);
  if (!features.wait) return t.skip('the server has no waiting dequeue');
  const queue = await freshQueue(db, 'worker');
  await enqueue(db, queue, { first: true });
  const go = gate();
  const started = gate();
  const own = pool({ max: 4, application_name: `cancel_${queue}` });
  t.after(() => own.end());
  const worker = new Worker({
    pool: own,
    queue,
    concurrency: 2,
    wait: 600000,
    handler: async (task, client) => {
      started.open();
      await go.promise;
      await record(queue)(task, client);
    },
  });
  const seen = collect(worker);
  await worker.start();
  assert.equal(worker.waiting, true);
  await started.promise;
  // the other slot waits in dequeue for the queue's next task, for up to ten minutes
  const waiting = async () => (await db.query("SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND query LIKE '%concurrency.dequeue(%' AND state = 'active'", [`cancel_${queue}`])).rows[0].n;
  await until(async () => (await waiting()) === 1, 'a waiting claim');
  const stopped = worker.stop();
  // the wait ends at once (cancelled), not in ten minutes; the running handler is waited for
  await until(async () => (await waiting()) === 0, 'the cancelled claim');
  go.open();
  assert.equal(await stopped, 0);
  assert.deepEqual(seen.errors, [], 'the cancel is no error');
  assert.equal(seen.completed.length, 1);
  const id = await enqueue(db, queue, { second: true });
  const { rows } = await db.query('SELECT state, attempt FROM concurrency.task_status($1, $2)', [queue, id]);
  assert.deepEqual(rows[0], { state: 'ready', attempt: 0 }, 'no claim after stop()');
  const leased = await db.query(`SELECT count(*)::int AS n FROM concurrency."q_${queue}" WHERE state = 'leased'`);
  assert.equal(leased.rows[0].n, 0);
});

// A pool whose connections record each message with what it returned, to
// see which completions claimed the next task in the same round trip.
function recordingPool(messages) {
  const own = pool({ max: 4 });
  own.on('connect', (client) => {
    const query = client.query.bind(client);
    client.query = (...args) => {
      const sent = query(...args);
      // a text, a query config, or the worker's own Submittable for its
      // completing message (client.query returns it; it resolves its
      // promise with the claim's rows, the message's second statement)
      const [text, values] = typeof args[0] === 'string' ? [args[0], args[1]] : [args[0]?.text, args[0]?.values];
      if (typeof text !== 'string' || values !== undefined || !/concurrency\.complete/.test(text)) return sent;
      const chained = /; COMMIT; BEGIN$/.test(text);
      if (typeof args[0].submit === 'function') {
        args[0].promise.then((rows) => messages.push({ text, chained, claimed: rows }), () => {});
        return sent;
      }
      return sent.then((result) => {
        messages.push({ text, chained, claimed: chained ? result[1].rows : [] });
        return result;
      });
    };
  });
  return own;
}

// A queue of n tasks, and a recording pool for a worker of it.
async function recordedQueue(t, n, settings) {
  const queue = await freshQueue(db, 'worker', settings);
  await enqueueBatch(db, queue, Array.from({ length: n }, (_, i) => ({ i })));
  const messages = [];
  const own = recordingPool(messages);
  t.after(() => own.end());
  return { queue, messages, own };
}

test('a completion claims the next task in its own round trip, whatever the isolation level where nothing races it', async (t) => {
  for (const isolation of ['read committed', 'repeatable read']) {
    const { queue, messages, own } = await recordedQueue(t, 20);
    const worker = new Worker({
      pool: own,
      queue,
      handler: async (task, client) => {
        await client.query(`SET TRANSACTION ISOLATION LEVEL ${isolation.toUpperCase()}`);
        await record(queue)(task, client);
      },
    });
    const seen = collect(worker);
    await worker.start();
    await until(async () => seen.completed.length === 20, '20 completions');
    await worker.stop();
    assert.deepEqual(await results(queue), { n: 20, distinct: 20 });
    assert.deepEqual(seen.errors, []);
    assert.deepEqual(seen.failed, []);
    assert.deepEqual(seen.released, []);
    // complete; dequeue; COMMIT; BEGIN: the dequeue's rows are the second result
    const chained = messages.filter((m) => m.chained);
    assert.equal(chained.length, 20, `every completion was one message (${isolation})`);
    const claimed = chained.filter((m) => m.claimed.length === 1).length;
    assert.equal(claimed, 19, `each completion but the last claimed the next task (${isolation})`);
    assert.ok(chained.every((m) => !m.text.includes('transaction_isolation')), 'no guard before a claim raced');
  }
});

test('under REPEATABLE READ, a claim with the completion that meets a task claimed since hands the tasks back unspent, and guards the next claims', async (t) => {
  const { queue, messages, own } = await recordedQueue(t, 6);
  const runs = new Map(); // task id -> runs of its handler
  let raced = false;
  const worker = new Worker({
    pool: own,
    queue,
    handler: async (task, client) => {
      runs.set(task.id, (runs.get(task.id) || 0) + 1);
      await client.query('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ');
      await record(queue)(task, client); // the snapshot is taken here
      if (raced) return;
      raced = true;
      // another worker claims and completes the next task after that snapshot
      const other = await db.connect();
      try {
        await other.query('BEGIN');
        const { rows } = await other.query('SELECT task_id::text AS id, lease_token::text AS token, attempt, payload FROM concurrency.dequeue($1)', [queue]);
        await record(queue)(rows[0], other);
        await other.query('SELECT concurrency.complete($1, $2, $3)', [queue, rows[0].id, rows[0].token]);
        await other.query('COMMIT');
      } finally {
        other.release();
      }
    },
  });
  const seen = collect(worker);
  await worker.start();
  await until(async () => seen.completed.length === 5, '5 completions');
  await worker.stop();
  assert.deepEqual(seen.errors, []);
  assert.deepEqual(seen.failed, [], 'the raced claim failed no task');
  assert.equal(seen.released.length, 1, 'the task whose completion raced was handed back');
  const first = seen.released[0].id;
  assert.equal(runs.get(first), 2, 'its handler ran again');
  // each task's work once (the first run's was rolled back), each at its first attempt
  assert.deepEqual(await results(queue), { n: 6, distinct: 6 });
  const attempts = await db.query(`SELECT array_agg(DISTINCT attempt) AS a FROM "r_${queue}"`);
  assert.deepEqual(attempts.rows[0].a, [1]);
  // from then on the claim with the completion is guarded: under REPEATABLE READ it claims nothing
  const chained = messages.filter((m) => m.chained);
  assert.equal(chained.length, 5);
  assert.ok(chained.every((m) => m.text.includes("current_setting('transaction_isolation') = 'read committed'") && m.claimed.length === 0));
});

test('a failure at COMMIT fails the task and undoes the claim made with it', async () => {
  // a deferred foreign key: the handler's insert passes, the COMMIT of the
  // completing message fails; the next task, claimed in that message, must
  // not be lost (its claim rolled back with it) nor counted as attempted
  const queue = await freshQueue(db, 'worker', "lease => '30 seconds', max_attempts => 1, retain => '1 hour'");
  await db.query(`CREATE TABLE "p_${queue}" (n int PRIMARY KEY)`);
  await db.query(`CREATE TABLE "c_${queue}" (n int REFERENCES "p_${queue}" DEFERRABLE INITIALLY DEFERRED)`);
  const [bad, good] = await enqueueBatch(db, queue, [{ bad: true }, { bad: false }]);
  const worker = new Worker({
    pool: db,
    queue,
    handler: async (task, client) => {
      if (task.payload.bad) await client.query(`INSERT INTO "c_${queue}" VALUES (1)`);
      await record(queue)(task, client);
    },
  });
  const seen = collect(worker);
  await worker.start();
  await until(async () => seen.failed.length === 1 && seen.completed.length === 1, 'one failure and one completion');
  await worker.stop();
  assert.equal(seen.failed[0][0].id, bad);
  assert.equal(seen.failed[0][1].code, '23503');
  assert.equal(seen.completed[0].id, good);
  const state = async (id) => (await db.query('SELECT state, attempt FROM concurrency.task_status($1, $2)', [queue, id])).rows[0];
  assert.deepEqual(await state(bad), { state: 'dead', attempt: 1 });
  assert.deepEqual(await state(good), { state: 'done', attempt: 1 });
  assert.deepEqual(await results(queue), { n: 1, distinct: 1 });
  assert.deepEqual(seen.errors, []);
});

test('results written into the completing message keep every character, whatever standard_conforming_strings says', async (t) => {
  const values = [
    { s: "it's a \\ back'slash\\' E'x' \\x41 $$ $1 ; COMMIT; \u00e9 \u2603 \ud83d\ude00" },
    ['\\', "'", '\\\'', ''],
    'plain',
    -0.5,
    null,
  ];
  // off: a backslash in a plain '' string is an escape; the worker's name
  // is written into the claim of the completing message too
  const off = pool({ max: 4, options: '-c standard_conforming_strings=off' });
  let worker = null;
  // stopped before its pool ends, also when the test fails (a running
  // worker keeps a connection: the pool's end would wait for it)
  t.after(async () => {
    await worker?.stop({ timeout: 1000 });
    await off.end();
  });
  for (const [own, name] of [[db, undefined], [off, "w'\\n\\"]]) {
    const queue = await freshQueue(db, 'worker', "lease => '30 seconds', retain => '1 hour'");
    const ids = await enqueueBatch(db, queue, values.map((_, i) => ({ i })));
    worker = new Worker({ pool: own, queue, name, handler: async (task) => values[task.payload.i] });
    const seen = collect(worker);
    await worker.start();
    await until(async () => seen.completed.length === values.length, 'the completions', 10000);
    await worker.stop();
    for (const [i, id] of ids.entries()) {
      const { rows } = await db.query('SELECT result, worker FROM concurrency.task_status($1, $2)', [queue, id]);
      assert.deepEqual(rows[0].result, values[i]);
      if (name) assert.equal(rows[0].worker, name);
    }
    assert.deepEqual(seen.errors, []);
  }
  assert.throws(() => new Worker({ pool: db, queue: 'a\0b', handler: async () => {} }), TypeError);
  assert.throws(() => new Worker({ pool: db, queue: 'worker', name: 'w\0', handler: async () => {} }), TypeError);
});

test('a task id a handler changed is never written into the completing message', async () => {
  const queue = await freshQueue(db);
  await enqueue(db, queue, {});
  const worker = new Worker({
    pool: db,
    queue,
    handler: async (task) => {
      task.id = `0'::bigint, '0'::bigint, NULL); DROP TABLE "r_${queue}"; --`;
    },
  });
  const seen = collect(worker);
  await worker.start();
  await until(async () => seen.errors.length > 0, 'the refused completion');
  await worker.stop();
  assert.deepEqual(seen.completed, []);
  const { rows } = await db.query('SELECT to_regclass($1) IS NOT NULL AS kept', [`"r_${queue}"`]);
  assert.equal(rows[0].kept, true, 'the statement in the id never ran');
});

test('tasks claimed with a completion keep their leases by heartbeats too', async (t) => {
  // a claim in the completing message does not return the lease's time
  // left; the worker reckons it from the lease's end and the clocks
  const { queue, messages, own } = await recordedQueue(t, 3, "lease => '300 milliseconds'");
  const worker = new Worker({
    pool: own,
    queue,
    handler: async (task, client) => {
      await until(async () => Date.now() - task.leaseExpiresAt.getTime() > 600, 'the leases to pass');
      // the lease was extended: the claim's end is long past, the task's is not
      const { rows } = await db.query(`SELECT greatest(lease_expires_at, lease_extended_to) > clock_timestamp() AS held FROM concurrency."q_${queue}" WHERE id = $1`, [task.id]);
      held.push(rows[0].held);
      await record(queue)(task, client);
    },
  });
  const held = [];
  const seen = collect(worker);
  await worker.start();
  await until(async () => seen.completed.length === 3, '3 completions');
  await worker.stop();
  assert.deepEqual(held, [true, true, true], 'every lease was extended');
  assert.equal(messages.filter((m) => m.chained && m.claimed.length === 1).length, 2, 'two tasks came with a completion');
  assert.deepEqual(seen.leaseLost, []);
  assert.deepEqual(seen.errors, []);
  const { rows } = await db.query(`SELECT attempt FROM "r_${queue}" ORDER BY task_id`);
  assert.deepEqual(rows, [{ attempt: 1 }, { attempt: 1 }, { attempt: 1 }], 'each done once, at its first attempt');
});

test('a completed listener that throws is reported; the task stays done and the slot goes on', async () => {
  const queue = await freshQueue(db, 'worker', "lease => '30 seconds', retain => '1 hour'");
  const ids = await enqueueBatch(db, queue, Array.from({ length: 5 }, (_, i) => ({ i })));
  const worker = new Worker({ pool: db, queue, handler: record(queue) });
  const seen = collect(worker);
  worker.on('completed', () => {
    throw new Error('a listener\'s bug');
  });
  await worker.start();
  await until(async () => seen.completed.length === 5, '5 completions');
  await worker.stop();
  assert.equal(seen.errors.length, 5);
  assert.match(seen.errors[0].message, /listener's bug/);
  assert.deepEqual(seen.failed, []);
  assert.deepEqual(seen.leaseLost, []);
  for (const id of ids) {
    const { rows } = await db.query('SELECT state, attempt FROM concurrency.task_status($1, $2)', [queue, id]);
    assert.deepEqual(rows[0], { state: 'done', attempt: 1 });
  }
});

test('task ids and lease tokens stay exact text where the application parses int8 as numbers', async (t) => {
  const pgTypes = require('pg').types;
  const before = pgTypes.getTypeParser(20, 'text');
  pgTypes.setTypeParser(20, (value) => Number(value)); // what many applications do
  t.after(() => pgTypes.setTypeParser(20, before));
  const queue = await freshQueue(db, 'worker');
  // ids past 2^53, which a Number cannot hold exactly
  await db.query(`SELECT pg_catalog.setval(pg_catalog.pg_get_serial_sequence('concurrency."q_${queue}"', 'id'), 9007199254740993)`);
  // enqueue's ids too
  assert.deepEqual(await enqueueBatch(db, queue, [{ i: 1 }, { i: 2 }, { i: 3 }]), ['9007199254740994', '9007199254740995', '9007199254740996']);
  const seen = [];
  const worker = new Worker({
    pool: db,
    queue,
    handler: async (task, client) => {
      // the rest of the row as node-postgres parses it, for claims on their
      // own and those made with a completion (the second and third) alike
      seen.push([typeof task.id, typeof task.leaseToken, task.id, task.payload, task.attempt, task.enqueuedAt instanceof Date, task.leaseExpiresAt instanceof Date]);
      await record(queue)(task, client);
    },
  });
  const events = collect(worker);
  await worker.start();
  await until(async () => events.completed.length === 3, '3 completions');
  await worker.stop();
  assert.deepEqual(seen, [
    ['string', 'string', '9007199254740994', { i: 1 }, 1, true, true],
    ['string', 'string', '9007199254740995', { i: 2 }, 1, true, true],
    ['string', 'string', '9007199254740996', { i: 3 }, 1, true, true],
  ]);
  assert.deepEqual(events.leaseLost, []);
  assert.deepEqual(events.errors, []);
  const { rows } = await db.query(`SELECT task_id::text AS id FROM "r_${queue}" ORDER BY task_id`);
  assert.deepEqual(rows.map((r) => r.id), ['9007199254740994', '9007199254740995', '9007199254740996']);
  assert.equal(await enqueue(db, queue, { i: 4 }), '9007199254740997');
});

test('claims wait less than the connections\' statement_timeout: no timeout errors while idle', async (t) => {
  // connections whose statements may run 400 ms: a claim waiting the
  // worker's 10 s would be cancelled (57014) and reported, its connection
  // dropped, again and again while the queue is empty
  const short = pool({ max: 4, statement_timeout: 400 });
  t.after(() => short.end());
  const queue = await freshQueue(db, 'worker');
  const worker = new Worker({ pool: short, queue, wait: 10000, handler: record(queue) });
  const events = collect(worker);
  await worker.start();
  // idle for three times the timeout: several claims have waited and ended
  await new Promise((resolve) => setTimeout(resolve, 1200));
  await enqueue(db, queue, { i: 1 });
  await until(async () => events.completed.length === 1, 'the completion');
  await worker.stop();
  assert.deepEqual(events.errors, []);
  assert.deepEqual(await results(queue), { n: 1, distinct: 1 });
});
