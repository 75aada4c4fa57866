"""OpenTelemetry tracing (README.md, "Tracing"; the protocol's TRACING) with the SDK's in-memory exporter,
for Worker and AsyncWorker and the producers of both; and the package without OpenTelemetry."""
import asyncio
import json
import os
import subprocess
import sys

import psycopg
import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from concurrency_ext import _protocol, aio, enqueue, enqueue_batch, enqueue_graph
from conftest import drain, enqueue_in, span_exporter

T = _protocol.TRACING
KEY = T["payload_key"]


@pytest.fixture(scope="module", autouse=True)
def provider():
    """The SDK as the global tracer provider, for every test here (those that look at no span too)."""
    span_exporter()


@pytest.fixture
def spans():
    exporter = span_exporter()
    exporter.clear()
    yield exporter


def tracer():
    return trace.get_tracer("concurrency_ext tests")


def span_named(exported, name):
    found = [s for s in exported.get_finished_spans() if s.name == name]
    assert len(found) == 1, f"one span {name!r} in {[s.name for s in exported.get_finished_spans()]}"
    return found[0]


def stored_payload(admin, queue, task_id):
    return admin.execute(f'SELECT payload FROM concurrency."q_{queue}" WHERE id = %s', (task_id,)).fetchone()[0]


KINDS = ["sync", "async"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_trace_goes_on_from_enqueue_to_the_handler(admin, dsn, queue, spans, kind):
    with tracer().start_as_current_span("request") as request:
        task_id = enqueue_in(kind, dsn, queue, {"n": 1})
    stored = stored_payload(admin, queue, task_id)
    assert set(stored) == {"n", KEY} and "traceparent" in stored[KEY], stored
    seen = []
    drain(kind, dsn, queue, lambda task: seen.append((task.payload, trace.get_current_span())))

    enqueue_span = span_named(spans, T["enqueue_span"].format(queue=queue))
    handle = span_named(spans, T["handle_span"].format(queue=queue))
    complete = span_named(spans, T["complete_span"].format(queue=queue))
    claim = span_named(spans, T["claim_span"].format(queue=queue))
    trace_id = request.get_span_context().trace_id
    assert enqueue_span.kind == SpanKind.PRODUCER
    assert enqueue_span.parent.span_id == request.get_span_context().span_id
    assert enqueue_span.attributes[T["attr_queue"]] == queue
    assert stored[KEY]["traceparent"].split("-")[2] == format(enqueue_span.context.span_id, "016x")
    assert handle.kind == SpanKind.CONSUMER
    assert handle.context.trace_id == trace_id
    assert handle.parent.span_id == enqueue_span.context.span_id, "the handle span's parent is the enqueue span"
    assert dict(handle.attributes) == {T["attr_task_id"]: task_id, T["attr_queue"]: queue, T["attr_attempt"]: 1,
                                       T["attr_messaging_system"][0]: T["attr_messaging_system"][1]}
    assert handle.status.status_code == StatusCode.UNSET
    assert complete.parent.span_id == handle.context.span_id and complete.context.trace_id == trace_id
    assert claim.parent is None and claim.context.trace_id != trace_id, "a claim is a trace of its own"
    assert not handle.links, "a handle span with a parent has no link"
    # the handler ran in the handle span and got the payload without the trace context
    assert len(seen) == 1
    payload, current = seen[0]
    assert payload == {"n": 1}
    assert current.get_span_context().span_id == handle.context.span_id


@pytest.mark.parametrize("kind", KINDS)
def test_a_task_without_a_trace_context_is_a_root_linked_to_its_claim(admin, dsn, queue, spans, kind):
    task_id = admin.execute("SELECT concurrency.enqueue(%s, '{\"raw\": true}')", (queue,)).fetchone()[0]
    seen = []
    drain(kind, dsn, queue, lambda task: seen.append(task.payload))
    handle = span_named(spans, T["handle_span"].format(queue=queue))
    claim = span_named(spans, T["claim_span"].format(queue=queue))
    assert seen == [{"raw": True}]
    assert handle.parent is None
    assert handle.attributes[T["attr_task_id"]] == task_id
    assert [link.context.span_id for link in handle.links] == [claim.context.span_id]
    assert T["enqueue_span"].format(queue=queue) not in [s.name for s in spans.get_finished_spans()]


@pytest.mark.parametrize("kind", KINDS)
def test_a_context_written_in_sql_is_continued(admin, dsn, queue, spans, kind):
    """docs/tracing.md: a producer in SQL, or in another runtime, writes the W3C traceparent under the key."""
    trace_id, span_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    payload = {"to": "a@example.com", KEY: {"traceparent": f"00-{trace_id}-{span_id}-01"}}
    admin.execute("SELECT concurrency.enqueue(%s, %s::jsonb)", (queue, json.dumps(payload)))
    seen = []
    drain(kind, dsn, queue, lambda task: seen.append(task.payload))
    handle = span_named(spans, T["handle_span"].format(queue=queue))
    assert seen == [{"to": "a@example.com"}]
    assert format(handle.context.trace_id, "032x") == trace_id
    assert format(handle.parent.span_id, "016x") == span_id and handle.parent.is_remote
    assert not handle.links


@pytest.mark.parametrize("kind", KINDS)
def test_a_failing_handler_is_an_error_of_its_span(admin, dsn, queue, spans, kind):
    with tracer().start_as_current_span("request"):
        task_id = enqueue_in(kind, dsn, queue, {"n": 1})

    def handler(task):
        raise ValueError("no such account")

    drain(kind, dsn, queue, handler, on_error=lambda e, t: None)
    handle = span_named(spans, T["handle_span"].format(queue=queue))
    fail = span_named(spans, T["fail_span"].format(queue=queue))
    assert handle.status.status_code == StatusCode.ERROR
    assert "no such account" in handle.status.description
    events = [e for e in handle.events if e.name == "exception"]
    assert len(events) == 1 and events[0].attributes["exception.type"] == "ValueError"
    assert fail.parent.span_id == handle.context.span_id
    assert fail.status.status_code == StatusCode.UNSET, "the fail call itself succeeded"
    assert not [s for s in spans.get_finished_spans() if s.name == T["complete_span"].format(queue=queue)]
    state = admin.execute(f'SELECT state, last_error FROM concurrency."q_{queue}" WHERE id = %s',
                          (task_id,)).fetchone()
    assert state == ("scheduled", "ValueError: no such account")


@pytest.mark.parametrize("kind", KINDS)
def test_a_batch_traces_each_task(admin, dsn, queue, spans, kind):
    with tracer().start_as_current_span("request") as request:
        with psycopg.connect(dsn, autocommit=True) as conn:
            ids = enqueue_batch(conn, queue, [{"n": i} for i in range(3)])
    seen = {}

    def handler(task):
        seen[task.id] = (task.payload, trace.get_current_span().get_span_context().span_id)
        if task.payload["n"] == 1:
            raise KeyError("one")

    drain(kind, dsn, queue, handler, batch=3, on_error=lambda e, t: None)
    enqueue_span = span_named(spans, T["enqueue_span"].format(queue=queue))
    handles = {s.attributes[T["attr_task_id"]]: s for s in spans.get_finished_spans()
               if s.name == T["handle_span"].format(queue=queue)}
    assert sorted(handles) == sorted(ids)
    for i, task_id in enumerate(ids):
        assert seen[task_id] == ({"n": i}, handles[task_id].context.span_id)
        assert handles[task_id].parent.span_id == enqueue_span.context.span_id
        assert handles[task_id].context.trace_id == request.get_span_context().trace_id
    assert [handles[t].status.status_code for t in ids] == [StatusCode.UNSET, StatusCode.ERROR, StatusCode.UNSET]
    completes = [s.parent.span_id for s in spans.get_finished_spans()
                 if s.name == T["complete_span"].format(queue=queue)]
    assert sorted(completes) == sorted([handles[ids[0]].context.span_id, handles[ids[2]].context.span_id])
    assert span_named(spans, T["fail_span"].format(queue=queue)).parent.span_id == handles[ids[1]].context.span_id


def test_the_producers_write_the_context_only_in_a_span_and_only_into_dicts(admin, dsn, queue, spans):
    with psycopg.connect(dsn, autocommit=True) as conn:
        outside = enqueue(conn, queue, {"n": 0})
        with tracer().start_as_current_span("request"):
            mine = enqueue(conn, queue, {"n": 1, KEY: "the caller's"})
            listed = enqueue(conn, queue, [1, 2])
            empty = enqueue(conn, queue)
            batch = enqueue_batch(conn, queue, [{"b": 1}, "text"])
            graph = dict(enqueue_graph(conn, queue, [{"ref": "a", "payload": {"g": 1}}, {"ref": "b"}]))
    assert stored_payload(admin, queue, outside) == {"n": 0}, "no current span: nothing written"
    assert stored_payload(admin, queue, mine) == {"n": 1, KEY: "the caller's"}
    assert stored_payload(admin, queue, listed) == [1, 2]
    assert set(stored_payload(admin, queue, empty)) == {KEY}
    assert stored_payload(admin, queue, batch[0])["b"] == 1 and KEY in stored_payload(admin, queue, batch[0])
    assert stored_payload(admin, queue, batch[1]) == "text"
    assert stored_payload(admin, queue, graph["a"])["g"] == 1 and KEY in stored_payload(admin, queue, graph["a"])
    assert set(stored_payload(admin, queue, graph["b"])) == {KEY}
    names = [s.name for s in spans.get_finished_spans()]
    assert names.count(T["enqueue_span"].format(queue=queue)) == 5, names
    # the key is the protocol's: a handler never sees it, the caller's own value included
    seen = []
    drain("sync", dsn, queue, lambda task: seen.append(task.payload))
    assert {"n": 1, KEY: "the caller's"} not in seen and {"n": 1} in seen


def test_the_async_producers_write_the_context(admin, dsn, queue, spans):
    async def main():
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            outside = await aio.enqueue(conn, queue, {"n": 0})
            with tracer().start_as_current_span("request"):
                batch = await aio.enqueue_batch(conn, queue, [{"b": 1}])
                graph = await aio.enqueue_graph(conn, queue, [{"ref": "a", "payload": {"g": 1}}])
            return outside, batch[0], graph[0][1]

    outside, batched, graphed = asyncio.run(main())
    assert stored_payload(admin, queue, outside) == {"n": 0}
    assert KEY in stored_payload(admin, queue, batched) and KEY in stored_payload(admin, queue, graphed)


BLOCKED = """
import asyncio, importlib.abc, json, sys

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError(f"{name} is blocked")

sys.meta_path.insert(0, Blocker())
import psycopg
import concurrency_ext
from concurrency_ext import Worker, _tracing, aio, enqueue, enqueue_batch

assert _tracing.trace is None
dsn, queue = sys.argv[1], sys.argv[2]
seen = []
with psycopg.connect(dsn, autocommit=True) as conn:
    ids = [enqueue(conn, queue, {"n": 1})] + enqueue_batch(conn, queue, [{"n": 2}])
    stored = [conn.execute(f'SELECT payload FROM concurrency."q_{queue}" WHERE id = %s', (i,)).fetchone()[0]
              for i in ids]
assert stored == [{"n": 1}, {"n": 2}], stored
Worker(dsn, queue, lambda task, conn: seen.append(task.payload)).run(drain=True)

async def ahandler(task, conn):
    seen.append(task.payload)

async def amain():
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await aio.enqueue(conn, queue, {"n": 3})
    await aio.AsyncWorker(dsn, queue, ahandler).run(drain=True)

asyncio.run(amain())
print(json.dumps(seen))
"""


def test_without_opentelemetry(admin, dsn, queue):
    # a task enqueued with a trace context here: a worker without OpenTelemetry still hands its handler the
    # payload without it
    with tracer().start_as_current_span("request"):
        with psycopg.connect(dsn, autocommit=True) as conn:
            traced = enqueue(conn, queue, {"n": 0})
    assert KEY in stored_payload(admin, queue, traced)
    out = subprocess.run([sys.executable, "-c", BLOCKED, dsn, queue], capture_output=True, text=True,
                         env=dict(os.environ), timeout=120)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert sorted(p["n"] for p in seen) == [0, 1, 2, 3]
    assert all(set(p) == {"n"} for p in seen), seen
