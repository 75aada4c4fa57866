#!/usr/bin/env python3
"""Dependencies between tasks in different shards of a distributed queue (coordinator + 2 workers).

A task may have parents in any shards, on any nodes, and a key of any shard: its edges are in both rows, and what one
end must tell the other (a child enqueued, a parent done, dead or cancelled, a child ended) travels in the same
transaction from the node that made the call. Checked here, with parents and children placed on shards of both worker
nodes by their concurrency keys and the calls made from every node: a fan-in child of parents on two nodes waits for
both and is ready when the last completes; parent_results from any node; a parent done before counts, a dead one
cancels; cancellation and death cross nodes through generations; enqueue_batch and enqueue_graph after parents on two
shards; an unknown parent on another node and a rolled-back enqueue change nothing; a done parent is kept until its
children on other shards ended; parents on two nodes completed at once by two workers leave no child waiting;
finally-children (enqueue_graph's after_ends) of parents in other shards are released by each parent's end, done, dead
or cancelled (before the graph too), their parents' outcomes read from every node, parents ending at once on two nodes
leaving none waiting; and chains across nodes drained while the backends carrying routed calls are killed run each
task once, in order.
"""
import json
import threading
import time

from citus_lib import (COORDINATOR, NODES, WORKER1, WORKER2, check, connect, error_of, fresh_distributed_queue,
                       kill_worker_backends, start_workers, run, scalar, wait_until)

SHARDS = 4


def positions_of(c, queue):
    """{port: [positions of the queue's shards on that node]} for the worker nodes."""
    rows = c.execute(
        "SELECT n.nodeport, s.pos FROM (SELECT shardid, row_number() OVER (ORDER BY shardid) - 1 AS pos"
        "                                 FROM pg_dist_shard WHERE logicalrelid = %s::regclass) s"
        "  JOIN pg_dist_placement p USING (shardid) JOIN pg_dist_node n USING (groupid) ORDER BY s.pos",
        (f"concurrency.q_{queue}",)).fetchall()
    placed = {}
    for port, pos in rows:
        placed.setdefault(port, []).append(pos)
    return placed


_keys = {}


def key_at(c, position):
    """A concurrency key whose tasks go to the shard at `position`."""
    if not _keys:
        for k, pos in c.execute("SELECT k, concurrency_internal.distributed_key_position(%s, k)"
                                "  FROM (SELECT 'k' || i AS k FROM generate_series(0, 99) AS i) AS s",
                                (SHARDS,)).fetchall():
            _keys.setdefault(pos, k)
    return _keys[position]


class Queue:
    """A fresh distributed queue, and helpers that place tasks on its shards."""

    def __init__(self, name, **settings):
        self.c = connect(COORDINATOR)
        fresh_distributed_queue(self.c, name, SHARDS, **settings)
        self.name = name
        placed = positions_of(self.c, name)
        self.w1 = placed[WORKER1]  # positions on worker node 1
        self.w2 = placed[WORKER2]

    def task(self, position, node=COORDINATOR, after=None, payload="{}"):
        """A task enqueued from `node` into the shard at `position` (by its key), after `after`."""
        return scalar(connect(node), "SELECT concurrency.enqueue(%s, %s, concurrency_key => %s, after => %s::bigint[])",
                      (self.name, payload, key_at(self.c, position), after))

    def status(self, tid, node=COORDINATOR):
        return connect(node).execute("SELECT state, parents_open FROM concurrency.task_status(%s, %s)",
                                     (self.name, tid)).fetchone()

    def leased_parent_of_remote_child(self):
        """A parent on worker node 1, leased, and its child waiting on worker node 2: (parent, child, token)."""
        parent = self.task(self.w1[0])
        child = self.task(self.w2[0], after=[parent])
        return parent, child, self.claim([parent])[parent]

    def claim(self, wanted):
        """Claims until every task of `wanted` is leased: {task_id: lease_token}."""
        got = {}
        for _ in range(20):
            for node in (WORKER1, WORKER2):
                for tid, token in connect(node).execute("SELECT task_id, lease_token FROM concurrency.dequeue(%s, 50)",
                                                        (self.name,)).fetchall():
                    got[tid] = token
            if set(wanted) <= set(got):
                break
        return got


