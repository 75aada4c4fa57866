#!/usr/bin/env python3
"""Every node of a Citus cluster serves a distributed queue (coordinator + 2 workers).

A producer or a worker may connect to any node. Checked here: the queue's
catalog (settings, shard keys, permissions) is on every node and follows
create, alter, grant, revoke and drop; those are refused on a worker node;
on a worker node enqueue, dequeue, heartbeat, complete, fail, the batch forms
and task_status act on the node's own shards without any remote command;
calls about another node's task are routed to it, fenced as anywhere; a
worker with no local work takes from other nodes' shards; task ids and lease
tokens are unique across nodes; a pause (on the coordinator) stops claims on
every node and a resume lets a waiting worker on another node go on; and workers on every node drain a queue with
each task's effect committed exactly once.
"""
import json
import threading
import time

import psycopg

from citus_lib import (COORDINATOR, fresh_distributed_queue, NODES, WORKER1, WORKER2, check, connect, error_of, remote_shards, routed, run, scalar,
                       sqlstate_of, wait_until)

SHARDS = 4


def group_of(port):
    return scalar(connect(port), "SELECT groupid FROM pg_dist_local_group")


def local_positions(c, queue):
    """The positions (0..SHARDS-1) of the queue's shards placed on the node of connection c."""
    return {r[0] for r in c.execute(
        "SELECT s.pos FROM (SELECT shardid, row_number() OVER (ORDER BY shardid) - 1 AS pos FROM pg_dist_shard "
        "                    WHERE logicalrelid = %s::regclass) s "
        "  JOIN pg_dist_placement p USING (shardid) "
        " WHERE p.groupid = (SELECT groupid FROM pg_dist_local_group)",
        (f"concurrency.q_{queue}",)).fetchall()}


def fresh_queue(name, **settings):
    c = connect(COORDINATOR)
    fresh_distributed_queue(c, name, SHARDS, **settings)
    return c


def catalog(port, queue):
    c = connect(port)
    q = c.execute("SELECT lease, max_attempts FROM concurrency.queue WHERE name = %s", (queue,)).fetchone()
    d = scalar(c, "SELECT shard_keys FROM concurrency.distributed_queue WHERE queue = %s", (queue,))
    p = sorted(c.execute("SELECT grantee::text, permission FROM concurrency.queue_permission WHERE queue = %s",
                         (queue,)).fetchall())
    return q, d, p


def test_catalog_on_every_node():
    c = fresh_queue("nq", lease="7 seconds")
    c.execute("DROP ROLE IF EXISTS nodes_worker")
    c.execute("CREATE ROLE nodes_worker LOGIN")
    views = [catalog(p, "nq") for p in NODES]
    check("create: the queue's settings and shard keys are on every node",
          all(v[0] is not None and str(v[0][0]) == "0:00:07" and v[1] is not None for v in views)
          and views[1] == views[0] and views[2] == views[0], repr(views))
    c.execute("SELECT concurrency.alter_queue('nq', max_attempts => 9)")
    c.execute("SELECT concurrency.grant_queue('nq', 'nodes_worker', ARRAY['work'])")
    views = [catalog(p, "nq") for p in NODES]
    check("alter and grant reach every node", all(v[0][1] == 9 and ("nodes_worker", "work") in v[2] for v in views),
          repr(views))
    # the grant is what lets the role work on a worker node
    w = connect(WORKER1, user="nodes_worker")
    check("a role granted work may claim on a worker node",
          sqlstate_of(lambda: w.execute("SELECT * FROM concurrency.dequeue('nq')").fetchall()) is None)
    c.execute("SELECT concurrency.revoke_queue('nq', 'nodes_worker', ARRAY['work'])")
    views = [catalog(p, "nq") for p in NODES]
    check("revoke reaches every node", all(("nodes_worker", "work") not in v[2] for v in views), repr(views))
    check("after the revoke the worker node refuses it: 42501",
          sqlstate_of(lambda: w.execute("SELECT * FROM concurrency.dequeue('nq')").fetchall()) == "42501")
    w.close()
    for what, sql in (("alter_queue", "SELECT concurrency.alter_queue('nq', max_attempts => 3)"),
                      ("drop_queue", "SELECT concurrency.drop_queue('nq')"),
                      ("grant_queue", "SELECT concurrency.grant_queue('nq', 'nodes_worker', ARRAY['read'])"),
                      ("revoke_queue", "SELECT concurrency.revoke_queue('nq', 'nodes_worker', ARRAY['work'])")):
        e = error_of(lambda: connect(WORKER2).execute(sql))
        check(f"{what} on a worker node: 0A000, the hint names the coordinator",
              e is not None and e.sqlstate == "0A000" and "coordinator" in (e.diag.message_hint or ""), repr(e))
    views = [catalog(p, "nq") for p in NODES]
    check("and nothing changed on any node", all(v[0][1] == 9 for v in views), repr(views))
    c.execute("SELECT concurrency.drop_queue('nq')")
    check("drop removes the queue from every node",
          all(scalar(connect(p), "SELECT count(*) FROM concurrency.queue WHERE name = 'nq'") == 0 for p in NODES))
    c.execute("DROP ROLE nodes_worker")


def test_worker_node_serves_its_shards():
    fresh_queue("nl", lease="30 seconds", max_attempts=3)
    w = connect(WORKER1)
    group = group_of(WORKER1)
    here = local_positions(w, "nl")
    check("the worker node holds shards of the queue", len(here) > 0, repr(here))
    rows, commands = remote_shards(w, "nl", "SELECT concurrency.enqueue('nl', %s) FROM generate_series(1, 6) g",
                                   ('{"a": 1}',))
    ids = [r[0] for r in rows]
    check("enqueue on a worker node: no remote command", commands == [], repr(commands))
    check("its tasks go to this node's shards, their ids name this node's group",
          all(i % 1024 in here and (i >> 10) % 1024 == group for i in ids), repr(ids))
    rows, commands = remote_shards(w, "nl", "SELECT task_id, lease_token FROM concurrency.dequeue('nl', 10)")
    held = dict(rows)
    check("dequeue on a worker node claims its own shards' tasks with no remote command",
          sorted(held) == sorted(ids) and commands == [], f"{held} {commands}")
    check("lease tokens made there carry the node's group", all(t % 1024 == group for t in held.values()),
          repr(held))
    a, b, rest = ids[0], ids[1], ids[2:]
    _, commands = remote_shards(w, "nl", "SELECT concurrency.heartbeat('nl', %s, %s), "
                                "concurrency.complete('nl', %s, %s), concurrency.fail('nl', %s, %s, 'boom')",
                                (a, held[a], a, held[a], b, held[b]))
    check("heartbeat, complete and fail of a local task: no remote command", commands == [], repr(commands))
    _, commands = remote_shards(w, "nl", "SELECT concurrency.task_status('nl', %s)", (b,))
    check("task_status of a local task: no remote command", commands == [], repr(commands))
    check("fail scheduled the task's next attempt",
          scalar(w, "SELECT state FROM concurrency.task_status('nl', %s)", (b,)) == "scheduled")
    same = [i for i in rest if i % 1024 == rest[0] % 1024]
    _, commands = remote_shards(w, "nl", "SELECT concurrency.complete_batch('nl', %s, %s)",
                                (same, [held[i] for i in same]))
    check("complete_batch of one local shard's tasks: no remote command", commands == [], repr(commands))
    c = connect(COORDINATOR)
    check("the coordinator sees what the worker node did",
          scalar(c, "SELECT count(*) FROM concurrency.q_nl WHERE id = ANY(%s)", ([a] + same,)) == 0
          and scalar(c, "SELECT attempt FROM concurrency.q_nl WHERE id = %s", (b,)) == 1)


