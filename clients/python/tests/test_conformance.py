"""The conformance scenarios of clients/conformance/scenarios.json, run through the package's public API:
Worker (threads) and AsyncWorker (asyncio). See clients/conformance/README.md."""
import asyncio
import json
import os
import re
import shutil
import subprocess
import threading

import psycopg
import pytest
from opentelemetry import context as otel_context, propagate, trace
from psycopg.types.json import Jsonb

from concurrency_ext import LeaseLostError, Worker, _protocol, emit_event, enqueue
from concurrency_ext import aio
from conftest import DB, admin_connect, drain, enqueue_in, span_exporter, wait_until

SPEC_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "conformance", "scenarios.json")
with open(SPEC_PATH, encoding="utf-8") as f:
    SPEC = json.load(f)


def _sql(text):
    """The scenario file's $1, $2, ... as psycopg's named placeholders %(p1)s, ... (see _args)."""
    return re.sub(r"\$([0-9]+)", r"%(p\1)s", text.replace("%", "%%"))


def _args(*values):
    return {f"p{i}": v for i, v in enumerate(values, 1)}


SQL = {name: _sql(text) if isinstance(text, str) else [_sql(t) for t in text] for name, text in SPEC["sql"].items()}


def _check(conn, sql, queue):
    row = conn.execute(_sql(sql), _args(queue)).fetchone()
    return row is not None and row[0] is True


class Run:
    """One scenario's run: the worker, and what stopping it (an op) started."""

    def __init__(self, queue):
        self.queue = queue
        self.worker = None
        self.stopping = None  # a thread or an asyncio task, once an op asked the worker to stop
        self.lock = threading.Lock()


def _mark(task, what, detail=None):
    with admin_connect() as conn:
        conn.execute(SQL["mark"], _args(task.queue, task.payload["n"], task.attempt, what,
                                        None if detail is None else Jsonb(detail)))


def _ops(task, conn, run):
    for op in task.payload["ops"]:
        kind = op["op"]
        if kind == "mark":
            _mark(task, op["what"])
        elif kind == "effect":
            conn.execute(SQL["mark"], _args(task.queue, task.payload["n"], task.attempt, "effect", None))
        elif kind == "cancel_self":
            with admin_connect() as other:
                other.execute(SQL["cancel"], _args(task.queue, task.id))
        elif kind == "fail_before":
            if task.attempt < op["attempt"]:
                raise RuntimeError(f"boom at attempt {task.attempt}")
        elif kind == "step":
            def step(name=op["name"]):
                _mark(task, f"step:{name}")
                return {"step": name}
            _mark(task, f"got:{op['name']}", task.step(op["name"], step))
        elif kind == "sleep":
            task.sleep(op["ms"] / 1000)
        elif kind == "wait_event":
            _mark(task, "event", task.wait_for_event(op["event"]))
        elif kind == "stop_worker":
            with run.lock:
                run.stopping = threading.Thread(target=run.worker.stop, daemon=True)
                run.stopping.start()
        else:
            raise ValueError(f"unknown op {kind}")


async def _aops(task, conn, run):
    for op in task.payload["ops"]:
        kind = op["op"]
        if kind == "mark":
            await asyncio.to_thread(_mark, task, op["what"])
        elif kind == "effect":
            await conn.execute(SQL["mark"], _args(task.queue, task.payload["n"], task.attempt, "effect", None))
        elif kind == "cancel_self":
            async with await psycopg.AsyncConnection.connect(dbname=DB, autocommit=True) as other:
                await other.execute(SQL["cancel"], _args(task.queue, task.id))
        elif kind == "fail_before":
            if task.attempt < op["attempt"]:
                raise RuntimeError(f"boom at attempt {task.attempt}")
        elif kind == "step":
            async def step(name=op["name"]):
                await asyncio.to_thread(_mark, task, f"step:{name}")
                return {"step": name}
            value = await task.step(op["name"], step)
            await asyncio.to_thread(_mark, task, f"got:{op['name']}", value)
        elif kind == "sleep":
            await task.sleep(op["ms"] / 1000)
        elif kind == "wait_event":
            value = await task.wait_for_event(op["event"])
            await asyncio.to_thread(_mark, task, "event", value)
        elif kind == "stop_worker":
            run.stopping = asyncio.ensure_future(run.worker.stop())
        else:
            raise ValueError(f"unknown op {kind}")


