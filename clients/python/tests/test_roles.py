"""Least privilege: a worker that holds only `work` on its queue (no CREATE,
no `read`), a producer that holds only `enqueue`; errors typed by SQLSTATE."""
import psycopg
import pytest

from concurrency_ext import QueueError, Worker, enqueue, enqueue_batch
from conftest import admin_connect, record, results_table


@pytest.fixture
def roles(admin, queue):
    for role in ("ce_py_worker", "ce_py_producer"):
        admin.execute(f"DROP ROLE IF EXISTS {role}")
        admin.execute(f"CREATE ROLE {role} LOGIN")
    admin.execute("SELECT concurrency.grant_queue(%s, 'ce_py_worker', ARRAY['work'])", (queue,))
    admin.execute("SELECT concurrency.grant_queue(%s, 'ce_py_producer', ARRAY['enqueue'])", (queue,))
    admin.execute(f"GRANT INSERT ON {results_table(queue)} TO ce_py_worker")
    yield
    admin.execute("SELECT concurrency.revoke_queue(%s, 'ce_py_worker', ARRAY['work'])", (queue,))
    admin.execute("SELECT concurrency.revoke_queue(%s, 'ce_py_producer', ARRAY['enqueue'])", (queue,))
    admin.execute("DROP OWNED BY ce_py_worker, ce_py_producer")
    admin.execute("DROP ROLE ce_py_worker, ce_py_producer")


def test_work_only_role_drains_the_queue(admin, database, queue, roles):
    with admin_connect(user="ce_py_producer") as producer:
        ids = enqueue_batch(producer, queue, [{"n": i} for i in range(25)])
        ids.append(enqueue(producer, queue, ["an", "array"]))
    conninfo = psycopg.conninfo.make_conninfo(dbname=database, user="ce_py_worker")
    with admin_connect(user="ce_py_worker") as conn:  # what the role cannot do
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("CREATE TABLE ce_py_t (a int)")
        assert conn.execute("SELECT ready FROM concurrency.queue_stats WHERE queue = %s",
                            (queue,)).fetchone() == (None,)
    Worker(conninfo, queue, record, concurrency=2, batch=4).run(drain=True)
    done = admin.execute(f"SELECT task_id FROM {results_table(queue)} ORDER BY 1").fetchall()
    assert [r[0] for r in done] == ids


def test_errors_carry_their_sqlstate(admin, database, queue, roles):
    with admin_connect(user="ce_py_producer") as producer:
        with pytest.raises(QueueError) as raised:
            producer.execute("SELECT 1")  # a working connection
            Worker(psycopg.conninfo.make_conninfo(dbname=database, user="ce_py_producer"), queue,
                   record).run(drain=True)
        assert raised.value.sqlstate == "42501"
        with pytest.raises(QueueError) as raised:
            enqueue(producer, "no_such_queue_here", {})
        assert raised.value.sqlstate == "42704"
        assert isinstance(raised.value.__cause__, psycopg.Error)