def test_a_node_with_every_shard_needs_no_routed_claim():
    c = connect(COORDINATOR)
    c.execute("SELECT concurrency.drop_queue('n1') FROM concurrency.queue WHERE name = 'n1'")
    c.execute("SELECT concurrency.create_queue('n1')")
    c.execute("SELECT concurrency.distribute_queue('n1', 1)")
    port = scalar(c, "SELECT nodeport FROM citus_shards WHERE table_name = 'concurrency.q_n1'::regclass")
    k = connect(port)
    rows, commands = remote_shards(k, "n1", "SELECT * FROM concurrency.dequeue('n1')")
    check("an empty queue whose every shard is on this node: dequeue sends no command to a shard",
          rows == [] and commands == [], f"{rows} {commands}")
    c.execute("SELECT concurrency.drop_queue('n1')")


def test_keys_place_tasks_alike_on_every_node():
    # a node computes a key's shard as the routed calls do: the same
    # dedupe_key enqueued on every node is one task, and a concurrency_key's
    # tasks share one shard wherever they were enqueued
    fresh_queue("nd")
    dedupe, keyed = [], []
    for n in range(8):
        dedupe.append({scalar(connect(p), "SELECT concurrency.enqueue('nd', '{}', dedupe_key => %s)", (f"d{n}",))
                       for p in NODES})
        keyed.append({scalar(connect(p), "SELECT concurrency.enqueue('nd', '{}', concurrency_key => %s)",
                             (f"k{n}",)) % 1024 for p in NODES})
    check("a dedupe_key enqueued on every node is one task", all(len(ids) == 1 for ids in dedupe), repr(dedupe))
    check("a concurrency_key's tasks enqueued on every node share one shard", all(len(p) == 1 for p in keyed),
          repr(keyed))
    check("and the keys spread over several shards", len({min(p) for p in keyed}) > 1, repr(keyed))
    connect(COORDINATOR).execute("SELECT concurrency.drop_queue('nd')")


def test_release_progress_cancel_on_the_shards_node():
    fresh_queue("np", lease="30 seconds")
    w1, w2 = connect(WORKER1), connect(WORKER2)
    ids = [r[0] for r in w1.execute("SELECT concurrency.enqueue('np', '{}') FROM generate_series(1, 3)").fetchall()]
    held = dict(w1.execute("SELECT task_id, lease_token FROM concurrency.dequeue('np', 3)").fetchall())
    a, b, c = ids
    _, commands = remote_shards(w1, "np", "SELECT concurrency.heartbeat('np', %s, %s, progress => '{\"p\": 5}'), "
                                "concurrency.release('np', %s, %s), concurrency.cancel('np', ARRAY[%s]::bigint[])",
                                (a, held[a], b, held[b], c))
    check("heartbeat with progress, release and cancel on the node of the tasks' shard: no remote command",
          commands == [], repr(commands))
    row = w1.execute("SELECT progress FROM concurrency.task_status('np', %s)", (a,)).fetchone()
    check("the progress is kept", row is not None and row[0] == {"p": 5}, repr(row))
    check("the released task is ready again, its attempt not counted",
          w1.execute("SELECT state, attempt FROM concurrency.task_status('np', %s)", (b,)).fetchone() == ("ready", 0))
    check("the cancelled task is gone or cancelled",
          w1.execute("SELECT state FROM concurrency.task_status('np', %s)", (c,)).fetchone() in (None, ("cancelled",)))
    # from another node: the same calls, each made on the node of the task's shard
    _, commands = remote_shards(w2, "np", "SELECT concurrency.heartbeat('np', %s, %s, progress => '{\"p\": 7}')",
                                (a, held[a]))
    check("heartbeat with progress from another node is routed to the task's shard", routed(commands) and
          len(commands) > 0, repr(commands))
    row = w1.execute("SELECT progress FROM concurrency.task_status('np', %s)", (a,)).fetchone()
    check("and its progress is kept there", row is not None and row[0] == {"p": 7}, repr(row))
    e = error_of(lambda: w2.execute("SELECT concurrency.release('np', %s, %s)", (a, held[a] + 1)))
    check("release from another node with a wrong token: CE001", e is not None and e.sqlstate == "CE001", repr(e))
    _, commands = remote_shards(w2, "np", "SELECT concurrency.release('np', %s, %s)", (a, held[a]))
    check("release from another node is routed to the task's shard", routed(commands) and len(commands) > 0,
          repr(commands))
    check("and the task is ready again there, its attempt not counted",
          w1.execute("SELECT state, attempt FROM concurrency.task_status('np', %s)", (a,)).fetchone() == ("ready", 0))
    connect(COORDINATOR).execute("SELECT concurrency.drop_queue('np')")


def test_calls_about_other_nodes_tasks_are_routed():
    fresh_queue("nr", lease="30 seconds")
    w1, w2 = connect(WORKER1), connect(WORKER2)
    tid = scalar(w1, "SELECT concurrency.enqueue('nr', '{}')")
    token = w1.execute("SELECT lease_token FROM concurrency.dequeue('nr')").fetchone()[0]
    check("a task claimed on worker 1", token is not None)
    e = error_of(lambda: w2.execute("SELECT concurrency.complete('nr', %s, %s)", (tid, token + 1)))
    check("a wrong token from another node is fenced: CE001", e is not None and e.sqlstate == "CE001", repr(e))
    rows, commands = remote_shards(w2, "nr", "SELECT concurrency.task_status('nr', %s)", (tid,))
    check("task_status from another node is routed to the task's shard", routed(commands) and len(commands) > 0,
          repr(commands))
    _, commands = remote_shards(w2, "nr", "SELECT concurrency.complete('nr', %s, %s)", (tid, token))
    check("complete from another node is routed to the task's shard (router statements)",
          routed(commands) and len(commands) > 0, repr(commands))
    check("and the task is done", scalar(w1, "SELECT count(*) FROM concurrency.q_nr") == 0)


def test_idle_node_takes_other_nodes_work():
    fresh_queue("ni")
    w1, w2 = connect(WORKER1), connect(WORKER2)
    ids = [r[0] for r in w2.execute("SELECT concurrency.enqueue('ni', '{}') FROM generate_series(1, 8)").fetchall()]
    mine = local_positions(w1, "ni")
    check("every task is on worker 2's shards", all(i % 1024 not in mine for i in ids), repr(ids))
    got = set()
    for _ in range(4 * SHARDS):
        got |= {r[0] for r in w1.execute("SELECT task_id FROM concurrency.dequeue('ni', 8)").fetchall()}
        if len(got) == len(ids):
            break
    check("a worker on worker 1 claims them all through the routed claim", got == set(ids),
          f"{len(got)} of {len(ids)}")


