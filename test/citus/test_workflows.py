#!/usr/bin/env python3
"""Durable workflows on a Citus cluster (coordinator + 2 workers).

A local queue of the coordinator runs workflows there as on one server
(steps, events, await_task), also inside a transaction that writes
distributed tables. A distributed queue refuses the workflow calls with
0A000, on the coordinator and on a worker node, and changes nothing.
"""
from citus_lib import COORDINATOR, WORKER1, check, connect, run, scalar, sqlstate_of


def setup():
    c = connect(COORDINATOR)
    c.execute("CREATE EXTENSION IF NOT EXISTS concurrency_ext")
    for q in ("wf_local", "wf_dist"):
        c.execute("SELECT concurrency.drop_queue(%s) FROM concurrency.queue WHERE name = %s", (q, q))
    c.execute("DROP TABLE IF EXISTS wf_orders")
    c.execute("CREATE TABLE wf_orders (id bigint PRIMARY KEY, step text)")
    c.execute("SELECT create_distributed_table('wf_orders', 'id')")
    c.execute("SELECT concurrency.create_queue('wf_local')")
    c.execute("SELECT concurrency.create_queue('wf_dist', distributed => true)")


def test_local_queue_with_distributed_writes():
    c = connect(COORDINATOR)
    tid = scalar(c, "SELECT concurrency.enqueue('wf_local', '{}')")
    tok = scalar(c, "SELECT lease_token FROM concurrency.dequeue('wf_local')")
    t = connect(COORDINATOR, autocommit=False)
    t.execute("INSERT INTO wf_orders VALUES (1, 'charge')")
    t.execute("SELECT concurrency.record_step('wf_local', %s, %s, 'charge', '{\"ok\": true}')", (tid, tok))
    t.rollback()
    check("a step rolled back with the distributed write is not recorded",
          scalar(c, "SELECT concurrency.step_result('wf_local', %s, %s, 'charge')", (tid, tok)) is None
          and scalar(c, "SELECT count(*) FROM wf_orders") == 0)
    t.execute("INSERT INTO wf_orders VALUES (1, 'charge')")
    t.execute("SELECT concurrency.record_step('wf_local', %s, %s, 'charge', '{\"ok\": true}')", (tid, tok))
    t.commit()
    check("committed with it: the step and the row together",
          scalar(c, "SELECT concurrency.step_result('wf_local', %s, %s, 'charge')", (tid, tok)) == {"ok": True}
          and scalar(c, "SELECT count(*) FROM wf_orders") == 1)
    check("the task parks for an event",
          scalar(c, "SELECT status FROM concurrency.await_event('wf_local', %s, %s, 'citus-reply')", (tid, tok)) == "waiting")
    check("the emit wakes it", scalar(c, "SELECT concurrency.emit_event('citus-reply', '1')") == 1)
    tok = scalar(c, "SELECT lease_token FROM concurrency.dequeue('wf_local')")
    c.execute("SELECT concurrency.complete('wf_local', %s, %s, '{\"shipped\": true}')", (tid, tok))
    check("await_task returns the result",
          scalar(c, "SELECT result FROM concurrency.await_task('wf_local', %s)", (tid,)) == {"shipped": True})


def test_distributed_queue_refuses():
    c = connect(COORDINATOR)
    tid = scalar(c, "SELECT concurrency.enqueue('wf_dist', '{}')")
    for node in (COORDINATOR, WORKER1):
        n = connect(node)
        for call in ("SELECT concurrency.record_step('wf_dist', %s, 1, 's', '1')",
                     "SELECT concurrency.step_result('wf_dist', %s, 1, 's')",
                     "SELECT * FROM concurrency.await_event('wf_dist', %s, 1, 'e')",
                     "SELECT * FROM concurrency.task_steps('wf_dist', %s)",
                     "SELECT * FROM concurrency.await_task('wf_dist', %s)"):
            check(f"on a distributed queue, {call.split('(')[0].split('.')[-1]} is refused (0A000)",
                  sqlstate_of(lambda: n.execute(call, (tid,))) == "0A000")
    check("and nothing changed", scalar(c, "SELECT state FROM concurrency.task_status('wf_dist', %s)", (tid,)) == "ready")


def test_drop():
    c = connect(COORDINATOR)
    c.execute("SELECT concurrency.drop_queue('wf_local'); SELECT concurrency.drop_queue('wf_dist')")
    c.execute("DROP TABLE wf_orders")
    c.execute("DELETE FROM concurrency.event WHERE name = 'citus-reply'")


if __name__ == "__main__":
    setup()
    run([test_local_queue_with_distributed_writes, test_distributed_queue_refuses, test_drop])