def _expect(admin, scenario, queue):
    states = admin.execute(SQL["state"], _args(queue)).fetchall()
    for what, sql in scenario["expect"]:
        assert _check(admin, sql, queue), f"{what}: {states}"


@pytest.mark.parametrize("flavour", ["sync", "async"])
@pytest.mark.parametrize("scenario", SPEC["scenarios"], ids=[s["name"] for s in SPEC["scenarios"]])
def test_conformance(scenario, flavour, admin, dsn):
    for statement in SQL["setup"]:
        admin.execute(statement)
    queue = f"conformance_{scenario['name']}_{flavour}"
    admin.execute(SQL["create_queue"], _args(queue, scenario["queue"]["lease"], scenario["queue"]["max_attempts"]))
    for e in scenario.get("emit_before", ()):
        emit_event(admin, f"{e['event']}-{flavour}", e["payload"])
    for t in scenario["tasks"]:
        t = dict(t, ops=[dict(op, event=f"{op['event']}-{flavour}") if "event" in op else op for op in t["ops"]])
        admin.execute(SQL["task"], _args(queue, t["n"], enqueue(admin, queue, t)))
    errors = []
    run = Run(queue)
    options = dict(concurrency=scenario["worker"]["concurrency"], batch=scenario["worker"]["batch"], wait=1.0,
                   on_error=lambda error, task: errors.append(error))

    def drive(emit):
        for step in scenario.get("then", ()):
            if "await" in step:
                wait_until(lambda: _check(admin, step["await"], queue), step["await"])
            if "emit" in step:
                emit(f"{step['emit']['event']}-{flavour}", step["emit"]["payload"])
        if scenario["until"] == "worker_stopped":
            wait_until(lambda: run.stopping is not None, "an op to stop the worker")
        else:
            wait_until(lambda: _check(admin, scenario["until"], queue), scenario["until"])

    if flavour == "sync":
        run.worker = Worker(dsn, queue, lambda task, conn: _ops(task, conn, run), **options)
        run.worker.start()
        try:
            drive(lambda event, payload: emit_event(admin, event, payload))
            if run.stopping is not None:
                run.stopping.join()
        finally:
            assert run.worker.stop()
    else:
        async def main():
            run.worker = aio.AsyncWorker(dsn, queue, lambda task, conn: _aops(task, conn, run), **options)
            await run.worker.start()
            try:
                await asyncio.to_thread(drive, lambda event, payload: emit_event(admin, event, payload))
                if run.stopping is not None:
                    await run.stopping
            finally:
                assert await run.worker.stop()
        asyncio.run(main())
    _expect(admin, scenario, queue)
    # on_error is told the handlers' errors and the lost leases; nothing else went wrong
    assert all(isinstance(e, LeaseLostError) or str(e).startswith("boom at attempt") for e in errors), errors


# The tracing scenario (scenarios.json "tracing"): this runtime writes the one trace context of the scenario, and
# continues it; and, with the Node.js runtime, a task enqueued by one is continued by the other.
TRACING = SPEC["tracing"]
_, TRACE_ID, CONTEXT_SPAN, _ = TRACING["context"]["traceparent"].split("-")
NAMES = _protocol.TRACING


def _stored_with(enqueue_span):
    """The scenario's stored payload, its enqueue span's id enqueue_span."""
    return json.loads(json.dumps(TRACING["stored"]).replace("{enqueue_span}", enqueue_span))


def _finished(name, queue):
    name = NAMES[name].format(queue=queue)
    return [s for s in span_exporter().get_finished_spans() if s.name == name]


def _tracing_queue(admin, queue):
    """The queue of a tracing test, created with the SDK installed (its spans recorded from here on)."""
    span_exporter()
    admin.execute(SQL["create_queue"], _args(queue, TRACING["queue"]["lease"], TRACING["queue"]["max_attempts"]))


def _hex(span_id):
    return format(span_id, "016x")


def _enqueue_in_context(flavour, dsn, queue, payload):
    """enqueue (or aio.enqueue) of payload inside the scenario's context."""
    token = otel_context.attach(propagate.extract(TRACING["context"]))
    try:
        return enqueue_in(flavour, dsn, queue, payload)
    finally:
        otel_context.detach(token)