def test_routed_queues_on_a_worker_node():
    # key_limit: every call routed from the worker node, admission as anywhere
    fresh_queue("nk", key_limit=1)
    w = connect(WORKER1)
    a = scalar(w, "SELECT concurrency.enqueue('nk', '{}', concurrency_key => 'k')")
    b = scalar(w, "SELECT concurrency.enqueue('nk', '{}', concurrency_key => 'k')")
    row = w.execute("SELECT task_id, lease_token FROM concurrency.dequeue('nk', 5)").fetchall()
    check("key_limit on a worker node: only the admitted task is claimed", [r[0] for r in row] == [a], repr(row))
    w.execute("SELECT concurrency.complete('nk', %s, %s)", row[0])
    check("complete there admits the key's next task",
          scalar(w, "SELECT state FROM concurrency.task_status('nk', %s)", (b,)) == "ready")
    check("queue_stats on a worker node counts the queue's tasks",
          scalar(w, "SELECT ready FROM concurrency.queue_stats WHERE queue = 'nk'") == 1)
    # max_leased: the lease slots are on the coordinator
    fresh_queue("nm", max_leased=2)
    tid = scalar(w, "SELECT concurrency.enqueue('nm', '{}')")
    check("max_leased: enqueue on a worker node works", tid is not None)
    for what, sql in (("dequeue", "SELECT * FROM concurrency.dequeue('nm')"),
                      ("complete", f"SELECT concurrency.complete('nm', {tid}, 1)"),
                      ("cancel", f"SELECT concurrency.cancel('nm', ARRAY[{tid}::bigint])")):
        e = error_of(lambda: w.execute(sql))
        check(f"max_leased: {what} on a worker node: 0A000, the hint names the coordinator",
              e is not None and e.sqlstate == "0A000" and "coordinator" in (e.diag.message_hint or ""), repr(e))
    c = connect(COORDINATOR)
    row = c.execute("SELECT task_id, lease_token FROM concurrency.dequeue('nm')").fetchone()
    check("and on the coordinator the task is claimed as before", row is not None and row[0] == tid, repr(row))
    c.execute("SELECT concurrency.drop_queue('nk'), concurrency.drop_queue('nm')")


def test_routed_functions_internal_and_usable_by_the_owner():
    """The routed functions live in schema concurrency_internal, which PUBLIC cannot use; the owner of a
    distributed queue's table (not a superuser) gets USAGE from distribute_queue, so that its routed calls
    (here: max_leased, whose lease slots are on the coordinator) work for it and for a role given work."""
    c = connect(COORDINATOR)
    for port in NODES:
        helpers = scalar(connect(port), "SELECT count(*) FROM pg_proc WHERE pronamespace = 'concurrency'::regnamespace"
                                        " AND proname ~ '^distributed_'")
        check(f"node {port}: no routed function in schema concurrency", helpers == 0, repr(helpers))
    c.execute("SELECT concurrency.drop_queue('ro') FROM concurrency.queue WHERE name = 'ro'")
    c.execute("DROP ROLE IF EXISTS routed_owner")
    c.execute("DROP ROLE IF EXISTS routed_worker")
    c.execute("CREATE ROLE routed_owner LOGIN")
    c.execute("CREATE ROLE routed_worker LOGIN")
    c.execute("GRANT EXECUTE ON FUNCTION concurrency.create_queue(text, interval, integer, interval, integer, integer,"
              " boolean, integer, interval, integer, interval) TO routed_owner")
    check("before: the owner has no USAGE on concurrency_internal",
          scalar(c, "SELECT has_schema_privilege('routed_owner', 'concurrency_internal', 'USAGE')") is False)
    o = connect(COORDINATOR, user="routed_owner")
    o.execute("SELECT concurrency.create_queue('ro', max_leased => 1, distributed => true)")
    check("distribute_queue gave the queue's owner USAGE on concurrency_internal, on every node",
          [scalar(connect(p), "SELECT has_schema_privilege('routed_owner', 'concurrency_internal', 'USAGE')")
           for p in NODES] == [True] * 3)
    check("a role given nothing still has none",
          scalar(c, "SELECT has_schema_privilege('routed_worker', 'concurrency_internal', 'USAGE')") is False)
    o.execute("SELECT concurrency.grant_queue('ro', 'routed_worker', ARRAY['enqueue', 'work'])")
    a = scalar(o, "SELECT concurrency.enqueue('ro', '{}')")
    b = scalar(o, "SELECT concurrency.enqueue('ro', '{}')")
    row = o.execute("SELECT task_id, lease_token FROM concurrency.dequeue('ro', 5)").fetchall()
    check("the owner claims through the routed functions, max_leased held", len(row) == 1, repr(row))
    w = connect(COORDINATOR, user="routed_worker")
    check("a second claim finds the one lease slot taken",
          w.execute("SELECT task_id FROM concurrency.dequeue('ro')").fetchall() == [])
    o.execute("SELECT concurrency.complete('ro', %s, %s)", row[0])
    row = w.execute("SELECT task_id, lease_token FROM concurrency.dequeue('ro')").fetchall()
    check("the owner's complete freed the slot; a role with work claims the other task",
          len(row) == 1 and {row[0][0]} | {a, b} == {a, b}, repr(row))
    w.execute("SELECT concurrency.complete('ro', %s, %s)", row[0])
    check("and completes it", scalar(c, "SELECT count(*) FROM concurrency.q_ro") == 0)
    check("the worker role cannot call a routed function itself: 42501",
          sqlstate_of(lambda: w.execute("SELECT concurrency_internal.distributed_lease_end('ro', 1, 1, now())")) == "42501")
    w.close()
    o.close()
    c.execute("SELECT concurrency.drop_queue('ro')")
    check("dropping the role's last distributed queue took USAGE back, on every node",
          [scalar(connect(p), "SELECT has_schema_privilege('routed_owner', 'concurrency_internal', 'USAGE')")
           for p in NODES] == [False] * 3)
    c.execute("REVOKE USAGE ON SCHEMA concurrency_internal FROM routed_owner")
    c.execute("REVOKE EXECUTE ON FUNCTION concurrency.create_queue(text, interval, integer, interval, integer, integer,"
              " boolean, integer, interval, integer, interval) FROM routed_owner")
    c.execute("DROP ROLE routed_worker")
    c.execute("DROP ROLE routed_owner")


