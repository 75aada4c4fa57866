"""Durable workflows in the synchronous Worker: steps kept across runs,
database steps exactly once, durable sleeps and events that take the task
away from its worker without completing or failing it, and await_task."""
import asyncio
import datetime
import os
import subprocess
import sys
import threading
import time

import psycopg
import pytest

from concurrency_ext import TaskEnd, Worker, aio, await_task, emit_event, enqueue
from conftest import admin_connect, results_table, run_in_thread, wait_until


def row(admin, queue, task_id):
    return admin.execute(f'SELECT state, attempt, last_error, lease_token FROM concurrency."q_{queue}" WHERE id = %s',
                         (task_id,)).fetchone()


def steps(admin, queue, task_id):
    return [s for s, in admin.execute("SELECT step FROM concurrency.task_steps(%s, %s)", (queue, task_id))]


def due_now(admin, queue):
    """Skips the backoff of a failed attempt: the retry is claimable at once."""
    admin.execute(f"UPDATE concurrency.\"q_{queue}\" SET run_at = clock_timestamp() WHERE state = 'scheduled'")


@pytest.fixture
def running(dsn, queue):
    """Starts Worker(dsn, queue, handler, **options) in the background; stopped at the end of the test."""
    workers = []

    def start(handler, **options):
        worker = Worker(dsn, queue, handler, wait=1.0, **options)
        worker.start()
        workers.append(worker)
        return worker

    yield start
    for worker in workers:
        assert worker.stop(30)


def test_step_is_not_run_again_after_a_failure(admin, dsn, queue):
    calls = []
    errors = []

    def handler(task, conn):
        charged = task.step("charge", lambda: calls.append(task.attempt) or {"charge": "ch_1"})
        if task.attempt == 1:
            raise ValueError("the mail server is down")
        return charged

    task_id = enqueue(admin, queue, {})
    worker = dict(on_error=lambda e, t: errors.append(e))
    Worker(dsn, queue, handler, **worker).run(drain=True)
    assert row(admin, queue, task_id)[:3] == ("scheduled", 1, "ValueError: the mail server is down")
    assert steps(admin, queue, task_id) == ["charge"], "the step is kept by the failed attempt"
    due_now(admin, queue)
    Worker(dsn, queue, handler, **worker).run(drain=True)
    assert calls == [1], "the second run took the recorded result"
    # a done task keeps the error of its failed attempt
    assert await_task(admin, queue, task_id, timeout=10)[:2] == ("done", {"charge": "ch_1"})
    assert [type(e) for e in errors] == [ValueError]


def test_database_step_exactly_once(admin, dsn, queue):
    table = results_table(queue)

    def write(conn, task):
        conn.execute(f"INSERT INTO {table} (task_id, attempt) VALUES (%s, %s)", (task.id, task.attempt))
        if task.attempt == 1:
            raise RuntimeError("the step's own transaction fails after its write")
        return {"written_by": task.attempt}

    def handler(task, conn):
        written = task.step("write", lambda step_conn: write(step_conn, task), transaction=True)
        conn.execute(f"INSERT INTO {table} (task_id, attempt, worker) VALUES (%s, %s, 'handler')",
                     (task.id, task.attempt))
        if task.attempt == 2:
            raise RuntimeError("the handler's transaction fails after the step committed")
        return written

    task_id = enqueue(admin, queue, {})
    for attempt in (1, 2, 3):
        Worker(dsn, queue, handler, on_error=lambda e, t: None).run(drain=True)
        due_now(admin, queue)
    assert await_task(admin, queue, task_id, timeout=10)[:2] == ("done", {"written_by": 2})
    rows = admin.execute(f"SELECT attempt, worker FROM {table} ORDER BY attempt").fetchall()
    assert rows == [(2, None), (3, "handler")], "the step's write once, the handler's with the completion"


def test_sleep_leaves_the_worker_and_comes_back(admin, queue, running):
    runs, before, errors = [], [], []
    slept_at = {}

    def handler(task, conn):
        runs.append((task.attempt, time.monotonic()))
        first = task.step("before", lambda: before.append(1) or "kept")
        slept_at.setdefault(task.id, time.monotonic())
        task.sleep(datetime.timedelta(seconds=1))
        return {"before": first, "runs": len(runs)}

    task_id = enqueue(admin, queue, {})
    running(handler, on_error=lambda e, t: errors.append(e))
    assert await_task(admin, queue, task_id, timeout=60) == TaskEnd("done", {"before": "kept", "runs": 2}, None)
    assert before == [1], "the step before the sleep ran once"
    assert [attempt for attempt, _ in runs] == [1, 1], "the sleep spent no attempt"
    assert runs[1][1] - slept_at[task_id] >= 0.9, "back after the sleep's duration"
    assert steps(admin, queue, task_id) == ["before", "sleep:1"]
    assert errors == []


