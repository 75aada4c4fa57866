"""The asyncio worker and producer, on psycopg's AsyncConnection, with an
asyncio task per slot: the source of the synchronous ones, which
tools/generate_sync.py writes from its regions (producer.py; workflow.py;
worker.py's _Runner, the base of Worker)."""
import asyncio
import contextlib
import dataclasses
import inspect
import logging
import signal
import time

import psycopg

from . import _core, _tracing
from .errors import LEASE_LOST, LeaseLostError, QueueError, translate, translating
from .worker import default_on_error, lost_task_id
from .workflow import TaskSuspended, _Flow

log = logging.getLogger("concurrency_ext")

# A slot's lock (worker.py: threading.Lock): in one thread, with no await
# inside the blocks it guards, there is nothing to exclude.
_slot_lock = contextlib.nullcontext


# --- begin: the source of producer (tools/generate_sync.py writes it there without async) ---
async def enqueue(conn, queue, payload=None, *, run_at=None, priority=0, dedupe_key=None, concurrency_key=None,
                  on_conflict=None, after=None):
    """Adds a task; returns its id (the existing task's id for a dedupe_key already held). on_conflict='replace'
    gives that task this payload, run_at and priority if it has not started (debounce). after: ids of tasks of
    the queue; the new task waits (state 'waiting') until every one of them is done."""
    with _tracing.enqueue_span(queue), translating:
        cur = await conn.execute(*_core.enqueue_statement(
            queue, _tracing.inject({} if payload is None else payload), run_at, priority, dedupe_key,
            concurrency_key, on_conflict, after))
        return (await cur.fetchone())[0]


async def enqueue_batch(conn, queue, payloads, *, run_at=None, priority=0, dedupe_keys=None, concurrency_keys=None):
    """Adds one task per payload in one statement; returns their ids in payload order."""
    with _tracing.enqueue_span(queue), translating:
        cur = await conn.execute(*_core.enqueue_batch_statement(
            queue, _tracing.inject_each(payloads), run_at, priority, dedupe_keys, concurrency_keys))
        return [row[0] for row in await cur.fetchall()]


async def enqueue_graph(conn, queue, tasks):
    """Adds a graph of tasks, all or nothing; returns (ref, task_id) per task in the order of tasks.

    Each task is a dict with the keys ref, payload, after, queue (default: queue), run_at, priority and
    concurrency_key; its after lists refs of the graph (str), ids of tasks of its own queue (int), or
    {"queue": ..., "id": ...} for a task of another queue."""
    with _tracing.enqueue_span(queue), translating:
        cur = await conn.execute(_core.ENQUEUE_GRAPH_SQL, _core.graph_params(queue, _tracing.inject_graph(tasks)))
        return await cur.fetchall()


async def schedule(conn, name, queue, *, cron=None, every=None, payload=None, time_zone="UTC", priority=0,
                   concurrency_key=None, catch_up=1):
    """Enqueues a task into queue at each due time of cron (five fields or @hourly, @daily, ..., read in
    time_zone) or every (seconds or a timedelta), whatever the number of workers; the task's payload is payload
    with "scheduled_for". The same settings again change nothing; others replace the schedule. Needs
    permission manage on the queue."""
    with translating:
        await conn.execute(*_core.schedule_statement(name, queue, cron, every, payload, time_zone,
                                                      priority, concurrency_key, catch_up))


async def unschedule(conn, name):
    """Removes the schedule (its tasks already enqueued stay); False if there was none."""
    with translating:
        cur = await conn.execute(_core.UNSCHEDULE_SQL, (name,))
        return (await cur.fetchone())[0]


async def parent_results(conn, queue, task_id):
    """The results of the task's parents that are done: (task_id, parent_queue, result) per parent."""
    with translating:
        cur = await conn.execute(_core.PARENT_RESULTS_SQL, (queue, task_id))
        return await cur.fetchall()