def test_rate_limit_on_distributed_queues():
    """A distributed queue's rate limit holds across nodes: its rate slots are a table on the coordinator, where
    every claim of the queue takes them (dequeue on a worker node: 0A000 naming the coordinator; the tasks' other
    calls stay on their nodes); alter_queue changes and removes it, distribute_queue takes a limited queue along."""
    c = connect(COORDINATOR)
    c.execute("SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name IN ('nr', 'nr2')")
    c.execute("SELECT concurrency.create_queue('nr', distributed => true, rate_limit => 5, rate_period => '1 hour')")
    check("create_queue(…, distributed => true, rate_limit): a distributed queue with the limit on every node",
          all(connect(p).execute("SELECT rate_limit, rate_period = '1 hour' FROM concurrency.queue"
                                 " WHERE name = 'nr'").fetchone() == (5, True) for p in NODES)
          and scalar(c, "SELECT count(*) FROM concurrency.distributed_queue WHERE queue = 'nr'") == 1)
    c.execute("SELECT concurrency.enqueue('nr', jsonb_build_object('n', g)) FROM generate_series(1, 12) g")
    got = [len(c.execute("SELECT * FROM concurrency.dequeue('nr', %s)", (b,)).fetchall()) for b in (3, 10, 1)]
    check("dequeue on the coordinator: 3, then 2 (5 in the window), then none", got == [3, 2, 0], repr(got))
    w = connect(WORKER1)
    e = error_of(lambda: w.execute("SELECT * FROM concurrency.dequeue('nr')"))
    check("dequeue on a worker node: 0A000 naming the coordinator and the rate slots",
          e is not None and e.sqlstate == "0A000" and "coordinator (" in (e.diag.message_hint or "")
          and "rate slots" in (e.diag.message_detail or ""), repr(e))
    leased = c.execute("SELECT id, lease_token FROM concurrency.q_nr WHERE state = 'leased' ORDER BY id").fetchall()
    w.execute("SELECT concurrency.complete('nr', %s, %s)", leased[0])
    check("complete of a leased task works on a worker node",
          scalar(c, "SELECT state FROM concurrency.q_nr WHERE id = %s", (leased[0][0],)) in ("done", None))
    c.execute("SELECT concurrency.alter_queue('nr', rate_limit => 7)")
    check("rate_limit => 7: two more claims in the window",
          len(c.execute("SELECT * FROM concurrency.dequeue('nr', 10)").fetchall()) == 2)
    c.execute("SELECT concurrency.alter_queue('nr', rate_limit => 9)")
    t1 = connect(COORDINATOR, autocommit=False)
    first = t1.execute("SELECT task_id FROM concurrency.dequeue('nr', 1)").fetchall()
    t2 = connect(COORDINATOR, autocommit=False)
    second = t2.execute("SELECT task_id FROM concurrency.dequeue('nr', 5)").fetchall()
    third = t2.execute("SELECT task_id FROM concurrency.dequeue('nr', 5)").fetchall()
    t1.commit()
    t2.commit()
    check("two transactions at once share the two claims left (1 and 1, then none)",
          (len(first), len(second), len(third)) == (1, 1, 0), repr((first, second, third)))
    empty = len(c.execute("SELECT * FROM concurrency.dequeue('nr', 100)").fetchall())
    c.execute("SELECT concurrency.alter_queue('nr', rate_limit => 0)")
    # (without the limit a claim from the coordinator takes one node's tasks: the 3 in two calls at most)
    rest = sum(len(c.execute("SELECT * FROM concurrency.dequeue('nr', 100)").fetchall()) for _ in range(2))
    check("rate_limit => 0 removes it: the 3 tasks left are claimed", (empty, rest) == (0, 3),
          repr((empty, rest)))
    check("and its slot table is gone",
          scalar(c, "SELECT to_regclass('concurrency.r_nr') IS NULL") is True)
    check("12 claims in all, each task once (one of them completed)",
          c.execute("SELECT count(*), count(*) FILTER (WHERE state = 'leased' AND attempt = 1)"
                    " FROM concurrency.q_nr").fetchone() == (11, 11))
    c.execute("SELECT concurrency.create_queue('nr2', rate_limit => 2, rate_period => '1 hour')")
    c.execute("SELECT concurrency.distribute_queue('nr2', 4)")
    check("distribute_queue of a queue with a rate limit: distributed, the limit kept",
          scalar(c, "SELECT count(*) FROM concurrency.distributed_queue WHERE queue = 'nr2'") == 1
          and scalar(w, "SELECT rate_limit FROM concurrency.queue WHERE name = 'nr2'") == 2)
    c.execute("UPDATE concurrency.r_nr2 SET used_at = timestamptz '2000-01-01 UTC' + slot * interval '1 minute'")
    nothing = len(c.execute("SELECT * FROM concurrency.dequeue('nr2', 2)").fetchall())
    check("a claim that found no task gave its slots back with the time of their use before (not as free)",
          scalar(c, "SELECT bool_and(used_at = timestamptz '2000-01-01 UTC' + slot * interval '1 minute')"
                    " FROM concurrency.r_nr2") is True)
    c.execute("SELECT concurrency.enqueue('nr2', '{}') FROM generate_series(1, 4)")
    got = len(c.execute("SELECT * FROM concurrency.dequeue('nr2', 4)").fetchall())
    check("a claim that found no task used no slot: 2 of 4 then", (nothing, got) == (0, 2), repr((nothing, got)))
    e = error_of(lambda: c.execute("SELECT concurrency.alter_queue('nr2', rate_limit => -1)"))
    check("bad rate_limit on a distributed queue: 22023, the limit unchanged",
          e is not None and e.sqlstate == "22023"
          and scalar(c, "SELECT rate_limit FROM concurrency.queue WHERE name = 'nr2'") == 2, repr(e))
    c.execute("SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name = 'nr3'")
    c.execute("SELECT concurrency.create_queue('nr3', distributed => true, rate_limit => 1,"
              " rate_period => '1 second')")
    c.execute("SELECT concurrency.enqueue('nr3', '{}') FROM generate_series(1, 3)")
    first = len(c.execute("SELECT * FROM concurrency.dequeue('nr3', 5)").fetchall())
    waited = len(c.execute("SELECT * FROM concurrency.dequeue('nr3', 5, wait => '20 seconds')").fetchall())
    c.execute("SELECT concurrency.drop_queue('nr3')")
    check("a waiting dequeue held back by the limit claims once the window opens (1, then 1 more)",
          (first, waited) == (1, 1), repr((first, waited)))
    c.execute("SELECT concurrency.drop_queue('nr'), concurrency.drop_queue('nr2')")
    check("drop_queue drops the rate slots", scalar(c, "SELECT to_regclass('concurrency.r_nr2') IS NULL") is True)


def fair_indexes(port, queue):
    """How many shards of `queue` on node `port` have the fair index (Citus hides shards from catalog queries)."""
    k = connect(port)
    k.execute("SET citus.override_table_visibility TO off")
    return scalar(k, "SELECT count(*) FROM pg_indexes WHERE indexname LIKE %s", (f"fair\\_q\\_{queue}\\_%",))


