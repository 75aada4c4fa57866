'use strict';
// OpenTelemetry tracing, as clients/protocol/statements.json's "tracing"
// section says: a producer writes its caller's trace context (W3C
// traceparent, tracestate: what the registered propagator writes) under
// payload key "_trace"; a worker takes it out of the payload before the
// handler sees it and continues the trace in the task's handle span.
//
// @opentelemetry/api is an optional peer dependency: without it (not
// installed, or failing to load) `api` is null, and every call here is a
// test of that null. With it but no SDK registered, its calls are the
// API's no-ops.

const { performance } = require('node:perf_hooks');
const { protocol } = require('./statements');

const T = protocol.tracing;
const KEY = T.payload_key;
const [SYSTEM_KEY, SYSTEM] = T.attr_messaging_system;

let api = null;
try {
  api = require('@opentelemetry/api');
} catch {
  // not installed (or broken): no tracing
}

const VERSION = require('../package.json').version;
const tracer = () => api.trace.getTracer(T.tracer_name, VERSION);
const spanName = (template, queue) => template.replace('{queue}', queue);

// A time for a span's start or end given after the fact, ms since the
// epoch with the monotonic clock's precision.
const now = () => performance.timeOrigin + performance.now();

// A payload the producer may add its key to: a plain object (not an array,
// not a class instance, nothing that writes its own JSON).
function plainObject(value) {
  if (value === null || typeof value !== 'object') return false;
  const proto = Object.getPrototypeOf(value);
  return (proto === Object.prototype || proto === null) && typeof value.toJSON !== 'function';
}

// Whether a context has a (valid) span.
function traced(ctx) {
  const sc = api.trace.getSpanContext(ctx);
  return sc !== undefined && api.trace.isSpanContextValid(sc);
}