async def await_task(conn, queue, task_id, *, timeout=None):
    """Waits for the task to end; returns TaskEnd(state, result, last_error), or None when there is no such
    task. Raises TimeoutError once timeout (seconds or a timedelta; None: no end) has passed first.

    Each statement waits at most 30 seconds (through a pooler, none holds a server connection for long);
    on an autocommit connection each is a transaction of its own."""
    wait = _core.TaskWait(queue, task_id, timeout)
    while True:
        with translating:
            row = await (await conn.execute(_core.AWAIT_TASK_SQL, wait.params())).fetchone()
        if wait.over(row):
            return wait.end


async def emit_event(conn, name, payload=None):
    """Emits the event name with payload (any JSON value): the tasks waiting for it go on, and a task that
    waits for it later gets it at once (kept for concurrency.event_retention). Returns how many tasks it woke.
    Needs EXECUTE on concurrency.emit_event (granted by the extension's owner)."""
    with translating:
        cur = await conn.execute(_core.EMIT_EVENT_SQL, (name, _core.payload_param(payload)))
        return (await cur.fetchone())[0]
# --- end


async def _in_transaction(conn, query, params):
    """One statement as a transaction of its own, its rows (workflow._in_transaction's twin)."""
    async with conn.transaction():
        cur = await conn.execute(query, params)
        return await cur.fetchall() if cur.description else []


async def _value(result):
    """A step's result: what fn returned, awaited if it is awaitable (fn may be a coroutine function)."""
    return await result if inspect.isawaitable(result) else result


# --- begin: the source of workflow (tools/generate_sync.py writes it there without async) ---
class _Workflow(_Flow):
    """The workflow calls of one run of a handler on one task."""

    async def _call(self, query, params):
        conn = await self._steps.get()
        try:
            with translating:
                return await _in_transaction(conn, query, params)
        except LeaseLostError as e:
            await self._lost(e)
            raise

    async def _lost(self, error):
        async with self._held.lock:
            self._mark_lost(error)

    async def _suspending(self):
        async with self._held.lock:  # waits for a heartbeat in flight
            self._mark_suspending()

    async def _resumed(self, error):
        async with self._held.lock:
            self._mark_resumed(error)

    async def step(self, name, fn, transaction):
        (recorded,) = (await self._call(_core.STEP_RESULT_SQL, self._key(name)))[0]
        if recorded is not None:
            return _core.json_value(recorded)
        if not transaction:
            result = await _value(fn())
            await self._call(_core.RECORD_STEP_SQL, self._key(name, _core.Jsonb(result)))
            return result
        conn = await self._steps.get()
        try:
            async with conn.transaction():
                result = await _value(fn(conn))
                with translating:
                    await conn.execute(_core.RECORD_STEP_SQL, self._key(name, _core.Jsonb(result)))
        except LeaseLostError as e:
            await self._lost(e)
            raise
        return result

    async def sleep(self, duration):
        name = self._next_sleep()
        until, passed = (await self._call(_core.SLEEP_STATE_SQL, self._key(name)))[0]
        if until is not None and passed:
            return  # slept already
        await self._suspending()
        try:
            # not recorded: records its end and sleeps; recorded and still to come: woken early, asleep again
            until = (await self._call(*_core.sleep_statement(self._key(name), until, duration)))[0][0]
        except BaseException as e:
            await self._resumed(e)
            raise
        raise self._suspended(f"sleeps until {until}")

    async def wait_for_event(self, name, timeout):
        timed_out = self._timeout_step(name)
        if (await self._call(_core.STEP_RESULT_SQL, self._key(timed_out)))[0][0] is not None:
            return None
        await self._suspending()
        try:
            status, payload, _ = (await self._call(*_core.await_event_statement(self._key(name), timeout,
                                                                                 timed_out)))[0]
        except BaseException as e:
            await self._resumed(e)
            raise
        if status == "waiting":
            raise self._suspended(f"waits for event {name!r}")
        await self._resumed(None)
        return _core.json_value(payload)


