#!/usr/bin/env python3
"""Durable workflows on a Citus cluster (coordinator + 2 workers).

A local queue of the coordinator runs workflows there as on one server
(steps, events, await_task), also inside a transaction that writes
distributed tables. A distributed queue runs them from every node: steps on
the task's shard (fenced by the lease, kept across a sleep), events in both
orders with the emit made on another node than the await (the event tables
distributed by name, an emit sent to the event's shard and the task's shard
only, not through the coordinator), await_task woken on the task's shard,
a batch with a finally-child (after_ends) whose parents end dead and done, and the Python runtime's workflow
calls from a worker node.
"""
import json
import os
import sys
import threading

from citus_lib import (COORDINATOR, NODES, WORKER1, WORKER2, check, connect, fresh_distributed_queue, run, scalar,
                       sqlstate_of, wait_until)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))


def setup():
    c = connect(COORDINATOR)
    c.execute("CREATE EXTENSION IF NOT EXISTS concurrency_ext")
    for q in ("wf_local", "wf_dist"):
        c.execute("SELECT concurrency.drop_queue(%s) FROM concurrency.queue WHERE name = %s", (q, q))
    c.execute("DROP TABLE IF EXISTS wf_orders")
    c.execute("CREATE TABLE wf_orders (id bigint PRIMARY KEY, step text)")
    c.execute("SELECT create_distributed_table('wf_orders', 'id')")
    c.execute("SELECT concurrency.create_queue('wf_local')")
    fresh_distributed_queue(c, "wf_dist", 4, max_attempts=1)


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


def claim_on(conn, tid):
    """Claims from node `conn` until task `tid` is claimed (a distributed claim visits one shard at a time); its
    lease token. Tasks claimed on the way are handed back."""
    for _ in range(64):
        rows = conn.execute("SELECT task_id, lease_token FROM concurrency.dequeue('wf_dist', 4)").fetchall()
        token = None
        for task_id, lease in rows:
            if task_id == tid:
                token = lease
            else:
                conn.execute("SELECT concurrency.release('wf_dist', %s, %s)", (task_id, lease))
        if token is not None:
            return token
    raise AssertionError(f"task {tid} was not claimed")


def test_distributed_steps():
    c = connect(COORDINATOR)
    check("the event tables are distributed by the event's name once a queue is distributed",
          c.execute("SELECT logicalrelid::text, column_to_column_name(logicalrelid, partkey) FROM pg_dist_partition "
                    "WHERE logicalrelid::text IN ('concurrency.event', 'concurrency.event_wait') ORDER BY 1").fetchall()
          == [("concurrency.event", "name"), ("concurrency.event_wait", "event")])
    for node in NODES:
        n = connect(node)
        tid = scalar(n, "SELECT concurrency.enqueue('wf_dist', '{}')")
        tok = claim_on(n, tid)
        # from each node, the task's steps on its shard, wherever that is
        other = connect(WORKER2 if node != WORKER2 else WORKER1)
        other.execute("SELECT concurrency.record_step('wf_dist', %s, %s, 'charge', '{\"id\": \"ch_1\"}')", (tid, tok))
        check(f"record_step / step_result from another node than the claim's ({node})",
              scalar(n, "SELECT concurrency.step_result('wf_dist', %s, %s, 'charge')", (tid, tok)) == {"id": "ch_1"})
        check("an unknown step reads NULL",
              scalar(n, "SELECT concurrency.step_result('wf_dist', %s, %s, 'nope')", (tid, tok)) is None)
        check("record_step under a lost lease: CE001",
              sqlstate_of(lambda: n.execute("SELECT concurrency.record_step('wf_dist', %s, %s, 'x', '1')",
                                            (tid, tok + 1))) == "CE001")
        t = connect(node, autocommit=False)
        t.execute("INSERT INTO wf_orders VALUES (%s, 'receipt')", (tid,))
        t.execute("SELECT concurrency.record_step('wf_dist', %s, %s, 'receipt', '2')", (tid, tok))
        t.rollback()
        check("a step rolled back with its distributed write is not recorded",
              scalar(c, "SELECT count(*) FROM wf_orders WHERE id = %s", (tid,)) == 0
              and scalar(n, "SELECT concurrency.step_result('wf_dist', %s, %s, 'receipt')", (tid, tok)) is None)
        t.execute("INSERT INTO wf_orders VALUES (%s, 'receipt')", (tid,))
        t.execute("SELECT concurrency.record_step('wf_dist', %s, %s, 'receipt', '2')", (tid, tok))
        t.commit()
        # a sleep into the past: claimable now, its steps kept
        n.execute("SELECT concurrency.sleep_task('wf_dist', %s, %s, now() - interval '1 day')", (tid, tok))
        check("the old token is fenced off after the sleep",
              sqlstate_of(lambda: n.execute("SELECT concurrency.step_result('wf_dist', %s, %s, 'charge')",
                                            (tid, tok))) == "CE001")
        tok = claim_on(n, tid)
        check("claimed again after a sleep into the past, its steps kept",
              scalar(n, "SELECT concurrency.step_result('wf_dist', %s, %s, 'receipt')", (tid, tok)) == 2)
        # a durable sleep: the lease ends, the steps stay
        n.execute("SELECT concurrency.sleep_task_for('wf_dist', %s, %s, '1 hour')", (tid, tok))
        check("sleep_task_for: the task is scheduled, without a lease",
              c.execute("SELECT state, lease_expires_at FROM concurrency.task_status('wf_dist', %s)",
                        (tid,)).fetchone() == ("scheduled", None))
        check("task_steps from every node while it sleeps",
              all([s for s, in connect(p).execute("SELECT step FROM concurrency.task_steps('wf_dist', %s)", (tid,))]
                  == ["charge", "receipt"] for p in NODES))
        c.execute("SELECT concurrency.cancel('wf_dist', ARRAY[%s]::bigint[])", (tid,))


