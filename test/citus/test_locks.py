#!/usr/bin/env python3
"""Named locks and lock diagnostics on a Citus cluster (coordinator + 2 workers).

Named locks are advisory locks, which live in one server's lock manager: they
are taken on the coordinator and refused with 0A000 on worker nodes, so that
a lock never seems to exclude while it does not.
"""
import threading
import time

from citus_lib import (COORDINATOR, WORKER1, WORKER2, check, connect, error_of, run, scalar,
                       sqlstate_of, wait_until)


def setup():
    c = connect(COORDINATOR)
    c.execute("CREATE EXTENSION IF NOT EXISTS concurrency_ext")
    for port in (WORKER1, WORKER2):
        w = connect(port)
        check(f"extension propagated to worker {port}",
              scalar(w, "SELECT extversion FROM pg_extension WHERE extname = 'concurrency_ext'") is not None)
    c.execute("SELECT concurrency.register_subsystem('billing', 4242)")
    c.execute("DROP TABLE IF EXISTS accounts")
    c.execute("CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL)")
    c.execute("SELECT create_distributed_table('accounts', 'id')")
    c.execute("INSERT INTO accounts SELECT g, 100 FROM generate_series(1, 100) g")


def test_node_roles():
    check("coordinator says coordinator",
          scalar(connect(COORDINATOR), "SELECT concurrency.citus_node_role()") == "coordinator")
    for port in (WORKER1, WORKER2):
        check(f"worker {port} says worker", scalar(connect(port), "SELECT concurrency.citus_node_role()") == "worker")


def test_coordinator_locks_exclude():
    a, b = connect(COORDINATOR, autocommit=False), connect(COORDINATOR)
    a.execute("SELECT concurrency.xact_lock('billing')")
    check("coordinator: a second client cannot take a held lock",
          scalar(b, "SELECT concurrency.try_xact_lock('billing')") is False)
    check("coordinator: a resource lock is independent",
          scalar(b, "SELECT concurrency.try_session_lock('billing', 7)") is True)
    b.execute("SELECT concurrency.session_unlock('billing', 7)")
    a.rollback()
    check("coordinator: free again after the holder's rollback",
          scalar(b, "SELECT concurrency.try_xact_lock('billing')") is True)


