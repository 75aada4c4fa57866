"""The synchronous Worker against a real server."""
import logging
import threading
import time

import psycopg
import pytest

from concurrency_ext import LeaseLostError, Worker, enqueue, enqueue_batch
from conftest import record, results_table, run_in_thread, states, wait_until


def counts(admin, queue):
    return admin.execute(f"SELECT count(*), count(DISTINCT task_id) FROM {results_table(queue)}").fetchone()


@pytest.mark.parametrize("concurrency,batch", [(1, 1), (4, 1), (2, 10)])
def test_drain_every_task_once(admin, dsn, queue, concurrency, batch):
    enqueue_batch(admin, queue, [{"n": i} for i in range(60)])
    Worker(dsn, queue, record, concurrency=concurrency, batch=batch).run(drain=True)
    assert counts(admin, queue) == (60, 60)
    assert states(admin, queue) == {}  # completed tasks are gone (no retention)


def test_handler_writes_and_complete_share_a_transaction(admin, dsn, queue):
    """The handler's conn is in the completing transaction: it sees its own
    task leased, and its write lands with the completion."""
    seen = []

    def handler(task, conn):
        record(task, conn)
        seen.append(conn.info.transaction_status)

    enqueue(admin, queue, {"a": 1})
    Worker(dsn, queue, handler).run(drain=True)
    assert seen == [psycopg.pq.TransactionStatus.INTRANS]
    assert counts(admin, queue) == (1, 1)


def test_failure_records_the_exception_and_rolls_back(admin, dsn, queue):
    errors = []

    def handler(task, conn):
        record(task, conn)
        raise ValueError(f"no address in {task.payload['n']}")

    task_id = enqueue(admin, queue, {"n": 7})
    Worker(dsn, queue, handler, on_error=lambda e, t: errors.append(e)).run(drain=True)
    row = admin.execute(f'SELECT state, attempt, last_error FROM concurrency."q_{queue}" WHERE id = %s',
                        (task_id,)).fetchone()
    assert row[1:] == (1, "ValueError: no address in 7")
    assert row[0] == "scheduled", "to be retried after the backoff"
    assert [type(e) for e in errors] == [ValueError]
    assert counts(admin, queue) == (0, 0), "the failed handler's write rolled back"


def test_batch_failure_undoes_only_its_task(admin, dsn, queue):
    ids = enqueue_batch(admin, queue, [{"n": i} for i in range(6)])

    def handler(task, conn):
        record(task, conn)
        if task.payload["n"] == 3:
            raise RuntimeError("three")

    Worker(dsn, queue, handler, batch=6, on_error=lambda e, t: None).run(drain=True)
    done = [r[0] for r in admin.execute(f"SELECT task_id FROM {results_table(queue)} ORDER BY 1").fetchall()]
    assert done == [i for i in ids if i != ids[3]]
    row = admin.execute(f'SELECT attempt, last_error FROM concurrency."q_{queue}"').fetchall()
    assert row == [(1, "RuntimeError: three")]


def test_payloads_of_every_json_type(admin, dsn, queue):
    payloads = [[1, "two", None], "text", 42, 1.5, True, None, {"nested": {"list": [1, 2]}}, []]
    enqueue_batch(admin, queue, payloads[:4])
    for p in payloads[4:]:
        enqueue(admin, queue, p) if p is not None else admin.execute(
            "SELECT concurrency.enqueue(%s, 'null')", (queue,))
    got = []
    Worker(dsn, queue, lambda task, conn: got.append(task.payload)).run(drain=True)
    assert sorted(map(repr, got)) == sorted(map(repr, payloads))


def test_heartbeats_keep_a_task_past_its_lease(admin, dsn, queue):
    """The handler returns once the heartbeats have pushed the lease more
    than a full lease past where the claim set it."""
    task_id = enqueue(admin, queue, {})

    def handler(task, conn):
        wait_until(lambda: admin.execute(
            "SELECT lease_expires_at > %s + interval '2 seconds' FROM concurrency.task_status(%s, %s)",
            (task.lease_expires_at, queue, task.id)).fetchone()[0], "the heartbeats")
        record(task, conn)

    Worker(dsn, queue, handler).run(drain=True)
    assert admin.execute(f"SELECT task_id, attempt FROM {results_table(queue)}").fetchall() == [(task_id, 1)]


