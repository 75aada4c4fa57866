"""What the synchronous and asyncio runtimes share: the SQL they send, the
task they hand to a handler, what the server offers, and the timings."""
import collections
import json
import dataclasses
import datetime
import logging
import os
import socket
import time
import traceback
import typing

from psycopg.types.json import Jsonb

from . import _protocol, _tracing

log = logging.getLogger("concurrency_ext")

# The statements, from clients/protocol/statements.json (see _protocol.py).
def statement(name, params=(), **named):
    """The text and parameters of a statement of the protocol: params in the
    statement's order, then the named arguments given (None: left out, so
    that the server's default applies)."""
    text, _names, types, _columns, order = _protocol.STATEMENTS[name]
    values = [params[i] for i in order]
    extra = ""
    for arg, value in named.items():
        if value is not None:
            extra += f", {arg} => %s::{types[arg]}"
            values.append(value)
    return text.replace("{named}", extra), tuple(values)


def _text(name):
    """The text of a statement whose placeholders come once each, in order, without named arguments."""
    text, names, types, _columns, order = _protocol.STATEMENTS[name]
    assert order == tuple(range(len(names))) and not types, name
    return text


FEATURES_SQL = _text("features")
WORKER_SETTINGS_SQL = _text("worker_settings")
# A claim on its own: dequeue's columns, and the seconds the lease has by the
# server's clock (for the heartbeats).
CLAIM_SQL = _text("claim")
CLAIM_WAIT_SQL = _text("claim_wait")
# The next claim, made in the completing transaction: only under READ
# COMMITTED (a handler that raised its transaction's isolation level claims
# nothing there, where its old snapshot would make the claim fail on rows
# claimed since); the slot then claims on its own.
CLAIM_NEXT_SQL = _text("claim_next") + _protocol.FRAGMENTS["read_committed_only"]
COMPLETE_SQL = _text("complete")


def result_param(result):
    """complete's result argument: a handler's return value as jsonb (None: no result)."""
    return None if result is None else Jsonb(result)


COMPLETE_BATCH_SQL = _text("complete_batch")
FAIL_SQL = _text("fail")
HEARTBEAT_SQL, _ = statement("heartbeat", (None,) * 4)
HEARTBEAT_BATCH_SQL = _text("heartbeat_batch")
RELEASE_SQL = _text("release")
RELEASE_BATCH_SQL = _text("release_batch")
ENQUEUE_GRAPH_SQL = _text("enqueue_graph")
UNSCHEDULE_SQL = _text("unschedule")
PARENT_RESULTS_SQL = _text("parent_results")

# Durable workflows (docs/workflows.md). A step's recorded result as JSON
# text (JSON null as 'null'), None when the step is not recorded.
STEP_RESULT_SQL = _text("step_result")
RECORD_STEP_SQL = _text("record_step")
# A numbered sleep: its end as recorded (JSON text, None: not recorded), and whether it has passed.
SLEEP_STATE_SQL = _text("sleep_state")
EMIT_EVENT_SQL = _text("emit_event")
AWAIT_TASK_SQL = _text("await_task")


def sleep_statement(key, until, duration):
    """The statement of a sleep whose state (SLEEP_STATE_SQL) said until (its recorded end as JSON text, None
    when not recorded): records its end and sleeps, or sleeps again until the recorded end. key: the task's
    (queue, id, lease_token, step). Its row: the end (timestamptz)."""
    if until is None:
        return statement("sleep", key + (interval(duration),))
    return statement("sleep_again", key[:3] + (until,))


def await_event_statement(key, timeout, timed_out):
    """await_event for key (queue, id, lease_token, event), recording the step timed_out if it timed out."""
    return statement("await_event", key + (interval(timeout), timed_out))


def json_value(text):
    """A JSON text as Python's value (None stays None)."""
    return None if text is None else json.loads(text)


TaskEnd = collections.namedtuple("TaskEnd", "state result last_error")
TaskEnd.__doc__ = "What await_task found: state 'done' (with result), 'dead' or 'cancelled' (with last_error)."


class TaskWait:
    """The loop of await_task, for the synchronous and the asyncio call: each statement's parameters, and
    what its row means."""

    def __init__(self, queue, task_id, timeout):
        self.queue, self.task_id = queue, task_id
        self.limit = seconds(timeout)
        self.deadline = None if self.limit is None else time.monotonic() + self.limit
        self.end = None

    def params(self):
        left = AWAIT_TASK_SLICE if self.deadline is None else max(0.0, self.deadline - time.monotonic())
        return (self.queue, self.task_id, interval(min(left, AWAIT_TASK_SLICE)))

    def over(self, row):
        """True when the wait is over (end holds the TaskEnd, or None for no such task); TimeoutError when the
        timeout passed first. No row: no such task (any more) -- on a queue that retains nothing, a task
        completed without a result, or cancelled, is gone at once, and nothing tells which."""
        if row is None:
            self.end = None
            return True
        if row[0] in ("done", "dead", "cancelled"):
            self.end = TaskEnd(row[0], json_value(row[1]), row[2])
            return True
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise TimeoutError(f"task {self.task_id} of queue {self.queue!r} is still {row[0]} after {self.limit} s")
        return False