def test_fan_in_across_nodes():
    q = Queue("xf")
    c = q.c
    a = q.task(q.w1[0], WORKER2, payload='{"p": "a"}')
    b = q.task(q.w2[0], WORKER1, payload='{"p": "b"}')
    child = scalar(c, "SELECT concurrency.enqueue('xf', '{}', after => ARRAY[%s, %s]::bigint[])", (a, b))
    check("a child of parents on two worker nodes, enqueued on the coordinator: in the first parent's shard",
          child & 1023 == a & 1023, repr((a, b, child)))
    keyed = q.task(q.w2[1], WORKER1, after=[a, b])
    check("a child with a key of a third shard: in its key's shard", keyed & 1023 == q.w2[1], repr(keyed))
    for node in NODES:
        check(f"both wait for their two parents (task_status on {node})",
              [q.status(t, node) for t in (child, keyed)] == [("waiting", 2)] * 2)
    rows = c.execute("SELECT id, children FROM concurrency.q_xf WHERE id = ANY (%s) ORDER BY id", ([a, b],)).fetchall()
    check("each parent's row names both children", all(sorted(r[1]) == sorted([child, keyed]) for r in rows), repr(rows))
    leases = q.claim([a, b])
    check("only the parents are claimable", sorted(leases) == sorted([a, b]), repr(leases))
    connect(WORKER1).execute("SELECT concurrency.complete('xf', %s, %s, '{\"r\": \"b\"}')", (b, leases[b]))
    check("one parent done on worker node 2 (completed from worker node 1): the children wait for one",
          [q.status(t) for t in (child, keyed)] == [("waiting", 1)] * 2)
    connect(WORKER2).execute("SELECT concurrency.complete('xf', %s, %s, '{\"r\": \"a\"}')", (a, leases[a]))
    check("the other done on worker node 1 (completed from worker node 2): both children ready",
          [q.status(t)[0] for t in (child, keyed)] == ["ready"] * 2)
    for node in NODES:
        results = connect(node).execute("SELECT task_id, result FROM concurrency.parent_results('xf', %s)",
                                        (keyed,)).fetchall()
        check(f"parent_results on {node}: both parents' results", results == sorted([(a, {"r": "a"}), (b, {"r": "b"})]),
              repr(results))
    c.execute("SELECT concurrency.drop_queue('xf')")


def test_ends_cross_nodes():
    q = Queue("xe", max_attempts=1)
    c = q.c
    root = q.task(q.w1[0])
    mid = q.task(q.w2[0], after=[root])
    leaf = q.task(q.w1[1], WORKER2, after=[mid])
    connect(WORKER2).execute("SELECT concurrency.cancel('xe', ARRAY[%s]::bigint[])", (root,))
    ended = c.execute("SELECT state, last_error FROM concurrency.q_xe WHERE id = ANY (%s) ORDER BY id",
                      ([mid, leaf],)).fetchall()
    check("a cancelled parent cancels its descendants on the other node and back, naming it",
          ended == [("cancelled", f'parent task {root} of queue "xe" ended cancelled')] * 2, repr(ended))

    parent = q.task(q.w2[1])
    child = q.task(q.w1[0], after=[parent])
    grandchild = q.task(q.w2[0], after=[child])
    leases = q.claim([parent])
    connect(WORKER1).execute("SELECT concurrency.fail('xe', %s, %s, 'boom')", (parent, leases[parent]))
    ended = c.execute("SELECT state, last_error FROM concurrency.q_xe WHERE id = ANY (%s) ORDER BY id",
                      ([child, grandchild],)).fetchall()
    check("a parent that fails for good cancels its descendants on other shards",
          ended == [("cancelled", f'parent task {parent} of queue "xe" ended dead')] * 2, repr(ended))

    dead_before = parent
    late = q.task(q.w1[1], after=[dead_before])
    check("a child enqueued after a dead parent of another node is cancelled at once",
          scalar(c, "SELECT state FROM concurrency.q_xe WHERE id = %s", (late,)) == "cancelled")
    c.execute("SELECT concurrency.drop_queue('xe')")

    q = Queue("xl", max_attempts=1, lease="1 second", retain="1 hour")  # the cancelled child stays
    parent, child, _ = q.leased_parent_of_remote_child()

    def reclaimed():
        connect(WORKER1).execute("SELECT * FROM concurrency.dequeue('xl')")
        return scalar(q.c, "SELECT state FROM concurrency.q_xl WHERE id = %s", (child,)) != "waiting"
    wait_until(reclaimed, timeout=20, step=0.2)
    check("a parent whose lease expires for good in a claim cancels its child on the other node",
          q.c.execute("SELECT state, last_error FROM concurrency.q_xl WHERE id = %s", (child,)).fetchone()
          == ("cancelled", f'parent task {parent} of queue "xl" ended dead'))
    q.c.execute("SELECT concurrency.drop_queue('xl')")


