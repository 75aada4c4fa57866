"""Tasks that wait for their parents: enqueue(after=...), enqueue_graph and
parent_results, with the synchronous and asyncio producers and a worker."""
import asyncio
import datetime

import psycopg
import pytest

from concurrency_ext import QueueError, Worker, enqueue, enqueue_graph, parent_results
from concurrency_ext import aio


def status(admin, queue, task_id):
    return admin.execute("SELECT state, parents_open, last_error FROM concurrency.task_status(%s, %s)",
                         (queue, task_id)).fetchone()


def run_one(admin, queue, result=None):
    """Claims the next task of the queue and completes it with result; returns its id (None: nothing to claim)."""
    row = admin.execute("SELECT t.task_id, concurrency.complete(%s, t.task_id, t.lease_token, %s)"
                        " FROM concurrency.dequeue(%s) AS t",
                        (queue, psycopg.types.json.Jsonb(result), queue)).fetchone()
    return row and row[0]


def test_enqueue_after_waits_for_every_parent(admin, queue):
    a = enqueue(admin, queue, {"step": "a"})
    b = enqueue(admin, queue, {"step": "b"})
    c = enqueue(admin, queue, {"step": "c"}, after=[a, b], priority=9)
    assert status(admin, queue, c) == ("waiting", 2, None)
    assert run_one(admin, queue, {"from": "a"}) == a, "the waiting child is not claimed, whatever its priority"
    assert status(admin, queue, c)[:2] == ("waiting", 1)
    assert run_one(admin, queue, {"from": "b"}) == b
    assert status(admin, queue, c)[:2] == ("ready", None)
    # the queue retains nothing, but the parents are kept until their child has finished
    assert parent_results(admin, queue, c) == [(a, queue, {"from": "a"}), (b, queue, {"from": "b"})]
    assert run_one(admin, queue) == c
    assert status(admin, queue, enqueue(admin, queue, after=[]))[0] == "ready"
    with pytest.raises(QueueError) as error:
        enqueue(admin, queue, after=[424242])
    assert error.value.sqlstate == "22023"


def test_enqueue_graph_refs_ids_and_other_queues(admin, queue):
    other = queue[:30] + "_other"
    admin.execute("SELECT concurrency.create_queue(%s)", (other,))
    try:
        old = enqueue(admin, other, {"old": True})
        run_at = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
        rows = enqueue_graph(admin, queue, [
            {"ref": "fetch", "payload": [1, 2], "priority": 5},
            {"ref": "parse", "after": ["fetch"], "queue": other, "concurrency_key": "k"},
            {"ref": "store", "after": ["parse", {"queue": other, "id": old}], "run_at": run_at},
            {"after": ["fetch"]},
        ])
        assert [ref for ref, _ in rows] == ["fetch", "parse", "store", None]
        fetch, parse, store, last = [task_id for _, task_id in rows]
        assert admin.execute(f'SELECT payload, priority FROM concurrency."q_{queue}" WHERE id = %s',
                             (fetch,)).fetchone() == ([1, 2], 5)
        assert admin.execute(f'SELECT concurrency_key FROM concurrency."q_{other}" WHERE id = %s',
                             (parse,)).fetchone() == ("k",)
        assert status(admin, queue, store)[:2] == ("waiting", 2)
        assert run_one(admin, queue, "fetched") == fetch
        assert status(admin, queue, last)[0] == "ready"
        assert run_one(admin, other) == old
        assert run_one(admin, other, "parsed") == parse
        assert admin.execute("SELECT state, run_at FROM concurrency.task_status(%s, %s)",
                             (queue, store)).fetchone() == ("scheduled", run_at), "released to its run_at"
        assert parent_results(admin, queue, store) == [(old, other, None), (parse, other, "parsed")]
        assert enqueue_graph(admin, queue, []) == []
    finally:
        admin.execute("SELECT concurrency.drop_queue(%s)", (other,))


