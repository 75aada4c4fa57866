'use strict';
// Worker runtime and producer API for the concurrency_ext task queue, on
// node-postgres. Every statement is one parameterised query (node-postgres's
// unnamed statements), but for the message that ends a handler's
// transaction (see Worker.finish), with no LISTEN and no session state, so
// that it works through PgBouncer in transaction mode as well as on a
// direct connection.

const { EventEmitter } = require('node:events');
const net = require('node:net');
const pgTypes = require('pg').types;
// the statements and SQLSTATEs of clients/protocol/statements.json
const protocol = require('./lib/protocol');

const S = protocol.statements;
const LEASE_LOST = protocol.sqlstates.lease_lost;

// An error of the queue, carrying the server's SQLSTATE (`code`), DETAIL
// and HINT; `cause` is node-postgres's error.
class QueueError extends Error {
  constructor(message, { code, detail, hint, cause } = {}) {
    super(message, cause ? { cause } : undefined);
    this.name = 'QueueError';
    this.code = code;
    this.detail = detail;
    this.hint = hint;
  }
}

// The task's lease is no longer this worker's (SQLSTATE CE001): another
// worker claimed it after the lease expired, it was cancelled, or it is gone.
// `reason` is the server's DETAIL, which says which.
class LeaseLostError extends QueueError {
  constructor(message, options = {}) {
    super(message, { ...options, code: LEASE_LOST });
    this.name = 'LeaseLostError';
    this.reason = options.detail;
  }
}

// node-postgres's error (or anything else) as ours: CE001 becomes a
// LeaseLostError, another SQLSTATE a QueueError with it; errors without a
// SQLSTATE (a dropped connection) pass through unchanged.
function queueError(err) {
  if (!err || err instanceof QueueError || typeof err.code !== 'string' || !/^[0-9A-Z]{5}$/.test(err.code)) return err;
  const options = { code: err.code, detail: err.detail, hint: err.hint, cause: err };
  return err.code === LEASE_LOST ? new LeaseLostError(err.message, options) : new QueueError(err.message, options);
}

// `text`: a query text, or a node-postgres query config (then no `values`)
async function query(db, text, values) {
  try {
    return await db.query(text, values);
  } catch (err) {
    throw queueError(err);
  }
}

// Milliseconds (a number) or a PostgreSQL interval (a string) as an interval
// parameter; null stays null (the server's default).
function interval(value, name) {
  if (value === undefined || value === null) return null;
  if (typeof value === 'number') {
    if (!Number.isFinite(value) || value <= 0) throw new RangeError(`${name} must be a positive number of milliseconds`);
    return `${value} milliseconds`;
  }
  if (typeof value === 'string') return value;
  throw new TypeError(`${name} must be milliseconds (a number) or an interval (a string)`);
}