def test_enqueue_after_remote_parents():
    q = Queue("xa", retain="1 hour")
    c = q.c
    done = q.task(q.w2[0])
    leases = q.claim([done])
    c.execute("SELECT concurrency.complete('xa', %s, %s)", (done, leases[done]))
    open_here = q.task(q.w1[0])
    child = q.task(q.w1[0], WORKER1, after=[done, open_here])
    check("a parent on another node done before counts as done", q.status(child) == ("waiting", 1), repr(q.status(child)))

    before = scalar(c, "SELECT count(*) FROM concurrency.q_xa")
    children = scalar(c, "SELECT children FROM concurrency.q_xa WHERE id = %s", (open_here,))
    missing = (1 << 40) | q.w2[1]  # an id of a shard of worker node 2 that no task has
    e = error_of(lambda: connect(WORKER1).execute(
        "SELECT concurrency.enqueue('xa', '{}', after => ARRAY[%s, %s]::bigint[])", (open_here, missing)))
    check("a parent that does not exist on another node: 22023", e is not None and e.sqlstate == "22023", repr(e))
    w = connect(WORKER2, autocommit=False)
    w.execute("SELECT concurrency.enqueue('xa', '{}', after => ARRAY[%s, %s]::bigint[])", (open_here, done))
    w.rollback()
    check("nothing enqueued by the refused call or the rolled-back one, the parent's row as before",
          (scalar(c, "SELECT count(*) FROM concurrency.q_xa"),
           scalar(c, "SELECT children FROM concurrency.q_xa WHERE id = %s", (open_here,))) == (before, children))

    a, b = q.task(q.w1[1]), q.task(q.w2[1])
    batch = [r[0] for r in connect(WORKER2).execute(
        "SELECT concurrency.enqueue_batch('xa', ARRAY['{}', '{}', '{}']::jsonb[],"
        " concurrency_keys => ARRAY[%s, %s, NULL], after => ARRAY[%s, %s]::bigint[])",
        (key_at(c, q.w1[0]), key_at(c, q.w2[0]), a, b)).fetchall()]
    check("enqueue_batch after parents on two nodes: keyed tasks in their keys' shards, the other beside a",
          [t & 1023 for t in batch] == [q.w1[0], q.w2[0], a & 1023], repr(batch))
    outer = json.dumps([{"ref": "g1", "after": [a, b]}, {"ref": "g2", "after": ["g1"]}])
    graph = dict(connect(WORKER2).execute("SELECT ref, task_id FROM concurrency.enqueue_graph('xa', %s)",
                                          (outer,)).fetchall())
    check("enqueue_graph after parents on two nodes", [q.status(t) for t in batch + [graph["g1"]]]
          == [("waiting", 2)] * 4 and q.status(graph["g2"]) == ("waiting", 1))
    leases = q.claim([a, b])
    for t in (a, b):
        connect(WORKER1).execute("SELECT concurrency.complete('xa', %s, %s)", (t, leases[t]))
    check("both parents done: the batch and the graph's first task ready",
          [q.status(t)[0] for t in batch + [graph["g1"]]] == ["ready"] * 4)
    c.execute("SELECT concurrency.drop_queue('xa')")


