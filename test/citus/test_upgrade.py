#!/usr/bin/env python3
"""The update from the last released version (FROM) on a Citus cluster, with live tasks (runs last: it recreates the extension).

FROM's install script (scripts/citus-check.sh writes it from the last release
commit of src/sql/RELEASES and names it in CITUS_UPGRADE_FROM) is installed next to the current module, as a
package update leaves it. Under FROM a local queue and a distributed queue
get tasks in every state, then ALTER EXTENSION concurrency_ext UPDATE runs on
the coordinator (Citus runs it on every node). Checked: no task lost or
changed, the distributed queue known on every node, the event tables
distributed and a lease taken under FROM running a workflow from the worker
nodes, a finally-child enqueued after the update released by the ends of tasks
made under FROM, the leases taken under FROM completed with their tokens from a worker node, new ids and tokens made
on the worker nodes unequal to every number FROM made, and both queues drain.
"""
import os
import re
from pathlib import Path

from citus_lib import COORDINATOR, NODES, check, connect, error_of, run, scalar

FROM = os.environ.get("CITUS_UPGRADE_FROM", "0.3.0")
CURRENT = re.search(r"default_version = '([^']+)'",
                    (Path(__file__).resolve().parents[2] / "concurrency_ext.control").read_text()).group(1)
STATES = "SELECT id, state, attempt, lease_token FROM concurrency.{} ORDER BY id"


def recreate(c, version=None):
    c.execute("DROP EXTENSION IF EXISTS concurrency_ext CASCADE")
    c.execute("CREATE EXTENSION concurrency_ext" + (f" VERSION '{version}'" if version else ""))