def test_fair_on_distributed_queues():
    """A fair queue distributed (its index on every shard), or a distributed queue made fair: claims on a node
    take turns between the keys of its shards, and workers on every node drain it exactly once."""
    c = connect(COORDINATOR)
    c.execute("SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name IN ('nf', 'nf2')")
    c.execute("SELECT concurrency.create_queue('nf')")
    c.execute("SELECT concurrency.alter_queue('nf', fair => true)")
    c.execute("SELECT concurrency.distribute_queue('nf', 1)")
    port = scalar(c, "SELECT nodeport FROM citus_shards WHERE table_name = 'concurrency.q_nf'::regclass")
    k = connect(port)
    check("distribute_queue of a fair queue: its shard has the fair index",
          fair_indexes(port, "nf") == 1)
    c.execute("SELECT concurrency.enqueue('nf', '{\"k\": \"heavy\"}', concurrency_key => 'heavy')"
              " FROM generate_series(1, 20)")
    c.execute("SELECT concurrency.enqueue('nf', '{\"k\": \"lone\"}', concurrency_key => 'lone')")
    got = [scalar(k, "SELECT payload ->> 'k' FROM concurrency.dequeue('nf')") for _ in range(2)]
    check("on the shard's node, a lone key behind another key's 20 tasks is claimed within 2 claims",
          "lone" in got, repr(got))

    fresh_queue("nf2")
    c.execute("SELECT concurrency.alter_queue('nf2', fair => true)")
    shards = sum(fair_indexes(p, "nf2") for p in (WORKER1, WORKER2))
    check("alter_queue(…, fair => true) of a distributed queue: the fair index on every shard", shards == SHARDS,
          f"{shards} of {SHARDS}")
    check("and every node knows the queue is fair",
          all(scalar(connect(p), "SELECT fair FROM concurrency.queue WHERE name = 'nf2'") for p in NODES))
    ids = {r[0] for r in c.execute("SELECT concurrency.enqueue('nf2', jsonb_build_object('n', i),"
                                   " concurrency_key => 'key' || (i % 6)) FROM generate_series(1, 36) i").fetchall()}
    claimed = []
    for _ in range(40):
        for p in (WORKER1, WORKER2):
            w = connect(p)
            for task_id, token in w.execute("SELECT task_id, lease_token FROM concurrency.dequeue('nf2', 3)").fetchall():
                claimed.append(task_id)
                w.execute("SELECT concurrency.complete('nf2', %s, %s)", (task_id, token))
        if len(claimed) >= len(ids):
            break
    check("workers on both worker nodes drain the fair queue, every task once",
          sorted(claimed) == sorted(ids), f"{len(claimed)} claims of {len(ids)} tasks")
    c.execute("SELECT concurrency.alter_queue('nf2', fair => false)")
    shards = sum(fair_indexes(p, "nf2") for p in (WORKER1, WORKER2))
    check("fair => false drops the index from every shard", shards == 0, repr(shards))
    c.execute("SELECT concurrency.drop_queue('nf'), concurrency.drop_queue('nf2')")


def test_key_rate_limit_on_distributed_queues():
    """key_rate_limit on a distributed queue: each key's slots on the shard of its tasks, taken by the claims of
    the node that holds it; workers on both worker nodes never claim a key more often than its limit, and the
    tasks without a key are not held back; alter_queue may add it to a distributed queue with tasks. It cannot be
    beside rate_limit: 0A000, nothing changed."""
    c = connect(COORDINATOR)
    c.execute("SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name IN ('nk', 'nk2', 'nk3', 'nk4')")
    fresh_queue("nk", key_rate_limit=2, key_rate_period="1 hour")
    shards = scalar(c, "SELECT count(*) FROM citus_shards WHERE table_name = 'concurrency.rk_nk'::regclass")
    check("distribute_queue of a queue with key_rate_limit: its slots' table distributed beside the tasks",
          shards == SHARDS, repr(shards))
    ids = {r[0] for r in c.execute("SELECT concurrency.enqueue('nk', jsonb_build_object('n', i),"
                                   " concurrency_key => 'key' || (i % 6)) FROM generate_series(1, 36) i").fetchall()}
    free = {r[0] for r in c.execute("SELECT concurrency.enqueue('nk', jsonb_build_object('free', i))"
                                    " FROM generate_series(1, 4) i").fetchall()}
    claimed = []
    for _ in range(6):
        for p in (WORKER1, WORKER2):
            w = connect(p)
            claimed += [r[0] for r in w.execute("SELECT task_id FROM concurrency.dequeue('nk', 5)").fetchall()]
    per_key = dict(c.execute("SELECT concurrency_key, count(*) FROM concurrency.q_nk WHERE state = 'leased'"
                             " AND concurrency_key IS NOT NULL GROUP BY 1").fetchall())
    check("claims on both worker nodes: every key claimed exactly its limit of 2 in the hour, no more",
          per_key == {f"key{k}": 2 for k in range(6)}, repr(per_key))
    check("the tasks without a key are all claimed", free <= set(claimed), f"{len(claimed)} claims")
    check("each task once", len(claimed) == len(set(claimed)) == 16, repr(len(claimed)))
    used = scalar(c, "SELECT count(*) FROM concurrency.rk_nk WHERE used_at > '-infinity'")
    check("12 slots used, on the keys' shards", used == 12, repr(used))
    c.execute("SELECT concurrency.alter_queue('nk', key_rate_limit => 3)")
    more = []
    for p in (WORKER1, WORKER2):
        more += [r[0] for r in connect(p).execute("SELECT task_id FROM concurrency.dequeue('nk', 20)").fetchall()]
    check("key_rate_limit => 3 on the distributed queue: one more claim of each key", len(more) == 6, repr(len(more)))
    c.execute("SELECT concurrency.alter_queue('nk', key_rate_limit => 0)")
    check("key_rate_limit => 0 drops the distributed slots' table",
          scalar(c, "SELECT to_regclass('concurrency.rk_nk') IS NULL") is True)

    # added again to the queue, which has 3 ready tasks of each key: its slots' table made and distributed
    c.execute("SELECT concurrency.alter_queue('nk', key_rate_limit => 1, key_rate_period => '1 hour')")
    shards = scalar(c, "SELECT count(*) FROM citus_shards WHERE table_name = 'concurrency.rk_nk'::regclass")
    check("alter_queue adding key_rate_limit to a distributed queue with tasks: its slots' table distributed",
          shards == SHARDS, repr(shards))
    again = []
    for _ in range(2):
        for p in (WORKER1, WORKER2):
            again += [r[0] for r in connect(p).execute("SELECT task_id FROM concurrency.dequeue('nk', 20)")
                      .fetchall()]
    keys = sorted(r[0] for r in c.execute("SELECT concurrency_key FROM concurrency.q_nk WHERE id = ANY (%s)",
                                          (again,)).fetchall())
    check("then claims on both worker nodes take one task of each key, no more",
          keys == [f"key{k}" for k in range(6)], repr(keys))
    e = sqlstate_of(lambda: c.execute("SELECT concurrency.create_queue('nk2', distributed => true, rate_limit => 5,"
                                      " rate_period => '1 second', key_rate_limit => 5, key_rate_period => '1 second')"))
    check("create_queue(…, distributed => true) with rate_limit and key_rate_limit: 0A000, no queue",
          e == "0A000" and scalar(c, "SELECT count(*) FROM concurrency.queue WHERE name = 'nk2'") == 0, repr(e))
    c.execute("SELECT concurrency.create_queue('nk3', rate_limit => 5, rate_period => '1 second',"
              " key_rate_limit => 5, key_rate_period => '1 second')")
    e = sqlstate_of(lambda: c.execute("SELECT concurrency.distribute_queue('nk3')"))
    check("distribute_queue of a queue with both limits: 0A000, the queue stays on the coordinator",
          e == "0A000" and scalar(c, "SELECT count(*) FROM concurrency.distributed_queue WHERE queue = 'nk3'") == 0,
          repr(e))
    fresh_queue("nk4", key_rate_limit=5, key_rate_period="1 second")
    e = sqlstate_of(lambda: c.execute("SELECT concurrency.alter_queue('nk4', rate_limit => 5,"
                                      " rate_period => '1 second')"))
    check("alter_queue adding rate_limit beside key_rate_limit on a distributed queue: 0A000",
          e == "0A000" and scalar(c, "SELECT rate_limit FROM concurrency.queue WHERE name = 'nk4'") is None, repr(e))
    c.execute("SELECT concurrency.enqueue('nk4', '{}', concurrency_key => 'f' || g) FROM generate_series(1, 4) g")
    claimed = 0
    for _ in range(4 * SHARDS):
        claimed += scalar(c, "SELECT count(*) FROM concurrency.dequeue('nk4', 10)")
    used = scalar(c, "SELECT count(*) FROM concurrency.rk_nk4")
    c.execute("UPDATE concurrency.rk_nk4 SET used_at = now() - interval '3 hours'")  # unused for long
    forgotten = wait_until(lambda: scalar(c, "SELECT count(*) FROM (SELECT concurrency.dequeue('nk4')) d") == 0
                           and scalar(c, "SELECT count(*) FROM concurrency.rk_nk4") == 0, timeout=30, step=0.2)
    check("the slots of keys unused for long are forgotten on their shards, by the claims that visit them",
          claimed == 4 and used == 4 and forgotten,
          repr((claimed, used, scalar(c, "SELECT count(*) FROM concurrency.rk_nk4"))))
    c.execute("SELECT concurrency.drop_queue(q) FROM unnest(ARRAY['nk', 'nk3', 'nk4']) q")
    check("drop_queue drops the distributed slots' table",
          scalar(c, "SELECT to_regclass('concurrency.rk_nk4') IS NULL") is True)