def remote_ports(conn, sql, params=None):
    """Runs sql with citus.log_remote_commands on: the ports of the nodes its remote commands went to, and the event
    shards they name."""
    import re
    ports, shards = set(), set()

    def handler(d):
        m = re.search(r":(\d+) connectionId", d.message_detail or "")
        if m:
            ports.add(int(m.group(1)))
        shards.update(re.findall(r"event(?:_wait)?_[0-9]{5,}", d.message_primary or ""))
    conn.add_notice_handler(handler)
    conn.execute("SET citus.log_remote_commands = on")
    conn.execute("SET client_min_messages = log")
    try:
        rows = conn.execute(sql, params).fetchall()
    finally:
        conn.execute("RESET citus.log_remote_commands")
        conn.execute("RESET client_min_messages")
        conn.remove_notice_handler(handler)
    return rows, ports, shards


def test_distributed_events():
    w1, w2 = connect(WORKER1), connect(WORKER2)
    # await first (on worker 1), emit after (on worker 2)
    tid = scalar(w1, "SELECT concurrency.enqueue('wf_dist', '{}')")
    tok = claim_on(w1, tid)
    check("await_event before the emit: waiting",
          scalar(w1, "SELECT status FROM concurrency.await_event('wf_dist', %s, %s, 'order-1-reply')", (tid, tok))
          == "waiting")
    check("the parked task has no lease",
          scalar(w2, "SELECT state FROM concurrency.task_status('wf_dist', %s)", (tid,)) == "scheduled")
    rows, ports, shards = remote_ports(w2, "SELECT concurrency.emit_event('order-1-reply', '{\"ok\": 1}')")
    check("the emit on another node wakes the parked task", rows == [(1,)], rows)
    check("the emit goes to the task's node (worker 1, where it was enqueued) and not through the coordinator",
          ports == {WORKER1}, ports)
    check("the emit's statements on the events name one shard of each event table",
          len({s.rsplit("_", 1)[1] for s in shards}) <= 2 and len(shards) <= 2, shards)
    check("the task is ready again", scalar(w1, "SELECT state FROM concurrency.task_status('wf_dist', %s)", (tid,)) == "ready")
    tok = claim_on(w2, tid)
    check("the await made again receives the payload",
          w2.execute("SELECT status, payload FROM concurrency.await_event('wf_dist', %s, %s, 'order-1-reply')",
                     (tid, tok)).fetchone() == ("received", {"ok": 1}))
    check("the payload is the event's step",
          scalar(w1, "SELECT concurrency.step_result('wf_dist', %s, %s, 'event:order-1-reply')", (tid, tok)) == {"ok": 1})
    check("no wait is left", scalar(connect(COORDINATOR), "SELECT count(*) FROM concurrency.event_wait") == 0)
    w2.execute("SELECT concurrency.complete('wf_dist', %s, %s)", (tid, tok))
    # emit first (on the coordinator), await after (on worker 2)
    connect(COORDINATOR).execute("SELECT concurrency.emit_event('order-2-reply', '\"yes\"')")
    tid = scalar(w2, "SELECT concurrency.enqueue('wf_dist', '{}')")
    tok = claim_on(w2, tid)
    check("an event emitted before the await is taken by it",
          w2.execute("SELECT status, payload FROM concurrency.await_event('wf_dist', %s, %s, 'order-2-reply')",
                     (tid, tok)).fetchone() == ("received", "yes"))
    # an await that times out
    check("await_event with a timeout: waiting",
          scalar(w2, "SELECT status FROM concurrency.await_event('wf_dist', %s, %s, 'never', '1 ms')", (tid, tok))
          == "waiting")
    tok = claim_on(w1, tid)
    check("claimed again after the timeout: timed_out",
          scalar(w1, "SELECT status FROM concurrency.await_event('wf_dist', %s, %s, 'never')", (tid, tok))
          == "timed_out")
    check("bad input: an empty event name (22023), nothing changed",
          sqlstate_of(lambda: w1.execute("SELECT concurrency.emit_event('')")) == "22023"
          and scalar(w1, "SELECT state FROM concurrency.task_status('wf_dist', %s)", (tid,)) == "leased")
    w1.execute("SELECT concurrency.complete('wf_dist', %s, %s)", (tid, tok))


