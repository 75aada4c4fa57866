"""Adding tasks: enqueue and enqueue_batch, on a psycopg connection.

They run in the connection's current transaction (or their own, in
autocommit): a task enqueued with the producer's writes exists exactly when
they commit. Payloads are any JSON value: objects, arrays, strings, numbers,
booleans, None (JSON null).
"""
from . import _core
from .errors import translating


def enqueue(conn, queue, payload=None, *, run_at=None, priority=0, dedupe_key=None, concurrency_key=None,
            on_conflict=None):
    """Adds a task; returns its id (the existing task's id for a dedupe_key already held). on_conflict='replace'
    gives that task this payload, run_at and priority if it has not started (debounce)."""
    if payload is None:
        payload = {}
    with translating:
        return conn.execute(*_core.enqueue_statement(queue, payload, run_at, priority, dedupe_key, concurrency_key,
                                                     on_conflict)).fetchone()[0]


def enqueue_batch(conn, queue, payloads, *, run_at=None, priority=0, dedupe_keys=None, concurrency_keys=None):
    """Adds one task per payload in one statement; returns their ids in payload order."""
    with translating:
        rows = conn.execute(_core.ENQUEUE_BATCH_SQL,
                            _core.enqueue_batch_params(queue, payloads, run_at, priority, dedupe_keys,
                                                       concurrency_keys)).fetchall()
    return [row[0] for row in rows]