def test_dependencies_on_distributed_queues():
    """enqueue(…, after) on a distributed queue: the child goes to its parents' shard (routed to their node from any
    other), its edges in the shard's rows; completing the parent on any node makes the children ready, the last of
    two parents the fan-in child; parent_results from any node; a cancelled parent cancels its waiting descendants;
    a done parent is kept for its children. An id of no shard is refused, nothing enqueued (parents and keys in
    other shards: test_dependencies.py)."""
    c = fresh_queue("nd")
    w1, w2 = connect(WORKER1), connect(WORKER2)
    root = scalar(w1, "SELECT concurrency.enqueue('nd', '{\"step\": \"root\"}')")
    kids = [scalar(n, "SELECT concurrency.enqueue('nd', '{}', after => ARRAY[%s]::bigint[])", (root,)) for n in (w2, c)]
    fan_in = scalar(w2, "SELECT concurrency.enqueue('nd', '{}', after => %s::bigint[])", (kids,))
    batch = [r[0] for r in c.execute("SELECT concurrency.enqueue_batch('nd', ARRAY['{}', '{}']::jsonb[],"
                                     " after => ARRAY[%s]::bigint[])", (root,)).fetchall()]
    tasks = kids + [fan_in] + batch
    check("children enqueued on other nodes go to their parent's shard",
          {t & 1023 for t in tasks} == {root & 1023}, repr((root, tasks)))
    states = c.execute("SELECT state, parents_open FROM concurrency.task_status('nd', %s)", (fan_in,)).fetchone()
    check("task_status on the coordinator: the fan-in child waits for 2 parents", states == ("waiting", 2),
          repr(states))
    claimed = [r[0] for n in (w1, w2) for r in n.execute("SELECT task_id FROM concurrency.dequeue('nd', 10)")]
    check("only the root is claimable", claimed == [root], repr(claimed))
    token = scalar(c, "SELECT lease_token FROM concurrency.q_nd WHERE id = %s", (root,))
    w2.execute("SELECT concurrency.complete('nd', %s, %s, '{\"rows\": 7}')", (root, token))
    ready = sorted(r[0] for r in c.execute("SELECT id FROM concurrency.q_nd WHERE state = 'ready'"))
    check("completing the root from another node makes its 4 children ready", ready == sorted(kids + batch),
          repr(ready))
    results = w2.execute("SELECT task_id, parent_queue, result FROM concurrency.parent_results('nd', %s)",
                         (kids[0],)).fetchall()
    check("parent_results from another node: the root's result", results == [(root, "nd", {"rows": 7})],
          repr(results))
    check("the done root is kept for its children (the queue retains nothing)",
          scalar(c, "SELECT state FROM concurrency.task_status('nd', %s)", (root,)) == "done")
    leases = {}
    for _ in range(3):
        for n in (w1, w2):
            leases.update(dict(n.execute("SELECT task_id, lease_token FROM concurrency.dequeue('nd', 10)")))
    check("workers on both worker nodes claim the 4 children", sorted(leases) == sorted(kids + batch),
          repr(sorted(leases)))
    _, commands = remote_shards(w1, "nd", "SELECT concurrency.complete('nd', %s, %s)", (kids[0], leases[kids[0]]))
    check("completing a parent on the node of its shard: its child's row written there, no remote command",
          commands == [], repr(commands))
    check("one parent of two done: the fan-in child still waits for one",
          c.execute("SELECT state, parents_open FROM concurrency.task_status('nd', %s)", (fan_in,)).fetchone()
          == ("waiting", 1))
    w2.execute("SELECT concurrency.complete('nd', %s, %s, '{\"n\": 2}')", (kids[1], leases[kids[1]]))
    check("the second makes it ready", scalar(c, "SELECT state FROM concurrency.task_status('nd', %s)", (fan_in,))
          == "ready")
    results = c.execute("SELECT task_id, result FROM concurrency.parent_results('nd', %s)", (fan_in,)).fetchall()
    check("parent_results of the fan-in child: both parents", results == [(kids[0], None), (kids[1], {"n": 2})],
          repr(results))

    doomed = scalar(w2, "SELECT concurrency.enqueue('nd', '{}')")
    line = [doomed]
    for n in (w1, c):
        line.append(scalar(n, "SELECT concurrency.enqueue('nd', '{}', after => ARRAY[%s]::bigint[])", (line[-1],)))
    w1.execute("SELECT concurrency.cancel('nd', ARRAY[%s]::bigint[])", (doomed,))
    ended = c.execute("SELECT state, last_error FROM concurrency.q_nd WHERE id = ANY (%s) ORDER BY id",
                      (line[1:],)).fetchall()
    check("a cancelled parent cancels its waiting descendants, through generations",
          ended == [("cancelled", f'parent task {doomed} of queue "nd" ended cancelled')] * 2, repr(ended))

    before = scalar(c, "SELECT count(*) FROM concurrency.q_nd")
    e = error_of(lambda: c.execute("SELECT concurrency.enqueue('nd', '{}', after => ARRAY[%s]::bigint[])",
                                   ((fan_in & ~1023) | 1000,)))
    check("a parent id of no shard: 22023", e is not None and e.sqlstate == "22023", repr(e))
    check("nothing enqueued by the refused call", scalar(c, "SELECT count(*) FROM concurrency.q_nd") == before)
    c.execute("SELECT concurrency.drop_queue('nd')")