def test_distributed_await_task():
    w1, w2 = connect(WORKER1), connect(WORKER2)
    tid = scalar(w1, "SELECT concurrency.enqueue('wf_dist', '{}')")
    tok = claim_on(w1, tid)
    out = {}

    def wait():
        out["row"] = connect(WORKER2).execute(
            "SELECT state, result FROM concurrency.await_task('wf_dist', %s, wait => '60 s')", (tid,)).fetchone()
    t = threading.Thread(target=wait)
    t.start()
    asleep = "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Extension' AND query LIKE '%%await_task%%'"
    check("await_task waits on the task's shard's node",
          wait_until(lambda: sum(scalar(connect(p), asleep) for p in NODES) > 0))
    check("not ended yet", "row" not in out)
    w1.execute("SELECT concurrency.complete('wf_dist', %s, %s, '{\"shipped\": true}')", (tid, tok))
    t.join(60)
    check("await_task from another node returns the end and result", out.get("row") == ("done", {"shipped": True}),
          out)
    check("await_task of an id that names no shard: no row",
          w2.execute("SELECT * FROM concurrency.await_task('wf_dist', 1023)").fetchall() == [])


def test_distributed_finally_children():
    c, w1 = connect(COORDINATOR), connect(WORKER1)
    graph = json.dumps([{"ref": "a", "payload": {}}, {"ref": "b", "payload": {}},
                        {"ref": "summary", "payload": {}, "after_ends": ["a", "b"]}])
    ids = dict(c.execute("SELECT ref, task_id FROM concurrency.enqueue_graph('wf_dist', %s::jsonb)",
                         (graph,)).fetchall())
    check("a batch with a finally-child on a distributed queue: it waits for both",
          scalar(w1, "SELECT parents_open FROM concurrency.task_status('wf_dist', %s)", (ids["summary"],)) == 2)
    leases = {}

    def claim(wanted):
        for _ in range(20):
            for node in NODES:
                leases.update(connect(node).execute(
                    "SELECT task_id, lease_token FROM concurrency.dequeue('wf_dist', 10)").fetchall())
            if set(wanted) <= set(leases):
                return
    claim([ids["a"], ids["b"]])
    w1.execute("SELECT concurrency.fail('wf_dist', %s, %s, 'no')", (ids["a"], leases[ids["a"]]))
    w1.execute("SELECT concurrency.complete('wf_dist', %s, %s, '{\"b\": 1}')", (ids["b"], leases[ids["b"]]))
    outcomes = connect(WORKER2).execute("SELECT task_id, state, result, last_error FROM "
                                        "concurrency.parent_outcomes('wf_dist', %s) ORDER BY task_id",
                                        (ids["summary"],)).fetchall()
    check("one parent dead, the other done (on worker node 1): the finally-child is ready",
          scalar(c, "SELECT state FROM concurrency.task_status('wf_dist', %s)", (ids["summary"],)) == "ready")
    check("parent_outcomes on worker node 2: dead with its error, done with its result",
          outcomes == sorted([(ids["a"], "dead", None, "no"), (ids["b"], "done", {"b": 1}, None)]), repr(outcomes))
    claim([ids["summary"]])
    c.execute("SELECT concurrency.complete('wf_dist', %s, %s)", (ids["summary"], leases[ids["summary"]]))