def _handle_all(flavour, dsn, queue):
    """Works off the queue with a Worker (or AsyncWorker); returns what each handler saw (its payload, the id of
    its current span) and the errors the worker reported."""
    seen, errors = [], []

    def record(task):
        seen.append((task.payload, trace.get_current_span().get_span_context().span_id))

    drain(flavour, dsn, queue, record, wait=1.0, on_error=lambda error, task: errors.append(error))
    return seen, errors


def _assert_continued(handle, parent_span):
    assert format(handle.context.trace_id, "032x") == TRACE_ID, "the same trace"
    assert _hex(handle.parent.span_id) == parent_span, "the handle span's parent is the enqueue span"
    assert handle.parent.is_remote
    assert handle.context.trace_state.to_header() == TRACING["context"]["tracestate"]


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_conformance_tracing_enqueue(flavour, admin, dsn):
    """An enqueue inside a span stores the trace context every runtime reads."""
    queue = f"conformance_tracing_produce_{flavour}"
    _tracing_queue(admin, queue)
    _enqueue_in_context(flavour, dsn, queue, TRACING["payload"])
    spans = _finished("enqueue_span", queue)
    assert len(spans) == 1, "one enqueue span"
    assert format(spans[0].context.trace_id, "032x") == TRACE_ID
    assert _hex(spans[0].parent.span_id) == CONTEXT_SPAN, "the enqueue span is the caller's span's child"
    stored = [row[0] for row in admin.execute(_sql(TRACING["read"]), _args(queue))]
    assert stored == [_stored_with(_hex(spans[0].context.span_id))]


@pytest.mark.parametrize("flavour", ["sync", "async"])
def test_conformance_tracing_handle(flavour, admin, dsn):
    """A task another runtime enqueued inside a span is handled in a span continuing it."""
    queue = f"conformance_tracing_handle_{flavour}"
    _tracing_queue(admin, queue)
    admin.execute(_sql(TRACING["enqueue"]), _args(queue, Jsonb(_stored_with(TRACING["other_enqueue_span"]))))
    seen, errors = _handle_all(flavour, dsn, queue)
    assert errors == []
    handles = _finished("handle_span", queue)
    assert len(handles) == 1, "one handle span"
    _assert_continued(handles[0], TRACING["other_enqueue_span"])
    assert seen == [(TRACING["payload"], handles[0].context.span_id)], \
        "the handler gets the payload without the trace context, in the handle span"


NODE_PEER = os.path.join(os.path.dirname(SPEC_PATH), "..", "node", "test", "fixtures", "trace-peer.js")


def _node(*args):
    """Runs the Node.js runtime's side of a tracing test (trace-peer.js) on this test's database; its output."""
    if shutil.which("node") is None or not os.path.isdir(os.path.join(
            os.path.dirname(NODE_PEER), "..", "..", "node_modules", "@opentelemetry", "sdk-trace-base")):
        pytest.skip("the Node.js runtime with its test dependencies (clients/node/test/run.sh installs them)")
    out = subprocess.run(["node", NODE_PEER, *args], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, PGDATABASE=DB))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_conformance_tracing_with_node(admin, dsn):
    """A task the Node.js runtime enqueued inside a span is continued by this runtime's worker, and one enqueued
    here by the Node.js runtime's worker."""
    queue = "conformance_tracing_node_to_python"
    _tracing_queue(admin, queue)
    produced = _node("enqueue", queue, json.dumps(TRACING["context"]), json.dumps(TRACING["payload"]))
    assert produced["enqueue"]["parentSpanId"] == CONTEXT_SPAN
    seen, errors = _handle_all("sync", dsn, queue)
    assert errors == []
    handles = _finished("handle_span", queue)
    assert len(handles) == 1, "one handle span"
    _assert_continued(handles[0], produced["enqueue"]["spanId"])
    assert seen == [(TRACING["payload"], handles[0].context.span_id)]

    queue = "conformance_tracing_python_to_node"
    _tracing_queue(admin, queue)
    _enqueue_in_context("sync", dsn, queue, TRACING["payload"])
    enqueue_span = _finished("enqueue_span", queue)[0]
    handled = _node("handle", queue)
    assert handled["payload"] == TRACING["payload"]
    assert handled["handle"] == {"traceId": TRACE_ID, "parentSpanId": _hex(enqueue_span.context.span_id),
                                 "remote": True, "traceState": TRACING["context"]["tracestate"],
                                 "active": True}
