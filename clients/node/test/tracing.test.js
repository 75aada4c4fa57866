'use strict';
// OpenTelemetry tracing (lib/tracing.js) with the SDK's in-memory exporter:
// the trace goes from the producer's span through the task's payload to
// the handler's span.
const { test, beforeEach } = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const path = require('node:path');
const api = require('@opentelemetry/api');
const { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } = require('@opentelemetry/sdk-trace-base');
const { AsyncLocalStorageContextManager } = require('@opentelemetry/context-async-hooks');
const { W3CTraceContextPropagator, hrTimeToMilliseconds } = require('@opentelemetry/core');
const { Worker, enqueue, enqueueBatch, enqueueGraph } = require('..');
const { protocol } = require('../lib/statements');
const { freshQueue, until, workerPool } = require('./helpers');

const T = protocol.tracing;
const exporter = new InMemorySpanExporter();
api.trace.setGlobalTracerProvider(new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }));
api.context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
api.propagation.setGlobalPropagator(new W3CTraceContextPropagator());
const tracer = api.trace.getTracer('tracing.test');

const { db, collect } = workerPool({ max: 20 });
beforeEach(() => exporter.reset());

const spans = (name) => exporter.getFinishedSpans().filter((s) => s.name === name);
const only = (name) => {
  const found = spans(name);
  assert.equal(found.length, 1, `one span ${name}: ${exporter.getFinishedSpans().map((s) => s.name).join(', ')}`);
  return found[0];
};
const name = (template, queue) => template.replace('{queue}', queue);
const parentOf = (span) => span.parentSpanContext?.spanId;
const stored = async (queue, id) => (await db.query(`SELECT payload FROM concurrency."q_${queue}" WHERE id = $1`, [id])).rows[0].payload;
// Runs fn inside a span of the test's (a request, say); resolves with fn's value and that span's context.
const inSpan = (what, fn) =>
  tracer.startActiveSpan(what, async (span) => {
    try {
      return { value: await fn(), context: span.spanContext() };
    } finally {
      span.end();
    }
  });

// Starts a worker on `queue` whose handler records what it sees and then
// runs `then`; resolves with the worker, its events and the records.
async function worker(queue, options = {}, then = () => {}) {
  const seen = [];
  const w = new Worker({
    pool: db,
    queue,
    ...options,
    handler: async (input) => {
      const tasks = [input].flat();
      for (const task of tasks) seen.push({ task, active: api.trace.getActiveSpan()?.spanContext(), payload: task.payload, claimed: tasks.length });
      return then(input);
    },
  });
  const events = collect(w);
  await w.start();
  return { worker: w, events, seen };
}

test('the trace goes on from the enqueue span to the handle span, whose context the handler runs in', async () => {
  const queue = await freshQueue(db, 'trace');
  const { value: id, context: request } = await inSpan('request', () => enqueue(db, queue, { n: 1 }));

  const enqueueSpan = only(name(T.enqueue_span, queue));
  assert.equal(enqueueSpan.kind, api.SpanKind.PRODUCER);
  assert.equal(enqueueSpan.spanContext().traceId, request.traceId);
  assert.equal(parentOf(enqueueSpan), request.spanId, 'the enqueue span is the caller\'s span\'s child');
  assert.deepEqual(enqueueSpan.attributes, { [T.attr_queue]: queue, [T.attr_task_id]: id, [T.attr_messaging_system[0]]: T.attr_messaging_system[1] });
  const carrier = (await stored(queue, id))[T.payload_key];
  assert.equal(carrier.traceparent, `00-${request.traceId}-${enqueueSpan.spanContext().spanId}-01`, 'the payload carries the enqueue span\'s context');

  const { worker: w, events, seen } = await worker(queue);
  await until(async () => events.completed.length === 1 && spans(name(T.handle_span, queue)).length === 1, 'the task done');
  await w.stop();
  assert.deepEqual(events.errors, []);

  const handle = only(name(T.handle_span, queue));
  assert.equal(handle.kind, api.SpanKind.CONSUMER);
  assert.equal(handle.spanContext().traceId, request.traceId, 'the same trace');
  assert.equal(parentOf(handle), enqueueSpan.spanContext().spanId, 'the handle span\'s parent is the enqueue span');
  assert.deepEqual(handle.attributes, {
    [T.attr_task_id]: id,
    [T.attr_queue]: queue,
    [T.attr_attempt]: 1,
    [T.attr_messaging_system[0]]: T.attr_messaging_system[1],
  });
  assert.equal(handle.status.code, api.SpanStatusCode.UNSET);
  assert.deepEqual(handle.links, [], 'a continued trace needs no link');

  assert.equal(seen.length, 1);
  assert.deepEqual(seen[0].payload, { n: 1 }, 'the handler gets the payload without the trace context');
  assert.equal(seen[0].active.spanId, handle.spanContext().spanId, 'the handler runs in the handle span');

  const complete = only(name(T.complete_span, queue));
  assert.equal(complete.spanContext().traceId, request.traceId);
  assert.equal(parentOf(complete), handle.spanContext().spanId, 'complete inside handle');
  assert.equal(spans(name(T.fail_span, queue)).length, 0);

  const claim = only(name(T.claim_span, queue));
  assert.equal(parentOf(claim), undefined, 'the claim span is a span of its own');
  assert.notEqual(claim.spanContext().traceId, request.traceId);
  assert.equal(claim.attributes[T.attr_queue], queue);
  assert.ok(hrTimeToMilliseconds(claim.duration) >= 0);
  assert.ok(hrTimeToMilliseconds(claim.endTime) <= hrTimeToMilliseconds(handle.startTime), 'claimed, then handled');
});