class _StepConnection:
    """The slot's connection for workflow calls, opened at the first one; a
    pool's is given back after each handler, a conninfo's kept."""

    def __init__(self, source):
        self._source = source
        self._stack = contextlib.AsyncExitStack()
        self._conn = None

    async def get(self):
        if self._conn is not None and (self._conn.broken or self._conn.closed):
            await self.close()
        if self._conn is None:
            self._conn = await self._stack.enter_async_context(self._source.connect())
        return self._conn

    async def handler_done(self):
        if self._source.pool is not None:
            await self.close()

    async def close(self):
        self._conn = None
        with contextlib.suppress(Exception):  # a broken connection cannot be closed cleanly
            await self._stack.aclose()
        self._stack = contextlib.AsyncExitStack()
# --- end


# --- begin: the source of worker (tools/generate_sync.py writes it there without async) ---
async def _one(conn, query, params=None):
    """One statement as a transaction of its own: on an autocommit connection
    just the statement (no BEGIN and COMMIT round trips, no lock held while
    this process waits between them); on a pool's connection, then a commit."""
    try:
        cur = await conn.execute(query, params)
        rows = await cur.fetchall() if cur.description else []
        if not conn.autocommit:
            await conn.commit()
        return rows
    except BaseException:
        if not conn.autocommit and not conn.closed:
            await conn.rollback()
        raise


class _Source:
    """Connections from a libpq conninfo string (opened by the worker) or a pool."""

    def __init__(self, connection, name, connect_kwargs):
        self.pool = connection if _core.is_pool(connection) else None
        if self.pool is None:
            self.conninfo, self.kwargs = connection, _core.connect_kwargs(name, connect_kwargs)

    @contextlib.asynccontextmanager
    async def connect(self):
        if self.pool is not None:
            async with self.pool.connection() as conn:
                yield conn
        else:
            conn = await psycopg.AsyncConnection.connect(self.conninfo, **self.kwargs)
            try:
                yield conn
            finally:
                await conn.close()


class _Slot:
    def __init__(self):
        self.lock = _slot_lock()  # guards conn and waiting against stop(), which cancels a waiting claim
        self.conn = None
        self.waiting = False  # in a dequeue(wait): stop() cancels it
        self.busy = False  # running a handler
        self.steps = None  # the connection of workflow calls (_StepConnection)


