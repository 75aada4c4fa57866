#!/usr/bin/env python3
"""What an edge between two shards of a distributed queue costs (docs/benchmarks.md, "Parents on other shards").

Against a running Citus cluster (scripts/citus-cluster.sh: a coordinator and two worker nodes, concurrency_ext
installed), on a queue of 4 shards, each call made on worker node 1, on the node of the task it finishes:

  complete, no child           a parent without children (the baseline)
  complete, child here         its child in the same shard (edges in the rows)
  complete, child elsewhere    its child in a shard of worker node 2 (a message delivered there)
  enqueue after a parent here  a child enqueued beside its parent
  enqueue after one elsewhere  a child enqueued on worker node 1 after a parent on worker node 2

Rounds alternate (ROUNDS of N calls each, the order rotated each round); each side's time per call is the median
of its rounds, and the remote commands a call sends (citus.log_remote_commands) are counted once per side.

Usage: CITUS_PORTS="5621 5622 5623" python3 bench/citus_edges.py   [N=300 ROUNDS=5]
"""
import os
import statistics
import time

import psycopg

PORTS = [int(p) for p in os.environ.get("CITUS_PORTS", "5621 5622 5623").split()]
N = int(os.environ.get("N", "300"))
ROUNDS = int(os.environ.get("ROUNDS", "5"))
SHARDS = 4


def connect(port):
    return psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname="postgres", autocommit=True)


c, w1, w2 = (connect(p) for p in PORTS)
c.execute("CREATE EXTENSION IF NOT EXISTS concurrency_ext")
c.execute("SELECT concurrency.drop_queue('edges') FROM concurrency.queue WHERE name = 'edges'")
c.execute("SELECT concurrency.create_queue('edges', lease => '1 hour')")
c.execute("SELECT concurrency.distribute_queue('edges', %s)", (SHARDS,))
placed = {}
for port, pos in c.execute(
        "SELECT n.nodeport, s.pos FROM (SELECT shardid, row_number() OVER (ORDER BY shardid) - 1 AS pos"
        "   FROM pg_dist_shard WHERE logicalrelid = 'concurrency.q_edges'::regclass) s"
        " JOIN pg_dist_placement USING (shardid) JOIN pg_dist_node n USING (groupid)").fetchall():
    placed.setdefault(port, []).append(pos)
keys = {}
for k, pos in c.execute("SELECT k, concurrency_internal.distributed_key_position(%s, k)"
                        " FROM (SELECT 'k' || i AS k FROM generate_series(0, 99) i) s", (SHARDS,)).fetchall():
    keys.setdefault(pos, k)
here, there = keys[placed[PORTS[1]][0]], keys[placed[PORTS[2]][0]]


def enqueue(conn, key, after=None):
    return conn.execute("SELECT concurrency.enqueue('edges', '{}', concurrency_key => %s, after => %s::bigint[])",
                        (key, after)).fetchone()[0]


def leased(conn, key, n, child_key=None):
    """n tasks of `key` leased (with a child each, of child_key, when given): [(id, token)]."""
    ids = [enqueue(w1, key) for _ in range(n)]
    if child_key:
        for i in ids:
            enqueue(w2 if child_key == there else w1, child_key, [i])
    w1.execute("UPDATE concurrency.q_edges SET state = 'leased', lease_token = id, attempt = 1,"
               " lease_expires_at = now() + interval '1 hour' WHERE id = ANY (%s)", (ids,))
    return [(i, i) for i in ids]


def complete_side(child_key):
    def prepare():
        return leased(w1, here, N, child_key)

    def run(tasks):
        for i, t in tasks:
            w1.execute("SELECT concurrency.complete('edges', %s, %s)", (i, t))
    return prepare, run


def enqueue_side(parent_key):
    def prepare():
        return [enqueue(w1 if parent_key == here else w2, parent_key) for _ in range(N)]

    def run(parents):
        for p in parents:
            enqueue(w1, here, [p])
    return prepare, run


sides = {
    "complete, no child": complete_side(None),
    "complete, child here": complete_side(here),
    "complete, child elsewhere": complete_side(there),
    "enqueue after a parent here": enqueue_side(here),
    "enqueue after one elsewhere": enqueue_side(there),
}


def remote_commands(name):
    prepare, run = sides[name]
    args = prepare()[:1]
    seen = []

    def handler(d):
        seen.append(d.message_primary or "")
    w1.add_notice_handler(handler)
    w1.execute("SET citus.log_remote_commands = on")
    w1.execute("SET client_min_messages = log")
    run(args)
    w1.execute("RESET citus.log_remote_commands")
    w1.execute("RESET client_min_messages")
    w1.remove_notice_handler(handler)
    return len([m for m in seen if "issuing" in m])


times = {name: [] for name in sides}
names = list(sides)
for r in range(ROUNDS):
    order = names[r % len(names):] + names[:r % len(names)]
    for name in order:
        prepare, run = sides[name]
        args = prepare()
        start = time.perf_counter()
        run(args)
        times[name].append((time.perf_counter() - start) / N * 1000)
    c.execute("DELETE FROM concurrency.q_edges")

base = {"complete": statistics.median(times["complete, no child"]),
        "enqueue": statistics.median(times["enqueue after a parent here"])}
print(f"{N} calls a round, {ROUNDS} rounds, on worker node 1 (port {PORTS[1]})")
print("| side | ms per call (median of rounds) | range | ÷ baseline | remote commands per call |")
print("|---|---:|---:|---:|---:|")
for name in names:
    m = statistics.median(times[name])
    b = base["complete" if name.startswith("complete") else "enqueue"]
    print(f"| {name} | {m:.3f} | {min(times[name]):.3f}–{max(times[name]):.3f} | {m / b:.2f} | "
          f"{remote_commands(name)} |")
c.execute("SELECT concurrency.drop_queue('edges')")