test('a task enqueued by SQL: the handle span is a root span, linked to its claim', async () => {
  const queue = await freshQueue(db, 'trace_sql');
  // inside a span of the test's: that is not the task's trace
  const { value: id } = await inSpan('request', async () => {
    const { rows } = await db.query('SELECT concurrency.enqueue($1, $2::jsonb)::text AS id', [queue, '{"n": 2}']);
    return rows[0].id;
  });
  const { worker: w, events, seen } = await worker(queue);
  await until(async () => events.completed.length === 1 && spans(name(T.handle_span, queue)).length === 1, 'the task done');
  await w.stop();
  const handle = only(name(T.handle_span, queue));
  const claim = only(name(T.claim_span, queue));
  assert.equal(parentOf(handle), undefined, 'a root span');
  assert.notEqual(handle.spanContext().traceId, claim.spanContext().traceId);
  assert.deepEqual(handle.links.map((l) => l.context.spanId), [claim.spanContext().spanId], 'linked to the claim');
  assert.equal(handle.attributes[T.attr_task_id], id);
  assert.deepEqual(seen[0].payload, { n: 2 });
  assert.equal(seen[0].active.spanId, handle.spanContext().spanId);
  assert.equal(parentOf(only(name(T.complete_span, queue))), handle.spanContext().spanId);
});

test('a failing handler: its handle span has status ERROR and the exception, the fail span is inside it', async () => {
  const queue = await freshQueue(db, 'trace_fail', "lease => '30 seconds', max_attempts => 1");
  const { context: request } = await inSpan('request', () => enqueue(db, queue, { n: 3 }));
  const { worker: w, events } = await worker(queue, {}, () => {
    throw new Error('the mail server said no');
  });
  await until(async () => events.failed.length === 1 && spans(name(T.handle_span, queue)).length === 1, 'the failure');
  await w.stop();
  const handle = only(name(T.handle_span, queue));
  assert.equal(handle.spanContext().traceId, request.traceId);
  assert.equal(handle.status.code, api.SpanStatusCode.ERROR);
  assert.equal(handle.status.message, 'the mail server said no');
  const exception = handle.events.find((e) => e.name === 'exception');
  assert.ok(exception, 'the exception is recorded');
  assert.equal(exception.attributes['exception.message'], 'the mail server said no');
  const fail = only(name(T.fail_span, queue));
  assert.equal(parentOf(fail), handle.spanContext().spanId);
  assert.equal(fail.status.code, api.SpanStatusCode.UNSET, 'the fail statement itself worked');
  assert.equal(spans(name(T.complete_span, queue)).length, 0);
});

test('no span in the caller\'s context: no "_trace" and no enqueue span', async () => {
  const queue = await freshQueue(db, 'trace_none');
  const id = await enqueue(db, queue, { n: 4 });
  const [batchId] = await enqueueBatch(db, queue, [{ n: 5 }]);
  assert.deepEqual(await stored(queue, id), { n: 4 });
  assert.deepEqual(await stored(queue, batchId), { n: 5 });
  assert.equal(spans(name(T.enqueue_span, queue)).length, 0);
  assert.equal(exporter.getFinishedSpans().length, 0);
});