class _AsyncRunner(_core.Settings):
    """What the asyncio worker and the synchronous one share: each slot's loop (claim, run the handlers,
    complete or fail them, release what did not start) and the heartbeats. The subclass starts the slots
    (asyncio tasks; threads), stops them and waits: _begin_stop, _pause, _wait_beats and _slot_done are its."""

    def __init__(self, connection, queue, handler, *, connect_kwargs=None, **options):
        super().__init__(queue, handler, default_on_error=default_on_error, **options)
        self._source = _Source(connection, self.name, connect_kwargs)
        self._stopping = asyncio.Event()
        self._drain = False
        self._slots = []
        self._held = []
        self._beats = asyncio.Condition()
        self._closed = False  # the heartbeats end
        self._error = None  # what stopped a slot, raised by run()

    async def _prepare(self, drain):
        """What the server offers, and the slots."""
        async with self._source.connect() as conn:
            with translating:
                self.features = _core.Features.read(await _one(conn, _core.FEATURES_SQL),
                                                    (await _one(conn, _core.WORKER_SETTINGS_SQL, (self.queue,)))[0])
        self._drain = drain
        self._slots = [_Slot() for _ in range(self.concurrency)]

    def _cancel_waits(self):
        for slot in self._slots:
            with slot.lock:
                if slot.waiting and slot.conn is not None:
                    slot.conn.cancel()

    # --- a slot ---------------------------------------------------------------

    async def _slot_main(self, slot):
        slot.steps = _StepConnection(self._source)
        try:
            await self._slot_loop(slot)
        except Exception as e:  # e.g. 42501 at the claim: the whole worker stops and run() raises it
            log.error("worker %s: stopping on an error: %s", self.name, e)
            self._error = self._error or e
            self._begin_stop()
        finally:
            await slot.steps.close()
            self._slot_done()

    async def _slot_loop(self, slot):
        pause = _core.FIRST_POLL
        while not self._stopping.is_set():
            try:
                async with self._source.connect() as conn:
                    with slot.lock:
                        slot.conn = conn
                    try:
                        await self._serve(slot, conn)
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
            await self._pause(pause)
            pause = _core.next_poll(pause, max(self.poll_interval, 5.0))

    async def _serve(self, slot, conn):
        pause = _core.FIRST_POLL
        tasks, lease_seconds = [], None
        while True:
            if not tasks:
                if self._stopping.is_set():
                    return
                tasks, lease_seconds = await self._claim(slot, conn)
                if not tasks:
                    if self._drain or self._stopping.is_set():
                        return
                    if not self.features.wait:
                        await self._pause(pause)
                        pause = _core.next_poll(pause, self.poll_interval)
                    continue
                pause = _core.FIRST_POLL
            if self._stopping.is_set():
                await self._release(conn, tasks)
                return
            tasks, lease_seconds = await self._work(slot, conn, tasks, lease_seconds)

    async def _claim(self, slot, conn):
        waits = self.features.wait and not self._drain
        params = self.claim_params(waits)
        with slot.lock:
            if self._stopping.is_set():
                return [], None
            slot.waiting = waits
        started = self._tracing.now()
        try:
            rows = await _one(conn, _core.CLAIM_WAIT_SQL if waits else _core.CLAIM_SQL, params)
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
        return self._claimed(started, rows)

    def _claimed(self, started, rows):
        tasks, lease_seconds = self.tasks_from_rows(rows)
        self._tracing.claimed(started, tasks)
        return tasks, lease_seconds

    async def _claim_next(self, conn):
        """The cheapest loop: the next claim in the completing transaction (no wait)."""
        if self._stopping.is_set():
            return [], None
        started = self._tracing.now()
        cur = await conn.execute(_core.CLAIM_NEXT_SQL, self.claim_params(False))
        return self._claimed(started, await cur.fetchall())

    async def _work(self, slot, conn, tasks, lease_seconds):
        every = self.heartbeat_every(lease_seconds)
        held = _core.Held(tasks, lease_seconds, every, time.monotonic())
        held.lock = asyncio.Lock()
        held.steps = slot.steps
        with slot.lock:
            slot.busy = True
        async with self._beats:
            self._held.append(held)
            self._beats.notify_all()
        try:
            if len(tasks) == 1:
                return await self._work_one(conn, held, tasks[0])
            return await self._work_batch(conn, held)
        finally:
            self._tracing.end(tasks)
            async with self._beats:
                self._held.remove(held)
            with slot.lock:
                slot.busy = False
            await slot.steps.handler_done()

    async def _run_handler(self, task, conn, held):
        """The handler, with task's workflow calls bound to this run, in the task's handle span; TaskSuspended
        when the task left it."""
        with self._tracing.running(task):
            return await self.handler(dataclasses.replace(task, _workflow=_Workflow(task, held, held.steps)), conn)

    async def _finishing(self, held, finishing=True):
        async with held.lock:  # waits for a heartbeat in flight
            held.finishing = finishing

    async def _work_one(self, conn, held, task):
        following = ([], None)
        failure = None
        try:
            async with conn.transaction():
                try:
                    result = await self._run_handler(task, conn, held)
                except Exception as exc:
                    if conn.broken:
                        raise
                    failure = exc
                    raise _Rollback()
                await self._finishing(held)
                if task.id in held.lost:
                    raise _Rollback()  # the heartbeat found the lease lost, and reported it
                self._tracing.completing([task])
                with translating:
                    await conn.execute(_core.COMPLETE_SQL, (self.queue, task.id, task.lease_token,
                                                            _core.result_param(result)))
                    following = await self._claim_next(conn)
            self._tracing.completed([task])
            self._completed([task])
        except TaskSuspended:
            pass  # sleeping or waiting for an event: not complete, not failed, not heartbeated
        except _Rollback:
            if failure is not None:
                await self._fail(conn, held, task, failure)
        except LeaseLostError as e:
            self._tracing.completed([task], e)
            self.on_error(e, task)
        except psycopg.Error as e:  # the commit failed (a deferred constraint, a serialization failure)
            if conn.broken:
                raise
            self._tracing.completed([task], e)
            self._tracing.end(following[0])
            following = ([], None)  # the next claim rolled back with it
            await self._fail(conn, held, task, e)
        return following

    async def _work_batch(self, conn, held):
        pending = held.live()
        failures, unstarted = [], []
        following = ([], None)
        while pending:
            done, failures, unstarted = [], [], []
            try:
                async with conn.transaction():
                    for i, task in enumerate(pending):
                        if self._stopping.is_set():
                            unstarted = pending[i:]
                            break
                        if task.id in held.lost:
                            continue
                        try:
                            async with conn.transaction():  # a savepoint: a failure undoes only its task
                                await self._run_handler(task, conn, held)
                            done.append(task)
                        except TaskSuspended:
                            pass  # its savepoint rolled back; not complete, not failed
                        except Exception as exc:
                            if conn.broken:
                                raise
                            failures.append((task, exc))
                    await self._finishing(held)
                    done = [t for t in done if t.id not in held.lost]
                    self._tracing.completing(done)
                    with translating:
                        if done:
                            await conn.execute(_core.COMPLETE_BATCH_SQL, (
                                self.queue, [t.id for t in done], [t.lease_token for t in done]))
                        if not unstarted:
                            following = await self._claim_next(conn)
                pending = []
                self._tracing.completed(done)
                self._completed(done)
            except psycopg.Error as e:  # the commit failed: the batch's work is undone
                if conn.broken:
                    raise
                self._tracing.completed(done, e)
                self._tracing.end(following[0])
                failures += [(t, e) for t in done]
                following = ([], None)  # the next claim rolled back with it
                pending = []
            except LeaseLostError as e:
                # one lease is lost and the batch rolled back: again without it
                self._tracing.completed(done, e)
                lost = next((t for t in pending if t.id == lost_task_id(e)), None)
                if lost is None:
                    raise
                held.lost[lost.id] = e
                self.on_error(e, lost)
                await self._finishing(held, False)
                pending = [t for t in pending if t.id not in held.lost]
        for task, exc in failures:
            await self._fail(conn, held, task, exc)
        if unstarted:
            await self._release(conn, unstarted)
        return following

    async def _fail(self, conn, held, task, exc):
        self.on_error(exc, task)
        if task.id in held.lost:
            return
        try:
            with self._tracing.step(task, "fail_span"), translating:
                await _one(conn, _core.FAIL_SQL, (self.queue, task.id, task.lease_token, _core.error_text(exc), None))
        except LeaseLostError as e:
            self.on_error(e, task)

    async def _release(self, conn, tasks):
        """Hands back claimed tasks that did not start: no attempt spent. A
        server without release leaves them to their leases' end."""
        self._tracing.end(tasks)
        if not tasks:
            return
        if not self.features.release:
            log.info("worker %s: %d claimed tasks left to their leases (the server has no release)", self.name,
                     len(tasks))
            return
        if self.features.release_batch and len(tasks) > 1:
            try:
                return await self._release_call(conn, _core.RELEASE_BATCH_SQL, (
                    self.queue, [t.id for t in tasks], [t.lease_token for t in tasks]))
            except LeaseLostError:
                pass  # one was lost already: hand back the others one by one
        for t in tasks:
            with contextlib.suppress(LeaseLostError):
                await self._release_call(conn, _core.RELEASE_SQL, (self.queue, t.id, t.lease_token))

    async def _release_call(self, conn, query, params):
        try:
            with translating:
                await _one(conn, query, params)
        except QueueError as e:
            if e.sqlstate != "57014":
                raise
            with translating:  # a late cancel of the claim's wait hit it: once more
                await _one(conn, query, params)

    # --- heartbeats -----------------------------------------------------------

    async def _heartbeat_main(self):
        async with contextlib.AsyncExitStack() as stack:
            conn = None
            while True:
                async with self._beats:
                    if self._closed:
                        return
                    now = time.monotonic()
                    held = min(self._held, key=lambda h: h.due, default=None)
                    if held is None or held.due > now:
                        await self._wait_beats(None if held is None else held.due - now)
                        continue
                    held.due = now + held.every
                try:
                    if conn is None:
                        conn = await stack.enter_async_context(self._source.connect())
                    await self._beat(conn, held)
                except psycopg.Error as e:
                    log.warning("worker %s: heartbeat: %s", self.name, e)
                    if conn is not None and (conn.broken or conn.closed):
                        await stack.aclose()
                        conn = None

    def _lost(self, held, task, error):
        """A heartbeat found the lease lost: the slot will roll the task's work back."""
        held.lost[task.id] = error
        self.on_error(error, task)

    async def _beat(self, conn, held):
        async with held.lock:
            if held.finishing:
                return
            live = held.live()
            if not live:
                return
            try:
                if len(live) == 1:
                    await _one(conn, _core.HEARTBEAT_SQL, (self.queue, live[0].id, live[0].lease_token, self.lease))
                else:
                    await _one(conn, _core.HEARTBEAT_BATCH_SQL, (self.queue, [t.id for t in live],
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
                    await _one(conn, _core.HEARTBEAT_SQL, (self.queue, t.id, t.lease_token, self.lease))
                except psycopg.Error as e:
                    if e.sqlstate != LEASE_LOST:
                        raise
                    self._lost(held, t, translate(e))


class _Rollback(Exception):
    """Leaves the handler's transaction block, rolling it back."""
# --- end


class AsyncWorker(_AsyncRunner):
    """Runs `await handler(task, conn)` for the tasks of one queue.

    The arguments are Worker's; connection is a conninfo string or an async
    pool (psycopg_pool.AsyncConnectionPool); concurrency is the number of
    asyncio tasks, each with its connection, that run handlers.
    """

    def __init__(self, connection, queue, handler, *, connect_kwargs=None, **options):
        super().__init__(connection, queue, handler, connect_kwargs=connect_kwargs, **options)
        self._tasks = []
        self._beater = None

    async def start(self, drain=False):
        await self._prepare(drain)
        self._tasks = [asyncio.create_task(self._slot_main(s)) for s in self._slots]
        if self.heartbeat:
            self._beater = asyncio.create_task(self._heartbeat_main())

    async def run(self, drain=False, handle_signals=True):
        """start(), then waits until drained or stopped; SIGTERM and SIGINT call stop()."""
        await self.start(drain)
        loop = asyncio.get_running_loop()
        installed = []
        if handle_signals:
            for signum in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(signum, self._begin_stop)
                    installed.append(signum)
        try:
            stopping = asyncio.create_task(self._stopping.wait())
            slots = asyncio.create_task(asyncio.wait(self._tasks))
            await asyncio.wait([stopping, slots], return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            slots.cancel()
            await self._finish()
            if self._error is not None:
                raise self._error
        finally:
            for signum in installed:
                loop.remove_signal_handler(signum)

    async def stop(self, timeout=None):
        """Stops claiming, releases claimed tasks not started, waits up to
        timeout (default shutdown_timeout) for running handlers; True if all ended."""
        self._begin_stop()
        return await self._finish(timeout)

    def _begin_stop(self):
        self._stopping.set()
        self._cancel_waits()

    async def _finish(self, timeout=None):
        limit = self.shutdown_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        pending = set(self._tasks)
        while pending:
            # a cancel that reached a claim before its statement began is lost: again
            done, pending = await asyncio.wait(pending, timeout=max(0.0, min(0.5, deadline - time.monotonic())))
            if not pending or time.monotonic() >= deadline:
                break
            self._cancel_waits()
        for task in pending:  # abandoned: their transactions roll back, their leases lapse
            task.cancel()
        if pending:
            await asyncio.wait(pending)
        if self._beater is not None:
            self._beater.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._beater
        return not pending

    def _slot_done(self):
        pass  # run() and _finish() wait for the slots' asyncio tasks

    async def _pause(self, seconds):
        """Sleeps seconds, or less when stop() is called."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    async def _wait_beats(self, timeout):
        """Waits (holding _beats) for a change of the held tasks, at most timeout seconds (None: no limit)."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._beats.wait(), timeout)