function failed(span, err) {
  span.recordException(err instanceof Error ? err : String(err));
  span.setStatus({ code: api.SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
}

// ---- producer

// Runs call(inject) in the span of an enqueue into `queue` (enqueue,
// enqueueBatch, enqueueGraph), when the caller's context has a span: that
// span's context is the one inject(payload) writes into a payload (a copy
// with the key added; the payload itself where the caller set the key,
// where it is no plain object, or where the propagator wrote nothing).
// Without a span in the caller's context: no span, and inject returns the
// payload as it is. `taskId(result)`: the task's id, for one task.
function traceEnqueue(queue, call, taskId) {
  const parent = api && api.context.active();
  if (!parent || !traced(parent)) return call(unchanged);
  return inEnqueueSpan(parent, queue, call, taskId);
}

async function inEnqueueSpan(parent, queue, call, taskId) {
  const span = tracer().startSpan(
    spanName(T.enqueue_span, queue),
    { kind: api.SpanKind.PRODUCER, attributes: { [T.attr_queue]: queue, [SYSTEM_KEY]: SYSTEM } },
    parent,
  );
  const ctx = api.trace.setSpan(parent, span);
  const carrier = {};
  api.propagation.inject(ctx, carrier);
  const inject = Object.keys(carrier).length === 0 ? unchanged : (payload) => withTrace(payload, carrier);
  try {
    const result = await api.context.with(ctx, () => call(inject));
    if (taskId) span.setAttribute(T.attr_task_id, String(taskId(result)));
    return result;
  } catch (err) {
    failed(span, err);
    throw err;
  } finally {
    span.end();
  }
}

const unchanged = (payload) => payload;

function withTrace(payload, carrier) {
  if (!plainObject(payload) || Object.prototype.hasOwnProperty.call(payload, KEY)) return payload;
  return { ...payload, [KEY]: carrier };
}

// ---- worker

// Takes the trace context out of the claimed rows' payloads (whether or
// not tracing is on: the key is the protocol's, never the handler's).
// Returns the carriers, one a row (undefined: none), or null when no row
// had one.
function takeTraces(rows) {
  let carriers = null;
  for (let i = 0; i < rows.length; i++) {
    const payload = rows[i].payload;
    if (payload === null || typeof payload !== 'object' || payload[KEY] === undefined || Array.isArray(payload)) continue;
    const { [KEY]: carrier, ...rest } = payload;
    rows[i].payload = rest;
    (carriers ??= new Array(rows.length))[i] = carrier;
  }
  return carriers;
}

// Whether spans and contexts can have any effect now: a tracer provider is
// registered, or a context manager that carries contexts (through which a
// handler could see a producer's span context and pass it on). With
// neither, every span is the API's no-op and every context.with() a plain
// call: a worker then skips the tracing of its tasks (its startSpan,
// extract, attribute objects and context calls, ~5 % of the Node.js
// process's CPU a task of a busy slot where @opentelemetry/api is merely
// installed). Asked once a claim, so that an SDK registered after the
// worker started is seen. Conservative: another copy of the API's provider
// is taken as live.
const NOOP_PROVIDER = api && new api.ProxyTracerProvider().getDelegate();
const PROBE = api && api.createContextKey('concurrency-ext context probe');
const PROBE_CONTEXT = api && api.ROOT_CONTEXT.setValue(PROBE, true);
const probe = () => api.context.active().getValue(PROBE) === true;

function live() {
  const provider = api.trace.getTracerProvider();
  if (typeof provider.getDelegate !== 'function' || provider.getDelegate() !== NOOP_PROVIDER) return true;
  return api.context.with(PROBE_CONTEXT, probe);
}

// A worker's spans (null when tracing is off: see workerTracing).
class WorkerTracing {
  constructor(queue) {
    this.tracer = tracer();
    this.queue = queue;
    this.names = {
      claim: spanName(T.claim_span, queue),
      handle: spanName(T.handle_span, queue),
      complete: spanName(T.complete_span, queue),
      fail: spanName(T.fail_span, queue),
    };
  }

  // Whether this claim's tasks are traced (see live).
  live() {
    return live();
  }

  // The span of a claim that brought tasks, made from `start` (see now()) until now:
  // a span of its own, whatever the context the worker was started in.
  claimed(start) {
    const span = this.tracer.startSpan(this.names.claim, {
      root: true,
      startTime: start,
      attributes: { [T.attr_queue]: this.queue, [SYSTEM_KEY]: SYSTEM },
    });
    span.end(now());
    return span.spanContext();
  }

  // Each task's handle span, begun: its parent the context its producer
  // stored (carriers[i]); a root span linked to the claim's where there is
  // none (a task enqueued by SQL, or by a producer outside any trace).
  // Returns [{ span, context }] in the order of tasks.
  handling(tasks, carriers, claimContext) {
    return tasks.map((task, i) => {
      const carrier = carriers && carriers[i];
      const parent = carrier && typeof carrier === 'object' ? api.propagation.extract(api.ROOT_CONTEXT, carrier) : api.ROOT_CONTEXT;
      const continues = traced(parent);
      const span = this.tracer.startSpan(
        this.names.handle,
        {
          kind: api.SpanKind.CONSUMER,
          links: continues ? undefined : [{ context: claimContext }],
          attributes: {
            [T.attr_task_id]: String(task.id),
            [T.attr_queue]: this.queue,
            [T.attr_attempt]: task.attempt,
            [SYSTEM_KEY]: SYSTEM,
          },
        },
        parent,
      );
      return { span, context: api.trace.setSpan(parent, span) };
    });
  }

  // Runs fn in the context of the first handle span (a batch handler's
  // too: see the README's "Tracing").
  run(handles, fn) {
    return api.context.with(handles[0].context, fn);
  }

  // A complete or fail span (`kind`) inside each handle span, begun.
  step(kind, handles) {
    const name = this.names[kind];
    return handles.map((h) => this.tracer.startSpan(name, { attributes: { [T.attr_queue]: this.queue, [SYSTEM_KEY]: SYSTEM } }, h.context));
  }

  // Ends spans (or the handle spans of handling()), as failed with `err`
  // unless it is undefined.
  end(spans, err) {
    for (const span of spans) {
      if (err !== undefined) failed(span, err);
      span.end();
    }
  }

  endHandles(handles, err) {
    this.end(handles.map((h) => h.span), err);
  }
}

// The worker's tracing for `queue`, or null without @opentelemetry/api.
const workerTracing = (queue) => (api ? new WorkerTracing(queue) : null);

module.exports = {
  enabled: api !== null,
  traceEnqueue,
  takeTraces,
  workerTracing,
  now,
};
