'use strict';
// A claimed task as the handler gets it, with the durable-workflow calls
// (step, sleep, waitForEvent).

const { S, query, interval, decoded, timestamp } = require('./statements');
const { queueError } = require('./errors');
const { parentResults } = require('./producer');

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

module.exports = {
  Task,
};