def test_undelivered_messages_refuse_the_commit():
    q = Queue("xu")
    c = q.c
    parent, child, token = q.leased_parent_of_remote_child()
    shard_key = scalar(c, "SELECT shard_keys[%s] FROM concurrency.distributed_queue WHERE queue = 'xu'",
                       (q.w1[0] + 1,))
    # the queue's routed form written by hand, without the column that takes the messages back: the complete runs
    # on the parent's node, where its message to the child's node cannot be sent
    e = error_of(lambda: c.execute(
        "SELECT concurrency.complete('xu', %s, %s) FROM concurrency.q_xu WHERE shard_key = %s AND id = 0 HAVING true",
        (parent, token, shard_key)))
    check("a complete whose message to another node was not delivered fails at commit (XX000), nothing changed",
          e is not None and e.sqlstate == "XX000" and "not delivered" in str(e)
          and [q.status(t)[0] for t in (parent, child)] == ["leased", "waiting"], repr((e, q.status(parent))))
    c.execute("SELECT concurrency.drop_queue('xu')")


def test_batches_across_nodes():
    q = Queue("xb", max_attempts=1)
    c = q.c
    parents = [q.task(q.w1[0]), q.task(q.w2[0]), q.task(q.w1[1]), q.task(q.w2[1])]
    # each child in the shard after its parent's, a fan-in of all four beside the first
    kids = [q.task(q.w2[0] if p & 1023 in q.w1 else q.w1[0], after=[p]) for p in parents]
    fan_in = scalar(c, "SELECT concurrency.enqueue('xb', '{}', after => %s::bigint[])", (parents,))
    leases = q.claim(parents)
    ids = [p for p in parents]
    tokens = [leases[p] for p in parents]
    connect(WORKER1).execute("SELECT * FROM concurrency.complete_batch('xb', %s::bigint[], %s::bigint[])",
                             (ids[:2], tokens[:2]))
    c.execute("SELECT * FROM concurrency.complete_batch('xb', %s::bigint[], %s::bigint[])", (ids[2:], tokens[2:]))
    states = [q.status(t) for t in kids + [fan_in]]
    check("complete_batch of parents in four shards, from a worker node and the coordinator: every child on the "
          "other node ready, the fan-in too", states == [("ready", None)] * 5, repr(states))
    more = [q.task(q.w2[1], after=[k]) for k in kids]
    leases = q.claim(kids)
    connect(WORKER2).execute("SELECT * FROM concurrency.fail_batch('xb', %s::bigint[], %s::bigint[], 'no')",
                             (kids, [leases[k] for k in kids]))
    ended = [c.execute("SELECT state, last_error FROM concurrency.q_xb WHERE id = %s", (t,)).fetchone() for t in more]
    check("fail_batch (for good) of children in two shards, from worker node 2: each one's child on worker node 2 "
          "cancelled, naming it", ended == [("cancelled", f'parent task {k} of queue "xb" ended dead') for k in kids],
          repr(ended))
    c.execute("SELECT concurrency.drop_queue('xb')")


def test_done_parent_kept_for_remote_children():
    q = Queue("xk")
    c = q.c
    parent, child, token = q.leased_parent_of_remote_child()
    c.execute("SELECT concurrency.complete('xk', %s, %s)", (parent, token))
    c.execute("SELECT concurrency.purge('xk')")
    check("a done parent of a queue that retains nothing is kept while its child on another node lives",
          scalar(c, "SELECT state FROM concurrency.q_xk WHERE id = %s", (parent,)) == "done")
    leases = q.claim([child])
    connect(WORKER1).execute("SELECT concurrency.complete('xk', %s, %s)", (child, leases[child]))
    check("the child's end is told to its parent's row",
          scalar(c, "SELECT children FROM concurrency.q_xk WHERE id = %s", (parent,)) == [])
    c.execute("SELECT concurrency.purge('xk')")
    check("and purge deletes the parent then", scalar(c, "SELECT count(*) FROM concurrency.q_xk") == 0)
    waiting_parent = q.task(q.w2[1])
    cancelled_child = q.task(q.w1[1], after=[waiting_parent])
    c.execute("SELECT concurrency.cancel('xk', ARRAY[%s]::bigint[])", (cancelled_child,))
    check("a cancelled child is forgotten by its parent on the other node",
          scalar(c, "SELECT children FROM concurrency.q_xk WHERE id = %s", (waiting_parent,)) == [])
    c.execute("SELECT concurrency.drop_queue('xk')")


