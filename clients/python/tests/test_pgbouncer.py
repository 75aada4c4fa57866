"""Through PgBouncer (Debian's) in transaction mode, as run-tests.sh starts it."""
import os

import psycopg
import pytest

from concurrency_ext import Worker, enqueue_batch
from conftest import record, results_table


def test_worker_through_pgbouncer(admin, queue, pgbouncer):
    with psycopg.connect(pgbouncer, autocommit=True, prepare_threshold=None) as producer:
        ids = enqueue_batch(producer, queue, [{"n": i} for i in range(60)])
    Worker(pgbouncer, queue, record, concurrency=3).run(drain=True)
    Worker(pgbouncer, queue, record, concurrency=2, batch=5).run(drain=True)  # nothing left
    done = admin.execute(f"SELECT task_id FROM {results_table(queue)} ORDER BY 1").fetchall()
    assert [r[0] for r in done] == ids


def prepared_twice(conninfo, **kwargs):
    """Two clients alternate the same statement through the pooler."""
    with psycopg.connect(conninfo, autocommit=True, **kwargs) as a, \
            psycopg.connect(conninfo, autocommit=True, **kwargs) as b:
        for i in range(8):
            for conn in (a, b):
                conn.execute("SELECT %s::int + 1", (i,))


def test_server_side_prepared_statements_break_behind_pgbouncer(pgbouncer):
    """What the runtime's prepare_threshold=None avoids, as psycopg 3.1 and
    PgBouncer 1.18 behave: once psycopg prepares (after prepare_threshold runs,
    here at once), the other client meets its statement on the shared server
    connection. Through a pool of one server connection, so that they share
    it every time (with more, two clients may each keep landing on a server
    connection that has a statement of that name and text, and nothing
    fails)."""
    one_server = os.environ.get("CE_PGBOUNCER_ONE_SERVER", pgbouncer)
    with pytest.raises(psycopg.Error) as raised:
        prepared_twice(one_server, prepare_threshold=0)
    assert raised.value.sqlstate in ("42P05", "26000")
    prepared_twice(one_server, prepare_threshold=None)
    prepared_twice(pgbouncer, prepare_threshold=None)