@pytest.mark.parametrize("graph,sqlstate", [
    ([{"ref": "a", "after": ["b"]}, {"ref": "b", "after": ["a"]}], "22023"),  # a cycle
    ([{"ref": "a"}, {"ref": "b", "after": ["a", 999999]}], "22023"),  # a parent that does not exist
    ([{"ref": "a", "aftr": ["b"]}], "22023"),  # a field the graph does not know
    ([{"ref": "a"}, {"queue": "nosuchqueue"}], "42704"),
])
def test_enqueue_graph_is_all_or_nothing(admin, queue, graph, sqlstate):
    with pytest.raises(QueueError) as error:
        enqueue_graph(admin, queue, graph)
    assert error.value.sqlstate == sqlstate
    assert admin.execute(f'SELECT count(*) FROM concurrency."q_{queue}"').fetchone() == (0,)


def test_a_dead_parent_cancels_its_waiting_descendants(admin, queue):
    admin.execute("SELECT concurrency.alter_queue(%s, max_attempts => 1, retain => '1 hour')", (queue,))
    root, mid, leaf = [task_id for _, task_id in enqueue_graph(
        admin, queue, [{"ref": "root"}, {"ref": "mid", "after": ["root"]}, {"after": ["mid"]}])]
    task_id, token = admin.execute("SELECT task_id, lease_token FROM concurrency.dequeue(%s)", (queue,)).fetchone()
    assert task_id == root
    admin.execute("SELECT concurrency.fail(%s, %s, %s, 'boom')", (queue, task_id, token))
    assert status(admin, queue, mid)[0] == status(admin, queue, leaf)[0] == "cancelled"
    assert "ended dead" in status(admin, queue, leaf)[2]


def test_worker_reads_the_parents_results(admin, dsn, queue):
    """The child is claimed only after both parents, and its handler reads
    their results: what their handler returned (None: no result)."""
    admin.execute("SELECT concurrency.alter_queue(%s, retain => '1 hour')", (queue,))
    a, b, child = [task_id for _, task_id in enqueue_graph(admin, queue, [
        {"ref": "a"}, {"ref": "b"}, {"ref": "both", "payload": {"child": True}, "after": ["a", "b"], "priority": 10}])]
    order, seen = [], []

    def handler(task, conn):
        order.append(task.id)
        if task.payload.get("child"):
            seen.append(parent_results(conn, task.queue, task.id))
            return None
        return {"rows": [task.id]} if task.id == a else None

    Worker(dsn, queue, handler).run(drain=True)
    assert order == [a, b, child]
    assert seen == [[(a, queue, {"rows": [a]}), (b, queue, None)]]
    assert status(admin, queue, child)[0] == "done"


def test_async_enqueue_after_and_graph(admin, dsn, queue):
    async def main():
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            parent = await aio.enqueue(conn, queue, {"p": 1})
            child = await aio.enqueue(conn, queue, after=[parent])
            rows = await aio.enqueue_graph(conn, queue, [{"ref": "g", "after": [parent]}])
            return parent, child, rows

    parent, child, rows = asyncio.run(main())
    assert status(admin, queue, child)[:2] == ("waiting", 1)
    assert [ref for ref, _ in rows] == ["g"] and status(admin, queue, rows[0][1])[:2] == ("waiting", 1)
    assert run_one(admin, queue, {"r": 1}) == parent

    async def results():
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            return await aio.parent_results(conn, queue, child)

    assert asyncio.run(results()) == [(parent, queue, {"r": 1})]


def test_async_worker_stores_the_handlers_result(admin, dsn, queue):
    """What an AsyncWorker's handler returns is the task's result (the child,
    finished, has no edges left for parent_results: read from task_status)."""
    admin.execute("SELECT concurrency.alter_queue(%s, retain => '1 hour')", (queue,))
    parent = enqueue(admin, queue, {"n": 2})
    child = enqueue(admin, queue, after=[parent])

    async def handler(task, conn):
        return [task.payload["n"], "squared", task.payload["n"] ** 2] if task.id == parent else None

    asyncio.run(aio.AsyncWorker(dsn, queue, handler).run(drain=True))
    assert admin.execute("SELECT result FROM concurrency.task_status(%s, %s)", (queue, parent)).fetchone()[0] \
        == [2, "squared", 4]
    assert status(admin, queue, child)[0] == "done"