def test_python_runtime_on_a_worker_node():
    from concurrency_ext import Worker, await_task, emit_event, enqueue
    dsn = f"host=127.0.0.1 port={WORKER1} user=postgres dbname=postgres"
    w1 = connect(WORKER1)
    runs = []

    def handler(task, conn):
        runs.append(task.id)
        charged = task.step("charge", lambda: runs.append("charge") or {"charge": "ch_9"})
        reply = task.wait_for_event(f"py-reply-{task.id}")
        return {"charged": charged, "reply": reply}

    tid = enqueue(w1, "wf_dist", {"order": 9})

    def state_after_run(want):
        Worker(dsn, "wf_dist", handler).run(drain=True)
        return scalar(w1, "SELECT state FROM concurrency.task_status('wf_dist', %s)", (tid,)) == want
    check("the Python runtime's workflow parks on a worker node", wait_until(lambda: state_after_run("scheduled")))
    emit_event(connect(WORKER2), f"py-reply-{tid}", {"yes": True})
    check("the emit from the other worker node lets it finish", wait_until(lambda: state_after_run("done")))
    end = await_task(connect(WORKER2), "wf_dist", tid, timeout=30)
    check("its result, the step run once", tuple(end)[:2] == ("done", {"charged": {"charge": "ch_9"},
                                                                         "reply": {"yes": True}})
          and runs.count("charge") == 1 and runs.count(tid) == 2, (end, runs))


def test_distributed_max_leased():
    c, w1 = connect(COORDINATOR), connect(WORKER1)
    fresh_distributed_queue(c, "wf_slots", 4, max_leased=1)
    tid = scalar(c, "SELECT concurrency.enqueue('wf_slots', '{}')")
    tok = scalar(c, "SELECT lease_token FROM concurrency.dequeue('wf_slots')")
    check("max_leased: a step from a worker node is refused (0A000: the slots are the coordinator's), "
          "nothing recorded",
          sqlstate_of(lambda: w1.execute("SELECT concurrency.record_step('wf_slots', %s, %s, 's', '1')",
                                         (tid, tok))) == "0A000"
          and scalar(c, "SELECT count(*) FROM concurrency.task_steps('wf_slots', %s)", (tid,)) == 0)
    c.execute("SELECT concurrency.record_step('wf_slots', %s, %s, 's', '1')", (tid, tok))
    check("on the coordinator the workflow runs: a step, then the task parks",
          scalar(c, "SELECT status FROM concurrency.await_event('wf_slots', %s, %s, 'slots-reply')", (tid, tok))
          == "waiting")
    check("the emit from a worker node wakes it", scalar(w1, "SELECT concurrency.emit_event('slots-reply', '1')") == 1)
    c.execute("SELECT concurrency.drop_queue('wf_slots')")


def test_local_queue_event_from_a_worker_node():
    c, w1 = connect(COORDINATOR), connect(WORKER1)
    tid = scalar(c, "SELECT concurrency.enqueue('wf_local', '{}')")
    tok = scalar(c, "SELECT lease_token FROM concurrency.dequeue('wf_local')")
    c.execute("SELECT * FROM concurrency.await_event('wf_local', %s, %s, 'local-reply')", (tid, tok))
    check("an emit on a worker node leaves the wait of a queue of the coordinator alone",
          scalar(w1, "SELECT concurrency.emit_event('local-reply', '1')") == 0
          and scalar(c, "SELECT count(*) FROM concurrency.event_wait WHERE event = 'local-reply'") == 1
          and scalar(c, "SELECT state FROM concurrency.task_status('wf_local', %s)", (tid,)) == "scheduled")
    check("an emit on the coordinator wakes it",
          scalar(c, "SELECT concurrency.emit_event('local-reply', '2')") == 1
          and scalar(c, "SELECT count(*) FROM concurrency.event_wait WHERE event = 'local-reply'") == 0)
    tok = scalar(c, "SELECT lease_token FROM concurrency.dequeue('wf_local')")
    check("with the payload of that emit",
          c.execute("SELECT status, payload FROM concurrency.await_event('wf_local', %s, %s, 'local-reply')",
                    (tid, tok)).fetchone() == ("received", 2))
    c.execute("SELECT concurrency.complete('wf_local', %s, %s)", (tid, tok))


def test_drop():
    c = connect(COORDINATOR)
    c.execute("SELECT concurrency.drop_queue('wf_local'); SELECT concurrency.drop_queue('wf_dist')")
    c.execute("DROP TABLE wf_orders")
    c.execute("DELETE FROM concurrency.event")


if __name__ == "__main__":
    setup()
    run([test_local_queue_with_distributed_writes, test_distributed_steps, test_distributed_events,
         test_distributed_await_task, test_distributed_finally_children, test_python_runtime_on_a_worker_node,
         test_distributed_max_leased, test_local_queue_event_from_a_worker_node, test_drop])
