'use strict';
// The worker: slots that claim, run the handler in a transaction that
// completes the tasks, heartbeats, and the shutdown.

const { EventEmitter } = require('node:events');
const { protocol, S, query, interval, bigintText, json, withNamed, inline, inliner, ISO_TIMESTAMP, claimQuery, READ_COMMITTED_ONLY } = require('./statements');
const { QueueError, LeaseLostError, queueError, TaskSuspended, RacedClaim } = require('./errors');
const { serverFeatures } = require('./producer');
const { chainable, chainedQuery, waitWithin, sendCancel } = require('./transport');
const { Task } = require('./workflow');
const tracing = require('./tracing');

// The task of a batch that a lease-lost error names (null: none of them).
const LEASE_LOST_TASK = new RegExp(protocol.leaseLostTask);
function lostTask(tasks, err) {
  const match = LEASE_LOST_TASK.exec(err.message);
  return (match && tasks.find((t) => String(t.id) === match[1])) || null;
}

const POLL_MIN = protocol.timings.first_poll_ms; // the first sleep after an empty claim when polling

const RESOLVED = Promise.resolve();

// the completions' texts in the completing message (see Worker.finish)
const COMPLETE = inliner(S.complete.sql);
const COMPLETE_BATCH = inliner(S.complete_batch.sql);

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
    this.handles = null; // the tasks' handle spans (see lib/tracing.js), when tracing
    this.nextClaimed = 0; // when the completing message that claimed the next tasks was sent (tracing)
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
    const { heartbeat_min_ms: least, heartbeat_fraction: fraction } = protocol.timings;
    this.due = Date.now() + Math.max(least, leftSeconds * 1000 * fraction);
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
    this.tracing = tracing.workerTracing(this.queue); // null without @opentelemetry/api
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
    let claimedAt = 0; // when the claim of the tasks at hand began (tracing)
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
          if (this.tracing) claimedAt = tracing.now();
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
      const carriers = tracing.takeTraces(rows);
      const tasks = rows.map((r) => new Task(this.queue, r, client));
      // (no spans where none could have an effect: see tracing.live)
      const traced = this.tracing !== null && this.tracing.live();
      const claimContext = traced && this.tracing.claimed(claimedAt);
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
      if (traced) claim.handles = this.tracing.handling(tasks, carriers, claimContext);
      this.claims.add(claim);
      try {
        const outcome = await this.execute(claim, client, begun);
        if (outcome === false) {
          client.release(true);
          client = null;
        } else if (outcome !== true) {
          next = outcome;
          claimedAt = claim.nextClaimed;
        }
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
  //
  // When tracing, the handler runs in the context of the (first) task's
  // handle span, the completing message in complete spans inside the handle
  // spans, which end with the tasks' outcome (see lib/tracing.js).
  async execute(claim, client, begun) {
    const { tasks, handles } = claim;
    const batch = this.options.batch > 1;
    const input = batch ? tasks : tasks[0];
    let result;
    let next;
    let completing = null; // the complete spans, when tracing
    try {
      if (!begun) await client.query('BEGIN');
      result = await (handles ? this.tracing.run(handles, () => this.options.handler(input, client)) : this.options.handler(input, client));
      const beating = claim.end();
      if (beating) await beating;
      if (claim.suspension) throw claim.suspension; // even where the handler swallowed it
      if (claim.lost) throw claim.lost;
      if (handles) {
        completing = this.tracing.step('complete', handles);
        claim.nextClaimed = tracing.now();
      }
      next = await this.finish(client, tasks, result);
      if (completing) this.tracing.end(completing);
    } catch (thrown) {
      if (completing) this.tracing.end(completing, thrown);
      // what the handle spans end with: the error, but where the tasks
      // left the worker or went back unspent
      let failure = thrown;
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
        failure = undefined;
      } else if (claim.lost) {
        // told when the heartbeat found it
        failure = claim.lost;
      } else if (thrown instanceof RacedClaim) {
        failure = undefined;
        // the handler raised its isolation level, and the claim made with
        // the completion raced another worker's: its work was rolled back
        // with the message, so the tasks go back unspent, and the worker
        // claims with the completion under READ COMMITTED only from now on
        this.guarded = true;
        if (healthy) await this.giveBack(tasks);
      } else if (err instanceof LeaseLostError) {
        const lost = tasks.length > 1 && healthy ? lostTask(tasks, err) : null;
        if (lost) {
          // complete_batch named the one whose lease was lost: the others
          // go back unspent, to run again at once
          this.emit('leaseLost', lost, err);
          await this.giveBack(tasks.filter((t) => t !== lost));
        } else for (const t of tasks) this.emit('leaseLost', t, err);
      } else if (healthy) {
        await this.failTasks(tasks, err, handles);
      } else {
        this.report(err);
      }
      if (handles) this.tracing.endHandles(handles, failure);
      return healthy;
    }
    if (handles) this.tracing.endHandles(handles);
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
      sql = COMPLETE_BATCH([this.queue, array(tasks.map((t) => t.id)), array(tasks.map((t) => t.leaseToken))]);
    } else {
      const t = tasks[0];
      sql = COMPLETE([this.queue, bigintText(t.id), bigintText(t.leaseToken), result === undefined ? null : json(result)]);
    }
    if (this.stopping) return query(client, `${sql}; COMMIT`).then(() => null);
    if (!this.chainSql) this.chainSql = inline(S.claim_next.sql, [this.queue, this.options.batch, this.lease, this.options.name ?? null]);
    const guard = this.guarded || !chainable(client) ? READ_COMMITTED_ONLY : '';
    return chainedQuery(client, `${sql}; ${this.chainSql}${guard}; COMMIT; BEGIN`, this);
  }

  // `handles`: the tasks' handle spans, for fail spans inside them (when tracing).
  async failTasks(tasks, err, handles) {
    const message = err instanceof Error ? err.message : String(err);
    let failing = handles ? this.tracing.step('fail', handles) : null;
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
      if (failing) {
        this.tracing.end(failing);
        failing = null;
      }
      for (const t of tasks) this.emit('failed', t, err);
    } catch (failError) {
      if (failing) this.tracing.end(failing, failError);
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
};