# await_task statements last at most this long, so that none holds a
# pooler's server connection (or meets a statement_timeout) for long
AWAIT_TASK_SLICE = _protocol.TIMINGS["await_task_slice_ms"] / 1000

# Without dequeue(wait): the pause after an empty claim starts here and
# doubles up to the worker's poll_interval; any claim that gets a task resets it.
FIRST_POLL = _protocol.TIMINGS["first_poll_ms"] / 1000
# Heartbeats every this fraction of the lease's time left (Settings' default).
HEARTBEAT_FRACTION = _protocol.TIMINGS["heartbeat_fraction"]


@dataclasses.dataclass(frozen=True)
class Features:
    wait: bool
    release: bool
    release_batch: bool
    statement_timeout: float = 0.0  # ms, 0: none

    @classmethod
    def read(cls, rows, settings):
        """What the server offers: the rows of FEATURES_SQL (each function's name and argument names) and the
        row of WORKER_SETTINGS_SQL."""
        def has(name, arg=None):
            return any(p == name and (arg is None or arg in (args or ())) for p, args in rows)
        return cls(has("dequeue", "wait"), has("release"), has("release_batch"), settings[1] or 0.0)


@dataclasses.dataclass(frozen=True)
class Task:
    """A claimed task, as dequeue returned it."""

    queue: str
    id: int
    lease_token: int
    attempt: int
    payload: typing.Any
    enqueued_at: datetime.datetime
    lease_expires_at: datetime.datetime
    # the durable-workflow calls of this run of the handler (Worker only)
    _workflow: typing.Any = dataclasses.field(default=None, repr=False, compare=False)
    # the trace context the producer stored with the task (the payload's "_trace", which payload lacks)
    _trace_context: typing.Any = dataclasses.field(default=None, repr=False, compare=False)

    def step(self, name, fn, *, transaction=False):
        """Runs fn once for this task: its result is recorded under name and returned again, without running
        fn, when the handler runs again (after a failure, a crash, a sleep or an event). transaction=True: fn
        gets a connection in a transaction, which records the step before it commits (exactly once)."""
        return self._flow().step(name, fn, transaction)  # in an AsyncWorker's handler: awaited

    def sleep(self, duration):
        """Sleeps duration (seconds or a timedelta) without holding a worker: the task leaves this handler and
        comes back after it, its steps kept, no attempt spent."""
        return self._flow().sleep(duration)

    def wait_for_event(self, name, timeout=None):
        """The payload of the event name (emit_event), waiting for it without holding a worker; None once
        timeout (seconds or a timedelta; None: no end) has passed without it."""
        return self._flow().wait_for_event(name, timeout)

    def _flow(self):
        if self._workflow is None:
            raise RuntimeError("durable workflow calls are made in a handler run by Worker or AsyncWorker")
        return self._workflow


def seconds(value):
    """Seconds from a number or a timedelta (None stays None)."""
    if value is None:
        return None
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    return float(value)


def interval(value):
    """A timedelta for an interval parameter (None stays None)."""
    return None if value is None else datetime.timedelta(seconds=seconds(value))


def error_text(exc):
    """The text fail() records for a handler's exception: its last line as Python prints it."""
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


def next_poll(pause, poll_interval):
    return min(poll_interval, max(FIRST_POLL, pause * 2))


def payload_param(payload):
    """Any JSON value (dict, list, str, number, bool, None) as jsonb."""
    return Jsonb(payload)


def enqueue_params(queue, payload, run_at, priority, dedupe_key, concurrency_key):
    return (queue, payload_param(payload), run_at, priority, dedupe_key, concurrency_key)


def enqueue_statement(queue, payload, run_at, priority, dedupe_key, concurrency_key, on_conflict, after):
    """The SQL and parameters of enqueue; on_conflict 'ignore' or 'replace' (None: the server's default), after
    the ids of tasks of the queue that must be done first (None: none).

    on_conflict and after are sent only when given, so that servers before
    0.3.0 (whose enqueue has neither argument) take the other calls."""
    return statement("enqueue", enqueue_params(queue, payload, run_at, priority, dedupe_key, concurrency_key),
                     on_conflict=on_conflict, after=None if after is None else list(after))


def graph_params(queue, tasks):
    """enqueue_graph's parameters: the tasks as one jsonb array, a datetime run_at in ISO 8601."""
    graph = []
    for task in tasks:
        if isinstance(task, dict) and isinstance(task.get("run_at"), datetime.datetime):
            task = dict(task, run_at=task["run_at"].isoformat())
        graph.append(task)
    return (queue, Jsonb(graph))


def schedule_statement(name, queue, cron, every, payload, time_zone, priority, concurrency_key, catch_up):
    """schedule's SQL and parameters: every in seconds or a timedelta, payload any JSON object (None: {})."""
    return statement("schedule", (name, queue), cron=cron, every=interval(every),
                     payload=payload_param({} if payload is None else payload), time_zone=time_zone,
                     priority=priority, concurrency_key=concurrency_key, catch_up=catch_up)