def test_sleeping_task_is_not_failed_nor_heartbeated(admin, queue, running):
    errors, asleep = [], threading.Event()

    def handler(task, conn):
        asleep.set()
        task.sleep(3600)

    task_id = enqueue(admin, queue, {})
    worker = running(handler, on_error=lambda e, t: errors.append(e))
    wait_until(asleep.is_set, "the handler")
    wait_until(lambda: row(admin, queue, task_id)[0] == "scheduled", "the task to sleep")
    assert row(admin, queue, task_id) == ("scheduled", 0, None, None), "no lease, no attempt, no error"
    # the queue's lease is 2 s: heartbeats would come every 0.67 s and a heartbeat
    # of the fenced token would be reported as a lost lease
    time.sleep(2.5)
    assert errors == []
    assert not any(worker._held), "nothing held by the worker"
    assert row(admin, queue, task_id) == ("scheduled", 0, None, None)


def test_wait_for_event_then_emit(admin, queue, running):
    runs = []

    def handler(task, conn):
        runs.append(task.attempt)
        return {"reply": task.wait_for_event(f"reply-{task.payload['order']}")}

    task_id = enqueue(admin, queue, {"order": 7})
    running(handler, on_error=lambda e, t: pytest.fail(f"{e}"))
    wait_until(lambda: row(admin, queue, task_id)[0] == "scheduled", "the task to wait for its event")
    assert emit_event(admin, "reply-7", {"text": "yes"}) == 1
    assert await_task(admin, queue, task_id, timeout=60) == TaskEnd("done", {"reply": {"text": "yes"}}, None)
    assert runs == [1, 1]


def test_event_emitted_before_the_wait(admin, queue, running):
    runs = []

    def handler(task, conn):
        runs.append(task.attempt)
        return {"reply": task.wait_for_event("reply-early")}

    assert emit_event(admin, "reply-early", ["early"]) == 0
    task_id = enqueue(admin, queue, {})
    running(handler)
    assert await_task(admin, queue, task_id, timeout=60) == TaskEnd("done", {"reply": ["early"]}, None)
    assert runs == [1], "taken at once, without leaving the worker"


def test_wait_for_event_timeout(admin, queue, running):
    runs = []

    def handler(task, conn):
        runs.append(task.attempt)
        reply = task.wait_for_event("reply-never", timeout=0.5)
        task.sleep(0.2)  # the run after the sleep must not wait for the event again
        return {"reply": reply}

    task_id = enqueue(admin, queue, {})
    running(handler)
    assert await_task(admin, queue, task_id, timeout=60) == TaskEnd("done", {"reply": None}, None)
    assert len(runs) == 3, "parked, back after the timeout, back after the sleep"


def test_await_task(admin, dsn, queue, running):
    admin.execute("SELECT concurrency.alter_queue(%s, max_attempts => 1)", (queue,))

    def handler(task, conn):
        if task.payload.get("fail"):
            raise ValueError("no such customer")
        return {"total": task.payload["n"] * 2}

    idle = enqueue(admin, queue, {"n": 0})
    with pytest.raises(TimeoutError):
        await_task(admin, queue, idle, timeout=0.3)
    assert await_task(admin, queue, idle + 1000) is None, "no such task"
    running(handler, on_error=lambda e, t: None)
    assert await_task(admin, queue, idle, timeout=60) == TaskEnd("done", {"total": 0}, None)
    good = enqueue(admin, queue, {"n": 21})
    bad = enqueue(admin, queue, {"fail": True})
    assert await_task(admin, queue, good, timeout=60) == TaskEnd("done", {"total": 42}, None)
    assert await_task(admin, queue, bad, timeout=60) == TaskEnd("dead", None, "ValueError: no such customer")


def test_await_task_of_a_completion_without_result(admin, queue, running):
    """Seen alive, then removed (a queue that retains nothing, no result): no such task any more."""
    release = threading.Event()

    def handler(task, conn):
        release.wait(30)

    task_id = enqueue(admin, queue, {})
    running(handler)
    waiter = []

    def wait():
        with admin_connect() as conn:
            waiter.append(await_task(conn, queue, task_id, timeout=60))

    thread = run_in_thread(wait)
    wait_until(lambda: row(admin, queue, task_id)[0] == "leased", "the task to start")
    release.set()
    thread.join(60)
    assert waiter == [None]


def test_workflow_calls_outside_a_worker(admin, queue):
    from concurrency_ext import Task

    task = Task(queue, 1, 1, 1, {}, None, None)
    with pytest.raises(RuntimeError):
        task.step("a", lambda: 1)