// A value written into a query text (for the one message that carries
// several statements, which cannot have parameters), NULL for null. Quoted
// as node-postgres's escapeLiteral quotes (quotes doubled; with a
// backslash, an E'' string with backslashes doubled: right whatever
// standard_conforming_strings says), but without its loop that builds the
// text a character at a time: most values need no escape at all. A NUL
// character would end the message early: refused.
const ESCAPED = /['\\\0]/;
function literal(value, cast) {
  if (value === null || value === undefined) return `NULL${cast}`;
  const text = String(value);
  if (!ESCAPED.test(text)) return `'${text}'${cast}`;
  if (text.includes('\0')) throw new TypeError('a value sent to the server cannot contain a NUL character');
  const quoted = text.replace(/'/g, "''");
  return text.includes('\\') ? ` E'${quoted.replace(/\\/g, '\\\\')}'${cast}` : `'${quoted}'${cast}`;
}

// A task id or lease token (bigint, as the claim's text) for a query text:
// digits, checked rather than escaped.
const BIGINT = /^-?[0-9]{1,19}$/;
function bigintText(value) {
  const text = typeof value === 'string' ? value : String(value);
  if (!BIGINT.test(text)) throw new TypeError(`a task id or lease token must be an integer, not ${JSON.stringify(text)}`);
  return text;
}

// A payload of any JSON type. node-postgres would send a JS array as a
// PostgreSQL array (and an object through JSON.stringify anyway): sending
// the JSON text, cast to jsonb, treats every type alike.
function json(value) {
  if (value === undefined) return '{}';
  const text = JSON.stringify(value);
  if (text === undefined) throw new TypeError('a payload must be a JSON value');
  return text;
}

// Task ids (strings, numbers or bigints) as a bigint[] parameter.
function ids(value) {
  if (!Array.isArray(value)) throw new TypeError('after must be an array of task ids');
  return value.map((id) => (typeof id === 'bigint' ? id.toString() : id));
}

// The text of statement `name` with the named arguments of the options
// that are set (their values pushed onto `values`), so that the server's
// defaults apply to the others. `fields`: option -> [argument, convert].
function withNamed(name, values, fields, options) {
  const types = S[name].named;
  let extra = '';
  for (const option in fields) {
    const value = options[option];
    if (value === undefined) continue;
    const [argument, convert] = fields[option];
    values.push(convert ? convert(value) : value);
    extra += `, ${argument} => $${values.length}::${types[argument]}`;
  }
  return S[name].sql.replace('{named}', extra);
}

// A statement's text with each $n replaced by the quoted value (see
// literal), for the one message that carries several statements.
function inline(sql, values) {
  return sql.replace(/\$([0-9]+)/g, (_, n) => literal(values[n - 1], ''));
}

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
async function enqueue(db, queue, payload, options = {}) {
  const o = options;
  const values = [queue, json(payload), o.runAt ?? null, o.priority ?? 0, o.dedupeKey ?? null, o.concurrencyKey ?? null];
  const text = withNamed('enqueue', values, ENQUEUE_OPTIONS, options);
  // the id read as text by the row parser (see CLAIM_TYPES)
  const { rows } = await query(db, { text, values, types: CLAIM_TYPES, rowMode: 'array' });
  return rows[0][0];
}

// Adds one task per payload in one statement; returns their ids in payload order.
async function enqueueBatch(db, queue, payloads, options = {}) {
  if (!Array.isArray(payloads)) throw new TypeError('payloads must be an array');
  const o = options;
  const values = [queue, payloads.map(json), o.runAt ?? null, o.priority ?? 0, o.dedupeKeys ?? null, o.concurrencyKeys ?? null];
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
function graphTask(task, index) {
  if (task === null || typeof task !== 'object' || Array.isArray(task)) throw new TypeError(`tasks[${index}] must be an object`);
  const out = {};
  for (const [field, value] of Object.entries(task)) {
    const name = GRAPH_FIELDS[field];
    if (!name) throw new TypeError(`tasks[${index}] has a field enqueueGraph does not know: ${field}`);
    if (value === undefined) continue;
    if (field === 'payload') out.payload = JSON.parse(json(value)); // a TypeError for what is no JSON value
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
async function enqueueGraph(db, queue, tasks) {
  if (!Array.isArray(tasks)) throw new TypeError('tasks must be an array');
  const graph = JSON.stringify(tasks.map(graphTask));
  const { rows } = await query(db, { text: S.enqueue_graph.sql, values: [queue, graph], types: CLAIM_TYPES });
  return rows.map((r) => ({ ref: r.ref, taskId: r.task_id }));
}

// The results of a task's parents that are done: [{ taskId, parentQueue,
// result }] (for its worker: permission work on the task's queue).
async function parentResults(db, queue, taskId) {
  const { rows } = await query(db, { text: S.parent_results.sql, values: [queue, taskId], types: CLAIM_TYPES });
  return rows.map((r) => ({ taskId: r.task_id, parentQueue: r.parent_queue, result: r.result }));
}

// awaitTask's timeout: the task had not ended by then. `state` is the
// state it was in (ready, leased, scheduled, waiting).
class AwaitTimeoutError extends Error {
  constructor(queue, id, state) {
    super(`task ${id} of queue "${queue}" did not end in time (it is ${state})`);
    this.name = 'AwaitTimeoutError';
    this.state = state;
  }
}

// The longest one statement of awaitTask waits in the server: short enough
// for poolers and statement timeouts, long enough to cost little.
const AWAIT_STATEMENT_MS = 30000;

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

// The claims' rows (and enqueue's ids) parsed as node-postgres parses them,
// but bigint always as text: task ids and lease tokens go past 2^53, and an
// application may have told node-postgres to parse int8 as a number
// (pg.types.setTypeParser(20, …)).
// The timestamps stay as the server wrote them: a Task parses them when read
// (most handlers never do; parsing two a task was a tenth of the runtime's
// own JavaScript time in a busy slot, by a CPU profile).
const INT8 = 20;
const TIMESTAMPTZ = 1184;
const asText = (value) => value;
const CLAIM_TYPES = { getTypeParser: (oid, format) => (oid === INT8 || oid === TIMESTAMPTZ ? asText : pgTypes.getTypeParser(oid, format)) };
// a timestamp as node-postgres would have parsed it (a Date, unless the
// application told it otherwise)
const timestamp = (value) => (typeof value === 'string' ? pgTypes.getTypeParser(TIMESTAMPTZ, 'text')(value) : value);

const ISO_TIMESTAMP = /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d/;

const claimQuery = (db, text, values) => query(db, { text, values, types: CLAIM_TYPES });

// The guard of the claim in the completing message, once it needs one (see
// Worker.finish).
const READ_COMMITTED_ONLY = protocol.fragments.read_committed_only;

// The columns of a claim's row as the completing message reads them: where
// each of the task's columns is, and its parser. Rows are built in one
// shape from them (an object filled field by field under names read from
// the reply is a dictionary to V8, slower to build and to read); worked
// out once per worker and set of columns.
const TASK_FIELDS = ['task_id', 'lease_token', 'attempt', 'payload', 'enqueued_at', 'lease_expires_at', 'lease_left'];
class ClaimColumns {
  constructor(fields) {
    // what tells the reply's columns apart, to see that a later reply has
    // the same (compared field by field: a key string made per reply cost
    // its concatenations and number conversions)
    this.names = fields.map((f) => f.name);
    this.types = fields.map((f) => f.dataTypeID);
    this.formats = fields.map((f) => f.format);
    this.at = TASK_FIELDS.map((name) => this.names.indexOf(name));
    this.parsers = this.at.map((i) => (i < 0 ? null : CLAIM_TYPES.getTypeParser(fields[i].dataTypeID, fields[i].format || 'text')));
  }

  matches(fields) {
    const n = this.names.length;
    if (fields.length !== n) return false;
    for (let i = 0; i < n; i++) {
      const f = fields[i];
      if (f.name !== this.names[i] || f.dataTypeID !== this.types[i] || f.format !== this.formats[i]) return false;
    }
    return true;
  }

  // the worker's columns if these fields are theirs, else new ones
  static of(fields, known) {
    return known && known.matches(fields) ? known : new ClaimColumns(fields);
  }

  value(values, k) {
    const i = this.at[k];
    if (i < 0) return undefined;
    const v = values[i];
    return v === null ? null : this.parsers[k](v);
  }

  row(values) {
    return {
      task_id: this.value(values, 0),
      lease_token: this.value(values, 1),
      attempt: this.value(values, 2),
      payload: this.value(values, 3),
      enqueued_at: this.value(values, 4),
      lease_expires_at: this.value(values, 5),
      lease_left: this.value(values, 6),
    };
  }
}

// The completing message (see Worker.finish) as node-postgres's Submittable
// (the interface pg-cursor uses): a simple query whose replies are read
// here. It keeps the rows of the message's second statement, the claim,
// parsed as claimQuery parses them, and nothing of the others; it spares
// what node-postgres's Query does for every message and statement (a copy
// of its config, a result object and its parsers per statement, a row
// object per row): the Node.js process's instructions a task of a busy
// slot went from 215 000 to 160 000 (callgrind, the difference between
// drains of 4,000 and 12,000 tasks; the raw loop's: 131 000). Resolves with
// the claim's rows.
class ChainedQuery {
  constructor(text, worker) {
    this.text = text;
    this.worker = worker; // keeps the claim's columns (see ClaimColumns)
    this.statement = 0; // statements the server has completed
    this.columns = null;
    this.rows = [];
    this.failure = null; // a row that could not be parsed
    this.promise = new Promise((resolve, reject) => {
      // node-postgres wraps it where a query_timeout applies
      this.callback = (err, rows) => (err ? reject(chainError(err, this.statement)) : resolve(rows));
    });
  }

  submit(connection) {
    connection.query(this.text);
    return null;
  }

  handleRowDescription(msg) {
    if (this.statement !== 1) return;
    this.columns = this.worker.claimColumns = ClaimColumns.of(msg.fields, this.worker.claimColumns);
  }

  handleDataRow(msg) {
    if (this.statement !== 1 || this.failure) return;
    let row;
    try {
      row = this.columns.row(msg.fields);
    } catch (err) {
      this.failure = err;
      return;
    }
    this.rows.push(row);
  }

  handleCommandComplete() {
    this.statement++;
  }

  handleEmptyQuery() {}

  handleReadyForQuery() {
    if (this.failure) this.callback(this.failure);
    else this.callback(null, this.rows);
  }

  handleError(err) {
    this.callback(err);
  }

  // a simple query of these statements never gets these replies
  handlePortalSuspended() {}
  handleCopyInResponse(connection) {
    connection.sendCopyFail('the completing message does not copy');
  }
  handleCopyData() {}
}

// Whether `client` takes a ChainedQuery: node-postgres's own (pg-native's,
// or a client in pipeline mode, which refuses custom queries, take a Query).
const chainable = (client) => !!client.connection && !client.pipeline;

// The completing message's claim found a task changed since its snapshot
// (40001): the handler raised its transaction's isolation level (see
// Worker.finish). Nothing of the message holds.
class RacedClaim extends Error {
  constructor(cause) {
    super('the claim in the completing message met a task changed since its snapshot', { cause });
  }
}

// The completing message's error, `statement` the index of the statement
// that failed: a serialization failure (40001) after the completion, at the
// claim or the COMMIT, is a RacedClaim.
const SERIALIZATION_FAILURE = protocol.sqlstates.serialization_failure;
function chainError(err, statement) {
  if (err && err.code === SERIALIZATION_FAILURE && statement >= 1) return new RacedClaim(err);
  return queueError(err);
}

// Sends the completing message; resolves with the claim's rows (rejects with
// chainError's errors where the client is chainable).
function chainedQuery(client, text, worker) {
  if (!chainable(client)) return claimQuery(client, text).then((results) => results[1].rows);
  const chained = new ChainedQuery(text, worker);
  client.query(chained);
  return chained.promise;
}

const POLL_MIN = 50; // ms: the first sleep after an empty claim when polling

// The wait of a claim, ms: the worker's, but shorter than the connection's
// statement_timeout (ms, 0: none), which would end a longer wait with an
// error (57014), a reported error and a new connection each time.
function waitWithin(wait, timeout) {
  if (!(timeout > 0)) return wait;
  return Math.min(wait, Math.max(timeout - 1000, timeout / 2));
}

// Cancels the statement that `client`'s connection is running: the
// protocol's CancelRequest with the connection's backend key, on a
// connection of its own (what psql's ^C sends). Through PgBouncer the key is
// PgBouncer's, which passes the request to the server connection the client
// holds, where pg_cancel_backend(pid) could reach another client's statement.
// The request needs no authentication, so it goes in plain text even where
// the connection uses TLS. Resolves with whether it was sent, once the
// other side has closed the connection.
function sendCancel(client) {
  const { processID, secretKey } = client;
  const p = client.connectionParameters;
  if (processID == null || secretKey == null || !p) return Promise.resolve(false);
  return new Promise((resolve) => {
    const socket = typeof p.host === 'string' && p.host.startsWith('/')
      ? net.connect(`${p.host}/.s.PGSQL.${p.port}`)
      : net.connect(p.port, p.host);
    let sent = false;
    const done = () => {
      socket.destroy();
      resolve(sent);
    };
    socket.setTimeout(5000, done);
    socket.on('error', done);
    socket.on('close', done);
    socket.on('connect', () => {
      const message = Buffer.alloc(16);
      message.writeInt32BE(16, 0);
      message.writeInt32BE(80877102, 4); // the CancelRequest code
      message.writeInt32BE(processID, 8);
      message.writeInt32BE(secretKey, 12);
      sent = true;
      // and waits for the other side to close, as libpq does: PgBouncer
      // (1.18) fails on a cancel whose client hung up before it was passed on
      socket.write(message);
    });
    socket.on('end', done);
  });
}
const sleepFor = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const RESOLVED = Promise.resolve();

// Thrown inside a handler by task.sleep and task.waitForEvent once the task
// has left its worker (it comes back later, by itself): the worker neither
// completes nor fails it, and stops heartbeating it. A handler that catches
// errors around those calls must throw it on (`instanceof TaskSuspended`);
// one that swallows it is still taken as suspended.
class TaskSuspended extends Error {
  constructor(task, reason) {
    const until = reason.until instanceof Date ? reason.until.toISOString() : reason.until;
    super(`task ${task.id} of queue "${task.queue}" ${reason.event !== undefined ? `waits for event "${reason.event}"` : `sleeps until ${until}`}`);
    this.name = 'TaskSuspended';
    this.reason = reason;
  }
}

// A sleep's duration as an interval: milliseconds (>= 0) or an interval text.
function duration(value) {
  if (typeof value === 'number') {
    if (!Number.isFinite(value) || value < 0) throw new RangeError('a sleep must be a number of milliseconds >= 0');
    return `${value} milliseconds`;
  }
  if (typeof value === 'string') return value;
  throw new TypeError('a sleep must be milliseconds (a number) or an interval (a string)');
}

function stepName(name, what) {
  if (typeof name !== 'string' || name === '') throw new TypeError(`${what} must be a non-empty string`);
  return name;
}

// A step's result as it is recorded (JSON text, null for undefined) and as
// every run gets it back: what JSON makes of the value.
function stepValue(value) {
  if (value === undefined) return null;
  const text = JSON.stringify(value);
  if (text === undefined) throw new TypeError('a step must return a JSON value (or nothing)');
  return text;
}
const decoded = (text) => (text === null ? null : JSON.parse(text));

// The recorded result of a step as JSON text (jsonb null as 'null'), or
// null when the step was not recorded. CE001 when the lease is lost.
async function stepResult(db, task, step) {
  const { rows } = await query(db, S.step_result.sql, [
    task.queue,
    task.id,
    task.leaseToken,
    step,
  ]);
  return rows[0].result;
}

const RECORD_STEP = S.record_step.sql;

// Runs fn(client) in a transaction of its own on a pool connection, and
// gives the connection back (closed if it broke).
async function inTransaction(pool, fn) {
  const client = await pool.connect();
  let broken = false;
  try {
    await client.query('BEGIN');
    const value = await fn(client);
    await client.query('COMMIT');
    return value;
  } catch (err) {
    try {
      if (client.getTransactionStatus?.() !== 'I') await client.query('ROLLBACK');
    } catch {
      broken = true;
    }
    throw queueError(err);
  } finally {
    client.release(broken);
  }
}

// The step a runtime records when a wait for an event timed out, so that a
// later run of the handler (after a sleep) times out there again rather
// than waiting anew, or taking an event emitted since.
const eventTimeoutStep = (event) => `event-timeout:${event}`;

// A claimed task, as the handler gets it.
class Task {
  #client;
  #claim = null; // set by its Claim
  #enqueuedAt;
  #leaseExpiresAt;
  #sleeps = 0; // task.sleep calls of this run, which number them

  constructor(queue, row, client) {
    this.id = row.task_id;
    this.queue = queue;
    this.leaseToken = row.lease_token;
    this.attempt = row.attempt;
    this.payload = row.payload;
    this.#enqueuedAt = row.enqueued_at;
    this.#leaseExpiresAt = row.lease_expires_at;
    this.#client = client;
  }

  // parsed on first read (see CLAIM_TYPES)
  get enqueuedAt() {
    return (this.#enqueuedAt = timestamp(this.#enqueuedAt));
  }

  get leaseExpiresAt() {
    return (this.#leaseExpiresAt = timestamp(this.#leaseExpiresAt));
  }

  static attach(task, claim) {
    task.#claim = claim;
  }

  // aborted when the lease is lost (the LeaseLostError) or the worker
  // stopped past its deadline
  get signal() {
    return this.#claim.signal();
  }

  // extends the lease now (with progress, where the server keeps it)
  heartbeat(progress) {
    return this.#claim.heartbeat(progress);
  }

  // the results of the task's parents, read in the handler's transaction
  parentResults() {
    return parentResults(this.#client, this.queue, this.id);
  }

  // Durable workflows: the task's claim, for a call of `what`; refused in a
  // batch, and after the task was suspended (a handler that went on).
  #workflow(what) {
    const claim = this.#claim;
    if (claim.tasks.length > 1) throw new TypeError(`task.${what}() is for handlers of one task (batch 1)`);
    if (claim.suspension) throw claim.suspension;
    return claim;
  }

  // The key of a step for an outside service's idempotency: the same in
  // every run of the task.
  stepKey(name) {
    return `${this.queue}:${this.id}:${stepName(name, 'a step name')}`;
  }

  // A memoised step: the result recorded by an earlier run of this task,
  // or fn's, recorded now. With { transaction: true }, fn(client) runs in a
  // transaction of its own that records the step before it commits: its
  // database writes and the record happen together, exactly once.
  async step(name, fn, options = {}) {
    const claim = this.#workflow('step');
    stepName(name, 'a step name');
    if (typeof fn !== 'function') throw new TypeError('a step is a function');
    const pool = claim.worker.pool;
    const record = (db, text) => query(db, RECORD_STEP, [this.queue, this.id, this.leaseToken, name, text]);
    if (options.transaction) {
      return inTransaction(pool, async (client) => {
        const recorded = await stepResult(client, this, name);
        if (recorded !== null) return decoded(recorded);
        const text = stepValue(await fn(client));
        await record(client, text);
        return decoded(text);
      });
    }
    const recorded = await stepResult(pool, this, name);
    if (recorded !== null) return decoded(recorded);
    const text = stepValue(await fn());
    await record(pool, text);
    return decoded(text);
  }

  // A durable sleep: the task leaves the worker and comes back once
  // `ms` (milliseconds, or an interval text) has passed; the handler runs
  // again from its start, and this sleep (the Nth of the run) returns at
  // once then.
  async sleep(ms) {
    const claim = this.#workflow('sleep');
    const interval = duration(ms);
    const step = `sleep:${++this.#sleeps}`;
    const values = [this.queue, this.id, this.leaseToken, step];
    const { rows } = await query(claim.worker.pool, S.sleep_state.sql, values);
    const { until: recorded, passed } = rows[0];
    if (recorded !== null && passed) return;
    await claim.hold();
    let until;
    try {
      // the wake-up time once, recorded with the sleep that uses it (one
      // statement); woken before its time: to sleep again until then
      const r = recorded === null
        ? await query(claim.worker.pool, S.sleep.sql, [...values, interval])
        : await query(claim.worker.pool, S.sleep_again.sql, [this.queue, this.id, this.leaseToken, recorded]);
      until = r.rows[0].until;
    } catch (err) {
      claim.resume();
      throw err;
    }
    throw claim.suspend(this, { until: new Date(until) });
  }

  // The payload of `event` (emitted before, or while the task waited), or
  // null once `timeout` (milliseconds or an interval text; none: no limit)
  // has passed without it. Until then the task leaves the worker, as a
  // sleep does, and the handler runs again from its start when the event
  // comes or the timeout passes.
  async waitForEvent(event, timeout) {
    const claim = this.#workflow('waitForEvent');
    stepName(event, 'an event name');
    const limit = interval(timeout, 'timeout');
    const pool = claim.worker.pool;
    const timedOut = eventTimeoutStep(event);
    if ((await stepResult(pool, this, timedOut)) !== null) return null;
    await claim.hold();
    let row;
    try {
      // a time-out is recorded in the same statement (one transaction)
      ({ rows: [row] } = await query(pool, S.await_event.sql, [this.queue, this.id, this.leaseToken, event, limit, timedOut]));
    } catch (err) {
      claim.resume();
      throw err;
    }
    if (row.status === 'waiting') throw claim.suspend(this, { event });
    claim.resume();
    return row.status === 'received' ? decoded(row.payload) : null;
  }
}

// One claim: the tasks of one dequeue call that run together (one task, or
// a batch), with the heartbeats that keep their lease.
class Claim {
  constructor(worker, tasks) {
    this.worker = worker;
    this.tasks = tasks;
    this.lost = null; // the LeaseLostError a heartbeat got
    this.chain = RESOLVED; // heartbeats, one at a time, then complete
    this.due = null; // when the next heartbeat is due (Date.now() ms), if one is
    this.ended = false;
    for (const task of tasks) Task.attach(task, this);
    this.controller = null; // made when a handler reads task.signal
    this.aborted = null; // the reason, once aborted
    this.held = false; // no heartbeats while a sleep or a wait may end the lease
    this.suspension = null; // the TaskSuspended thrown, once the task left
  }

  // Stops the heartbeats before a call that may give the lease up (a
  // heartbeat after it would find the token fenced off: a spurious CE001);
  // resolves once the one in flight is done.
  hold() {
    this.held = true;
    this.due = null;
    return this.chain;
  }

  // The lease is still held: heartbeats again, the next one soon.
  resume() {
    this.held = false;
    this.schedule(1);
  }

  // The task left its worker (task.sleep, task.waitForEvent): no heartbeat
  // any more, and the worker neither completes nor fails it. Returns what
  // the handler is unwound with.
  suspend(task, reason) {
    this.ended = true;
    this.due = null;
    this.suspension = new TaskSuspended(task, reason);
    return this.suspension;
  }

  // The tasks' AbortSignal, made on first use (most handlers never read it).
  signal() {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.aborted) this.controller.abort(this.aborted);
    }
    return this.controller.signal;
  }

  abort(reason) {
    if (this.aborted) return;
    this.aborted = reason;
    if (this.controller) this.controller.abort(reason);
  }

  // Heartbeats every third of the time the lease has left (on the worker's
  // one timer: see Worker.wakeAt).
  schedule(leftSeconds) {
    if (this.ended || this.held || !this.worker.options.heartbeat) return;
    this.due = Date.now() + Math.max(10, (leftSeconds * 1000) / 3);
    this.worker.wakeAt(this.due);
  }

  // Extends the lease now (with the task's progress, where the server keeps
  // it). Chained behind the one in flight, and never after complete began,
  // so that a heartbeat cannot reach the server while the task completes
  // (it would wait for the completing transaction and then find the task
  // gone: a spurious CE001).
  heartbeat(progress) {
    if (progress !== undefined && !this.worker.features.progress)
      return Promise.reject(new QueueError('this server does not keep progress (heartbeat has no progress argument)', { code: protocol.sqlstates.undefined_function }));
    const beat = this.chain.then(async () => {
      if (this.ended || this.lost || this.held) return;
      const w = this.worker;
      const values = [w.queue];
      let text;
      if (this.tasks.length === 1) {
        values.push(this.tasks[0].id, this.tasks[0].leaseToken, w.lease);
        text = withNamed('heartbeat', values, { progress: ['progress', json] }, { progress });
      } else {
        values.push(this.tasks.map((t) => t.id), this.tasks.map((t) => t.leaseToken), w.lease);
        text = S.heartbeat_batch.sql;
      }
      try {
        const { rows } = await query(w.pool, text, values);
        this.schedule(rows[0].lease_left);
      } catch (err) {
        if (err instanceof LeaseLostError) {
          // told now, so that a long handler can stop (task.signal)
          this.lost = err;
          for (const t of this.tasks) w.emit('leaseLost', t, err);
          this.abort(err);
          return;
        }
        w.report(err);
        if (this.due === null) this.schedule(1); // try again soon
        throw err;
      }
    });
    this.chain = beat.catch(() => {});
    return beat;
  }

  // No heartbeat after this one. Returns the one in flight, to be awaited,
  // if there is one (none: nothing to wait for, not even a turn of the
  // event loop).
  end() {
    this.ended = true;
    this.due = null;
    return this.chain === RESOLVED ? null : this.chain;
  }
}

class Worker extends EventEmitter {
  constructor(options) {
    super();
    const o = { concurrency: 1, batch: 1, wait: 10000, pollInterval: 1000, heartbeat: true, handleSignals: false, shutdownTimeout: 30000, ...options };
    if (!o.pool || typeof o.pool.connect !== 'function') throw new TypeError('pool must be a pg.Pool');
    if (typeof o.queue !== 'string' || o.queue === '') throw new TypeError('queue must be a queue name');
    if (typeof o.handler !== 'function') throw new TypeError('handler must be a function');
    for (const k of ['concurrency', 'batch']) if (!Number.isInteger(o[k]) || o[k] < 1) throw new RangeError(`${k} must be an integer >= 1`);
    if (!Number.isFinite(o.wait) || o.wait < 0) throw new RangeError('wait must be a number of milliseconds (0: poll)');
    if (!Number.isFinite(o.pollInterval) || o.pollInterval <= 0) throw new RangeError('pollInterval must be a positive number of milliseconds');
    // each slot keeps a connection for its claims and handlers; heartbeats need one more
    const max = o.pool.options && o.pool.options.max;
    if (max && max < o.concurrency + 1)
      throw new RangeError(`the pool has max ${max} connections: a worker of concurrency ${o.concurrency} needs at least ${o.concurrency + 1}`);
    // they are written into a query text (Worker.finish), where a NUL would end it
    for (const k of ['queue', 'name', 'lease']) if (typeof o[k] === 'string' && o[k].includes('\0')) throw new TypeError(`${k} cannot contain a NUL character`);
    this.options = o;
    this.pool = o.pool;
    this.queue = o.queue;
    this.lease = interval(o.lease, 'lease');
    this.features = null;
    this.stopping = false;
    this.slots = [];
    this.claims = new Set();
    this.sleepers = new Set();
    // connections whose claim waits in the server (stop() cancels it), and
    // those a cancel was sent to (not given back to the pool: a cancel
    // that arrives late would cancel the next user's statement)
    this.waitingClients = new Set();
    this.cancelled = new WeakSet();
    this.signalHandler = null;
    this.chainSql = null;
    this.claimColumns = null; // the completing message's (see ClaimColumns)
    // the completing message's claim is made under READ COMMITTED only,
    // once a handler raised its transaction's isolation level (see finish)
    this.guarded = false;
    this.clockOffset = 0; // ms the server's clock is ahead of this one's
    // one timer for the heartbeats of every claim (a timer a claim, set and
    // cleared for every task, was a cost of a busy slot): when it is set to
    // go off (Date.now() ms)
    this.beatTimer = null;
    this.beatDue = Infinity;
  }

  // Sets the heartbeats' timer to go off by `due` (ms) at the latest.
  wakeAt(due) {
    if (this.beatTimer && this.beatDue <= due) return;
    if (this.beatTimer) clearTimeout(this.beatTimer);
    this.beatDue = due;
    this.beatTimer = setTimeout(() => this.beat(), Math.max(0, due - Date.now()));
    this.beatTimer.unref?.();
  }

  // Sends the heartbeats that are due, and sets the timer for the next.
  beat() {
    this.beatTimer = null;
    this.beatDue = Infinity;
    const now = Date.now();
    let next = Infinity;
    for (const claim of this.claims) {
      if (claim.due === null) continue;
      if (claim.due <= now) {
        claim.due = null;
        claim.heartbeat().catch(() => {}); // reported through the worker
      } else if (claim.due < next) next = claim.due;
    }
    if (next < Infinity) this.wakeAt(next);
  }

  // Seconds the claim's lease has by the server's clock: the claim on its
  // own says so (and shows the offset between the clocks, within a round
  // trip); for a claim without it, the lease's end less the server's time
  // reckoned from that offset.
  leaseLeft(row) {
    const now = Date.now();
    // the server's text as it comes: Date.parse reads DateStyle ISO (what
    // node-postgres expects) in a third of the time node-postgres's parser
    // takes; another style is not guessed at (NaN: heartbeat soon)
    const expires = row.lease_expires_at;
    const end = expires instanceof Date ? expires.getTime() : ISO_TIMESTAMP.test(expires) ? Date.parse(expires) : NaN;
    if (typeof row.lease_left === 'number') {
      if (Number.isFinite(end)) this.clockOffset = end - row.lease_left * 1000 - now;
      return row.lease_left;
    }
    const left = (end - (now + this.clockOffset)) / 1000;
    return Number.isFinite(left) ? left : 1; // an end it cannot read: heartbeat soon
  }

  // Reads what the server offers and starts claiming. Resolves once the
  // worker runs; fails if the extension or the queue is missing.
  async start() {
    if (this.features) throw new Error('the worker has been started already');
    this.features = await serverFeatures(this.pool);
    // wait: 0 polls even where the server could wait
    this.waiting = this.features.wait && this.options.wait > 0;
    const { rows } = await query(this.pool, S.worker_settings.sql, [this.queue]);
    if (!rows[0].queue_exists) throw new QueueError(`queue "${this.queue}" does not exist`, { code: protocol.sqlstates.undefined_object });
    this.waitMs = waitWithin(this.options.wait, rows[0].statement_timeout_ms);
    this.claimSql = this.waiting ? S.claim_wait.sql : S.claim.sql;
    if (this.options.handleSignals) {
      this.signalHandler = (signal) => {
        this.stop().finally(() => process.exit(0));
        void signal;
      };
      process.once('SIGTERM', this.signalHandler);
      process.once('SIGINT', this.signalHandler);
    }
    for (let i = 0; i < this.options.concurrency; i++) this.slots.push(this.runSlot());
    return this;
  }

  async claim(client) {
    const values = [this.queue, this.options.batch, this.lease, this.options.name ?? null];
    if (!this.waiting) return (await claimQuery(client, this.claimSql, values)).rows;
    values.push(`${this.waitMs} milliseconds`);
    this.waitingClients.add(client);
    try {
      return (await claimQuery(client, this.claimSql, values)).rows;
    } finally {
      this.waitingClients.delete(client);
    }
  }

  // Sleeps, or less if stop() comes first.
  pause(ms) {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.sleepers.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.sleepers.add(done);
    });
  }

  // One slot: a pool connection kept for its claims and handlers (as a
  // hand-written loop would), given back when it breaks and at the end.
  // A handler's completion usually claims the slot's next tasks too (see
  // finish): those arrive as `next`, their transaction already begun.
  async runSlot() {
    let idle = POLL_MIN;
    let client = null;
    let next = null;
    const backOff = async () => {
      await this.pause(idle);
      idle = Math.min(idle * 2, this.options.pollInterval);
    };
    for (;;) {
      let rows = next;
      const begun = rows !== null;
      next = null;
      if (!begun) {
        if (this.stopping) break;
        try {
          client = client || (await this.pool.connect());
          rows = await this.claim(client);
        } catch (err) {
          if (this.stopping && client && this.cancelled.has(client)) break; // stop() cancelled the wait
          this.report(err);
          if (client && !(err instanceof QueueError)) {
            client.release(true); // the connection broke: a new one next time
            client = null;
          }
          await backOff();
          continue;
        }
        if (rows.length === 0) {
          if (!this.waiting) await backOff();
          continue;
        }
      }
      idle = POLL_MIN;
      const tasks = rows.map((r) => new Task(this.queue, r, client));
      if (this.stopping) {
        if (begun && !(await this.commit(client))) {
          client.release(true);
          client = null;
        }
        await this.giveBack(tasks);
        break;
      }
      const claim = new Claim(this, tasks);
      claim.schedule(this.leaseLeft(rows[0]));
      this.claims.add(claim);
      try {
        const outcome = await this.execute(claim, client, begun);
        if (outcome === false) {
          client.release(true);
          client = null;
        } else if (outcome !== true) next = outcome;
      } finally {
        this.claims.delete(claim);
      }
    }
    if (client) client.release(this.cancelled.has(client));
  }

  // Commits the slot's open transaction; false when the connection broke.
  async commit(client) {
    try {
      await client.query('COMMIT');
      return true;
    } catch (err) {
      this.report(err);
      return false;
    }
  }

  // Runs the handler in a transaction whose last statement is complete (or
  // complete_batch); on a throw, rolls back and fails the tasks with the
  // error's message. `begun`: the transaction is open already (the
  // previous completion began it). Returns false when the connection is
  // broken, the next claimed tasks (their transaction begun) when the
  // completion brought some, true otherwise.
  async execute(claim, client, begun) {
    const { tasks } = claim;
    const batch = this.options.batch > 1;
    let result;
    let next;
    try {
      if (!begun) await client.query('BEGIN');
      result = await this.options.handler(batch ? tasks : tasks[0], client);
      const beating = claim.end();
      if (beating) await beating;
      if (claim.suspension) throw claim.suspension; // even where the handler swallowed it
      if (claim.lost) throw claim.lost;
      next = await this.finish(client, tasks, result);
    } catch (thrown) {
      const beating = claim.end();
      if (beating) await beating;
      let healthy = true;
      try {
        // not where the failure was the COMMIT's: nothing is open then
        if (client.getTransactionStatus?.() !== 'I') await client.query('ROLLBACK');
      } catch (rollbackError) {
        healthy = false; // the lease lapses; the task comes back
        this.report(rollbackError);
      }
      const err = queueError(thrown);
      if (claim.suspension) {
        // the task left the worker (a durable sleep or wait): not completed,
        // not failed; the handler's writes outside its steps rolled back
        for (const t of tasks) this.emit('suspended', t, claim.suspension.reason);
      } else if (claim.lost) {
        // told when the heartbeat found it
      } else if (thrown instanceof RacedClaim) {
        // the handler raised its isolation level, and the claim made with
        // the completion raced another worker's: its work was rolled back
        // with the message, so the tasks go back unspent, and the worker
        // claims with the completion under READ COMMITTED only from now on
        this.guarded = true;
        if (healthy) await this.giveBack(tasks);
      } else if (err instanceof LeaseLostError) {
        for (const t of tasks) this.emit('leaseLost', t, err);
      } else if (healthy) {
        await this.failTasks(tasks, err);
      } else {
        this.report(err);
      }
      return healthy;
    }
    // done: a listener's throw is reported, not taken for the task's failure
    try {
      for (const t of tasks) this.emit('completed', t, result);
    } catch (err) {
      this.report(err);
    }
    if (next === null) return true;
    if (next.length > 0) return next;
    return await this.commit(client);
  }

  // Completes the tasks and commits, in one message (a simple query of
  // several statements: one round trip where a statement each would take
  // two). Unless the worker is stopping, the same message claims the
  // slot's next tasks inside the completing transaction and begins the
  // next one:
  //
  //   SELECT concurrency.complete(…); SELECT … FROM concurrency.dequeue(…);
  //   COMMIT; BEGIN
  //
  // so that a busy slot spends two round trips a task (this one and its
  // handler's statements) instead of five. The claim commits with the
  // completion, before the next handler starts, as a claim on its own
  // would; if anything in the message fails, nothing of it holds (the
  // completion, the claim), and the tasks are failed as a throw would
  // fail them. The claim never waits. It is made in the handler's
  // transaction: where the handler raised its isolation level (SET
  // TRANSACTION ISOLATION LEVEL REPEATABLE READ), a claim that meets a task
  // another worker claimed since the handler's snapshot fails with 40001
  // (at the claim, or at the COMMIT under SERIALIZABLE). The tasks are then
  // handed back (their work rolled back with the message, no attempt
  // spent: see execute) and from then on the worker's claim in the
  // completing message carries a guard that claims nothing above READ
  // COMMITTED. Without that guard until then, because it costs the server
  // 52 600 instructions a message (parse, plan and a gating Result node;
  // callgrind), a quarter of an empty claim's. Where the failing statement
  // cannot be told (pg-native, pipeline mode) the guard is always there.
  // Resolves with the claimed rows ([] when none: the begun transaction
  // is then empty), or null when it claimed nothing and committed.
  finish(client, tasks, result) {
    let sql;
    if (this.options.batch > 1) {
      const array = (values) => `{${values.map(bigintText).join(',')}}`;
      sql = inline(S.complete_batch.sql, [this.queue, array(tasks.map((t) => t.id)), array(tasks.map((t) => t.leaseToken))]);
    } else {
      const t = tasks[0];
      sql = inline(S.complete.sql, [this.queue, bigintText(t.id), bigintText(t.leaseToken), result === undefined ? null : json(result)]);
    }
    if (this.stopping) return query(client, `${sql}; COMMIT`).then(() => null);
    if (!this.chainSql) this.chainSql = inline(S.claim_next.sql, [this.queue, this.options.batch, this.lease, this.options.name ?? null]);
    const guard = this.guarded || !chainable(client) ? READ_COMMITTED_ONLY : '';
    return chainedQuery(client, `${sql}; ${this.chainSql}${guard}; COMMIT; BEGIN`, this);
  }

  async failTasks(tasks, err) {
    const message = err instanceof Error ? err.message : String(err);
    try {
      if (tasks.length === 1) {
        await query(this.pool, S.fail.sql, [this.queue, tasks[0].id, tasks[0].leaseToken, message, null]);
      } else {
        await query(this.pool, S.fail_batch.sql, [
          this.queue,
          tasks.map((t) => t.id),
          tasks.map((t) => t.leaseToken),
          message,
        ]);
      }
      for (const t of tasks) this.emit('failed', t, err);
    } catch (failError) {
      if (failError instanceof LeaseLostError) for (const t of tasks) this.emit('leaseLost', t, failError);
      else this.report(failError); // the lease lapses; the task comes back
    }
  }

  // Hands claimed tasks back unstarted: ready again, the attempt not
  // counted. Without release on the server they are left to their lease
  // (never failed: that would spend an attempt).
  async giveBack(tasks) {
    if (!this.features.release && !this.features.releaseBatch) return;
    try {
      if (this.features.releaseBatch && tasks.length > 1) {
        await query(this.pool, S.release_batch.sql, [
          this.queue,
          tasks.map((t) => t.id),
          tasks.map((t) => t.leaseToken),
        ]);
      } else {
        for (const t of tasks) await query(this.pool, S.release.sql, [this.queue, t.id, t.leaseToken]);
      }
      for (const t of tasks) this.emit('released', t);
    } catch (err) {
      this.report(err);
    }
  }

  report(err) {
    if (this.listenerCount('error') > 0) this.emit('error', err);
    else console.error('concurrency-ext worker:', err);
  }

  // Stops claiming, cancels the claims that wait in the server for work
  // (a claim whose tasks arrive first hands them back), and waits for the
  // running handlers up to `timeout` ms; past it, stops heartbeating them,
  // so that their leases lapse. Resolves with the number of tasks still
  // running then.
  async stop({ timeout = this.options.shutdownTimeout } = {}) {
    this.stopping = true;
    if (this.signalHandler) {
      process.removeListener('SIGTERM', this.signalHandler);
      process.removeListener('SIGINT', this.signalHandler);
    }
    for (const wake of [...this.sleepers]) wake();
    // claims waiting for work end now; again while one is left (a cancel
    // that reaches the server before the claim's statement began is lost)
    const cancelWaits = () => {
      for (const client of this.waitingClients) {
        this.cancelled.add(client);
        void sendCancel(client);
      }
    };
    cancelWaits();
    const again = setInterval(cancelWaits, 250);
    let timer;
    const deadline = new Promise((resolve) => {
      timer = setTimeout(resolve, timeout);
    });
    await Promise.race([Promise.all(this.slots), deadline]);
    clearTimeout(timer);
    clearInterval(again);
    let running = 0;
    for (const claim of this.claims) {
      running += claim.tasks.length;
      claim.ended = true;
      claim.due = null;
      claim.abort(new Error('the worker stopped: the lease is left to lapse'));
    }
    return running;
  }
}

module.exports = {
  Worker,
  enqueue,
  enqueueBatch,
  enqueueGraph,
  schedule,
  unschedule,
  parentResults,
  awaitTask,
  emitEvent,
  serverFeatures,
  QueueError,
  LeaseLostError,
  AwaitTimeoutError,
  TaskSuspended,
  LEASE_LOST,
};