def enqueue_batch_statement(queue, payloads, run_at, priority, dedupe_keys, concurrency_keys):
    """enqueue_batch's SQL and parameters: the payloads as JSON texts."""
    return statement("enqueue_batch", (queue, [json.dumps(p) for p in payloads], run_at, priority,
                                       None if dedupe_keys is None else list(dedupe_keys),
                                       None if concurrency_keys is None else list(concurrency_keys)))


class Held:
    """The tasks one slot holds, as the heartbeat sees them.

    lock serializes heartbeats with the slot's complete: the slot sets
    finishing under it (waiting for a heartbeat in flight), and no heartbeat
    is sent after that, so none can race the completing transaction.
    """

    def __init__(self, tasks, lease_seconds, every, now):
        self.tasks = list(tasks)
        self.lost = {}  # task id -> LeaseLostError
        self.finishing = False
        self.every = every
        self.due = now + every
        self.lease_seconds = lease_seconds

    def live(self):
        return [t for t in self.tasks if t.id not in self.lost]


def default_name():
    return f"{socket.gethostname()}-{os.getpid()}"


def connect_kwargs(name, extra):
    """What the connections a worker opens from a conninfo string get.

    No server-side prepared statements unless asked for: psycopg prepares a
    statement after 5 runs by default, which PgBouncer before 1.21 in
    transaction mode cannot keep per client."""
    kwargs = {"prepare_threshold": None, "application_name": name[:63]}
    kwargs.update(extra or {})
    kwargs["autocommit"] = True
    return kwargs


def is_pool(connection):
    if isinstance(connection, str):
        return False
    if hasattr(connection, "connection"):
        return True
    raise TypeError("connection must be a libpq conninfo string or a pool with a connection() method")


class Settings:
    """The arguments Worker and AsyncWorker share (see Worker)."""

    def __init__(self, queue, handler, *, concurrency=1, batch=1, lease=None, wait=10.0, poll_interval=1.0,
                 name=None, heartbeat=True, heartbeat_fraction=HEARTBEAT_FRACTION, shutdown_timeout=30.0,
                 on_error=None, on_complete=None, default_on_error=None):
        if concurrency < 1 or batch < 1:
            raise ValueError("concurrency and batch must be at least 1")
        if not 0 < heartbeat_fraction < 1:
            raise ValueError("heartbeat_fraction must be between 0 and 1")
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.batch = batch
        self.lease = interval(lease)
        self.wait = interval(wait)
        self.poll_interval = seconds(poll_interval)
        self.name = name or default_name()
        self.heartbeat = heartbeat
        self.heartbeat_fraction = heartbeat_fraction
        self.shutdown_timeout = seconds(shutdown_timeout)
        self._on_error = on_error or default_on_error
        self._on_complete = on_complete
        self.features = None
        self._tracing = _tracing.for_worker(queue)
        self.clock_offset = 0.0  # seconds the server's clock is ahead of this one's

    def tasks_from_rows(self, rows):
        """Tasks, and the seconds their lease has by the server's clock.

        A claim on its own says so (and shows how far the server's clock is
        ahead, within a round trip); for a claim in the completing
        transaction, the lease's end less the server's time reckoned from
        that offset."""
        tasks = []
        for row in rows:
            payload, carrier = _tracing.split(row[3])  # the handler gets the payload without the trace context
            tasks.append(Task(self.queue, *row[:3], payload, *row[4:6], _trace_context=carrier))
        if not rows:
            return tasks, None
        end = min(row[5] for row in rows).timestamp()
        now = time.time()
        if len(rows[0]) > 6:
            left = min(row[6] for row in rows)
            self.clock_offset = end - left - now
            return tasks, left
        return tasks, end - (now + self.clock_offset)

    def claim_params(self, waits):
        return (self.queue, self.batch, self.lease, self.name) + ((self.claim_wait(),) if waits else ())

    def claim_wait(self):
        """The wait of a claim: the worker's, but shorter than the connection's
        statement_timeout, which would end a longer wait with an error (57014)
        and a reported error each time: the longer of half of it and all of
        it but a second."""
        timeout = self.features.statement_timeout if self.features else 0
        if not timeout or timeout <= 0:
            return self.wait
        cap = datetime.timedelta(milliseconds=max(timeout - _protocol.TIMINGS["wait_margin_ms"], timeout / 2))
        return min(self.wait, cap)

    def heartbeat_every(self, lease_seconds):
        return max(_protocol.TIMINGS["heartbeat_min_ms"] / 1000, (lease_seconds or 1.0) * self.heartbeat_fraction)

    def on_error(self, error, task):
        self._tracing.error(task, error)
        try:
            self._on_error(error, task)
        except Exception:  # a callback's bug does not stop the worker
            log.exception("on_error raised")

    def _completed(self, tasks):
        for task in tasks if self._on_complete is not None else ():
            try:
                self._on_complete(task)
            except Exception:
                log.exception("on_complete raised")

    @property
    def stopping(self):
        """True once stop() was called (or SIGTERM / SIGINT came, or a slot failed)."""
        return self._stopping.is_set()
