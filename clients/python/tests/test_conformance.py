"""The conformance scenarios of clients/conformance/scenarios.json, run through the package's public API:
Worker (threads) and AsyncWorker (asyncio). See clients/conformance/README.md."""
import asyncio
import json
import os
import re
import threading

import psycopg
import pytest
from psycopg.types.json import Jsonb

from concurrency_ext import LeaseLostError, Worker, emit_event, enqueue
from concurrency_ext import aio
from conftest import DB, admin_connect, wait_until

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