def test_orders_example(admin, dsn):
    """examples/orders.py runs as the README shows it."""
    example = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "orders.py")
    out = subprocess.run([sys.executable, example, dsn], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("done {'order': 1001, 'status': 'shipped', 'charge_id': 'ch_orders_"), out.stdout
    assert admin.execute("SELECT count(*) FROM receipts WHERE order_id = 1001").fetchone() == (1,)
    assert admin.execute("SELECT address FROM shipments WHERE order_id = 1001").fetchall() == [("1 Main St",)]


def test_batch_of_workflows(admin, queue, running):
    """Tasks claimed together: one sleeps (its savepoint rolled back, not completed), the others complete."""
    runs = []

    def handler(task, conn):
        runs.append(task.id)
        if task.payload["sleeps"]:
            task.sleep(0.3)
        conn.execute(f"INSERT INTO {results_table(queue)} (task_id, attempt) VALUES (%s, %s)", (task.id, task.attempt))

    ids = [enqueue(admin, queue, {"n": n, "sleeps": n == 1}) for n in range(3)]
    running(handler, batch=3)
    # complete_batch keeps no result: on this queue, which retains nothing, the tasks are removed
    wait_until(lambda: admin.execute(f'SELECT count(*) FROM concurrency."q_{queue}"').fetchone()[0] == 0,
               "every task completed")
    assert sorted(admin.execute(f"SELECT task_id, attempt FROM {results_table(queue)}").fetchall()) == \
        [(task_id, 1) for task_id in ids]
    assert runs.count(ids[1]) == 2


def test_workflow_through_pgbouncer(admin, queue, pgbouncer):
    runs = []

    def handler(task, conn):
        runs.append(task.id)
        first = task.step("first", lambda: "kept")
        task.sleep(0.2)
        return {"first": first, "reply": task.wait_for_event("bouncer-reply")}

    worker = Worker(pgbouncer, queue, handler, wait=1.0)
    worker.start()
    try:
        task_id = enqueue(admin, queue, {})
        wait_until(lambda: row(admin, queue, task_id)[0] == "scheduled" and len(runs) == 2, "the wait for the event")
        # the producer's side through the pooler too
        with psycopg.connect(pgbouncer, autocommit=True, prepare_threshold=None) as bouncer:
            emit_event(bouncer, "bouncer-reply", "yes")
            assert await_task(bouncer, queue, task_id, timeout=60) == TaskEnd("done", {"first": "kept", "reply": "yes"},
                                                                             None)
    finally:
        assert worker.stop(30)


def test_async_await_task_and_emit_event(admin, queue, running):
    def handler(task, conn):
        return {"reply": task.wait_for_event("async-reply")}

    task_id = enqueue(admin, queue, {})
    running(handler)

    async def produce():
        async with await psycopg.AsyncConnection.connect(admin.info.dsn, autocommit=True) as conn:
            assert await aio.await_task(conn, queue, task_id + 1000) is None
            with pytest.raises(TimeoutError):
                await aio.await_task(conn, queue, task_id, timeout=0.2)
            await aio.emit_event(conn, "async-reply", {"ok": True})
            return await aio.await_task(conn, queue, task_id, timeout=60)

    assert asyncio.run(produce()) == TaskEnd("done", {"reply": {"ok": True}}, None)


def test_async_workflow(admin, dsn, queue):
    """The same calls, awaited, in an AsyncWorker's handler: a step kept across a failed attempt, a database
    step (fn a coroutine function), a sleep and an event, with no error reported but the one raised."""
    table = results_table(queue)
    charged, errors = [], []

    async def write(tx):
        await tx.execute(f"INSERT INTO {table} (task_id, attempt) VALUES (1, 0)")
        return "written"

    async def handler(task, conn):
        charge = await task.step("charge", lambda: charged.append(task.attempt) or "ch_1")
        if task.attempt == 1:
            raise ValueError("first attempt fails")
        receipt = await task.step("receipt", write, transaction=True)
        await task.sleep(0.2)
        reply = await task.wait_for_event("async-workflow-reply")
        return {"charge": charge, "receipt": receipt, "reply": reply}

    async def main():
        worker = aio.AsyncWorker(dsn, queue, handler, wait=1.0, on_error=lambda e, t: errors.append(e))
        await worker.start()
        try:
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                task_id = await aio.enqueue(conn, queue, {})
                while (await (await conn.execute(f'SELECT state FROM concurrency."q_{queue}"')).fetchone())[0] \
                        != "scheduled":
                    await asyncio.sleep(0.02)
                await conn.execute(f'UPDATE concurrency."q_{queue}" SET run_at = clock_timestamp()')  # no backoff
                parked = "SELECT count(*) FROM concurrency.event_wait WHERE event = 'async-workflow-reply'"
                while not (await (await conn.execute(parked)).fetchone())[0]:
                    await asyncio.sleep(0.02)
                await aio.emit_event(conn, "async-workflow-reply", "yes")
                return await aio.await_task(conn, queue, task_id, timeout=60)
        finally:
            assert await worker.stop(30)

    end = asyncio.run(main())
    assert end[:2] == ("done", {"charge": "ch_1", "receipt": "written", "reply": "yes"})
    assert charged == [1]
    assert admin.execute(f"SELECT count(*) FROM {table}").fetchone() == (1,)
    assert [type(e) for e in errors] == [ValueError]