def test_heartbeats_keep_tasks_claimed_by_a_completion(admin, dsn, queue):
    """The second and third tasks come with the completion before them (no
    time left in that claim: the worker reckons it from the lease's end);
    each is still held past a full lease by its heartbeats, done once, at
    its first attempt."""
    ids = [enqueue(admin, queue, {"n": i}) for i in range(3)]
    chained = []

    def handler(task, conn):
        wait_until(lambda: admin.execute(
            "SELECT lease_expires_at > %s + interval '2 seconds' FROM concurrency.task_status(%s, %s)",
            (task.lease_expires_at, queue, task.id)).fetchone()[0], "the heartbeats")
        record(task, conn)

    worker = Worker(dsn, queue, handler)
    claim_next = worker._claim_next

    def counted(conn):
        tasks, left = claim_next(conn)
        chained.extend((t.id, 1.5 < left < 2.5) for t in tasks)  # about the 2 s lease
        return tasks, left

    worker._claim_next = counted
    worker.run(drain=True)
    assert chained == [(ids[1], True), (ids[2], True)]
    assert admin.execute(f"SELECT task_id, attempt FROM {results_table(queue)} ORDER BY task_id").fetchall() == [
        (i, 1) for i in ids]


def test_heartbeats_never_race_complete(admin, dsn, queue):
    """Heartbeats every 50 ms, tasks of about that length: a heartbeat sent
    after its task's complete would be a CE001 reported here."""
    enqueue_batch(admin, queue, [{"n": i} for i in range(150)])
    errors = []
    stop = threading.Event()

    def handler(task, conn):
        stop.wait(0.01 * (task.payload["n"] % 8))
        record(task, conn)

    Worker(dsn, queue, handler, concurrency=3, heartbeat_fraction=0.025,
           on_error=lambda e, t: errors.append(e)).run(drain=True)
    assert errors == []
    assert counts(admin, queue) == (150, 150)


def test_lease_exceeded_is_lost_cleanly(admin, dsn, queue):
    """Without heartbeats a handler that outlives its lease loses the task
    to the next claim: its complete raises LeaseLostError and its write rolls back."""
    task_id = enqueue(admin, queue, {})
    errors, taken_over = [], threading.Event()

    def handler(task, conn):
        record(task, conn)
        taken_over.wait(60)

    worker = Worker(dsn, queue, handler, heartbeat=False, lease=1, on_error=lambda e, t: errors.append(e))
    thread = run_in_thread(worker.run, True, False)
    wait_until(lambda: admin.execute(f'SELECT lease_expires_at < clock_timestamp() FROM concurrency."q_{queue}"')
               .fetchone()[0], "the lease to expire")
    other = admin.execute("SELECT task_id, lease_token FROM concurrency.dequeue(%s)", (queue,)).fetchone()
    assert other[0] == task_id
    taken_over.set()
    thread.join(60)
    assert len(errors) == 1 and isinstance(errors[0], LeaseLostError)
    assert errors[0].sqlstate == "CE001" and errors[0].reason == "reclaimed"
    assert counts(admin, queue) == (0, 0), "the handler's write rolled back"
    admin.execute("SELECT concurrency.complete(%s, %s, %s)", (queue, *other))


def test_cancelled_task_is_lost_at_the_next_heartbeat(admin, dsn, queue):
    task_id = enqueue(admin, queue, {})
    errors, started = [], threading.Event()
    worker = None

    def handler(task, conn):
        record(task, conn)
        started.set()
        # the heartbeat learns of the cancel: the held task is marked lost
        wait_until(lambda: any(h.lost for h in worker._held), "the heartbeat to see the cancel")

    worker = Worker(dsn, queue, handler, heartbeat_fraction=0.05, on_error=lambda e, t: errors.append(e))
    thread = run_in_thread(worker.run, True, False)
    started.wait(60)
    admin.execute("SELECT concurrency.cancel(%s, ARRAY[%s]::bigint[])", (queue, task_id))
    thread.join(60)
    assert [(type(e), e.reason) for e in errors] == [(LeaseLostError, "cancelled")]
    assert counts(admin, queue) == (0, 0)


def test_stop_cancels_a_waiting_claim(admin, dsn, queue):
    worker = Worker(dsn, queue, record, wait=60, poll_interval=0.2)
    thread = run_in_thread(worker.run, False, False)
    wait_until(lambda: worker.features is not None, "the worker to start")
    assert worker.stop(timeout=30)
    thread.join(30)
    assert not thread.is_alive()


def test_pool(admin, dsn, queue):
    pool_module = pytest.importorskip("psycopg_pool")
    enqueue_batch(admin, queue, [{"n": i} for i in range(20)])
    with pool_module.ConnectionPool(dsn, min_size=1, max_size=4, kwargs={"prepare_threshold": None}) as pool:
        Worker(pool, queue, record, concurrency=2).run(drain=True)
    assert counts(admin, queue) == (20, 20)


