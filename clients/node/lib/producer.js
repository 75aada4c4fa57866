'use strict';
// What producers call: enqueue (one, a batch, a graph), schedules, events,
// awaiting a task's end, and the server's features.

const { protocol, S, query, interval, json, ids, withNamed, decoded, CLAIM_TYPES } = require('./statements');
const { QueueError, AwaitTimeoutError } = require('./errors');
const { traceEnqueue } = require('./tracing');

// enqueue's named arguments, sent only when given, so that servers before
// 0.3.0 take the other calls
const ENQUEUE_OPTIONS = {
  // 'ignore' (the server's default) or 'replace': a dedupeKey's holder that
  // has not started takes this payload, runAt and priority (debounce)
  onConflict: ['on_conflict'],
  // ids of tasks of the same queue that must be done before this one runs
  // (it waits in state 'waiting')
  after: ['after', ids],
};

// Adds a task and returns its id (a string: ids are bigint). `db` is a Pool
// or a Client, so that a producer can enqueue inside its own transaction.
// Inside a traced context, in a span of its own whose context goes with the
// payload (see lib/tracing.js).
function enqueue(db, queue, payload, options = {}) {
  return traceEnqueue(queue, (inject) => enqueueOne(db, queue, inject(payload), options), taskIdOf);
}

const taskIdOf = (id) => id;

async function enqueueOne(db, queue, payload, options) {
  const o = options;
  const values = [queue, json(payload), o.runAt ?? null, o.priority ?? 0, o.dedupeKey ?? null, o.concurrencyKey ?? null];
  const text = withNamed('enqueue', values, ENQUEUE_OPTIONS, options);
  // the id read as text by the row parser (see CLAIM_TYPES)
  const { rows } = await query(db, { text, values, types: CLAIM_TYPES, rowMode: 'array' });
  return rows[0][0];
}

// Adds one task per payload in one statement; returns their ids in payload order.
function enqueueBatch(db, queue, payloads, options = {}) {
  return traceEnqueue(queue, (inject) => enqueueMany(db, queue, payloads, inject, options));
}

async function enqueueMany(db, queue, payloads, inject, options) {
  if (!Array.isArray(payloads)) throw new TypeError('payloads must be an array');
  const o = options;
  const values = [queue, payloads.map((p) => json(inject(p))), o.runAt ?? null, o.priority ?? 0, o.dedupeKeys ?? null, o.concurrencyKeys ?? null];
  const text = withNamed('enqueue_batch', values, {}, options);
  // the ids read as text by the row parser (see CLAIM_TYPES), not cast one
  // by one; a query config costs node-postgres a copy of it, once a call
  const { rows } = await query(db, { text, values, types: CLAIM_TYPES, rowMode: 'array' });
  return rows.map((r) => r[0]);
}

// enqueueGraph's task fields, as the server names them.
const GRAPH_FIELDS = {
  ref: 'ref',
  payload: 'payload',
  after: 'after',
  queue: 'queue',
  runAt: 'run_at',
  priority: 'priority',
  concurrencyKey: 'concurrency_key',
};

// A parent in a graph task's `after`, as the server reads it: a string is a
// ref of the graph; anything else an existing task: an id (a number or a
// bigint: a task of the task's own queue), or { id } / { queue, id } with
// the id as enqueue returns it (a string). JSON has no bigint: it goes as
// { id: 'digits' }, which the server reads as an id.
function graphParent(parent) {
  if (typeof parent === 'bigint') return { id: parent.toString() };
  if (parent !== null && typeof parent === 'object' && typeof parent.id === 'bigint') return { ...parent, id: parent.id.toString() };
  return parent;
}

// One task of a graph as the server's JSON object, its fields renamed.
function graphTask(task, index, inject) {
  if (task === null || typeof task !== 'object' || Array.isArray(task)) throw new TypeError(`tasks[${index}] must be an object`);
  const out = {};
  for (const [field, value] of Object.entries(task)) {
    const name = GRAPH_FIELDS[field];
    if (!name) throw new TypeError(`tasks[${index}] has a field enqueueGraph does not know: ${field}`);
    if (value === undefined) continue;
    if (field === 'payload') out.payload = JSON.parse(json(inject(value))); // a TypeError for what is no JSON value
    else if (field === 'after') {
      if (!Array.isArray(value)) throw new TypeError(`tasks[${index}].after must be an array`);
      out.after = value.map(graphParent);
    } else out[name] = value;
  }
  return out;
}

// Adds a graph of tasks, all or nothing; a task waits until the tasks of
// its `after` are done. Resolves with [{ ref, taskId }] in the order of
// `tasks` (ref null for a task without one).
function enqueueGraph(db, queue, tasks) {
  return traceEnqueue(queue, (inject) => enqueueTasks(db, queue, tasks, inject));
}

async function enqueueTasks(db, queue, tasks, inject) {
  if (!Array.isArray(tasks)) throw new TypeError('tasks must be an array');
  const graph = JSON.stringify(tasks.map((task, index) => graphTask(task, index, inject)));
  const { rows } = await query(db, { text: S.enqueue_graph.sql, values: [queue, graph], types: CLAIM_TYPES });
  return rows.map((r) => ({ ref: r.ref, taskId: r.task_id }));
}

