'use strict';
// The conformance scenarios of clients/conformance/scenarios.json, run
// through this package's public API (see clients/conformance/README.md).
const { test, before } = require('node:test');
const assert = require('node:assert/strict');
const api = require('@opentelemetry/api');
const { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } = require('@opentelemetry/sdk-trace-base');
const { AsyncLocalStorageContextManager } = require('@opentelemetry/context-async-hooks');
const { W3CTraceContextPropagator } = require('@opentelemetry/core');
const { Worker, enqueue, emitEvent } = require('..');
const { protocol } = require('../lib/statements');
const { until, workerPool } = require('./helpers');
const spec = require('../../conformance/scenarios.json');

// the tracing scenario's SDK: spans kept in memory, the W3C propagator
const exporter = new InMemorySpanExporter();
api.trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
api.context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
api.propagation.setGlobalPropagator(new W3CTraceContextPropagator());

const { db, collect } = workerPool({ max: 12 });
const SQL = spec.sql;

before(async () => {
  for (const statement of SQL.setup) await db.query(statement);
});

const queueOf = (scenario) => `conformance_${scenario.name}`;

// One task's ops (see scenarios.json "ops"), in the handler's transaction
// on `client`; run.worker is the worker running it, run.stopped its stop
// once an op asked for it.
async function runOps(task, client, run) {
  const mark = (what, detail = null) =>
    db.query(SQL.mark, [task.queue, task.payload.n, task.attempt, what, detail === null ? null : JSON.stringify(detail)]);
  for (const op of task.payload.ops) {
    switch (op.op) {
      case 'mark':
        await mark(op.what);
        break;
      case 'effect':
        await client.query(SQL.mark, [task.queue, task.payload.n, task.attempt, 'effect', null]);
        break;
      case 'cancel_self':
        await db.query(SQL.cancel, [task.queue, task.id]);
        break;
      case 'fail_before':
        if (task.attempt < op.attempt) throw new Error(`boom at attempt ${task.attempt}`);
        break;
      case 'step': {
        const value = await task.step(op.name, async () => {
          await mark(`step:${op.name}`);
          return { step: op.name };
        });
        await mark(`got:${op.name}`, value);
        break;
      }
      case 'sleep':
        await task.sleep(op.ms);
        break;
      case 'wait_event':
        await mark('event', await task.waitForEvent(op.event));
        break;
      case 'stop_worker':
        run.stopped = run.worker.stop();
        break;
      default:
        throw new Error(`unknown op ${op.op}`);
    }
  }
}

async function check(sql, queue) {
  const { rows } = await db.query(sql, [queue]);
  return rows.length > 0 && Object.values(rows[0])[0] === true;
}

for (const scenario of spec.scenarios) {
  test(`conformance: ${scenario.name}: ${scenario.about}`, async () => {
    const queue = queueOf(scenario);
    await db.query(SQL.create_queue, [queue, scenario.queue.lease, scenario.queue.max_attempts]);
    for (const e of scenario.emit_before || []) await emitEvent(db, e.event, e.payload);
    for (const t of scenario.tasks) {
      const id = await enqueue(db, queue, t);
      await db.query(SQL.task, [queue, t.n, id]);
    }
    const run = { worker: null, stopped: null };
    const worker = (run.worker = new Worker({
      pool: db,
      queue,
      concurrency: scenario.worker.concurrency,
      batch: scenario.worker.batch,
      wait: 1000,
      handler: async (tasks, client) => {
        for (const task of Array.isArray(tasks) ? tasks : [tasks]) await runOps(task, client, run);
      },
    }));
    const seen = collect(worker);
    await worker.start();
    for (const step of scenario.then || []) {
      if (step.await) await until(() => check(step.await, queue), step.await);
      if (step.emit) await emitEvent(db, step.emit.event, step.emit.payload);
    }
    if (scenario.until === 'worker_stopped') {
      await until(() => run.stopped !== null, 'an op to stop the worker');
      await run.stopped;
    }
    else await until(() => check(scenario.until, queue), scenario.until);
    await worker.stop();
    const { rows: states } = await db.query(SQL.state, [queue]);
    for (const [what, sql] of scenario.expect) assert.ok(await check(sql, queue), `${what}\n${JSON.stringify(states)}`);
    // the lost leases are told as such (leaseLost), the failures as failed:
    // nothing else went wrong
    assert.deepEqual(seen.errors, []);
  });
}

// The tracing scenario (scenarios.json "tracing"): this runtime writes the
// one trace context of the scenario, and continues it.
const TR = spec.tracing;
const [, traceId, contextSpan] = TR.context.traceparent.split('-');
const storedWith = (enqueueSpan) => JSON.parse(JSON.stringify(TR.stored).replace('{enqueue_span}', enqueueSpan));
const finished = (template, queue) => {
  const name = template.replace('{queue}', queue);
  return exporter.getFinishedSpans().filter((s) => s.name === name);
};

test('conformance: tracing: an enqueue inside a span stores the trace context every runtime reads', async () => {
  const queue = 'conformance_tracing_produce';
  await db.query(SQL.create_queue, [queue, TR.queue.lease, TR.queue.max_attempts]);
  const caller = api.propagation.extract(api.ROOT_CONTEXT, TR.context);
  await api.context.with(caller, () => enqueue(db, queue, TR.payload));
  const spans = finished(protocol.tracing.enqueue_span, queue);
  assert.equal(spans.length, 1, 'one enqueue span');
  const span = spans[0];
  assert.equal(span.spanContext().traceId, traceId);
  assert.equal(span.parentSpanContext?.spanId, contextSpan, "the enqueue span is the caller's span's child");
  const { rows } = await db.query(TR.read, [queue]);
  assert.deepEqual(rows.map((r) => r.payload), [storedWith(span.spanContext().spanId)]);
});

test('conformance: tracing: a task another runtime enqueued inside a span is handled in a span continuing it', async () => {
  const queue = 'conformance_tracing_handle';
  await db.query(SQL.create_queue, [queue, TR.queue.lease, TR.queue.max_attempts]);
  await db.query(TR.enqueue, [queue, JSON.stringify(storedWith(TR.other_enqueue_span))]);
  const seen = [];
  const worker = new Worker({
    pool: db,
    queue,
    wait: 1000,
    handler: async (task) => {
      seen.push({ payload: task.payload, active: api.trace.getActiveSpan()?.spanContext().spanId });
    },
  });
  const events = collect(worker);
  await worker.start();
  await until(() => finished(protocol.tracing.handle_span, queue).length > 0, 'the handle span');
  await worker.stop();
  assert.deepEqual(events.errors, []);
  const handles = finished(protocol.tracing.handle_span, queue);
  assert.equal(handles.length, 1, 'one handle span');
  const handle = handles[0];
  assert.deepEqual(seen.map((s) => s.payload), [TR.payload], 'the handler gets the payload without the trace context');
  assert.equal(seen[0].active, handle.spanContext().spanId, 'the handler runs in the handle span');
  assert.equal(handle.spanContext().traceId, traceId, 'the same trace');
  assert.equal(handle.parentSpanContext?.spanId, TR.other_enqueue_span, "the handle span's parent is the enqueue span");
  assert.equal(handle.parentSpanContext?.isRemote, true);
  assert.equal(handle.spanContext().traceState?.serialize(), TR.context.tracestate);
});
