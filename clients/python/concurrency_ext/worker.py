"""The synchronous worker: a thread per slot, one heartbeat thread."""
import contextlib
import dataclasses
import logging
import re
import signal
import threading
import time

import psycopg

from . import _core, _protocol
from .errors import LEASE_LOST, LeaseLostError, QueueError, translate, translating
from .workflow import StepConnection, TaskSuspended, Workflow

log = logging.getLogger("concurrency_ext")

_TASK_IN_ERROR = re.compile(_protocol.LEASE_LOST_TASK)


def lost_task_id(error):
    """The task a CE001 of a batch call names."""
    match = _TASK_IN_ERROR.search(error.message)
    return int(match.group(1)) if match else None


def default_on_error(error, task):
    if isinstance(error, LeaseLostError):
        log.warning("task %s of queue %r: lease lost (%s), its work rolled back: %s", task.id, task.queue,
                    error.reason, error)
    else:
        log.error("task %s of queue %r failed: %s", task.id, task.queue, _core.error_text(error))


def _one(conn, query, params=None):
    """One statement as a transaction of its own: on an autocommit connection
    just the statement (no BEGIN and COMMIT round trips, no lock held while
    this process waits between them); on a pool's connection, then a commit."""
    try:
        cur = conn.execute(query, params)
        rows = cur.fetchall() if cur.description else []
        if not conn.autocommit:
            conn.commit()
        return rows
    except BaseException:
        if not conn.autocommit and not conn.closed:
            conn.rollback()
        raise


class _Source:
    """Connections from a libpq conninfo string (opened by the worker) or a pool."""

    def __init__(self, connection, name, connect_kwargs):
        self.pool = connection if _core.is_pool(connection) else None
        if self.pool is None:
            self.conninfo, self.kwargs = connection, _core.connect_kwargs(name, connect_kwargs)

    def connect(self):
        if self.pool is not None:
            return self.pool.connection()
        return contextlib.closing(psycopg.connect(self.conninfo, **self.kwargs))


class _Slot:
    def __init__(self):
        self.lock = threading.Lock()
        self.conn = None
        self.waiting = False  # in a dequeue(wait): stop() cancels it
        self.busy = False  # running a handler
        self.steps = None  # the connection of workflow calls (StepConnection)


