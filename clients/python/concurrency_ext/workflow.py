"""Durable workflows in the synchronous worker (the asyncio twin, aio._Workflow,
shares _Flow): a task's steps, sleeps and events (task.step, task.sleep,
task.wait_for_event), and how a handler leaves its task without completing
or failing it (TaskSuspended).

The calls go through a second connection of the slot, not the handler's:
the handler's connection is inside the transaction that ends with
complete, and a step must commit on its own so that it is kept when the
handler later fails, crashes or suspends. Each step is a transaction of its
own there (with fn's writes when transaction=True); the handler's other
writes still commit with the completion, as without workflows.
"""
import contextlib

from psycopg.types.json import Jsonb

from . import _core
from .errors import LeaseLostError, translating


class TaskSuspended(BaseException):
    """Raised by task.sleep and task.wait_for_event when the task leaves its
    worker to come back later: the worker neither completes nor fails it.

    A BaseException, so that a handler's `except Exception` lets it pass; a
    handler that catches BaseException must raise it again."""


# What Held.lost holds for a task whose lease is being handed back by a
# sleep or an await: heartbeats leave it alone from then on.
_SUSPENDING = object()


class StepConnection:
    """The slot's connection for workflow calls, opened at the first one; a
    pool's is given back after each handler, a conninfo's kept."""

    def __init__(self, source):
        self._source = source
        self._stack = contextlib.ExitStack()
        self._conn = None

    def get(self):
        if self._conn is not None and (self._conn.broken or self._conn.closed):
            self.close()
        if self._conn is None:
            self._conn = self._stack.enter_context(self._source.connect())
        return self._conn

    def handler_done(self):
        if self._source.pool is not None:
            self.close()

    def close(self):
        self._conn = None
        with contextlib.suppress(Exception):  # a broken connection cannot be closed cleanly
            self._stack.close()
        self._stack = contextlib.ExitStack()


def _one(conn, query, params):
    """One statement as a transaction of its own, its rows."""
    with conn.transaction():
        cur = conn.execute(query, params)
        return cur.fetchall() if cur.description else []


class _Flow:
    """What the synchronous and asyncio workflow calls share: the task's key, the names of sleeps and timeouts,
    and what a lost lease or a suspension does to the held task (the callers hold held.lock)."""

    def __init__(self, task, held, steps):
        self._task = task
        self._held = held
        self._steps = steps
        self._sleeps = 0  # numbered in call order within this run: sleep:1, sleep:2, ...

    def _key(self, *more):
        return (self._task.queue, self._task.id, self._task.lease_token) + more

    def _next_sleep(self):
        self._sleeps += 1
        return f"sleep:{self._sleeps}"

    @staticmethod
    def _timeout_step(name):
        """The step that remembers a timeout met: await_event would park the task again in a later run."""
        return f"event-timeout:{name}"

    def _mark_lost(self, error):
        """The lease is gone: the worker reports it once and does not fail the task."""
        if self._held.lost.get(self._task.id) in (None, _SUSPENDING):
            self._held.lost[self._task.id] = error

    def _mark_suspending(self):
        """Heartbeats leave the task alone from now on."""
        self._held.lost.setdefault(self._task.id, _SUSPENDING)

    def _mark_resumed(self, error):
        """The task stays with this handler after all: heartbeats again, unless the lease was lost."""
        if isinstance(error, LeaseLostError):
            self._mark_lost(error)
        elif self._held.lost.get(self._task.id) is _SUSPENDING:
            del self._held.lost[self._task.id]

    def _suspended(self, why):
        return TaskSuspended(f"task {self._task.id} {why}")


class Workflow(_Flow):
    """The workflow calls of one run of a handler on one task."""

    def _call(self, query, params):
        try:
            with translating:
                return _one(self._steps.get(), query, params)
        except LeaseLostError as e:
            self._lost(e)
            raise

    def _lost(self, error):
        with self._held.lock:
            self._mark_lost(error)

    def step(self, name, fn, transaction):
        (recorded,) = self._call(_core.STEP_RESULT_SQL, self._key(name))[0]
        if recorded is not None:
            return _core.json_value(recorded)
        if not transaction:
            result = fn()
            self._call(_core.RECORD_STEP_SQL, self._key(name, Jsonb(result)))
            return result
        conn = self._steps.get()
        try:
            with conn.transaction():
                result = fn(conn)
                with translating:
                    conn.execute(_core.RECORD_STEP_SQL, self._key(name, Jsonb(result)))
        except LeaseLostError as e:
            self._lost(e)
            raise
        return result

    def sleep(self, duration):
        name = self._next_sleep()
        until, passed = self._call(_core.SLEEP_STATE_SQL, self._key(name))[0]
        if until is not None and passed:
            return  # slept already
        self._suspending()
        try:
            # not recorded: records its end and sleeps; recorded and still to come: woken early, asleep again
            until = self._call(*_core.sleep_statement(self._key(name), until, duration))[0][0]
        except BaseException as e:
            self._resumed(e)
            raise
        raise self._suspended(f"sleeps until {until}")

    def wait_for_event(self, name, timeout):
        timed_out = self._timeout_step(name)
        if self._call(_core.STEP_RESULT_SQL, self._key(timed_out))[0][0] is not None:
            return None
        self._suspending()
        try:
            status, payload, _ = self._call(*_core.await_event_statement(self._key(name), timeout, timed_out))[0]
        except BaseException as e:
            self._resumed(e)
            raise
        if status == "waiting":
            raise self._suspended(f"waits for event {name!r}")
        self._resumed(None)
        return _core.json_value(payload)

    def _suspending(self):
        with self._held.lock:  # waits for a heartbeat in flight
            self._mark_suspending()

    def _resumed(self, error):
        with self._held.lock:
            self._mark_resumed(error)