def test_update_with_live_tasks():
    c = connect(COORDINATOR)
    recreate(c, FROM)
    check(f"{FROM} is installed on every node",
          all(scalar(connect(p), "SELECT extversion FROM pg_extension WHERE extname = 'concurrency_ext'") == FROM
              for p in NODES))
    # the old version's numbers from 4097 on: a worker node of group 1 whose sequence
    # were not moved would make the id (4 * 1024 + 1) * 1024 + p of its 4th
    # number, which is the first old task's id 4097 * 1024 + p
    c.execute("SELECT setval('concurrency.lease_token', 4096)")
    c.execute("SELECT concurrency.create_queue('up_local', lease => '1 hour')")
    c.execute("SELECT concurrency.create_queue('up_dist', lease => '1 hour', max_attempts => 3)")
    c.execute("SELECT concurrency.distribute_queue('up_dist', 4)")
    held = {}
    for q in ("up_local", "up_dist"):
        c.execute("SELECT concurrency.enqueue_batch(%s, array_fill('{}'::jsonb, ARRAY[40]))", (q,))
        for _ in range(16):  # a distributed claim visits one shard at a time
            for tid, token in c.execute("SELECT task_id, lease_token FROM concurrency.dequeue(%s, 10)",
                                        (q,)).fetchall():
                held[(q, tid)] = token
            if sum(1 for k in held if k[0] == q) >= 10:
                break
        mine = [(tid, tok) for (qq, tid), tok in held.items() if qq == q]
        c.execute("SELECT concurrency.complete(%s, %s, %s)", (q, mine[0][0], mine[0][1]))
        c.execute("SELECT concurrency.fail(%s, %s, %s, 'boom')", (q, mine[1][0], mine[1][1]))
        del held[(q, mine[0][0])], held[(q, mine[1][0])]
    before = {q: c.execute(STATES.format("q_" + q)).fetchall() for q in ("up_local", "up_dist")}
    old_ids = {r[0] for rows in before.values() for r in rows}
    old_tokens = {r[3] for rows in before.values() for r in rows if r[3] is not None}
    last = scalar(c, "SELECT last_value FROM concurrency.lease_token")

    c.execute("ALTER EXTENSION concurrency_ext UPDATE")
    check("the update reached every node",
          all(scalar(connect(p), "SELECT extversion FROM pg_extension WHERE extname = 'concurrency_ext'") == CURRENT
              for p in NODES))
    after = {q: c.execute(STATES.format("q_" + q)).fetchall() for q in ("up_local", "up_dist")}
    check("no task lost or changed by the update", after == before,
          f"{sum(map(len, before.values()))} before, {sum(map(len, after.values()))} after")
    w = connect(NODES[1])
    check("the distributed queue is known on a worker node after the update",
          scalar(w, "SELECT count(*) FROM concurrency.distributed_queue WHERE queue = 'up_dist'") == 1
          and scalar(w, "SELECT count(*) FROM concurrency.queue WHERE name = 'up_dist'") == 1)
    if FROM == "0.2.0":  # the update to 0.3.0 moved each worker node's sequence past the coordinator's
        check("every worker node's lease_token is past the coordinator's",
              all(scalar(connect(p), "SELECT last_value FROM concurrency.lease_token") >= last for p in NODES[1:]))
    check("the update distributed the event tables by event name (the queue was distributed before)",
          c.execute("SELECT logicalrelid::text FROM pg_dist_partition WHERE logicalrelid::text IN "
                    "('concurrency.event', 'concurrency.event_wait') ORDER BY 1").fetchall()
          == [("concurrency.event",), ("concurrency.event_wait",)])
    # a lease taken before the update runs a workflow after it, from the worker nodes
    (wq, wtid), wtok = next(((k, t) for k, t in held.items() if k[0] == "up_dist"))
    del held[(wq, wtid)]
    w2 = connect(NODES[2])
    w.execute("SELECT concurrency.record_step('up_dist', %s, %s, 'charge', '1')", (wtid, wtok))
    check("a step of a task leased before the update, recorded and read on two worker nodes",
          scalar(w2, "SELECT concurrency.step_result('up_dist', %s, %s, 'charge')", (wtid, wtok)) == 1)
    check("it awaits an event on one worker node",
          scalar(w, "SELECT status FROM concurrency.await_event('up_dist', %s, %s, 'up-reply')", (wtid, wtok))
          == "waiting")
    check("an emit on the other wakes it", scalar(w2, "SELECT concurrency.emit_event('up-reply', '2')") == 1)
    # a finally-child enqueued after the update, on a worker node, of a task leased before it and one ready
    (_, p1), t1 = next(((k, t) for k, t in held.items() if k[0] == "up_dist"))
    del held[("up_dist", p1)]
    p2 = scalar(c, "SELECT id FROM concurrency.q_up_dist WHERE state = 'ready' ORDER BY id LIMIT 1")
    fin = scalar(w2, "SELECT task_id FROM concurrency.enqueue_graph('up_dist', %s::jsonb)",
                 (f'[{{"after_ends": [{p1}, {p2}]}}]',))
    w.execute("SELECT concurrency.complete('up_dist', %s, %s, '\"ok\"')", (p1, t1))
    c.execute("SELECT concurrency.cancel('up_dist', ARRAY[%s]::bigint[])", (p2,))
    check("a finally-child of tasks made before the update is released by their ends (done, cancelled), "
          "parent_outcomes read on a worker node",
          scalar(c, "SELECT state FROM concurrency.task_status('up_dist', %s)", (fin,)) == "ready"
          and w2.execute("SELECT task_id, state, result FROM concurrency.parent_outcomes('up_dist', %s) "
                         "ORDER BY task_id", (fin,)).fetchall()
          == sorted([(p1, "done", "ok"), (p2, "cancelled", None)]))
    c.execute("SELECT concurrency.cancel('up_dist', ARRAY[%s]::bigint[])", (fin,))
    c.execute("SELECT concurrency.purge('up_dist')")
    check("its parents, kept for it, are purged once it has ended",
          scalar(c, "SELECT count(*) FROM concurrency.q_up_dist WHERE id = ANY (%s)", ([p1, p2],)) == 0)
    # leases taken before the update, completed after it: the distributed ones on whichever node
    done = 0
    for (q, tid), token in held.items():
        node = NODES[1 + tid % 2] if q == "up_dist" else COORDINATOR
        connect(node).execute("SELECT concurrency.complete(%s, %s, %s)", (q, tid, token))
        done += 1
    check("every lease taken before the update completes with its token", done == len(held))
    new_ids, new_tokens = set(), set()
    for p in NODES:
        k = connect(p)
        new_ids |= {r[0] for r in k.execute(
            "SELECT * FROM concurrency.enqueue_batch('up_dist', array_fill('{}'::jsonb, ARRAY[20]))").fetchall()}
        new_tokens |= {r[0] for r in k.execute("SELECT lease_token FROM concurrency.dequeue('up_dist', 20)").fetchall()}
    check("new ids made on every node equal no id made before the update", len(new_ids) == 60 and not new_ids & old_ids,
          f"{len(new_ids)} new, {len(new_ids & old_ids)} shared")
    check("new lease tokens equal no token made before the update", new_tokens and not new_tokens & old_tokens,
          repr(new_tokens & old_tokens))
    for q in ("up_local", "up_dist"):
        for _ in range(40):
            rows = c.execute("SELECT concurrency.complete(%s, t.task_id, t.lease_token) "
                             "FROM concurrency.dequeue(%s, 50, lease => '1 hour') t", (q, q)).fetchall()
            if not rows:
                break
    left = [c.execute(f"SELECT id, state FROM concurrency.q_{q} WHERE state NOT IN ('leased', 'scheduled')").fetchall()
            for q in ("up_local", "up_dist")]
    check("the ready and failed tasks made before the update drain after it", left == [[], []], repr(left))
    # the queues made under FROM keep the names FROM gave their indexes (table first), on every node (a worker
    # node's shards are named after them); a queue whose table would have one of them is refused, naming its queue
    if FROM != CURRENT:
        check("the queues made before the update keep their index names",
              all(scalar(connect(p), "SELECT to_regclass('concurrency.q_up_dist_ready') IS NOT NULL") for p in NODES)
              and scalar(c, "SELECT to_regclass('concurrency.q_up_local_ready') IS NOT NULL"))
        err = error_of(lambda: c.execute("SELECT concurrency.create_queue('up_dist_ready')"))
        check("create_queue of a name taken by such an index: 42P07 naming the queue",
              err is not None and err.sqlstate == "42P07" and '"up_dist"' in (err.diag.message_detail or ""), repr(err))
    recreate(c)


if __name__ == "__main__":
    run([test_update_with_live_tasks])