// The results of a task's parents that are done: [{ taskId, parentQueue,
// result }] (for its worker: permission work on the task's queue).
async function parentResults(db, queue, taskId) {
  const { rows } = await query(db, { text: S.parent_results.sql, values: [queue, taskId], types: CLAIM_TYPES });
  return rows.map((r) => ({ taskId: r.task_id, parentQueue: r.parent_queue, result: r.result }));
}

// The longest one statement of awaitTask waits in the server: short enough
// for poolers and statement timeouts, long enough to cost little.
const AWAIT_STATEMENT_MS = protocol.timings.await_task_slice_ms;

// Resolves with { state, result, lastError } as soon as the task is done,
// dead or cancelled (`timeout`: ms, none: no limit; past it, rejects with an
// AwaitTimeoutError), or null when there is no such task (any more). One statement at
// a time, of at most 30 s, each woken by the task's end.
async function awaitTask(db, queue, id, { timeout } = {}) {
  if (timeout !== undefined && timeout !== null && !(Number.isFinite(timeout) && timeout >= 0))
    throw new RangeError('timeout must be a number of milliseconds >= 0');
  const taskId = typeof id === 'bigint' ? id.toString() : id;
  const deadline = timeout == null ? Infinity : Date.now() + timeout;
  for (;;) {
    const wait = Math.max(0, Math.min(deadline - Date.now(), AWAIT_STATEMENT_MS));
    const { rows } = await query(db, S.await_task.sql, [
      queue,
      taskId,
      `${Math.round(wait)} milliseconds`,
    ]);
    const row = rows[0];
    // none (any more): on a queue that retains nothing, a task completed
    // without a result or cancelled is gone at once, and nothing tells which
    if (!row) return null;
    if (row.state === 'done' || row.state === 'dead' || row.state === 'cancelled') return { state: row.state, result: decoded(row.result), lastError: row.last_error };
    if (Date.now() >= deadline) throw new AwaitTimeoutError(queue, taskId, row.state);
  }
}

// Emits `event` with `payload` (a JSON value; none: null): the tasks
// waiting for it run again, and tasks that wait for it later (within
// concurrency.event_retention) take it at once. Resolves with how many
// waiting tasks it woke. Needs EXECUTE on concurrency.emit_event.
async function emitEvent(db, event, payload) {
  if (typeof event !== 'string' || event === '') throw new TypeError('an event name must be a non-empty string');
  const { rows } = await query(db, S.emit_event.sql, [event, payload === undefined ? null : json(payload)]);
  return rows[0].woken;
}

// schedule's settings, as the server names them.
const SCHEDULE_OPTIONS = {
  cron: ['cron'],
  every: ['every', (v) => interval(v, 'every')],
  payload: ['payload', json],
  timeZone: ['time_zone'],
  priority: ['priority'],
  concurrencyKey: ['concurrency_key'],
  catchUp: ['catch_up'],
};

// Enqueues a task into `queue` at each due time of `cron` (five fields or
// @hourly, @daily, …, in `timeZone`) or `every` (milliseconds or an
// interval), whatever the number of workers; the task's payload is
// `payload` with "scheduled_for". The same settings again change nothing;
// others replace the schedule. Needs permission manage on the queue.
async function schedule(db, name, queue, options = {}) {
  for (const k of Object.keys(options)) if (!SCHEDULE_OPTIONS[k]) throw new TypeError(`schedule has no option ${k}`);
  const values = [name, queue];
  await query(db, withNamed('schedule', values, SCHEDULE_OPTIONS, options), values);
}

// Removes a schedule (its tasks already enqueued stay); false if there was none.
async function unschedule(db, name) {
  const { rows } = await query(db, S.unschedule.sql, [name]);
  return rows[0].removed;
}

// What the server offers beyond 0.2.0 (the waiting dequeue, release,
// progress), read from pg_proc once per worker.
async function serverFeatures(db) {
  const { rows } = await query(db, S.features.sql);
  const has = (name, arg) => rows.some((r) => r.proname === name && (!arg || (r.args || []).includes(arg)));
  if (!has('dequeue')) throw new QueueError('the extension concurrency_ext is not installed in this database', { code: protocol.sqlstates.undefined_function });
  return {
    wait: has('dequeue', 'wait'),
    release: has('release'),
    releaseBatch: has('release_batch'),
    progress: has('heartbeat', 'progress'),
    completeBatch: has('complete_batch'),
  };
}

// What a claim returns for each task (S.claim, S.claim_wait, and S.claim_next
// in the completing message): dequeue's columns and lease_left, the seconds
// its lease has by the server's clock (for the heartbeats; it also shows
// the offset between the clocks: see Worker.leaseLeft).

module.exports = {
  enqueue,
  enqueueBatch,
  enqueueGraph,
  parentResults,
  awaitTask,
  emitEvent,
  schedule,
  unschedule,
  serverFeatures,
};