def test_graphs_on_distributed_queues():
    """enqueue_graph on a distributed queue, on any node: the graph's tasks go to one shard, that of their parents
    enqueued before (else any), their edges in its rows, the parents' included; they run in order as on one
    server, parent_results and cancellation follow the edges. Keys of two shards and tasks or parents in another
    queue are refused, nothing enqueued."""
    c = fresh_queue("ng")
    w1, w2 = connect(WORKER1), connect(WORKER2)
    c.execute("SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name = 'ng_local'")
    c.execute("SELECT concurrency.create_queue('ng_local')")
    first = scalar(w1, "SELECT concurrency.enqueue('ng', '{\"step\": 0}')")
    graph = json.dumps([{"ref": "x", "after": [first]}, {"ref": "y", "after": ["x"]},
                        {"ref": "z", "after": ["x", "y"], "priority": 5}])
    rows = dict(w2.execute("SELECT ref, task_id FROM concurrency.enqueue_graph('ng', %s)", (graph,)).fetchall())
    check("enqueue_graph on another node: every task in the shard of the parent enqueued before",
          sorted(rows) == ["x", "y", "z"] and {t & 1023 for t in rows.values()} == {first & 1023}, repr(rows))
    waits = [c.execute("SELECT state, parents_open FROM concurrency.task_status('ng', %s)", (rows[r],)).fetchone()
             for r in "xyz"]
    check("x waits for the first task, y for x, z for x and y", waits == [("waiting", 1)] * 2 + [("waiting", 2)],
          repr(waits))
    order, results = [], {}
    for _ in range(5):
        got = [r for n in (w2, w1) for r in n.execute("SELECT task_id, lease_token FROM concurrency.dequeue('ng', 5)")]
        for task_id, token in got:
            order.append(task_id)
            # what its worker reads, from a node that does not hold the shard
            results[task_id] = w2.execute("SELECT task_id, result FROM concurrency.parent_results('ng', %s)",
                                          (task_id,)).fetchall()
            c.execute("SELECT concurrency.complete('ng', %s, %s, jsonb_build_object('id', %s::bigint))",
                      (task_id, token, task_id))
    check("claimed and completed from every node, one at a time in the graph's order",
          order == [first, rows["x"], rows["y"], rows["z"]], repr(order))
    check("parent_results of x: the task enqueued before the graph, with its result",
          results.get(rows["x"]) == [(first, {"id": first})], repr(results.get(rows["x"])))
    check("parent_results of z: x and y",
          results.get(rows["z"]) == [(rows["x"], {"id": rows["x"]}), (rows["y"], {"id": rows["y"]})],
          repr(results.get(rows["z"])))

    loose = dict(c.execute("SELECT ref, task_id FROM concurrency.enqueue_graph('ng',"
                           " '[{\"ref\": \"p\"}, {\"ref\": \"q\", \"after\": [\"p\"]}]')").fetchall())
    check("a graph without parents or keys, from the coordinator: its tasks in one shard",
          len({t & 1023 for t in loose.values()}) == 1, repr(loose))
    doomed = scalar(w2, "SELECT concurrency.enqueue('ng', '{}')")
    under = dict(w1.execute("SELECT ref, task_id FROM concurrency.enqueue_graph('ng', %s)",
                            (json.dumps([{"ref": "u", "after": [doomed]}, {"ref": "v", "after": ["u"]}]),)).fetchall())
    w1.execute("SELECT concurrency.cancel('ng', ARRAY[%s]::bigint[])", (doomed,))
    ended = c.execute("SELECT state FROM concurrency.q_ng WHERE id = ANY (%s)", (list(under.values()),)).fetchall()
    check("cancelling a parent enqueued before a graph cancels the graph's tasks after it",
          ended == [("cancelled",)] * 2 and {t & 1023 for t in under.values()} == {doomed & 1023}, repr(ended))

    before = scalar(c, "SELECT count(*) FROM concurrency.q_ng")
    keys = {}
    for k in (f"k{i}" for i in range(100)):
        keys.setdefault(scalar(c, "SELECT concurrency_internal.distributed_key_position(%s, %s)", (SHARDS, k)), k)
    two = list(keys.values())[:2]
    refused = [
        ("keys of two shards", json.dumps([{"ref": "a", "concurrency_key": two[0]},
                                           {"ref": "b", "concurrency_key": two[1]}])),
        ("a task in another queue", json.dumps([{"ref": "a"}, {"ref": "b", "after": ["a"], "queue": "ng_local"}])),
    ]
    for what, tasks in refused:
        e = error_of(lambda: c.execute("SELECT * FROM concurrency.enqueue_graph('ng', %s)", (tasks,)))
        check(f"enqueue_graph on a distributed queue with {what}: 0A000", e is not None and e.sqlstate == "0A000",
              repr(e))
    local = scalar(c, "SELECT concurrency.enqueue('ng_local', '{}')")
    e = error_of(lambda: c.execute("SELECT * FROM concurrency.enqueue_graph('ng', %s)",
                                   (json.dumps([{"ref": "a", "after": [{"queue": "ng_local", "id": local}]}]),)))
    check("enqueue_graph on a distributed queue with a parent in another queue: 0A000",
          e is not None and e.sqlstate == "0A000", repr(e))
    check("nothing enqueued by the refused graphs", scalar(c, "SELECT count(*) FROM concurrency.q_ng") == before)
    c.execute("SELECT concurrency.drop_queue('ng'), concurrency.drop_queue('ng_local')")


def test_errors_on_a_worker_node():
    fresh_queue("ne")
    c = connect(COORDINATOR)
    c.execute("SELECT concurrency.drop_queue('ne_local') FROM concurrency.queue WHERE name = 'ne_local'")
    c.execute("SELECT concurrency.create_queue('ne_local')")
    e = error_of(lambda: connect(WORKER1).execute("SELECT * FROM concurrency.dequeue('ne_local')"))
    check("a local queue of the coordinator on a worker node: 42704, the hint names the coordinator",
          e is not None and e.sqlstate == "42704" and "coordinator" in (e.diag.message_hint or ""), repr(e))
    for sql in ("SELECT * FROM concurrency.dequeue('ne', 0)",
                "SELECT * FROM concurrency.dequeue(NULL)",
                "SELECT concurrency.enqueue('ne', NULL)",
                "SELECT * FROM concurrency.dequeue('ne', 1, lease => '-1 second')",
                "SELECT concurrency.complete('ne', 1, 1)",
                "SELECT concurrency.heartbeat('ne', NULL, 1)",
                "SELECT * FROM concurrency.dequeue('nope')"):
        states = [sqlstate_of(lambda p=p: connect(p).execute(sql)) for p in NODES]
        check(f"the same SQLSTATE on every node: {sql}", states[0] is not None and len(set(states)) == 1,
              repr(states))
    c.execute("SELECT concurrency.drop_queue('ne_local'), concurrency.drop_queue('ne')")


def test_wait_on_a_distributed_queue():
    fresh_queue("nw")
    w1 = connect(WORKER1)
    got = {}

    def enqueue_later(port, key):
        time.sleep(0.3)
        got[key] = scalar(connect(port), "SELECT concurrency.enqueue('nw', '{}')")
    for port, where in ((WORKER1, "this node"), (WORKER2, "another node")):
        t = threading.Thread(target=enqueue_later, args=(port, where))
        t.start()
        rows = w1.execute("SELECT task_id FROM concurrency.dequeue('nw', 1, wait => '20 seconds')").fetchall()
        t.join()
        check(f"dequeue with wait on a worker node returns a task enqueued meanwhile on {where}",
              [r[0] for r in rows] == [got[where]], f"{rows} {got}")
    rows = w1.execute("SELECT task_id FROM concurrency.dequeue('nw', 1, wait => '1.5 seconds')").fetchall()
    check("on an empty distributed queue it returns nothing when the wait is over", rows == [], repr(rows))
    connect(COORDINATOR).execute("SELECT concurrency.drop_queue('nw')")