def test_worker_refuses():
    holder = connect(COORDINATOR, autocommit=False)
    holder.execute("SELECT concurrency.xact_lock('billing')")
    w = connect(WORKER1)
    calls = {
        "xact_lock": "SELECT concurrency.xact_lock('billing')",
        "try_xact_lock": "SELECT concurrency.try_xact_lock('billing')",
        "xact_lock resource": "SELECT concurrency.xact_lock('billing', 1, interval '1 second')",
        "xact_lock array": "SELECT concurrency.xact_lock(ARRAY['billing'])",
        "session_lock": "SELECT concurrency.session_lock('billing')",
        "try_session_lock": "SELECT concurrency.try_session_lock('billing', 5)",
        "unregistered name": "SELECT concurrency.try_xact_lock('no such subsystem')",
    }
    for label, sql in calls.items():
        e = error_of(lambda: w.execute(sql))
        check(f"worker: {label} refused with 0A000", e is not None and e.sqlstate == "0A000",
              f"got {e.sqlstate if e else 'success'}")
    e = error_of(lambda: w.execute("SELECT concurrency.try_xact_lock('billing')"))
    hint = e.diag.message_hint if e else ""
    check("worker: the hint names the coordinator", hint and f"127.0.0.1:{COORDINATOR}" in hint, repr(hint))
    check("worker: the detail says why",
          e is not None and "per node" in (e.diag.message_detail or ""), repr(e.diag.message_detail if e else None))
    check("worker: nothing was taken there",
          scalar(w, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'") == 0)
    w2 = connect(WORKER2)
    check("second worker refuses too",
          sqlstate_of(lambda: w2.execute("SELECT concurrency.try_xact_lock('billing')")) == "0A000")
    holder.rollback()


def test_pushed_down_call_refused():
    # A lock call inside a query that Citus runs on a worker (router query on
    # a distributed table) must fail, not return true from the worker.
    c = connect(COORDINATOR)
    state = sqlstate_of(lambda: c.execute("SELECT concurrency.try_xact_lock('billing') FROM accounts WHERE id = 1"))
    check("a lock call pushed down to a worker is refused", state == "0A000", f"got {state}")


def test_diagnostics_scope():
    c = connect(COORDINATOR)
    rows = dict(c.execute("SELECT diagnostic, covers FROM concurrency.diagnostics_scope").fetchall())
    check("coordinator: lock_waits covers this node", rows.get("lock_waits") == "this node", repr(rows))
    check("coordinator: cluster_lock_waits covers the cluster", rows.get("cluster_lock_waits") == "cluster", repr(rows))
    note = scalar(c, "SELECT note FROM concurrency.diagnostics_scope WHERE diagnostic = 'held_locks'")
    check("coordinator: held_locks says it sees every named lock", "every named lock of the cluster" in note, note)
    note = scalar(connect(WORKER1), "SELECT note FROM concurrency.diagnostics_scope WHERE diagnostic = 'lock_waits'")
    check("worker: lock_waits says this worker only", "this worker" in note, note)


def test_cluster_lock_waits():
    # a named-lock wait on the coordinator: scope node, with the lock named
    a, b = connect(COORDINATOR, autocommit=False), connect(COORDINATOR, autocommit=False)
    a.execute("SELECT concurrency.xact_lock('billing')")
    b_pid = scalar(b, "SELECT pg_backend_pid()")
    t = threading.Thread(target=lambda: error_of(lambda: b.execute("SELECT concurrency.xact_lock('billing', NULL, '20 s')")))
    t.start()
    obs = connect(COORDINATOR)
    seen = wait_until(lambda: scalar(obs, "SELECT count(*) FROM concurrency.cluster_lock_waits WHERE scope = 'node' "
                                          "AND waiting_pid = %s AND locked_object = 'subsystem billing'", (b_pid,)) == 1)
    check("cluster_lock_waits: a named-lock wait on the coordinator, scope node", seen)
    a.rollback()
    t.join()
    b.rollback()

    # a row-lock wait between distributed transactions inside a worker:
    # invisible to lock_waits on the coordinator, shown by cluster_lock_waits
    c1, c2 = connect(COORDINATOR, autocommit=False), connect(COORDINATOR, autocommit=False)
    c1.execute("UPDATE accounts SET balance = balance - 1 WHERE id = 1")
    t = threading.Thread(target=lambda: error_of(lambda: c2.execute("UPDATE accounts SET balance = balance + 1 WHERE id = 1")))
    t.start()
    rows = []

    def cluster_edge():
        rows[:] = obs.execute("SELECT waiting_node, blocking_node, waiting_query FROM concurrency.cluster_lock_waits "
                              "WHERE scope = 'cluster'").fetchall()
        return len(rows) > 0
    seen = wait_until(cluster_edge, timeout=30)
    check("cluster_lock_waits: a row-lock wait inside a worker, scope cluster", seen, repr(rows))
    if seen:
        # Citus names the node where each distributed transaction started
        # (where its client is connected), not the worker where it waits
        check("cluster_lock_waits: both sessions named by the node their client uses",
              rows[0][0] == rows[0][1] == f"127.0.0.1:{COORDINATOR}", repr(rows))
        check("cluster_lock_waits: the waiting statement is the client's",
              "UPDATE accounts" in (rows[0][2] or ""), repr(rows))
    local = scalar(obs, "SELECT count(*) FROM concurrency.lock_waits")
    check("lock_waits on the coordinator does not see the worker's wait (this node only)", local == 0, f"{local} rows")
    c1.rollback()
    t.join()
    c2.rollback()


if __name__ == "__main__":
    setup()
    run([test_node_roles, test_coordinator_locks_exclude, test_worker_refuses, test_pushed_down_call_refused,
         test_diagnostics_scope, test_cluster_lock_waits])
