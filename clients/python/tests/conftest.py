"""Fixtures: a database with the extension, a fresh queue per test, and the
PgBouncer in front of the server when run-tests.sh started one.

The server is the one the PG* environment variables name (run-tests.sh
starts a throw-away cluster); CE_PGBOUNCER is a conninfo through PgBouncer
in transaction mode to the same database, when there is one.
"""
import asyncio
import os
import re
import threading
import time

import psycopg
import pytest

from concurrency_ext import Worker, aio, enqueue

DB = os.environ.get("CE_TEST_DATABASE", "concurrency_ext_pytest")


def admin_connect(dbname=DB, **kwargs):
    return psycopg.connect(dbname=dbname, autocommit=True, **kwargs)


@pytest.fixture(scope="session")
def database():
    with admin_connect("postgres") as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{DB}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{DB}"')
    with admin_connect() as conn:
        conn.execute("CREATE EXTENSION concurrency_ext")
    yield DB


@pytest.fixture
def admin(database):
    with admin_connect() as conn:
        yield conn


@pytest.fixture
def dsn(database):
    return psycopg.conninfo.make_conninfo(dbname=database)


@pytest.fixture
def queue(request, admin):
    """A new queue named after the test (lease 2 s), with a results table."""
    name = re.sub(r"[^a-z0-9_]", "_", request.node.name.lower())[:40]
    admin.execute("SELECT concurrency.create_queue(%s, lease => '2 seconds', max_attempts => 3)", (name,))
    admin.execute(f'DROP TABLE IF EXISTS "r_{name}"')
    admin.execute(f'CREATE TABLE "r_{name}" (task_id bigint, attempt int, payload jsonb, worker text)')
    yield name
    admin.execute("SELECT concurrency.drop_queue(%s)", (name,))
    admin.execute(f'DROP TABLE "r_{name}"')


def results_table(queue):
    return f'"r_{queue}"'


def record(task, conn, worker=None):
    """What the handlers of the tests do: one row per completed run."""
    conn.execute(f"INSERT INTO {results_table(task.queue)} VALUES (%s, %s, %s, %s)",
                 (task.id, task.attempt, psycopg.types.json.Jsonb(task.payload), worker))


_SPANS = []


def span_exporter():
    """The in-memory exporter of the OpenTelemetry SDK's tracer provider, made the global one at the first call
    (a process has one global provider: the tests of every file that records spans share it)."""
    if not _SPANS:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        _SPANS.append(exporter)
    return _SPANS[0]


def drain(kind, dsn, queue, handler, **options):
    """Runs a worker of kind ("sync": Worker, "async": AsyncWorker) until the queue is empty; handler(task) is
    called in the handler with the task it got."""
    if kind == "sync":
        Worker(dsn, queue, lambda task, conn: handler(task), **options).run(drain=True)
    else:
        async def ahandler(task, conn):
            await asyncio.sleep(0)  # the span stays current across an await
            return handler(task)

        asyncio.run(aio.AsyncWorker(dsn, queue, ahandler, **options).run(drain=True))


def enqueue_in(kind, dsn, queue, payload):
    """enqueue (kind "sync") or aio.enqueue (kind "async") on a connection of its own."""
    if kind == "sync":
        with psycopg.connect(dsn, autocommit=True) as conn:
            return enqueue(conn, queue, payload)

    async def main():
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            return await aio.enqueue(conn, queue, payload)

    return asyncio.run(main())


def wait_until(predicate, what, timeout=60.0):
    """Waits for a condition (not a timing assertion: the limit only ends a hung test)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def states(admin, queue):
    return dict(admin.execute(f'SELECT state, count(*) FROM concurrency."q_{queue}" GROUP BY state').fetchall())


def run_in_thread(target, *args):
    thread = threading.Thread(target=target, args=args, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def pgbouncer():
    conninfo = os.environ.get("CE_PGBOUNCER")
    if not conninfo:
        pytest.skip("no PgBouncer (CE_PGBOUNCER unset; run-tests.sh starts one)")
    return conninfo