def test_pause_on_every_node():
    c = fresh_queue("np")
    for port in NODES:
        connect(port).execute("SELECT count(*) FROM concurrency.enqueue_batch('np', array_fill('{}'::jsonb, ARRAY[4]))")
    e = error_of(lambda: connect(WORKER1).execute("SELECT concurrency.pause_queue('np')"))
    check("pause_queue on a worker node: 0A000, the hint names the coordinator",
          e is not None and e.sqlstate == "0A000" and "coordinator" in (e.diag.message_hint or ""), repr(e))
    check("pause_queue on the coordinator", scalar(c, "SELECT concurrency.pause_queue('np')") is True)
    check("the flag is on every node",
          [scalar(connect(p), "SELECT paused FROM concurrency.queue WHERE name = 'np'") for p in NODES] == [True] * 3)
    claimed = [scalar(connect(p), "SELECT count(*) FROM concurrency.dequeue('np', 10)") for p in NODES]
    check("paused: no node claims anything, from its own shards or others'", claimed == [0, 0, 0], repr(claimed))
    check("paused: enqueue works on a worker node",
          scalar(connect(WORKER2), "SELECT concurrency.enqueue('np', '{}') > 0") is True)
    w1 = connect(WORKER1)
    got = {}

    def resume_later():
        time.sleep(0.3)
        got["resumed"] = scalar(connect(COORDINATOR), "SELECT concurrency.resume_queue('np')")
    t = threading.Thread(target=resume_later)
    t.start()
    rows = w1.execute("SELECT task_id FROM concurrency.dequeue('np', 1, wait => '20 seconds')").fetchall()
    t.join()
    check("a waiting dequeue on a worker node claims once the coordinator resumes the queue",
          len(rows) == 1 and got.get("resumed") is True, f"{rows} {got}")
    left = sum(scalar(connect(p), "SELECT count(*) FROM concurrency.dequeue('np', 20)") for p in NODES)
    check("resumed: every node claims again, the queue drains", left == 12, repr(left))
    c.execute("SELECT concurrency.drop_queue('np')")


def test_ids_unique_across_nodes():
    fresh_queue("nu")
    per_thread = 150
    ids, errors = [], []
    lock = threading.Lock()

    def produce(port):
        try:
            k = connect(port)
            got = [r[0] for r in k.execute("SELECT concurrency.enqueue('nu', '{}') FROM generate_series(1, %s)",
                                           (per_thread,)).fetchall()]
            got += [r[0] for r in k.execute("SELECT * FROM concurrency.enqueue_batch('nu', "
                                            "array_fill('{}'::jsonb, ARRAY[%s]))", (per_thread,)).fetchall()]
            with lock:
                ids.extend(got)
        except psycopg.Error as e:
            errors.append(e.sqlstate)
    threads = [threading.Thread(target=produce, args=(p,)) for p in NODES for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check("concurrent enqueues on every node: no error", errors == [], repr(errors))
    check("task ids are unique across the nodes", len(ids) == len(set(ids)) == len(NODES) * 2 * 2 * per_thread,
          f"{len(ids)} ids, {len(set(ids))} distinct")
    check("ids were made on the workers' own groups",
          {(i >> 10) % 1024 for i in ids} >= {group_of(WORKER1), group_of(WORKER2)},
          repr({(i >> 10) % 1024 for i in ids}))
    c = connect(COORDINATOR)
    check("every task is in the queue", scalar(c, "SELECT count(*) FROM concurrency.q_nu") == len(ids))
    c.execute("SELECT concurrency.drop_queue('nu')")


def test_workers_on_every_node_drain_exactly_once():
    tasks = 400
    c = fresh_queue("nx", lease="30 seconds")
    c.execute("DROP TABLE IF EXISTS nodes_effects")
    c.execute("CREATE TABLE nodes_effects (task_id bigint, n int)")
    c.execute("SELECT create_distributed_table('nodes_effects', 'task_id', colocate_with => 'none')")
    for port in NODES:
        connect(port).execute("SELECT concurrency.enqueue_batch('nx', array_agg(jsonb_build_object('n', g))) "
                              "FROM generate_series(%s, %s) g", (port * 10000, port * 10000 + tasks // 4 - 1))
    c.execute("SELECT concurrency.enqueue_batch('nx', array_agg(jsonb_build_object('n', g))) "
              "FROM generate_series(1, %s) g", (tasks - 3 * (tasks // 4),))
    errors = []
    stop = threading.Event()

    def work(port):
        k = connect(port, autocommit=False)
        while not stop.is_set():
            try:
                with k.transaction():
                    row = k.execute("SELECT task_id, lease_token, payload FROM concurrency.dequeue('nx')").fetchone()
                    if row is None:
                        continue
                    k.execute("INSERT INTO nodes_effects VALUES (%s, %s)", (row[0], row[2]["n"]))
                    k.execute("SELECT concurrency.complete('nx', %s, %s)", (row[0], row[1]))
            except psycopg.Error as e:
                errors.append(e.sqlstate)
    threads = [threading.Thread(target=work, args=(p,)) for p in NODES for _ in range(2)]
    for t in threads:
        t.start()
    done = wait_until(lambda: scalar(c, "SELECT count(*) FROM concurrency.q_nx") == 0, timeout=120, step=0.2)
    stop.set()
    for t in threads:
        t.join()
    check("workers on every node drained the queue", done,
          f"{scalar(c, 'SELECT count(*) FROM concurrency.q_nx')} left")
    check("without errors", errors == [], repr(errors[:5]))
    effects = c.execute("SELECT count(*), count(DISTINCT task_id) FROM nodes_effects").fetchone()
    check("each task's effect committed exactly once", effects == (tasks, tasks), repr(effects))
    c.execute("DROP TABLE nodes_effects")
    c.execute("SELECT concurrency.drop_queue('nx')")


if __name__ == "__main__":
    connect(COORDINATOR).execute("CREATE EXTENSION IF NOT EXISTS concurrency_ext")
    run([test_catalog_on_every_node, test_worker_node_serves_its_shards,
         test_a_node_with_every_shard_needs_no_routed_claim, test_release_progress_cancel_on_the_shards_node, test_keys_place_tasks_alike_on_every_node, test_calls_about_other_nodes_tasks_are_routed, test_idle_node_takes_other_nodes_work,
         test_routed_queues_on_a_worker_node, test_routed_functions_internal_and_usable_by_the_owner,
         test_rate_limit_on_distributed_queues, test_fair_on_distributed_queues,
         test_key_rate_limit_on_distributed_queues, test_dependencies_on_distributed_queues, test_graphs_on_distributed_queues, test_errors_on_a_worker_node, test_wait_on_a_distributed_queue, test_pause_on_every_node,
         test_ids_unique_across_nodes, test_workers_on_every_node_drain_exactly_once])