def test_features_match_the_server(admin, dsn, queue):
    worker = Worker(dsn, queue, record)
    worker.start(drain=True)
    worker.stop(timeout=30)
    has = admin.execute("SELECT count(*) FILTER (WHERE proname = 'release') > 0, "
                        "       count(*) FILTER (WHERE proname = 'dequeue' AND 'wait' = ANY (proargnames)) > 0 "
                        "  FROM pg_proc WHERE pronamespace = 'concurrency'::regnamespace").fetchone()
    assert (worker.features.release, worker.features.wait) == has


def test_enqueue_on_conflict_replace(admin, queue):
    task_id = enqueue(admin, queue, {"rev": 1}, dedupe_key="doc-7")
    assert enqueue(admin, queue, {"rev": 2}, dedupe_key="doc-7", priority=4, on_conflict="replace") == task_id
    assert admin.execute(f'SELECT payload, priority FROM concurrency."q_{queue}" WHERE id = %s',
                         (task_id,)).fetchone() == ({"rev": 2}, 4)
    assert enqueue(admin, queue, {"rev": 3}, dedupe_key="doc-7") == task_id
    assert admin.execute(f'SELECT payload FROM concurrency."q_{queue}" WHERE id = %s', (task_id,)).fetchone() == (
        {"rev": 2},)


def test_task_enqueued_while_waiting_is_claimed(admin, dsn, queue):
    """A worker in a claim that waits far longer than this test may take (or,
    without dequeue(wait), polling) picks up a task enqueued meanwhile."""
    worker = Worker(dsn, queue, record, wait=600, poll_interval=0.2)
    thread = run_in_thread(worker.run, False, False)
    wait_until(lambda: worker.features is not None, "the worker to start")
    if worker.features.wait:
        wait_until(lambda: admin.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                                         "AND state = 'active' AND query LIKE '%%dequeue%%'",
                                         (worker.name,)).fetchone()[0] == 1, "the claim to wait")
    task_id = enqueue(admin, queue, {"late": True})
    wait_until(lambda: counts(admin, queue) == (1, 1), "the task to be done", timeout=120)
    assert worker.stop(timeout=30)
    thread.join(30)
    assert admin.execute(f"SELECT task_id FROM {results_table(queue)}").fetchall() == [(task_id,)]


def test_a_handler_under_repeatable_read_claims_nothing_in_its_transaction(admin, dsn, queue):
    """The next claim rides on the completing transaction only under READ
    COMMITTED: under the handler's older snapshot it would fail (40001) on a
    task claimed since, and take the task it completed down with it."""
    enqueue_batch(admin, queue, [{"n": i} for i in range(3)])
    errors = []

    def handler(task, conn):
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        record(task, conn)  # the transaction's snapshot is taken here
        if task.payload["n"] == 0:  # another worker claims and completes a task after it
            other = admin.execute("SELECT task_id, lease_token FROM concurrency.dequeue(%s)", (queue,)).fetchone()
            admin.execute("SELECT concurrency.complete(%s, %s, %s)", (queue, other[0], other[1]))

    Worker(dsn, queue, handler, on_error=lambda e, t: errors.append(e)).run(drain=True)
    assert errors == []
    assert counts(admin, queue) == (2, 2)
    assert states(admin, queue) == {}


def test_claims_wait_less_than_the_statement_timeout(admin, dsn, queue, caplog):
    """Connections whose statements may run 400 ms: a claim waiting the
    worker's 10 s would be cancelled (57014), logged and its connection made
    again, over and over while the queue is empty; the claims wait less than
    the timeout."""
    short = psycopg.conninfo.make_conninfo(dsn, options="-c statement_timeout=400")
    worker = Worker(short, queue, record, wait=10)
    raised = []

    def run():
        try:
            worker.run(False, False)
        except Exception as e:  # noqa: BLE001 - what stopped the worker
            raised.append(e)

    with caplog.at_level(logging.WARNING, logger="concurrency_ext"):
        thread = run_in_thread(run)
        wait_until(lambda: worker.features is not None, "the worker to start")
        time.sleep(1.2)  # idle for three times the timeout: several claims waited and ended
        task_id = enqueue(admin, queue, {"late": True})
        wait_until(lambda: raised or counts(admin, queue) == (1, 1), "the task to be done")
        worker.stop(timeout=30)
        thread.join(30)
    assert raised == []
    assert [r.getMessage() for r in caplog.records] == []
    assert admin.execute(f"SELECT task_id FROM {results_table(queue)}").fetchall() == [(task_id,)]
