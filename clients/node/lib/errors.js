'use strict';
// The errors of the queue calls, typed by SQLSTATE (clients/protocol).

const { sqlstates } = require('./protocol');

const LEASE_LOST = sqlstates.lease_lost;

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

// awaitTask's timeout: the task had not ended by then. `state` is the
// state it was in (ready, leased, scheduled, waiting).
class AwaitTimeoutError extends Error {
  constructor(queue, id, state) {
    super(`task ${id} of queue "${queue}" did not end in time (it is ${state})`);
    this.name = 'AwaitTimeoutError';
    this.state = state;
  }
}

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

// The completing message's claim found a task changed since its snapshot
// (40001): the handler raised its transaction's isolation level (see
// Worker.finish). Nothing of the message holds.
class RacedClaim extends Error {
  constructor(cause) {
    super('the claim in the completing message met a task changed since its snapshot', { cause });
  }
}

module.exports = {
  LEASE_LOST,
  QueueError,
  LeaseLostError,
  queueError,
  AwaitTimeoutError,
  TaskSuspended,
  RacedClaim,
};
