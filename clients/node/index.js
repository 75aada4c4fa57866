'use strict';
// Worker runtime and producer API for the concurrency_ext task queue, on
// node-postgres. Every statement is one parameterised query (node-postgres's
// unnamed statements), but for the message that ends a handler's
// transaction (see lib/worker.js, Worker.finish), with no LISTEN and no
// session state, so that it works through PgBouncer in transaction mode as
// well as on a direct connection. The statements are those of
// clients/protocol/statements.json (lib/protocol.js).

const { Worker } = require('./lib/worker');
const producer = require('./lib/producer');
const { QueueError, LeaseLostError, AwaitTimeoutError, TaskSuspended, LEASE_LOST } = require('./lib/errors');

module.exports = {
  Worker,
  enqueue: producer.enqueue,
  enqueueBatch: producer.enqueueBatch,
  enqueueGraph: producer.enqueueGraph,
  schedule: producer.schedule,
  unschedule: producer.unschedule,
  parentResults: producer.parentResults,
  awaitTask: producer.awaitTask,
  emitEvent: producer.emitEvent,
  serverFeatures: producer.serverFeatures,
  QueueError,
  LeaseLostError,
  AwaitTimeoutError,
  TaskSuspended,
  LEASE_LOST,
};
