"""AsyncWorker and the asyncio producer against a real server."""
import asyncio

import psycopg
import pytest

from concurrency_ext import LeaseLostError
from concurrency_ext.aio import AsyncWorker, enqueue, enqueue_batch
from conftest import results_table, states


def run(coro):
    return asyncio.run(coro)


async def arecord(task, conn):
    await conn.execute(f"INSERT INTO {results_table(task.queue)} VALUES (%s, %s, %s, %s)",
                       (task.id, task.attempt, psycopg.types.json.Jsonb(task.payload), "async"))


@pytest.mark.parametrize("concurrency,batch", [(1, 1), (3, 1), (2, 7)])
def test_async_drain_every_task_once(admin, dsn, queue, concurrency, batch):
    async def main():
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            ids = await enqueue_batch(conn, queue, [{"n": i} for i in range(40)])
            ids.append(await enqueue(conn, queue, [1, 2, 3]))
        await AsyncWorker(dsn, queue, arecord, concurrency=concurrency, batch=batch).run(drain=True)
        return ids

    ids = run(main())
    done = admin.execute(f"SELECT task_id FROM {results_table(queue)} ORDER BY 1").fetchall()
    assert [r[0] for r in done] == ids
    assert states(admin, queue) == {}


def test_async_failure_and_lost_lease(admin, dsn, queue):
    errors = []

    async def handler(task, conn):
        await arecord(task, conn)
        if task.payload["n"] == 0:
            raise KeyError("missing")
        # the task is cancelled while its handler runs: its complete is refused
        admin.execute("SELECT concurrency.cancel(%s, ARRAY[%s]::bigint[])", (queue, task.id))

    async def main():
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await enqueue_batch(conn, queue, [{"n": 0}, {"n": 1}])
        await AsyncWorker(dsn, queue, handler, on_error=lambda e, t: errors.append(e)).run(drain=True)

    run(main())
    assert sorted(type(e).__name__ for e in errors) == ["KeyError", "LeaseLostError"]
    assert [e.reason for e in errors if isinstance(e, LeaseLostError)] == ["cancelled"]
    assert admin.execute(f"SELECT count(*) FROM {results_table(queue)}").fetchone()[0] == 0
    assert admin.execute(f'SELECT state, attempt, last_error FROM concurrency."q_{queue}" WHERE state <> %s',
                         ("cancelled",)).fetchall() == [("scheduled", 1, "KeyError: 'missing'")]


def test_async_stop_while_waiting(admin, dsn, queue):
    async def main():
        worker = AsyncWorker(dsn, queue, arecord, wait=60, poll_interval=0.2)
        await worker.start()
        return await worker.stop(timeout=30)

    assert run(main()) is True


def test_async_handler_under_repeatable_read_claims_nothing_in_its_transaction(admin, dsn, queue):
    """As the synchronous runtime: no claim in the completing transaction
    under REPEATABLE READ (it would fail with 40001 on a task claimed since)."""
    errors = []

    async def handler(task, conn):
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        await arecord(task, conn)  # the snapshot is taken here
        if task.payload["n"] == 0:  # another worker claims and completes a task after it
            other = admin.execute("SELECT task_id, lease_token FROM concurrency.dequeue(%s)", (queue,)).fetchone()
            admin.execute("SELECT concurrency.complete(%s, %s, %s)", (queue, other[0], other[1]))

    async def main():
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await enqueue_batch(conn, queue, [{"n": i} for i in range(3)])
        await AsyncWorker(dsn, queue, handler, on_error=lambda e, t: errors.append(e)).run(drain=True)

    run(main())
    assert errors == []
    assert admin.execute(f"SELECT count(*), count(DISTINCT task_id) FROM {results_table(queue)}").fetchone() == (2, 2)
    assert states(admin, queue) == {}
