"""Adding tasks: enqueue, enqueue_batch, enqueue_graph and schedule (unschedule), on a psycopg
connection (and parent_results, which a child's worker reads); waiting for a task's end (await_task) and
emitting the events workflows wait for (emit_event).

They run in the connection's current transaction (or their own, in
autocommit): a task enqueued with the producer's writes exists exactly when
they commit. Payloads are any JSON value: objects, arrays, strings, numbers,
booleans, None (JSON null).
"""
from . import _core
from .errors import translating


def enqueue(conn, queue, payload=None, *, run_at=None, priority=0, dedupe_key=None, concurrency_key=None,
            on_conflict=None, after=None):
    """Adds a task; returns its id (the existing task's id for a dedupe_key already held). on_conflict='replace'
    gives that task this payload, run_at and priority if it has not started (debounce). after: ids of tasks of
    the queue; the new task waits (state 'waiting') until every one of them is done."""
    if payload is None:
        payload = {}
    with translating:
        return conn.execute(*_core.enqueue_statement(queue, payload, run_at, priority, dedupe_key, concurrency_key,
                                                     on_conflict, after)).fetchone()[0]


def enqueue_batch(conn, queue, payloads, *, run_at=None, priority=0, dedupe_keys=None, concurrency_keys=None):
    """Adds one task per payload in one statement; returns their ids in payload order."""
    with translating:
        rows = conn.execute(*_core.enqueue_batch_statement(queue, payloads, run_at, priority, dedupe_keys,
                                                                  concurrency_keys)).fetchall()
    return [row[0] for row in rows]


def enqueue_graph(conn, queue, tasks):
    """Adds a graph of tasks, all or nothing; returns (ref, task_id) per task in the order of tasks.

    Each task is a dict with the keys ref, payload, after, queue (default: queue), run_at, priority and
    concurrency_key; its after lists refs of the graph (str), ids of tasks of its own queue (int), or
    {"queue": ..., "id": ...} for a task of another queue."""
    with translating:
        return conn.execute(_core.ENQUEUE_GRAPH_SQL, _core.graph_params(queue, tasks)).fetchall()


def schedule(conn, name, queue, *, cron=None, every=None, payload=None, time_zone="UTC", priority=0,
             concurrency_key=None, catch_up=1):
    """Enqueues a task into queue at each due time of cron (five fields or @hourly, @daily, ..., read in
    time_zone) or every (seconds or a timedelta), whatever the number of workers; the task's payload is payload
    with "scheduled_for". The same settings again change nothing; others replace the schedule. Needs
    permission manage on the queue."""
    with translating:
        conn.execute(*_core.schedule_statement(name, queue, cron, every, payload, time_zone, priority,
                                                concurrency_key, catch_up))


def unschedule(conn, name):
    """Removes the schedule (its tasks already enqueued stay); False if there was none."""
    with translating:
        return conn.execute(_core.UNSCHEDULE_SQL, (name,)).fetchone()[0]


def parent_results(conn, queue, task_id):
    """The results of the task's parents that are done: (task_id, parent_queue, result) per parent."""
    with translating:
        return conn.execute(_core.PARENT_RESULTS_SQL, (queue, task_id)).fetchall()


def await_task(conn, queue, task_id, *, timeout=None):
    """Waits for the task to end; returns TaskEnd(state, result, last_error), or None when there is no such
    task. Raises TimeoutError once timeout (seconds or a timedelta; None: no end) has passed first.

    Each statement waits at most 30 seconds (through a pooler, none holds a server connection for long);
    on an autocommit connection each is a transaction of its own."""
    wait = _core.TaskWait(queue, task_id, timeout)
    while True:
        with translating:
            row = conn.execute(_core.AWAIT_TASK_SQL, wait.params()).fetchone()
        if wait.over(row):
            return wait.end


def emit_event(conn, name, payload=None):
    """Emits the event name with payload (any JSON value): the tasks waiting for it go on, and a task that
    waits for it later gets it at once (kept for concurrency.event_retention). Returns how many tasks it woke.
    Needs EXECUTE on concurrency.emit_event (granted by the extension's owner)."""
    with translating:
        return conn.execute(_core.EMIT_EVENT_SQL, (name, _core.payload_param(payload))).fetchone()[0]