def test_concurrent_parents_on_two_nodes():
    q = Queue("xc")
    c = q.c
    pairs = []
    for i in range(30):
        a, b = q.task(q.w1[i % 2]), q.task(q.w2[i % 2])
        pairs.append((a, b, scalar(c, "SELECT concurrency.enqueue('xc', '{}', after => ARRAY[%s, %s]::bigint[])",
                                   (a, b))))
    leases = q.claim([p for a, b, _ in pairs for p in (a, b)])
    errors = []

    def complete(node, ids):
        conn = connect(node)
        for t in ids:
            try:
                conn.execute("SELECT concurrency.complete('xc', %s, %s)", (t, leases[t]))
            except Exception as e:  # noqa: BLE001 - counted
                errors.append(repr(e))
    threads = [threading.Thread(target=complete, args=(WORKER1, [b for _, b, _ in pairs])),
               threading.Thread(target=complete, args=(WORKER2, [a for a, _, _ in pairs]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check("two workers on two nodes completed every parent at once, without error", errors == [], repr(errors[:3]))
    states = c.execute("SELECT state, count(*) FROM concurrency.q_xc WHERE id = ANY (%s) GROUP BY state",
                       ([ch for _, _, ch in pairs],)).fetchall()
    check("no child left waiting: all 30 ready", states == [("ready", 30)], repr(states))
    c.execute("SELECT concurrency.drop_queue('xc')")


def outcomes_of(node, queue, tid):
    """parent_outcomes of task `tid`, read on `node`: [(task_id, state, result, last_error)] by task id."""
    return connect(node).execute("SELECT task_id, state, result, last_error FROM concurrency.parent_outcomes(%s, %s)"
                                 " ORDER BY task_id", (queue, tid)).fetchall()


def test_finally_children_across_nodes():
    q = Queue("xn", max_attempts=1)  # retains nothing: the parents are kept for their finally-child
    c = q.c
    done, dead, cancelled = q.task(q.w1[0]), q.task(q.w2[0]), q.task(q.w1[1])
    graph = json.dumps([{"ref": "callback", "payload": {"n": "callback"}, "after_ends": [done, dead, cancelled]},
                        {"ref": "ordinary", "after": [dead]}])
    ids = dict(connect(WORKER2).execute("SELECT ref, task_id FROM concurrency.enqueue_graph('xn', %s)",
                                        (graph,)).fetchall())
    callback, ordinary = ids["callback"], ids["ordinary"]
    marks = c.execute("SELECT id, after_ends FROM concurrency.q_xn WHERE id = ANY (%s) ORDER BY id",
                      ([callback, ordinary],)).fetchall()
    check("a finally-child of parents in three shards on both worker nodes, enqueued from worker node 2: in the "
          "shard of one of its parents, with its graph's other task, the mark in its row only",
          callback & 1023 in [p & 1023 for p in (done, dead, cancelled)] and ordinary & 1023 == callback & 1023
          and marks == sorted([(callback, True), (ordinary, None)]), repr((ids, marks)))
    for node in NODES:
        check(f"it waits for its three parents (task_status on {node})", q.status(callback, node) == ("waiting", 3))
    c.execute("SELECT concurrency.cancel('xn', ARRAY[%s]::bigint[])", (cancelled,))
    check("a parent on worker node 1 cancelled from the coordinator: one parent less, the finally-child not cancelled",
          q.status(callback) == ("waiting", 2), repr(q.status(callback)))
    leases = q.claim([done, dead])
    connect(WORKER2).execute("SELECT concurrency.complete('xn', %s, %s, '{\"r\": \"done\"}')",
                             (done, leases[done]))
    check("a parent on worker node 1 completed from worker node 2: one parent less",
          q.status(callback) == ("waiting", 1), repr(q.status(callback)))
    connect(WORKER1).execute("SELECT concurrency.fail('xn', %s, %s, 'boom')", (dead, leases[dead]))
    check("the last parent, on worker node 2, dead (failed from worker node 1): the finally-child is ready, its "
          "ordinary sibling cancelled naming that parent",
          q.status(callback) == ("ready", None)
          and c.execute("SELECT state, last_error FROM concurrency.q_xn WHERE id = %s", (ordinary,)).fetchone()
          == ("cancelled", f'parent task {dead} of queue "xn" ended dead'), repr(q.status(callback)))
    want = sorted([(done, "done", {"r": "done"}, None), (dead, "dead", None, "boom"),
                   (cancelled, "cancelled", None, None)])
    for node in NODES:
        got = outcomes_of(node, "xn", callback)
        check(f"parent_outcomes on {node}: each parent's end, state, result and error", got == want, repr(got))
        results = connect(node).execute("SELECT task_id, result FROM concurrency.parent_results('xn', %s)",
                                        (callback,)).fetchall()
        check(f"parent_results on {node}: the done parent's result only", results == [(done, {"r": "done"})],
              repr(results))
    c.execute("SELECT concurrency.purge('xn')")
    check("the ended parents are kept while their finally-child lives",
          scalar(c, "SELECT count(*) FROM concurrency.q_xn WHERE id = ANY (%s)", ([done, dead, cancelled],)) == 3)
    leases = q.claim([callback])
    connect(WORKER1).execute("SELECT concurrency.complete('xn', %s, %s)", (callback, leases[callback]))
    c.execute("SELECT concurrency.purge('xn')")
    left = c.execute("SELECT id, state FROM concurrency.q_xn ORDER BY id").fetchall()
    check("its end is told to the parents in other shards, and purge deletes the parents then (the dead one "
          "stays, as every dead task does)", left == [(dead, "dead")], repr(left))
    c.execute("SELECT concurrency.retry_dead('xn')")
    leases = q.claim([dead])
    c.execute("SELECT concurrency.complete('xn', %s, %s)", (dead, leases[dead]))
    # parents that ended before the graph, on other nodes, count as ended at once; an open one is waited for
    gone, still = q.task(q.w2[1]), q.task(q.w2[0])
    leases = q.claim([gone])
    c.execute("SELECT concurrency.fail('xn', %s, %s, 'early')", (gone, leases[gone]))
    late = scalar(connect(WORKER1), "SELECT task_id FROM concurrency.enqueue_graph('xn', %s)",
                  (json.dumps([{"after_ends": [gone, still]}]),))
    check("a finally-child after a parent dead before, on the other node: that one counts as ended at once",
          q.status(late) == ("waiting", 1), repr(q.status(late)))
    c.execute("SELECT concurrency.cancel('xn', ARRAY[%s]::bigint[])", (still,))
    check("and the open one's cancellation releases it, its outcomes read on the coordinator",
          q.status(late) == ("ready", None) and [(t, s) for t, s, _, _ in outcomes_of(COORDINATOR, "xn", late)]
          == sorted([(gone, "dead"), (still, "cancelled")]), repr(q.status(late)))
    now = scalar(connect(WORKER2), "SELECT task_id FROM concurrency.enqueue_graph('xn', %s)",
                 (json.dumps([{"after_ends": [still, gone]}]),))
    check("a finally-child whose parents in other shards have all ended: ready at once",
          q.status(now) == ("ready", None), repr(q.status(now)))
    c.execute("SELECT concurrency.drop_queue('xn')")


def test_finally_parents_ending_at_once():
    q = Queue("xm", max_attempts=1)
    c = q.c
    triples = []
    for i in range(20):
        a, b = q.task(q.w1[i % 2]), q.task(q.w2[i % 2])
        child = scalar(c, "SELECT task_id FROM concurrency.enqueue_graph('xm', %s)",
                       (json.dumps([{"after_ends": [a, b]}]),))
        triples.append((a, b, child))
    leases = q.claim([p for a, b, _ in triples for p in (a, b)])
    errors = []

    def end(node, sql, ids):
        conn = connect(node)
        for t in ids:
            try:
                conn.execute(sql, (t, leases[t]))
            except Exception as e:  # noqa: BLE001 - counted
                errors.append(repr(e))
    threads = [threading.Thread(target=end, args=(WORKER1, "SELECT concurrency.complete('xm', %s, %s)",
                                                  [a for a, _, _ in triples])),
               threading.Thread(target=end, args=(WORKER2, "SELECT concurrency.fail('xm', %s, %s, 'no')",
                                                  [b for _, b, _ in triples]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check("parents on two nodes completed and failed at once by two workers, without error", errors == [],
          repr(errors[:3]))
    states = c.execute("SELECT state, count(*) FROM concurrency.q_xm WHERE id = ANY (%s) GROUP BY state",
                       ([ch for _, _, ch in triples],)).fetchall()
    check("no finally-child left waiting: all 20 ready", states == [("ready", 20)], repr(states))
    c.execute("SELECT concurrency.drop_queue('xm')")


def dep_worker(stop, errors, port):
    """Claims one task at a time and completes it, its effect (the task and the time) written in the same
    transaction, until `stop`; errors (a killed connection, a lost lease) are counted and the loop goes on."""
    conn = None
    while not stop.is_set():
        try:
            if conn is None or conn.closed:
                conn = connect(port, autocommit=False)
            row = conn.execute("SELECT task_id, lease_token FROM concurrency.dequeue('xz')").fetchone()
            if row is None:
                conn.rollback()
                time.sleep(0.02)
                continue
            conn.execute("INSERT INTO xz_effects VALUES (%s, clock_timestamp())", (row[0],))
            conn.execute("SELECT concurrency.complete('xz', %s, %s)", row)
            conn.commit()
        except Exception as e:  # noqa: BLE001 - the faults are the point
            errors.append(repr(e))
            try:
                conn.close()
            except Exception:  # noqa: BLE001
                pass
            conn = None


def test_chaos_chains_across_nodes():
    """Chains whose every link is in another shard than the one before, drained by workers on every node while the
    worker nodes' backends that carry routed calls are killed: every task's effect committed once, after its
    parent's."""
    q = Queue("xz", lease="2 seconds", max_attempts=50)
    c = q.c
    c.execute("DROP TABLE IF EXISTS xz_effects")
    c.execute("CREATE TABLE xz_effects (task_id bigint, at timestamptz)")
    c.execute("SELECT create_distributed_table('xz_effects', 'task_id', colocate_with => 'none')")
    links = []  # (parent, child)
    chains, length = 40, 4
    for i in range(chains):
        prev = None
        for j in range(length):
            t = q.task((i + j) % SHARDS, (COORDINATOR, WORKER1, WORKER2)[j % 3], after=[prev] if prev else None)
            if prev:
                links.append((prev, t))
            prev = t
    total = chains * length
    stop = threading.Event()
    errors = []
    threads = start_workers(dep_worker, stop, errors)  # two connected to each node
    killed = 0
    for _ in range(6):
        time.sleep(0.4)
        for port in (WORKER1, WORKER2):
            killed += kill_worker_backends(port)
    done = wait_until(lambda: scalar(c, "SELECT count(DISTINCT task_id) FROM xz_effects") == total, timeout=120,
                      step=0.5)
    stop.set()
    for t in threads:
        t.join()
    c.execute("SELECT recover_prepared_transactions()")
    check(f"chaos: backends carrying routed calls were killed ({killed}), the clients saw errors and went on",
          killed > 0 and len(errors) > 0, repr((killed, len(errors))))
    effects = c.execute("SELECT count(*), count(DISTINCT task_id) FROM xz_effects").fetchone()
    check(f"chaos: each of the {total} tasks of chains across nodes completed exactly once", done and
          effects == (total, total), repr(effects))
    at = dict(c.execute("SELECT task_id, at FROM xz_effects").fetchall())
    late = [(p, ch) for p, ch in links if p in at and ch in at and not at[p] < at[ch]]
    check("chaos: every child ran after its parent had committed", late == [], repr(late[:3]))
    left = c.execute("SELECT state, count(*) FROM concurrency.q_xz WHERE state <> 'done' GROUP BY state").fetchall()
    check("chaos: no task left waiting or ready", left == [], repr(left))
    c.execute("DROP TABLE xz_effects")
    c.execute("SELECT concurrency.drop_queue('xz')")


if __name__ == "__main__":
    connect(COORDINATOR).execute("CREATE EXTENSION IF NOT EXISTS concurrency_ext")
    run([test_fan_in_across_nodes, test_ends_cross_nodes, test_enqueue_after_remote_parents,
         test_undelivered_messages_refuse_the_commit,
         test_batches_across_nodes,
         test_done_parent_kept_for_remote_children, test_concurrent_parents_on_two_nodes,
         test_finally_children_across_nodes, test_finally_parents_ending_at_once,
         test_chaos_chains_across_nodes])