class Worker(_core.Settings):
    """Runs handler(task, conn) for the tasks of one queue.

    connection: a libpq conninfo string (each slot opens a connection of its
    own, plus one for heartbeats) or a pool with psycopg_pool's connection().
    concurrency: how many slots (threads, each on its connection) run tasks.
    batch: how many tasks one claim takes; a slot runs them in one transaction,
    each task's handler in a savepoint, and completes them with complete_batch.
    lease: the lease asked for at claim and heartbeat (None: the queue's).
    wait: how long one dequeue(wait) sleeps for work (seconds or timedelta);
    poll_interval: the longest pause between claims when the server has no
    dequeue(wait) (the pause starts at 50 ms and doubles).
    heartbeat_fraction: heartbeats every this fraction of the lease
    (heartbeat=False: none, the lease is then a hard deadline).
    shutdown_timeout: how long stop() waits for running handlers.
    on_error(error, task): called for a handler's exception and for a lost
    lease (LeaseLostError); by default both are logged.
    on_complete(task): called once a task's completion has committed.
    """

    def __init__(self, connection, queue, handler, *, concurrency=1, batch=1, lease=None, wait=10.0,
                 poll_interval=1.0, name=None, heartbeat=True, heartbeat_fraction=_core.HEARTBEAT_FRACTION,
                 shutdown_timeout=30.0, on_error=None, on_complete=None, connect_kwargs=None):
        super().__init__(queue, handler, concurrency=concurrency, batch=batch, lease=lease, wait=wait,
                         poll_interval=poll_interval, name=name, heartbeat=heartbeat,
                         heartbeat_fraction=heartbeat_fraction, shutdown_timeout=shutdown_timeout,
                         on_error=on_error, on_complete=on_complete, default_on_error=default_on_error)
        self._source = _Source(connection, self.name, connect_kwargs)
        self._stopping = threading.Event()
        self._finished = threading.Event()
        self._wake = threading.Event()  # stopping or finished
        self._drain = False
        self._slots = []
        self._threads = []
        self._held = []
        self._beats = threading.Condition()
        self._closed = False
        self._error = None  # what stopped a slot, raised by run()

    # --- life cycle -----------------------------------------------------------

    def start(self, drain=False):
        """Starts the slots and the heartbeat thread; returns at once.

        drain: each slot ends at its first empty claim (claims do not wait)."""
        with self._source.connect() as conn:
            with translating:
                self.features = _core.Features.read(_one(conn, _core.FEATURES_SQL),
                                                    _one(conn, _core.WORKER_SETTINGS_SQL, (self.queue,))[0])
        self._drain = drain
        self._slots = [_Slot() for _ in range(self.concurrency)]
        self._running = len(self._slots)
        self._threads = [threading.Thread(target=self._slot_main, args=(s,), daemon=True, name=f"{self.name}-{i}")
                         for i, s in enumerate(self._slots)]
        if self.heartbeat:
            threading.Thread(target=self._heartbeat_main, daemon=True, name=f"{self.name}-heartbeat").start()
        for t in self._threads:
            t.start()

    def run(self, drain=False, handle_signals=True):
        """start(), then blocks until drained or stopped. In the main thread
        SIGTERM and SIGINT call stop() (handle_signals=False leaves them)."""
        self.start(drain)
        previous = {}
        if handle_signals and threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGINT):
                previous[signum] = signal.signal(signum, lambda *_: self._begin_stop())
        try:
            self._wait()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        if self._error is not None:
            raise self._error

    def stop(self, timeout=None):
        """Stops claiming, hands back claimed tasks not started (release),
        waits up to timeout (default shutdown_timeout) for running handlers.
        Returns True if every slot ended in time; the leases of handlers still
        running then lapse."""
        self._begin_stop()
        return self._wait(timeout)

    def _begin_stop(self):
        self._stopping.set()
        self._wake.set()
        self._cancel_waits()

    def _cancel_waits(self):
        for slot in self._slots:
            with slot.lock:
                if slot.waiting and slot.conn is not None:
                    slot.conn.cancel()

    def _wait(self, timeout=None):
        self._wake.wait()  # a signal handler runs while this waits
        if not self._finished.is_set():
            limit = self.shutdown_timeout if timeout is None else timeout
            deadline = time.monotonic() + limit
            # a cancel that reached a claim before its statement began is lost: again
            while not self._finished.wait(max(0.0, min(0.5, deadline - time.monotonic()))):
                if time.monotonic() >= deadline:
                    break
                self._cancel_waits()
            if not self._finished.is_set():
                for slot in self._slots:  # abandoned: their transactions roll back, their leases lapse
                    with slot.lock:
                        if slot.busy and slot.conn is not None:
                            slot.conn.cancel()
        self._close_heartbeats()
        return self._finished.is_set()

    def _slot_done(self):
        with self._beats:
            self._running -= 1
            if self._running == 0:
                self._finished.set()
                self._wake.set()

    def _close_heartbeats(self):
        with self._beats:
            self._closed = True
            self._beats.notify_all()

    # --- a slot ---------------------------------------------------------------

    def _slot_main(self, slot):
        pause = _core.FIRST_POLL
        slot.steps = StepConnection(self._source)
        try:
            while not self._stopping.is_set():
                try:
                    with self._source.connect() as conn:
                        with slot.lock:
                            slot.conn = conn
                        try:
                            self._serve(slot, conn)
                            return
                        except psycopg.Error as e:
                            if not (conn.broken or conn.closed):
                                raise
                            error = e
                except psycopg.OperationalError as e:  # could not connect
                    error = e
                finally:
                    with slot.lock:
                        slot.conn = None
                if self._stopping.is_set():
                    return
                # the connection is gone: held tasks come back after their leases
                log.warning("worker %s: %s; connecting again in %.1f s", self.name, error, pause)
                self._stopping.wait(pause)
                pause = _core.next_poll(pause, max(self.poll_interval, 5.0))
        except Exception as e:  # e.g. 42501 at the claim: the whole worker stops and run() raises it
            log.error("worker %s: stopping on an error: %s", self.name, e)
            self._error = self._error or e
            self._begin_stop()
        finally:
            slot.steps.close()
            self._slot_done()

    def _serve(self, slot, conn):
        pause = _core.FIRST_POLL
        tasks, lease_seconds = [], None
        while True:
            if not tasks:
                if self._stopping.is_set():
                    return
                tasks, lease_seconds = self._claim(slot, conn)
                if not tasks:
                    if self._drain or self._stopping.is_set():
                        return
                    if not self.features.wait:
                        self._stopping.wait(pause)
                        pause = _core.next_poll(pause, self.poll_interval)
                    continue
                pause = _core.FIRST_POLL
            if self._stopping.is_set():
                self._release(conn, tasks)
                return
            tasks, lease_seconds = self._work(slot, conn, tasks, lease_seconds)

    def _claim(self, slot, conn):
        waits = self.features.wait and not self._drain
        params = self.claim_params(waits)
        with slot.lock:
            if self._stopping.is_set():
                return [], None
            slot.waiting = waits
        try:
            rows = _one(conn, _core.CLAIM_WAIT_SQL if waits else _core.CLAIM_SQL, params)
        except psycopg.errors.QueryCanceled:
            if self._stopping.is_set():
                return [], None  # stop() cancelled the wait: it holds no lease
            raise
        except psycopg.Error as e:
            if conn.broken:
                raise
            raise translate(e) from e
        finally:
            with slot.lock:
                slot.waiting = False
        return self.tasks_from_rows(rows)

    def _claim_next(self, conn):
        """The cheapest loop: the next claim in the completing transaction (no wait)."""
        if self._stopping.is_set():
            return [], None
        rows = conn.execute(_core.CLAIM_NEXT_SQL, self.claim_params(False)).fetchall()
        return self.tasks_from_rows(rows)

    def _work(self, slot, conn, tasks, lease_seconds):
        every = self.heartbeat_every(lease_seconds)
        held = _core.Held(tasks, lease_seconds, every, time.monotonic())
        held.lock = threading.Lock()
        held.steps = slot.steps
        with slot.lock:
            slot.busy = True
        with self._beats:
            self._held.append(held)
            self._beats.notify_all()
        try:
            if len(tasks) == 1:
                return self._work_one(conn, held, tasks[0])
            return self._work_batch(conn, held)
        finally:
            with self._beats:
                self._held.remove(held)
            with slot.lock:
                slot.busy = False
            slot.steps.handler_done()

    def _run_handler(self, task, conn, held):
        """The handler, with task's workflow calls bound to this run; TaskSuspended when the task left it."""
        return self.handler(dataclasses.replace(task, _workflow=Workflow(task, held, held.steps)), conn)

    def _finishing(self, held, finishing=True):
        with held.lock:  # waits for a heartbeat in flight
            held.finishing = finishing

    def _work_one(self, conn, held, task):
        following = ([], None)
        failure = None
        try:
            with conn.transaction():
                try:
                    result = self._run_handler(task, conn, held)
                except Exception as exc:
                    if conn.broken:
                        raise
                    failure = exc
                    raise _Rollback()
                self._finishing(held)
                if task.id in held.lost:
                    raise _Rollback()  # the heartbeat found the lease lost, and reported it
                with translating:
                    conn.execute(_core.COMPLETE_SQL, (self.queue, task.id, task.lease_token,
                                                      _core.result_param(result)))
                    following = self._claim_next(conn)
            self._completed([task])
        except TaskSuspended:
            pass  # sleeping or waiting for an event: not complete, not failed, not heartbeated
        except _Rollback:
            if failure is not None:
                self._fail(conn, held, task, failure)
        except LeaseLostError as e:
            self.on_error(e, task)
        except psycopg.Error as e:  # the commit failed (a deferred constraint, a serialization failure)
            if conn.broken:
                raise
            following = ([], None)  # the next claim rolled back with it
            self._fail(conn, held, task, e)
        return following

    def _work_batch(self, conn, held):
        pending = held.live()
        failures = []
        unstarted = []
        following = ([], None)
        while pending:
            done, failures, unstarted = [], [], []
            try:
                with conn.transaction():
                    for i, task in enumerate(pending):
                        if self._stopping.is_set():
                            unstarted = pending[i:]
                            break
                        if task.id in held.lost:
                            continue
                        try:
                            with conn.transaction():  # a savepoint: a failure undoes only its task
                                self._run_handler(task, conn, held)
                            done.append(task)
                        except TaskSuspended:
                            pass  # its savepoint rolled back; not complete, not failed
                        except Exception as exc:
                            if conn.broken:
                                raise
                            failures.append((task, exc))
                    self._finishing(held)
                    done = [t for t in done if t.id not in held.lost]
                    if done:
                        with translating:
                            conn.execute(_core.COMPLETE_BATCH_SQL, (self.queue, [t.id for t in done],
                                                                    [t.lease_token for t in done]))
                    if not unstarted:
                        with translating:
                            following = self._claim_next(conn)
                pending = []
                self._completed(done)
            except psycopg.Error as e:  # the commit failed: the batch's work is undone
                if conn.broken:
                    raise
                failures += [(t, e) for t in done]
                following = ([], None)  # the next claim rolled back with it
                pending = []
            except LeaseLostError as e:
                # one lease is lost and the batch rolled back: again without it
                task_id = lost_task_id(e)
                lost = next((t for t in pending if t.id == task_id), None)
                if lost is None:
                    raise
                held.lost[lost.id] = e
                self.on_error(e, lost)
                self._finishing(held, False)
                pending = [t for t in pending if t.id not in held.lost]
        for task, exc in failures:
            self._fail(conn, held, task, exc)
        if unstarted:
            self._release(conn, unstarted)
        return following

    def _fail(self, conn, held, task, exc):
        self.on_error(exc, task)
        if task.id in held.lost:
            return
        try:
            with translating:
                _one(conn, _core.FAIL_SQL, (self.queue, task.id, task.lease_token, _core.error_text(exc), None))
        except LeaseLostError as e:
            self.on_error(e, task)

    def _release(self, conn, tasks):
        """Hands back claimed tasks that did not start: no attempt spent. A
        server without release leaves them to their leases' end."""
        if not tasks:
            return
        if not self.features.release:
            log.info("worker %s: %d claimed tasks left to their leases (the server has no release)", self.name,
                     len(tasks))
            return
        if self.features.release_batch and len(tasks) > 1:
            try:
                return self._release_call(conn, _core.RELEASE_BATCH_SQL, (
                    self.queue, [t.id for t in tasks], [t.lease_token for t in tasks]))
            except LeaseLostError:
                pass  # one was lost already: hand back the others one by one
        for t in tasks:
            with contextlib.suppress(LeaseLostError):
                self._release_call(conn, _core.RELEASE_SQL, (self.queue, t.id, t.lease_token))

    def _release_call(self, conn, query, params):
        try:
            with translating:
                _one(conn, query, params)
        except QueueError as e:
            if e.sqlstate != "57014":
                raise
            with translating:  # a late cancel of the claim's wait hit it: once more
                _one(conn, query, params)

    # --- heartbeats -----------------------------------------------------------

    def _heartbeat_main(self):
        with contextlib.ExitStack() as stack:
            conn = None
            while True:
                with self._beats:
                    if self._closed:
                        return
                    now = time.monotonic()
                    held = min(self._held, key=lambda h: h.due, default=None)
                    if held is None or held.due > now:
                        self._beats.wait(None if held is None else held.due - now)
                        continue
                    held.due = now + held.every
                try:
                    if conn is None:
                        conn = stack.enter_context(self._source.connect())
                    self._beat(conn, held)
                except psycopg.Error as e:
                    log.warning("worker %s: heartbeat: %s", self.name, e)
                    if conn is not None and (conn.broken or conn.closed):
                        stack.close()
                        conn = None

    def _lost(self, held, task, error):
        """A heartbeat found the lease lost: the slot will roll the task's work back."""
        held.lost[task.id] = error
        self.on_error(error, task)

    def _beat(self, conn, held):
        with held.lock:
            if held.finishing:
                return
            live = held.live()
            if not live:
                return
            try:
                if len(live) == 1:
                    _one(conn, _core.HEARTBEAT_SQL, (self.queue, live[0].id, live[0].lease_token, self.lease))
                else:
                    _one(conn, _core.HEARTBEAT_BATCH_SQL, (self.queue, [t.id for t in live],
                                                           [t.lease_token for t in live], self.lease))
                return
            except psycopg.Error as e:
                if e.sqlstate != LEASE_LOST:
                    raise
                if len(live) == 1:
                    self._lost(held, live[0], translate(e))
                    return
            for t in live:  # which of the batch is lost
                try:
                    _one(conn, _core.HEARTBEAT_SQL, (self.queue, t.id, t.lease_token, self.lease))
                except psycopg.Error as e:
                    if e.sqlstate != LEASE_LOST:
                        raise
                    self._lost(held, t, translate(e))


class _Rollback(Exception):
    """Leaves the handler's transaction block, rolling it back."""