test('enqueueBatch and enqueueGraph carry the context in each plain-object payload, and leave the others and a caller\'s "_trace" alone', async () => {
  const queue = await freshQueue(db, 'trace_batch');
  const own = { traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' };
  const { value: ids, context: request } = await inSpan('request', () =>
    enqueueBatch(db, queue, [{ n: 1 }, [1, 2], 'text', 7, null, { n: 2, [T.payload_key]: own }]),
  );
  const batchSpan = only(name(T.enqueue_span, queue));
  assert.equal(parentOf(batchSpan), request.spanId);
  assert.equal(batchSpan.attributes[T.attr_task_id], undefined, 'a batch has no one task id');
  const traceparent = `00-${request.traceId}-${batchSpan.spanContext().spanId}-01`;
  const payloads = await Promise.all(ids.map((id) => stored(queue, id)));
  assert.deepEqual(payloads, [{ n: 1, [T.payload_key]: { traceparent } }, [1, 2], 'text', 7, null, { n: 2, [T.payload_key]: own }]);

  exporter.reset();
  const { value: graph } = await inSpan('request', () => enqueueGraph(db, queue, [{ ref: 'a', payload: { g: 1 } }, { ref: 'b', after: ['a'] }]));
  const graphSpan = only(name(T.enqueue_span, queue));
  const graphPayload = await stored(queue, graph[0].taskId);
  assert.deepEqual(graphPayload, { g: 1, [T.payload_key]: { traceparent: `00-${graphSpan.spanContext().traceId}-${graphSpan.spanContext().spanId}-01` } });
  assert.deepEqual(await stored(queue, graph[1].taskId), {}, 'a task without a payload gets none');
});

test('a batch handler: a handle span per task, each continuing its own producer\'s trace', async () => {
  const queue = await freshQueue(db, 'trace_batch_handler');
  const first = await inSpan('first request', () => enqueue(db, queue, { n: 1 }, { priority: 2 }));
  const second = await inSpan('second request', () => enqueue(db, queue, { n: 2 }, { priority: 1 }));
  const byId = { [first.value]: first.context, [second.value]: second.context };
  const { worker: w, events, seen } = await worker(queue, { batch: 2 });
  await until(async () => events.completed.length === 2 && spans(name(T.handle_span, queue)).length === 2, 'both done');
  await w.stop();
  assert.deepEqual(events.errors, []);
  const handles = spans(name(T.handle_span, queue));
  const enqueues = spans(name(T.enqueue_span, queue));
  const completes = spans(name(T.complete_span, queue));
  for (const handle of handles) {
    const id = handle.attributes[T.attr_task_id];
    const enqueueSpan = enqueues.find((s) => s.attributes[T.attr_task_id] === id);
    assert.equal(handle.spanContext().traceId, byId[id].traceId);
    assert.equal(parentOf(handle), enqueueSpan.spanContext().spanId);
    assert.equal(completes.filter((c) => parentOf(c) === handle.spanContext().spanId).length, 1, 'a complete span in each');
  }
  // claimed together (both were ready before the worker started): the
  // handler ran once, in the first task's handle span
  assert.deepEqual(seen.map((s) => s.claimed), [2, 2]);
  assert.deepEqual(seen.map((s) => s.payload.n).sort(), [1, 2], 'no "_trace" in either payload');
  const firstHandle = handles.find((h) => h.attributes[T.attr_task_id] === seen[0].task.id);
  assert.equal(seen[0].active.spanId, firstHandle.spanContext().spanId);
  assert.equal(seen[1].active.spanId, firstHandle.spanContext().spanId);
});

test('an enqueue that fails ends its span with status ERROR', async () => {
  await assert.rejects(inSpan('request', () => enqueue(db, 'no_such_queue_for_tracing', { n: 1 })));
  const span = only(name(T.enqueue_span, 'no_such_queue_for_tracing'));
  assert.equal(span.status.code, api.SpanStatusCode.ERROR);
  assert.ok(span.events.some((e) => e.name === 'exception'));
});

test('without @opentelemetry/api the runtime works, tracing off, and still hands the handler no "_trace"', async () => {
  const queue = await freshQueue(db, 'trace_absent');
  const script = path.join(__dirname, 'fixtures', 'trace-absent.js');
  const run = (hide) => {
    const args = hide ? ['--require', path.join(__dirname, 'fixtures', 'hide-otel.js'), script, queue] : [script, queue];
    const r = spawnSync(process.execPath, args, { encoding: 'utf8', timeout: 60000 });
    assert.equal(r.status, 0, r.stderr);
    return JSON.parse(r.stdout);
  };
  const hidden = run(true);
  assert.equal(hidden.loadable, false, 'the override hides the package');
  assert.equal(hidden.enabled, false, 'tracing is off');
  assert.deepEqual(hidden.stored, { n: 1, [T.payload_key]: { traceparent: 'set by the caller' } }, 'the caller\'s payload as it was');
  assert.deepEqual(hidden.handled, { n: 1 }, 'the handler gets no "_trace"');
  // the same program where the package can be loaded: tracing is on (so the
  // override is what turned it off)
  const shown = run(false);
  assert.equal(shown.loadable, true);
  assert.equal(shown.enabled, true);
  assert.deepEqual(shown.handled, { n: 1 });
});

test('a worker traces its tasks only while a tracer provider or a context manager is registered', () => {
  const r = spawnSync(process.execPath, [path.join(__dirname, 'fixtures', 'trace-live.js')], { encoding: 'utf8', timeout: 60000 });
  assert.equal(r.status, 0, r.stderr);
  assert.deepEqual(JSON.parse(r.stdout), { nothing: false, contextManager: true, contextManagerGone: false, provider: true, providerGone: false });
});
