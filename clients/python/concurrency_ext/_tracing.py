"""OpenTelemetry tracing, on the API package only (the extra `concurrency-ext[otel]`); without it this
module's calls do nothing. The names are the protocol's (TRACING in _protocol.py, shared with the Node.js
and Go runtimes):

* a producer's call (enqueue, enqueue_batch, enqueue_graph) made while a span is current runs in a span
  of its own, enqueue_span (kind PRODUCER), and writes the W3C trace context of that span (the
  propagator's carrier: traceparent, tracestate) under payload_key of each dict payload that has no such
  key yet; without a current span it records nothing and writes nothing;
* a worker records a span per claim that got tasks (claim_span, a trace of its own) and runs each
  handler in handle_span (kind CONSUMER), a child of the context its task's payload carries (without one
  a root, linked to its claim's span), with the task's id, queue and attempt as attributes; its
  complete_span or fail_span inside it; a handler's error, a failed completion and a lost lease are
  recorded on it, with status ERROR. The handler gets the payload without payload_key.

Everything here is synchronous (no I/O), so the asyncio worker and the synchronous one generated from it
make the same calls."""
import contextlib
import time

from . import _protocol

try:
    from opentelemetry import context as otel_context, propagate, trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError:  # tracing is off
    trace = None

_T = _protocol.TRACING
KEY = _T["payload_key"]
_SYSTEM = dict([_T["attr_messaging_system"]])
_OFF = contextlib.nullcontext()


def split(payload):
    """The payload a handler gets (without payload_key) and the trace context it carried (None: none)."""
    if isinstance(payload, dict) and KEY in payload:
        payload = dict(payload)
        carrier = payload.pop(KEY)
        return payload, carrier if isinstance(carrier, dict) else None
    return payload, None


def _active():
    return trace is not None and trace.get_current_span().get_span_context().is_valid


def _tracer():
    return trace.get_tracer(_T["tracer_name"])


def _attributes(queue):
    return {_T["attr_queue"]: queue, **_SYSTEM}


def enqueue_span(queue):
    """The producer's span around one call (nothing without a current span)."""
    if not _active():
        return _OFF
    return _tracer().start_as_current_span(_T["enqueue_span"].format(queue=queue), kind=SpanKind.PRODUCER,
                                           attributes=_attributes(queue))


def _carrier():
    """The current trace context as the propagator writes it (None: no current span, or nothing written)."""
    if not _active():
        return None
    carrier = {}
    propagate.inject(carrier)
    return carrier or None


def _with(payload, carrier):
    if carrier is None or not isinstance(payload, dict) or KEY in payload:
        return payload  # a caller's own payload_key is left as it is
    return {**payload, KEY: carrier}


def inject(payload):
    """payload with the current trace context under payload_key: a copy, when it is a dict without that key
    and there is a context to write; else payload itself."""
    return _with(payload, _carrier())


def inject_each(payloads):
    """The payloads of enqueue_batch, each as inject writes it."""
    carrier = _carrier()
    return payloads if carrier is None else [_with(p, carrier) for p in payloads]


def inject_graph(tasks):
    """The tasks of enqueue_graph, each payload as inject writes it (an absent payload is {})."""
    carrier = _carrier()
    if carrier is None:
        return tasks
    return [dict(t, payload=_with(t.get("payload", {}), carrier)) if isinstance(t, dict) else t for t in tasks]


def _extract(carrier):
    """The context a task's trace context carries; an empty one (a root span) when it carries none."""
    if carrier:
        try:
            return propagate.extract({k: v for k, v in carrier.items() if isinstance(v, str)})
        except Exception:  # a carrier that is no propagator's: a root span rather than a failed task
            pass
    return otel_context.Context()


def for_worker(queue):
    """The tracing of one worker's tasks: WorkerTracing, or _Off when OpenTelemetry is not importable."""
    return _Off() if trace is None else WorkerTracing(queue)


class _Off:
    """Tracing off: every call does nothing."""

    @staticmethod
    def now():
        return 0

    def claimed(self, started, tasks):
        pass

    def running(self, task):
        return _OFF

    def step(self, task, what):
        return _OFF

    def completing(self, tasks):
        pass

    def completed(self, tasks, error=None):
        pass

    def error(self, task, error):
        pass

    def end(self, tasks):
        pass


class WorkerTracing(_Off):
    """The spans of one worker's tasks; handle spans by task id, from its handler's start to end(task)."""

    def __init__(self, queue):
        self.queue = queue
        self._claims = {}  # task id -> the span context of the claim that took it
        self._handles = {}  # task id -> handle span
        self._completes = {}  # task id -> complete span, until its transaction ended

    @staticmethod
    def now():
        return time.time_ns()

    def _name(self, which):
        return _T[which].format(queue=self.queue)

    def claimed(self, started, tasks):
        """The span of a claim that began at started (now()) and got tasks: a trace of its own."""
        if not tasks:
            return
        span = _tracer().start_span(self._name("claim_span"), context=otel_context.Context(),
                                    kind=SpanKind.CLIENT, attributes=_attributes(self.queue), start_time=started)
        span.end()
        for task in tasks:
            self._claims[task.id] = span.get_span_context()

    @contextlib.contextmanager
    def running(self, task):
        """A new handle span for this run of task's handler (ending an earlier run's), current inside."""
        self._end_handle(task)
        claim = self._claims.get(task.id)
        parent = _extract(task._trace_context)
        links = None
        if claim is not None and not trace.get_current_span(parent).get_span_context().is_valid:
            links = [trace.Link(claim)]
        span = _tracer().start_span(self._name("handle_span"), context=parent, kind=SpanKind.CONSUMER,
                                    links=links, attributes={_T["attr_task_id"]: task.id,
                                                             _T["attr_attempt"]: task.attempt,
                                                             **_attributes(self.queue)})
        self._handles[task.id] = span
        with trace.use_span(span, record_exception=False, set_status_on_exception=False):
            yield span

    def _child(self, task, which):
        span = self._handles.get(task.id)
        context = trace.set_span_in_context(span) if span is not None else otel_context.Context()
        return _tracer().start_span(self._name(which), context=context, attributes={
            _T["attr_task_id"]: task.id, **_attributes(self.queue)})

    @contextlib.contextmanager
    def step(self, task, what):
        """A span (what: "complete_span" or "fail_span") inside task's handle span, around one call."""
        span = self._child(task, what)
        try:
            with trace.use_span(span):  # an exception is recorded, the status ERROR
                yield span
        finally:
            span.end()

    def completing(self, tasks):
        """complete_span for each task, from the complete statement to its transaction's end (completed)."""
        for task in tasks:
            self._completes[task.id] = self._child(task, "complete_span")

    def completed(self, tasks, error=None):
        """The completing transaction of tasks ended: committed (error None) or not."""
        for task in tasks:
            span = self._completes.pop(task.id, None)
            if span is not None:
                if error is not None:
                    span.record_exception(error)
                    span.set_status(Status(StatusCode.ERROR, str(error)))
                span.end()

    def error(self, task, error):
        """The task's run failed (its handler's error, a failed completion, a lost lease)."""
        span = self._handles.get(task.id)
        if span is not None and span.is_recording():
            span.record_exception(error)
            span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))

    def end(self, tasks):
        """The tasks left this worker (completed, failed, lost, suspended or released): their handle spans
        end."""
        for task in tasks:
            self._claims.pop(task.id, None)
            self._end_handle(task)

    def _end_handle(self, task):
        for spans in (self._completes, self._handles):
            span = spans.pop(task.id, None)
            if span is not None:
                span.end()
