#!/usr/bin/env python3
"""Distributed queues on a Citus cluster (coordinator + 2 workers).

create_queue(…, distributed => true) or distribute_queue makes a queue's table a Citus distributed table sharded by
shard_key; the queue functions keep their names and send every task
statement and every claim to one shard. Checked here: the table's shape and
placement, router claims that rotate over the shards, fencing, leases,
retries, dead letters, dedupe keys, stats, task_status, cancel, purge and the
batch acknowledgements (router statements only), and exactly-once effects
(written to a distributed table) by workers connected to every node while
backends on a worker are killed and a worker node is restarted.
"""
import json
import re
import threading
import time

import psycopg

from citus_lib import (COORDINATOR, fresh_distributed_queue, WORKER1, WORKER2, check, connect, error_of,
                       kill_worker_backends, start_workers, remote_shards, restart_node, routed, run, scalar, sqlstate_of, wait_until)

SHARDS = 4


def setup():
    c = connect(COORDINATOR)
    c.execute("CREATE EXTENSION IF NOT EXISTS concurrency_ext")
    for q in ("dq", "chaos", "busy"):
        c.execute("SELECT concurrency.drop_queue(%s) FROM concurrency.queue WHERE name = %s", (q, q))
    c.execute("SELECT concurrency.create_queue('dq', lease => '2 seconds', max_attempts => 2)")
    c.execute("SELECT concurrency.distribute_queue('dq', %s)", (SHARDS,))


def positions(ids):
    return {i % 1024 for i in ids}


def first_claim(c, claim, tries=SHARDS):
    """The first row `claim` (a dequeue) returns in up to `tries` calls, or None."""
    for _ in range(tries):
        row = c.execute(claim).fetchone()
        if row:
            return row
    return None


def test_shape():
    c = connect(COORDINATOR)
    check("the queue's table is a distributed table sharded by shard_key",
          scalar(c, "SELECT distribution_column FROM citus_tables WHERE table_name = 'concurrency.q_dq'::regclass")
          == "shard_key")
    check(f"{SHARDS} shards", scalar(c, "SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'concurrency.q_dq'::regclass")
          == SHARDS)
    nodes = scalar(c, "SELECT count(DISTINCT nodeport) FROM citus_shards WHERE table_name = 'concurrency.q_dq'::regclass")
    check("the shards are placed on both workers", nodes == 2, f"{nodes} nodes")
    pk = scalar(c, "SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = 'concurrency.q_dq'::regclass "
                   "AND indisprimary")
    check("the primary key includes the shard key", "(shard_key, id)" in pk, pk)
    uniques = c.execute("SELECT pg_get_indexdef(indexrelid) FROM pg_index WHERE indrelid = 'concurrency.q_dq'::regclass "
                        "AND indisunique").fetchall()
    check("every unique index includes the shard key", all("shard_key" in u[0] for u in uniques), repr(uniques))
    keys = scalar(c, "SELECT shard_keys FROM concurrency.distributed_queue WHERE queue = 'dq'")
    shard_of = [scalar(c, "SELECT get_shard_id_for_distribution_column('concurrency.q_dq', %s)", (k,)) for k in keys]
    check("one shard key value per shard, in shard order", shard_of == sorted(shard_of) and len(set(shard_of)) == SHARDS,
          repr(shard_of))
    check("distribute_queue again is a no-op", sqlstate_of(lambda: c.execute("SELECT concurrency.distribute_queue('dq')")) is None)


def test_refusals():
    c = connect(COORDINATOR)
    c.execute("SELECT concurrency.create_queue('busy')")
    c.execute("SELECT concurrency.enqueue('busy', '{}')")
    e = error_of(lambda: c.execute("SELECT concurrency.distribute_queue('busy')"))
    check("distributing a queue with tasks: 55000", e is not None and e.sqlstate == "55000", repr(e))
    check("and the queue stays a local queue",
          scalar(c, "SELECT count(*) FROM citus_tables WHERE table_name::text = 'concurrency.q_busy'") == 0)
    c.execute("SELECT concurrency.drop_queue('busy')")
    check("shard_count above 1024: 22023", sqlstate_of(lambda: c.execute(
        "SELECT concurrency.create_queue('busy'); SELECT concurrency.distribute_queue('busy', 2000)")) == "22023")
    c.execute("SELECT concurrency.drop_queue('busy') FROM concurrency.queue WHERE name = 'busy'")
    check("an unknown queue: 42704", sqlstate_of(lambda: c.execute("SELECT concurrency.distribute_queue('nope')")) == "42704")
    w = connect(WORKER1)
    check("distribute_queue on a worker node: 0A000",
          sqlstate_of(lambda: w.execute("SELECT concurrency.distribute_queue('dq')")) == "0A000")


def test_enqueue_places_tasks():
    c = connect(COORDINATOR)
    ids = [scalar(c, "SELECT concurrency.enqueue('dq', %s)", (psycopg.types.json.Jsonb({"n": i}),)) for i in range(8)]
    check("round-robin enqueue spreads tasks over every shard", positions(ids) == set(range(SHARDS)), repr(ids))
    keys = scalar(c, "SELECT shard_keys FROM concurrency.distributed_queue WHERE queue = 'dq'")
    rows = c.execute("SELECT id, shard_key FROM concurrency.q_dq").fetchall()
    check("each task lives on the shard its id names", all(keys[i % 1024] == k for i, k in rows), repr(rows))
    a = scalar(c, "SELECT concurrency.enqueue('dq', '{}', dedupe_key => 'order-1')")
    b = scalar(c, "SELECT concurrency.enqueue('dq', '{}', dedupe_key => 'order-1')")
    check("a dedupe_key returns the live task's id", a == b, f"{a} {b}")
    # one claim takes tasks from one shard: claim until every shard is empty
    for _ in range(2 * SHARDS):
        c.execute("SELECT concurrency.complete('dq', t.task_id, t.lease_token) FROM concurrency.dequeue('dq', 100) t")
    check("claims and completes drain every shard", scalar(c, "SELECT count(*) FROM concurrency.q_dq") == 0)
    check("a dedupe_key is free again once its task is done",
          scalar(c, "SELECT concurrency.enqueue('dq', '{}', dedupe_key => 'order-1')") != a)
    drain(c)


def drain(c, queue="dq"):
    for _ in range(20):
        c.execute(f"SELECT concurrency.complete('{queue}', t.task_id, t.lease_token) FROM concurrency.dequeue('{queue}', 1000) t")
    c.execute(f"DELETE FROM concurrency.q_{queue}")


def test_router_claims_rotate():
    c = connect(COORDINATOR)
    for i in range(SHARDS * 3):
        c.execute("SELECT concurrency.enqueue('dq', '{}')")
    remote = []
    c.add_notice_handler(lambda d: remote.append(d.message_primary or ""))
    c.execute("SET citus.log_remote_commands = on")
    c.execute("SET client_min_messages = log")
    got = []
    per_claim = []
    for _ in range(SHARDS):
        remote.clear()
        got.append(scalar(c, "SELECT task_id FROM concurrency.dequeue('dq')"))
        # the claim's statements (not the chunk of purge a connection's first call runs, on a shard at random)
        shard_tables = {t for m in remote if "DELETE FROM" not in m for t in re.findall(r"q_dq_[0-9]+", m)}
        per_claim.append(shard_tables)
    c.execute("RESET citus.log_remote_commands")
    c.execute("RESET client_min_messages")
    check("every claim is sent to one shard only (router queries)", all(len(s) == 1 for s in per_claim), repr(per_claim))
    # each claim is made on one worker node, which takes from its own shards in turn
    check("successive claims take tasks from every shard", len({t % 1024 for t in got}) == SHARDS, repr(got))
    check("successive claims of one backend rotate over the shards", positions(got) == set(range(SHARDS)), repr(got))
    # several backends: claims spread over the shards
    conns = [connect(COORDINATOR) for _ in range(SHARDS)]
    firsts = [scalar(k, "SELECT task_id FROM concurrency.dequeue('dq')") for k in conns]
    check("backends start at different shards", len(positions([f for f in firsts if f])) >= 2, repr(firsts))
    drain(c)


def test_fencing_leases_retries():
    c = connect(COORDINATOR)
    tid = scalar(c, "SELECT concurrency.enqueue('dq', '{\"job\": 1}')")
    t1 = c.execute("SELECT task_id, lease_token, attempt FROM concurrency.dequeue('dq', 1, worker => 'w1')").fetchone()
    check("claim returns the task with attempt 1", t1 is not None and t1[0] == tid and t1[2] == 1, repr(t1))
    deadline = scalar(c, "SELECT concurrency.heartbeat('dq', %s, %s, '3 seconds')", (tid, t1[1]))
    check("heartbeat extends the lease", deadline is not None)
    check("a wrong token is fenced: CE001", sqlstate_of(
        lambda: c.execute("SELECT concurrency.complete('dq', %s, %s)", (tid, t1[1] + 999999))) == "CE001")
    time.sleep(3.3)  # the lease expires
    t2 = first_claim(c, "SELECT task_id, lease_token, attempt FROM concurrency.dequeue('dq', 1, worker => 'w2')",
                     SHARDS + 1)
    check("an expired lease is claimed again, attempt 2, new token",
          t2 is not None and t2[0] == tid and t2[2] == 2 and t2[1] != t1[1], repr(t2))
    e = error_of(lambda: c.execute("SELECT concurrency.complete('dq', %s, %s)", (tid, t1[1])))
    check("the first holder's complete is refused (CE001) and names the new holder",
          e is not None and e.sqlstate == "CE001" and "w2" in (e.diag.message_detail or ""), repr(e and e.diag.message_detail))
    check("heartbeat of the old holder is refused too",
          sqlstate_of(lambda: c.execute("SELECT concurrency.heartbeat('dq', %s, %s)", (tid, t1[1]))) == "CE001")
    state = scalar(c, "SELECT concurrency.fail('dq', %s, %s, 'boom', '0 seconds')", (tid, t2[1]))
    check("fail on the last attempt (max_attempts 2) makes the task dead", state == "dead", state)
    check("the dead task keeps its error", scalar(c, "SELECT last_error FROM concurrency.q_dq WHERE id = %s", (tid,)) == "boom")
    stats = c.execute("SELECT ready, leased, dead FROM concurrency.queue_stats WHERE queue = 'dq'").fetchone()
    check("queue_stats counts over every shard", stats == (0, 0, 1), repr(stats))
    check("retry_dead revives it", scalar(c, "SELECT concurrency.retry_dead('dq')") == 1)
    t3 = first_claim(c, "SELECT task_id, lease_token, attempt FROM concurrency.dequeue('dq')")
    check("a revived task starts its attempts again", t3 is not None and t3[2] == 1, repr(t3))
    state = scalar(c, "SELECT concurrency.fail('dq', %s, %s, 'again', '1 hour')", (tid, t3[1]))
    check("fail with attempts left: ready again (scheduled for later)", state == "ready" and scalar(
        c, "SELECT state FROM concurrency.q_dq WHERE id = %s", (tid,)) == "scheduled")
    check("complete of a task that is gone: CE001",
          sqlstate_of(lambda: c.execute("SELECT concurrency.complete('dq', 12345678, 1)")) == "CE001")
    drain(c)


def test_keys_limits_retention():
    c = connect(COORDINATOR)
    for q in ("kq", "rq", "lq"):
        c.execute("SELECT concurrency.drop_queue(%s) FROM concurrency.queue WHERE name = %s", (q, q))
    c.execute("SELECT concurrency.create_queue('kq')")
    c.execute("SELECT concurrency.distribute_queue('kq', %s)", (SHARDS,))
    a = [scalar(c, "SELECT concurrency.enqueue('kq', '{}', concurrency_key => 'tenant-a')") for _ in range(6)]
    check("every task of a concurrency_key is on one shard", len(positions(a)) == 1, repr(a))
    keyed = [scalar(c, "SELECT concurrency.enqueue('kq', '{}', concurrency_key => %s)", (f"t{i}",)) for i in range(40)]
    check("different keys spread over the shards", len(positions(keyed)) == SHARDS, repr(positions(keyed)))
    check("claims work on it", scalar(c, "SELECT count(*) FROM concurrency.dequeue('kq')") >= 1)
    c.execute("SELECT concurrency.create_queue('lq', max_leased => 2)")
    c.execute("SELECT concurrency.distribute_queue('lq')")
    check("distribute_queue keeps max_leased: its slots stay a table on the coordinator",
          scalar(c, "SELECT count(*) FROM concurrency.s_lq") == 2
          and scalar(c, "SELECT count(*) FROM citus_tables WHERE table_name::text = 'concurrency.s_lq'") == 0)
    c.execute("SELECT concurrency.create_queue('rq', retain => '1 hour')")
    c.execute("SELECT concurrency.distribute_queue('rq', %s)", (SHARDS,))
    tid = scalar(c, "SELECT concurrency.enqueue('rq', '{}', dedupe_key => 'once')")
    got = first_claim(c, "SELECT task_id, lease_token FROM concurrency.dequeue('rq')")
    c.execute("SELECT concurrency.complete('rq', %s, %s, '{\"ok\": true}')", got)
    row = c.execute("SELECT state, result FROM concurrency.q_rq WHERE id = %s", (tid,)).fetchone()
    check("complete on a retaining distributed queue keeps the task done with its result",
          row == ("done", {"ok": True}), repr(row))
    check("the retained done task keeps its dedupe_key",
          scalar(c, "SELECT concurrency.enqueue('rq', '{}', dedupe_key => 'once')") == tid)
    done = c.execute("SELECT done FROM concurrency.queue_stats WHERE queue = 'rq'").fetchone()
    check("queue_stats counts done tasks of a distributed queue", done == (1,), repr(done))
    for q in ("kq", "rq", "lq"):
        c.execute("SELECT concurrency.drop_queue(%s)", (q,))


def test_create_queue_distributed():
    c = connect(COORDINATOR)
    for q in ("cq", "cq_lim", "cq_local", "cq_busy", "cq_tx"):
        c.execute("SELECT concurrency.drop_queue(%s) FROM concurrency.queue WHERE name = %s", (q, q))
    c.execute("SELECT concurrency.create_queue('cq', lease => '5 seconds', distributed => true)")
    shard_count = int(scalar(c, "SHOW citus.shard_count"))
    check("create_queue(distributed => true) makes the table a distributed table sharded by shard_key",
          scalar(c, "SELECT distribution_column FROM citus_tables WHERE table_name = 'concurrency.q_cq'::regclass")
          == "shard_key")
    check("with citus.shard_count shards, one shard key each",
          scalar(c, "SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'concurrency.q_cq'::regclass") == shard_count
          and scalar(c, "SELECT cardinality(shard_keys) FROM concurrency.distributed_queue WHERE queue = 'cq'")
          == shard_count)
    tid = scalar(c, "SELECT concurrency.enqueue('cq', '{\"n\": 1}')")
    got = first_claim(c, "SELECT task_id, lease_token FROM concurrency.dequeue('cq')", shard_count)
    check("its tasks are enqueued, claimed and completed", got is not None and got[0] == tid
          and sqlstate_of(lambda: c.execute("SELECT concurrency.complete('cq', %s, %s)", got)) is None, repr(got))
    check("the same call again is a no-op", sqlstate_of(lambda: c.execute(
        "SELECT concurrency.create_queue('cq', lease => '5 seconds', distributed => true)")) is None)
    c.execute("SELECT concurrency.create_queue('cq', lease => '5 seconds')")
    check("distributed => false (the default) leaves a distributed queue distributed",
          scalar(c, "SELECT count(*) FROM concurrency.distributed_queue WHERE queue = 'cq'") == 1)
    c.execute("SELECT concurrency.create_queue('cq_lim', max_leased => 1, key_limit => 1, distributed => true)")
    check("create_queue(max_leased, key_limit, distributed => true) makes a distributed queue with both limits",
          scalar(c, "SELECT count(*) FROM concurrency.distributed_queue WHERE queue = 'cq_lim'") == 1
          and scalar(c, "SELECT count(*) FROM concurrency.s_cq_lim") == 1)
    check("distributed => NULL: 22004", sqlstate_of(lambda: c.execute(
        "SELECT concurrency.create_queue('cq_lim', distributed => NULL)")) == "22004")
    c.execute("SELECT concurrency.create_queue('cq_local')")
    c.execute("SELECT concurrency.create_queue('cq_local', distributed => true)")
    check("an existing empty local queue, asked again with distributed => true, is distributed",
          scalar(c, "SELECT count(*) FROM citus_tables WHERE table_name::text = 'concurrency.q_cq_local'") == 1)
    c.execute("SELECT concurrency.create_queue('cq_busy')")
    c.execute("SELECT concurrency.enqueue('cq_busy', '{}')")
    e = error_of(lambda: c.execute("SELECT concurrency.create_queue('cq_busy', distributed => true)"))
    check("an existing local queue with tasks: 55000, it stays local with its task",
          e is not None and e.sqlstate == "55000"
          and scalar(c, "SELECT count(*) FROM citus_tables WHERE table_name::text = 'concurrency.q_cq_busy'") == 0
          and scalar(c, "SELECT count(*) FROM concurrency.q_cq_busy") == 1, repr(e))
    # the transaction that distributes a queue uses it at once: every call is
    # the queue's C++ on the shards' nodes (no PL/pgSQL copy serves it)
    t = connect(COORDINATOR, autocommit=False)
    t.execute("SELECT concurrency.create_queue('cq_tx', key_limit => 1, max_leased => 3, distributed => true)")
    ids = [scalar(t, "SELECT concurrency.enqueue('cq_tx', %s, concurrency_key => %s)", (json.dumps({"i": i}), f"k{i % 3}"))
           for i in range(6)]
    ids += [r[0] for r in t.execute("SELECT * FROM concurrency.enqueue_batch('cq_tx', ARRAY['{}', '{}']::jsonb[])")]
    claimed = []
    for _ in range(4 * SHARDS):
        claimed += t.execute("SELECT task_id, lease_token FROM concurrency.dequeue('cq_tx', 3)").fetchall()
    check("in the transaction that distributed it: enqueue, enqueue_batch and dequeue under key_limit and "
          "max_leased (3 claimed, one per key or keyless)",
          len(set(ids)) == 8 and len(claimed) == 3 and {c_[0] for c_ in claimed} <= set(ids), repr(claimed))
    t.execute("SELECT concurrency.complete('cq_tx', %s, %s)", claimed[0])
    t.execute("SELECT concurrency.fail('cq_tx', %s, %s, 'no', retry_in => '0')", claimed[1])
    t.execute("SELECT concurrency.heartbeat('cq_tx', %s, %s, progress => '{\"p\": 1}')", claimed[2])
    st = t.execute("SELECT state, progress FROM concurrency.task_status('cq_tx', %s)", (claimed[2][0],)).fetchone()
    stats = t.execute("SELECT ready + scheduled + blocked + leased FROM concurrency.queue_stats WHERE queue = 'cq_tx'").fetchone()
    check("complete, fail, heartbeat with progress, task_status and queue_stats in that transaction",
          st == ("leased", {"p": 1}) and stats == (7,), repr((st, stats)))
    t.commit()
    check("committed: every node serves what it wrote (7 tasks live, 1 leased, its slot held)",
          scalar(c, "SELECT ready + scheduled + blocked + leased FROM concurrency.queue_stats WHERE queue = 'cq_tx'") == 7
          and scalar(c, "SELECT count(*) FROM concurrency.s_cq_tx WHERE task_id IS NOT NULL") == 1
          and all(scalar(connect(p_), "SELECT count(*) FROM concurrency.queue WHERE name = 'cq_tx'") == 1
                  for p_ in (WORKER1, WORKER2)))
    c.execute("SELECT concurrency.drop_queue('cq_tx')")
    # after a parallel query in the transaction Citus cannot make the shards on
    # one connection per node: the queue is refused until the commit
    t.execute("SELECT count(*) FROM concurrency.q_cq")
    t.execute("DELETE FROM concurrency.q_cq WHERE id = 0")
    t.execute("SELECT concurrency.create_queue('cq_tx', distributed => true)")
    e = error_of(lambda: t.execute("SELECT concurrency.enqueue('cq_tx', '{}')"))
    t.rollback()
    check("distributed after a parallel query in its transaction: 0A000 until the commit",
          e is not None and e.sqlstate == "0A000" and "committed" in (e.diag.message_hint or ""), repr(e))
    t.execute("SELECT count(*) FROM concurrency.q_cq")
    t.execute("DELETE FROM concurrency.q_cq WHERE id = 0")
    t.execute("SELECT concurrency.create_queue('cq_tx', distributed => true)")
    t.commit()
    check("and served once committed", scalar(c, "SELECT concurrency.enqueue('cq_tx', '{}')") is not None)
    c.execute("SELECT concurrency.drop_queue('cq_tx')")
    t.execute("SELECT concurrency.create_queue('cq_tx', distributed => true)")
    t.execute("SELECT concurrency.enqueue('cq_tx', '{}')")
    t.rollback()
    check("rolled back with its transaction: no queue, no distributed table",
          scalar(c, "SELECT count(*) FROM concurrency.queue WHERE name = 'cq_tx'") == 0
          and scalar(c, "SELECT count(*) FROM citus_tables WHERE table_name::text = 'concurrency.q_cq_tx'") == 0)
    t.close()
    for port in (WORKER1, WORKER2):
        w = connect(port)
        e = error_of(lambda: w.execute("SELECT concurrency.create_queue('cq_worker', distributed => true)"))
        check(f"on worker node {port}: 0A000 naming the node role, nothing created there",
              e is not None and e.sqlstate == "0A000" and "worker" in (e.diag.message_detail or "")
              and scalar(w, "SELECT count(*) FROM concurrency.queue WHERE name = 'cq_worker'") == 0
              and scalar(w, "SELECT to_regclass('concurrency.q_cq_worker')") is None, repr(e))
    for q in ("cq", "cq_local", "cq_busy", "cq_lim"):
        c.execute("SELECT concurrency.drop_queue(%s)", (q,))


def fresh_queue(c, name, **settings):
    fresh_distributed_queue(c, name, SHARDS, **settings)


def claim_all(c, queue, n, worker="w"):
    """Claims until n tasks are leased (claims visit one shard each): {task_id: lease_token}."""
    got = {}
    for _ in range(4 * SHARDS):
        for tid, token in c.execute("SELECT task_id, lease_token FROM concurrency.dequeue(%s, 100, worker => %s)",
                                    (queue, worker)).fetchall():
            got[tid] = token
        if len(got) >= n:
            break
    return got


def status(c, queue, tid):
    return c.execute("SELECT state, attempt, lease_expires_at, worker, finished_at, result, last_error "
                     "FROM concurrency.task_status(%s, %s)", (queue, tid)).fetchone()


def test_task_status():
    c = connect(COORDINATOR)
    fresh_queue(c, "sq", lease="1 minute")
    ready = scalar(c, "SELECT concurrency.enqueue('sq', '{}', priority => 7, dedupe_key => 'd-1', concurrency_key => 'k-1')")
    later = scalar(c, "SELECT concurrency.enqueue('sq', '{}', run_at => now() + interval '1 hour')")
    row = c.execute("SELECT * FROM concurrency.task_status('sq', %s)", (ready,)).fetchone()
    check("task_status: one row with the task's id, state, attempt, priority and keys",
          row is not None and row[0] == ready and row[1] == "ready" and row[2] == 0 and row[3] == 7
          and row[11] == "d-1" and row[12] == "k-1", repr(row))
    check("task_status: a task scheduled for later reads scheduled", status(c, "sq", later)[0] == "scheduled")
    rows, commands = remote_shards(c, "sq", "SELECT * FROM concurrency.task_status('sq', %s)", (ready,))
    check("task_status is one router query, to the shard its id names", len(commands) == 1 and routed(commands)
          and len(rows) == 1, repr(commands))
    got = claim_all(c, "sq", 1, worker="w-status")
    deadline = scalar(c, "SELECT concurrency.heartbeat('sq', %s, %s, '10 minutes')", (ready, got.get(ready)))
    st = status(c, "sq", ready)
    check("task_status of a leased task: leased, attempt 1, its worker and its current deadline",
          st is not None and st[0] == "leased" and st[1] == 1 and st[3] == "w-status" and st[2] == deadline, repr(st))
    missing = [ready + 1024 * 1000, (ready // 1024) * 1024 + 1000, -ready, 0]
    check("task_status of an id that is no task (a free id, a position past the shards, negative, 0): no row",
          all(c.execute("SELECT * FROM concurrency.task_status('sq', %s)", (m,)).fetchone() is None for m in missing))
    check("task_status of an unknown queue: 42704",
          sqlstate_of(lambda: c.execute("SELECT * FROM concurrency.task_status('nope', 1)")) == "42704")
    c.execute("SELECT concurrency.drop_queue('sq')")


def test_cancel():
    c = connect(COORDINATOR)
    fresh_queue(c, "cx", lease="30 seconds")
    ids = [scalar(c, "SELECT concurrency.enqueue('cx', '{}')") for _ in range(2 * SHARDS)]
    got = claim_all(c, "cx", 1, worker="w-cx")
    keyed = scalar(c, "SELECT concurrency.enqueue('cx', '{}', dedupe_key => 'once')")
    held = next(iter(got))
    waiting = [i for i in ids if i not in got][:3] + [keyed]
    stranger = held + 1024 * 1000
    n, commands = remote_shards(c, "cx", "SELECT concurrency.cancel('cx', %s)", (waiting + [held, stranger, -5],))
    check("cancel counts the tasks it cancelled (ready and leased ones; unknown ids count 0)",
          n[0][0] == len(waiting) + 1, repr(n))
    check("cancel sends router statements only, to the shards of the ids",
          routed(commands) and len(set().union(*commands)) >= 2, repr(commands))
    check("on a queue that retains nothing the cancelled unleased tasks are gone at once",
          all(status(c, "cx", i) is None for i in waiting))
    st = status(c, "cx", held)
    check("a cancelled leased task stays cancelled while its holder's lease runs", st is not None and st[0] == "cancelled"
          and st[4] is not None, repr(st))
    e = error_of(lambda: c.execute("SELECT concurrency.complete('cx', %s, %s)", (held, got[held])))
    check("the holder's complete gets CE001: the task was cancelled", e is not None and e.sqlstate == "CE001"
          and "cancelled at" in (e.diag.message_detail or ""), repr(e and e.diag.message_detail))
    check("its heartbeat too", sqlstate_of(
        lambda: c.execute("SELECT concurrency.heartbeat('cx', %s, %s)", (held, got[held]))) == "CE001")
    check("cancel again counts 0", scalar(c, "SELECT concurrency.cancel('cx', %s)", ([held] + waiting,)) == 0)
    check("a cancelled task releases its dedupe_key",
          scalar(c, "SELECT concurrency.enqueue('cx', '{}', dedupe_key => 'once')") != keyed)
    check("empty array: 0", scalar(c, "SELECT concurrency.cancel('cx', '{}')") == 0)
    check("a NULL element: 22004", sqlstate_of(
        lambda: c.execute("SELECT concurrency.cancel('cx', ARRAY[1, NULL]::bigint[])")) == "22004")
    stats = c.execute("SELECT cancelled FROM concurrency.queue_stats WHERE queue = 'cx'").fetchone()
    check("queue_stats counts the cancelled task that is kept", stats == (1,), repr(stats))
    # a retaining queue keeps cancelled tasks, a dead task can be cancelled, done tasks are left alone
    fresh_queue(c, "cr", retain="1 hour", max_attempts="1")
    a, b = (scalar(c, "SELECT concurrency.enqueue('cr', '{}')") for _ in range(2))
    got = claim_all(c, "cr", 2)
    c.execute("SELECT concurrency.fail('cr', %s, %s)", (a, got[a]))
    c.execute("SELECT concurrency.complete('cr', %s, %s)", (b, got[b]))
    check("cancel of a dead task and a done one: only the dead one", scalar(
        c, "SELECT concurrency.cancel('cr', %s)", ([a, b],)) == 1 and status(c, "cr", a)[0] == "cancelled"
        and status(c, "cr", b)[0] == "done")
    for q in ("cx", "cr"):
        c.execute("SELECT concurrency.drop_queue(%s)", (q,))


def test_batches():
    c = connect(COORDINATOR)
    fresh_queue(c, "bq", lease="1 minute", max_attempts="2")
    for _ in range(3 * SHARDS):
        c.execute("SELECT concurrency.enqueue('bq', '{}')")
    got = claim_all(c, "bq", 3 * SHARDS)
    check("batch setup: every task claimed", len(got) == 3 * SHARDS, repr(len(got)))
    ids = sorted(got)
    tokens = [got[i] for i in ids]

    # heartbeat_batch
    part = ids[:SHARDS + 1]
    rows, commands = remote_shards(c, "bq", "SELECT concurrency.heartbeat_batch('bq', %s, %s, '10 minutes')",
                                   (part, [got[i] for i in part]))
    deadline = rows[0][0]
    check("heartbeat_batch sends router statements only, to the shard of each task", routed(commands)
          and len(set().union(*commands)) == len({i % 1024 for i in part}), repr(commands))
    # each shard's node extends from its own clock: the call returns the earliest deadline
    check("heartbeat_batch moves every deadline to at least the one it returns, the earliest",
          all(status(c, "bq", i)[2] >= deadline for i in part)
          and min(status(c, "bq", i)[2] for i in part) == deadline, repr(deadline))
    before = [status(c, "bq", i)[2] for i in ids]
    e = error_of(lambda: c.execute("SELECT concurrency.heartbeat_batch('bq', %s, %s, '1 hour')",
                                   (ids, tokens[:-1] + [tokens[-1] + 999999])))
    check("heartbeat_batch with one wrong token: CE001 naming that task", e is not None and e.sqlstate == "CE001"
          and str(ids[-1]) in e.diag.message_primary, repr(e))
    check("and no deadline moved", [status(c, "bq", i)[2] for i in ids] == before)
    check("heartbeat_batch of empty arrays: NULL",
          scalar(c, "SELECT concurrency.heartbeat_batch('bq', '{}', '{}')") is None)

    # complete_batch: all or nothing; CE001 names the first lost lease in
    # argument order of the first shard (in shard order) that has one
    first, second = ids[0], ids[1]
    nowhere = (ids[2] // 1024) * 1024 + 1000
    e = error_of(lambda: c.execute("SELECT concurrency.complete_batch('bq', %s, %s)",
                                   ([ids[3], second, first], [got[ids[3]], got[second] + 999999, got[first] + 1])))
    named = first if first % 1024 < second % 1024 else second
    check("complete_batch with lost leases: CE001 naming the first of the first shard",
          e is not None and e.sqlstate == "CE001" and f"task {named} " in e.diag.message_primary, repr(e))
    e = error_of(lambda: c.execute("SELECT concurrency.complete_batch('bq', %s, %s)",
                                   ([ids[3], nowhere, first], [got[ids[3]], 1, got[first] + 1])))
    check("an id that names no shard of the queue: CE001, task does not exist",
          e is not None and e.sqlstate == "CE001" and f"task {nowhere} of" in e.diag.message_primary
          and "does not exist" in e.diag.message_primary, repr(e))
    check("and nothing was completed", all(status(c, "bq", i) is not None for i in ids))
    part = ids[:SHARDS + 2]
    rows, commands = remote_shards(c, "bq", "SELECT concurrency.complete_batch('bq', %s, %s)",
                                   (part, [got[i] for i in part]))
    check("complete_batch completes every task and returns how many", rows[0][0] == len(part)
          and all(status(c, "bq", i) is None for i in part), repr(rows))
    check("complete_batch sends router statements only, to the shard of each task", routed(commands)
          and len(set().union(*commands)) == len({i % 1024 for i in part}), repr(commands))
    check("complete_batch of empty arrays: 0", scalar(c, "SELECT concurrency.complete_batch('bq', '{}', '{}')") == 0)
    check("complete_batch with a task twice: 22023", sqlstate_of(lambda: c.execute(
        "SELECT concurrency.complete_batch('bq', %s, %s)", ([ids[-1], ids[-1]], [1, 1]))) == "22023")
    check("complete_batch of arrays of different lengths: 22023", sqlstate_of(lambda: c.execute(
        "SELECT concurrency.complete_batch('bq', %s, %s)", ([ids[-1]], [1, 2]))) == "22023")

    # fail_batch: rows in argument order; attempts left: ready; used up: dead
    rest = ids[SHARDS + 2:]
    order = list(reversed(rest))
    e = error_of(lambda: c.execute("SELECT * FROM concurrency.fail_batch('bq', %s, %s)",
                                   (order, [got[i] for i in order[:-1]] + [got[order[-1]] + 1])))
    check("fail_batch with a lost lease: CE001, nothing failed", e is not None and e.sqlstate == "CE001"
          and all(status(c, "bq", i)[0] == "leased" for i in rest), repr(e))
    rows, commands = remote_shards(c, "bq", "SELECT * FROM concurrency.fail_batch('bq', %s, %s, 'boom', '0 seconds')",
                                   (order, [got[i] for i in order]))
    check("fail_batch: one row per task in argument order, ready with attempts left",
          [r[0] for r in rows] == order and all(r[1] == "ready" for r in rows), repr(rows))
    check("fail_batch sends router statements only", routed(commands), repr(commands))
    check("failed tasks keep the error and no lease",
          all(status(c, "bq", i)[0] == "ready" and status(c, "bq", i)[6] == "boom" for i in rest))
    again = claim_all(c, "bq", len(rest))
    rows = c.execute("SELECT * FROM concurrency.fail_batch('bq', %s, %s, 'boom 2', '1 hour')",
                     (order, [again.get(i, 0) for i in order])).fetchall()
    check("fail_batch on the last attempt: dead", [r for r in rows] == [(i, "dead") for i in order], repr(rows))
    check("empty fail_batch: no rows", c.execute("SELECT * FROM concurrency.fail_batch('bq', '{}', '{}')").fetchall() == [])
    check("retry_in below zero: 22023", sqlstate_of(lambda: c.execute(
        "SELECT * FROM concurrency.fail_batch('bq', '{}', '{}', retry_in => '-1 second')")) == "22023")

    # a retaining queue keeps batch-completed tasks as done
    fresh_queue(c, "br", retain="1 hour")
    tids = [scalar(c, "SELECT concurrency.enqueue('br', '{}')") for _ in range(SHARDS)]
    held = claim_all(c, "br", SHARDS)
    check("complete_batch on a retaining queue keeps every task done",
          scalar(c, "SELECT concurrency.complete_batch('br', %s, %s)", (tids, [held.get(i, 0) for i in tids])) == SHARDS
          and all(status(c, "br", i)[0] == "done" for i in tids))
    e = error_of(lambda: c.execute("SELECT concurrency.complete_batch('br', %s, %s)", (tids[:1], [held.get(tids[0], 0)])))
    check("completing a done task again: CE001, the task was completed",
          e is not None and e.sqlstate == "CE001" and "completed at" in (e.diag.message_detail or ""), repr(e))
    for q in ("bq", "br"):
        c.execute("SELECT concurrency.drop_queue(%s)", (q,))


def test_purge():
    c = connect(COORDINATOR)
    fresh_queue(c, "pq", retain="3 seconds", lease="2 seconds")
    tids = [scalar(c, "SELECT concurrency.enqueue('pq', '{}')") for _ in range(2 * SHARDS)]
    held = claim_all(c, "pq", len(tids))
    done = tids[:SHARDS + 1]
    c.execute("SELECT concurrency.complete_batch('pq', %s, %s)", (done, [held[i] for i in done]))
    leased = tids[-1]
    c.execute("SELECT concurrency.heartbeat('pq', %s, %s, '6 seconds')", (leased, held[leased]))
    c.execute("SELECT concurrency.cancel('pq', %s)", ([leased],))
    check("purge keeps tasks inside their retention", scalar(c, "SELECT concurrency.purge('pq')") == 0)
    time.sleep(3.2)
    rows, commands = remote_shards(c, "pq", "SELECT concurrency.purge('pq')")
    check("purge deletes the done tasks past their retention, not a cancelled one whose lease runs",
          rows[0][0] == len(done) and all(status(c, "pq", i) is None for i in done)
          and status(c, "pq", leased)[0] == "cancelled", repr(rows))
    # each worker node purges its own shards: one routed call per node
    check("purge sends router statements only, one call to each worker node", routed(commands)
          and len(set().union(*commands)) == len((WORKER1, WORKER2)), repr(commands))
    time.sleep(3.5)  # the cancelled task's lease ends
    check("after the lease, purge deletes the cancelled task", scalar(c, "SELECT concurrency.purge('pq')") == 1
          and status(c, "pq", leased) is None)
    check("live tasks are left alone", all(status(c, "pq", i) is not None for i in tids[SHARDS + 1:-1]))
    c.execute("SELECT concurrency.drop_queue('pq')")


def test_purge_by_queue_calls():
    c = connect(COORDINATOR)
    fresh_queue(c, "pc", retain="3 seconds")
    tids = [scalar(c, "SELECT concurrency.enqueue('pc', '{}')") for _ in range(2 * SHARDS)]
    held = claim_all(c, "pc", len(tids))
    c.execute("SELECT concurrency.complete_batch('pc', %s, %s)", (tids, [held.get(i, 0) for i in tids]))

    def first_call():
        # a new connection: its first queue call purges a chunk (of one shard)
        k = connect(COORDINATOR)
        try:
            return remote_shards(k, "pc", "SELECT * FROM concurrency.dequeue('pc')")[1]
        finally:
            k.close()
    first_call()
    check("queue calls keep the finished tasks inside their retention",
          scalar(c, "SELECT count(*) FROM concurrency.q_pc") == len(tids))
    time.sleep(3.2)
    commands = []
    left = len(tids)
    for _ in range(60):
        commands += first_call()
        left = scalar(c, "SELECT count(*) FROM concurrency.q_pc")
        if left == 0:
            break
    check("dequeue purges the done tasks past their retention of every shard, without purge()", left == 0,
          f"{left} left")
    check("with router statements only", routed(commands), repr(commands))
    c.execute("SELECT concurrency.drop_queue('pc')")


# --- key_limit on a distributed queue ---

def one_shard_group(c, commands):
    """Every command names one shard, and all of them shards of one group (a key's row and its tasks)."""
    if not commands or not all(len(s) == 1 for s in commands):
        return False
    ids = {int(n.rsplit("_", 1)[1]) for s in commands for n in s}
    groups = {scalar(c, "SELECT shardminvalue FROM pg_dist_shard WHERE shardid = %s", (i,)) for i in ids}
    return len(groups) == 1


def key_states(c, queue, key, cancelled=True):
    """The states of a key's tasks in enqueue order (cancelled=False: without the cancelled ones, which a queue that
    retains nothing keeps only until their holder's lease ends)."""
    return [r[0] for r in c.execute(f"SELECT state FROM concurrency.q_{queue} WHERE concurrency_key = %s ORDER BY id",
                                    (key,)).fetchall() if cancelled or r[0] != "cancelled"]


def test_key_limit_admission():
    c = connect(COORDINATOR)
    fresh_queue(c, "kl", lease="1 second", max_attempts="1", key_limit="1")
    dist = c.execute("SELECT table_name::text, distribution_column, colocation_id FROM citus_tables "
                     "WHERE table_name IN ('concurrency.q_kl'::regclass, 'concurrency.k_kl'::regclass) "
                     "ORDER BY 1").fetchall()
    check("key_limit: the key table is distributed by shard_key, co-located with the queue's table",
          len(dist) == 2 and all(d[1] == "shard_key" for d in dist) and dist[0][2] == dist[1][2], repr(dist))
    rows, commands = remote_shards(c, "kl", "SELECT concurrency.enqueue('kl', '{}', concurrency_key => 'acct')",
                                   tables="qk")
    a = rows[0][0]
    check("a keyed enqueue sends router statements only, all to the key's shard (its row and its tasks)",
          one_shard_group(c, commands), repr(commands))
    b, d, e, f = (scalar(c, "SELECT concurrency.enqueue('kl', '{}', concurrency_key => 'acct')") for _ in range(4))
    check("the first task of a serial key is ready, the others blocked",
          key_states(c, "kl", "acct") == ["ready"] + ["blocked"] * 4, repr(key_states(c, "kl", "acct")))
    check("a key's row is in the key table while it has tasks",
          scalar(c, "SELECT count(*) FROM concurrency.k_kl WHERE concurrency_key = 'acct'") == 1)
    got = claim_all(c, "kl", 5)
    check("claims take only the admitted task", list(got) == [a], repr(got))
    rows, commands = remote_shards(c, "kl", "SELECT concurrency.complete('kl', %s, %s)", (a, got[a]), tables="qk")
    check("complete admits the key's next task", key_states(c, "kl", "acct") == ["ready"] + ["blocked"] * 3,
          repr(key_states(c, "kl", "acct")))
    check("complete with its admission: router statements only, to the key's shard", one_shard_group(c, commands),
          repr(commands))
    got = claim_all(c, "kl", 1)
    check("the admitted task is claimed next", list(got) == [b], repr(got))
    rows, commands = remote_shards(c, "kl", "SELECT concurrency.fail('kl', %s, %s, 'boom')", (b, got[b]), tables="qk")
    check("fail for good (dead) admits the next task", rows[0][0] == "dead"
          and key_states(c, "kl", "acct") == ["dead", "ready", "blocked", "blocked"], repr(key_states(c, "kl", "acct")))
    check("fail with its admission: router statements only, to the key's shard", one_shard_group(c, commands),
          repr(commands))
    got = claim_all(c, "kl", 1)
    rows, commands = remote_shards(c, "kl", "SELECT concurrency.cancel('kl', %s)", ([d],), tables="qk")
    check("cancel of a leased task admits the next one",
          rows[0][0] == 1 and key_states(c, "kl", "acct") == ["dead", "cancelled", "ready", "blocked"],
          repr(key_states(c, "kl", "acct")))
    check("cancel with its admission: router statements only, to the key's shard", one_shard_group(c, commands),
          repr(commands))
    got = claim_all(c, "kl", 1)
    check("then the admitted task is claimed", list(got) == [e], repr(got))
    time.sleep(1.3)  # e's lease expires: with max_attempts 1 it dies when reclaimed
    got = claim_all(c, "kl", 1)
    check("a lease expiring for good admits the next task (and the claim takes it)",
          list(got) == [f] and key_states(c, "kl", "acct")[-2:] == ["dead", "leased"],
          repr((got, key_states(c, "kl", "acct"))))
    check("retry_dead brings dead tasks of a full key back blocked",
          scalar(c, "SELECT concurrency.retry_dead('kl', %s)", ([b, e],)) == 2
          and sorted(key_states(c, "kl", "acct", cancelled=False)) == ["blocked", "blocked", "leased"],
          repr(key_states(c, "kl", "acct")))
    stats = c.execute("SELECT blocked, leased FROM concurrency.queue_stats WHERE queue = 'kl'").fetchone()
    check("queue_stats counts the blocked tasks of a distributed queue", stats == (2, 1), repr(stats))
    keys = c.execute("SELECT concurrency_key, leased, waiting FROM concurrency.queue_keys('kl')").fetchall()
    check("queue_keys covers a distributed queue", keys == [("acct", 1, 2)], repr(keys))
    c.execute("SELECT concurrency.complete('kl', %s, %s)", (f, got[f]))
    check("complete admits the revived tasks in enqueue order",
          key_states(c, "kl", "acct", cancelled=False) == ["ready", "blocked"], repr(key_states(c, "kl", "acct")))
    check("cancel of a blocked task admits nothing", scalar(c, "SELECT concurrency.cancel('kl', %s)", ([e],)) == 1
          and key_states(c, "kl", "acct", cancelled=False) == ["ready"], repr(key_states(c, "kl", "acct")))
    got = claim_all(c, "kl", 1)
    c.execute("SELECT concurrency.complete_batch('kl', %s, %s)", (list(got), list(got.values())))
    time.sleep(1.1)  # the cancelled task's holder's lease ends
    c.execute("SELECT concurrency.purge('kl')")
    check("a key without live tasks leaves the key table",
          scalar(c, "SELECT count(*) FROM concurrency.k_kl") == 0 and key_states(c, "kl", "acct") == [],
          repr(key_states(c, "kl", "acct")))
    c.execute("SELECT concurrency.drop_queue('kl')")
    check("drop_queue drops the distributed key table too", scalar(c, "SELECT to_regclass('concurrency.k_kl')") is None)


def test_key_limit_batches():
    c = connect(COORDINATOR)
    fresh_queue(c, "kb", lease="1 minute", max_attempts="1", key_limit="2")
    ids = [r[0] for r in c.execute(
        "SELECT * FROM concurrency.enqueue_batch('kb', array_fill('{}'::jsonb, ARRAY[8]), "
        "concurrency_keys => ARRAY['p', 'q', 'p', 'q', 'p', 'q', 'p', 'q'])").fetchall()]
    check("enqueue_batch admits key_limit tasks of each key and blocks the rest",
          key_states(c, "kb", "p") == ["ready", "ready", "blocked", "blocked"]
          and key_states(c, "kb", "q") == ["ready", "ready", "blocked", "blocked"],
          repr((key_states(c, "kb", "p"), key_states(c, "kb", "q"))))
    got = claim_all(c, "kb", 4)
    check("claims take the admitted tasks only", sorted(got) == sorted(ids[:4]), repr(got))
    p1, q1, p2, q2 = ids[:4]
    rows, commands = remote_shards(c, "kb", "SELECT concurrency.complete_batch('kb', %s, %s)",
                                   ([p1, q1], [got.get(p1, 0), got.get(q1, 0)]), tables="qk")
    check("complete_batch admits the next task of each key",
          key_states(c, "kb", "p") == ["leased", "ready", "blocked"]
          and key_states(c, "kb", "q") == ["leased", "ready", "blocked"],
          repr((key_states(c, "kb", "p"), key_states(c, "kb", "q"))))
    check("complete_batch with admissions: router statements only", routed(commands), repr(commands))
    rows = c.execute("SELECT * FROM concurrency.fail_batch('kb', %s, %s)",
                     ([p2, q2], [got.get(p2, 0), got.get(q2, 0)])).fetchall()
    check("fail_batch for good admits the next task of each key", [r[1] for r in rows] == ["dead", "dead"]
          and key_states(c, "kb", "p") == ["dead", "ready", "ready"]
          and key_states(c, "kb", "q") == ["dead", "ready", "ready"],
          repr((key_states(c, "kb", "p"), key_states(c, "kb", "q"))))
    c.execute("SELECT concurrency.drop_queue('kb')")


def test_key_limit_alter():
    c = connect(COORDINATOR)
    c.execute("SELECT concurrency.drop_queue('ka') FROM concurrency.queue WHERE name = 'ka'")
    c.execute("SELECT concurrency.create_queue('ka', lease => '1 minute', key_limit => 5, distributed => true)")
    check("create_queue(key_limit, distributed => true) makes a distributed queue with its key_limit",
          scalar(c, "SELECT count(*) FROM concurrency.distributed_queue WHERE queue = 'ka'") == 1
          and scalar(c, "SELECT key_limit FROM concurrency.queue WHERE name = 'ka'") == 5)
    c.execute("SELECT concurrency.alter_queue('ka', key_limit => 0)")
    x = [scalar(c, "SELECT concurrency.enqueue('ka', '{}', concurrency_key => 'x')") for _ in range(6)]
    check("without key_limit every task of a key is ready", set(key_states(c, "ka", "x")) == {"ready"})
    got = {}
    for _ in range(4 * SHARDS):
        got = dict(c.execute("SELECT task_id, lease_token FROM concurrency.dequeue('ka')").fetchall())
        if set(got) & set(x):
            break
        if got:
            c.execute("SELECT concurrency.complete('ka', %s, %s)", next(iter(got.items())))
    check("setup: the first task of key x claimed", list(got) == [x[0]], repr((got, x)))
    for _ in range(2):
        c.execute("SELECT concurrency.enqueue('ka', '{}', concurrency_key => 'y')")
    c.execute("SELECT concurrency.alter_queue('ka', key_limit => 3)")
    check("alter_queue(key_limit => 3): per key the first tasks up to the limit (the leased one counts) stay admitted",
          key_states(c, "ka", "x") == ["leased", "ready", "ready", "blocked", "blocked", "blocked"],
          repr(key_states(c, "ka", "x")))
    c.execute("SELECT concurrency.alter_queue('ka', key_limit => 1)")
    check("lowering key_limit holds back the rest; a leased task stays leased",
          key_states(c, "ka", "x") == ["leased"] + ["blocked"] * 5 and key_states(c, "ka", "y") == ["ready", "blocked"],
          repr((key_states(c, "ka", "x"), key_states(c, "ka", "y"))))
    c.execute("SELECT concurrency.alter_queue('ka', key_limit => 4)")
    check("raising key_limit admits blocked tasks in enqueue order",
          key_states(c, "ka", "x") == ["leased", "ready", "ready", "ready", "blocked", "blocked"],
          repr(key_states(c, "ka", "x")))
    c.execute("SELECT concurrency.alter_queue('ka', key_limit => 0)")
    check("removing key_limit admits every task",
          "blocked" not in key_states(c, "ka", "x") + key_states(c, "ka", "y"))
    c.execute("SELECT concurrency.drop_queue('ka')")


def test_key_limit_concurrent():
    """Six connections claim, hold and complete (some fail once and are retried) tasks of four keys with
    key_limit 2, while backends on a worker are killed once: a key never has more than 2 leased tasks."""
    c = connect(COORDINATOR)
    fresh_queue(c, "kc", lease="3 seconds", max_attempts="50", key_limit="2")
    keys = ["k0", "k1", "k2", "k3"]
    c.execute("SELECT concurrency.enqueue_batch('kc', array_agg(jsonb_build_object('n', g) ORDER BY g), "
              "concurrency_keys => array_agg('k' || (g % 4) ORDER BY g)) FROM generate_series(0, 39) g")
    c.execute("SELECT concurrency.enqueue_batch('kc', array_fill('{}'::jsonb, ARRAY[10]))")
    lock = threading.Lock()
    running = {k: 0 for k in keys}
    seen_max = {k: 0 for k in keys}
    db_max = {k: 0 for k in keys}
    stop = threading.Event()
    errors = []

    def worker():
        conn = None
        while not stop.is_set():
            try:
                if conn is None or conn.closed:
                    conn = connect(COORDINATOR)
                rows = conn.execute("SELECT t.task_id, t.lease_token, t.attempt, t.payload "
                                    "FROM concurrency.dequeue('kc', 2) t").fetchall()
                if not rows:
                    time.sleep(0.02)
                    continue
                tasks = [(tid, token, attempt, f"k{p['n'] % 4}" if "n" in p else None)
                         for tid, token, attempt, p in rows]
                with lock:
                    for t in tasks:
                        if t[3]:
                            running[t[3]] += 1
                            seen_max[t[3]] = max(seen_max[t[3]], running[t[3]])
                time.sleep(0.03)
                with lock:
                    for t in tasks:
                        if t[3]:
                            running[t[3]] -= 1
                for tid, token, attempt, _ in tasks:
                    if tid % 3 == 0 and attempt == 1:
                        conn.execute("SELECT concurrency.fail('kc', %s, %s, 'once', '0 seconds')", (tid, token))
                    else:
                        conn.execute("SELECT concurrency.complete('kc', %s, %s)", (tid, token))
            except psycopg.Error as e:
                errors.append(e.sqlstate or type(e).__name__)
                try:
                    conn.close()
                except Exception:  # noqa: BLE001
                    pass
                conn = None
                time.sleep(0.05)

    def monitor():
        m = None
        while not stop.is_set():
            try:
                if m is None or m.closed:
                    m = connect(COORDINATOR)
                for key, n in m.execute("SELECT concurrency_key, count(*) FROM concurrency.q_kc WHERE state = 'leased' "
                                        "AND concurrency_key IS NOT NULL GROUP BY 1").fetchall():
                    db_max[key] = max(db_max[key], n)
            except psycopg.Error:
                m = None  # its connection to the worker was killed: reconnect
            time.sleep(0.01)

    def left():
        try:
            return scalar(connect(COORDINATOR), "SELECT count(*) FROM concurrency.q_kc")
        except psycopg.Error:
            return None

    threads = [threading.Thread(target=worker) for _ in range(6)] + [threading.Thread(target=monitor)]
    for t in threads:
        t.start()
    time.sleep(0.8)
    killed = kill_worker_backends(WORKER1)
    done = wait_until(lambda: left() == 0, timeout=120, step=0.2)
    stop.set()
    for t in threads:
        t.join()
    c = connect(COORDINATOR)
    check(f"key_limit under concurrent claims: the queue drained ({killed} backends on a worker killed meanwhile)",
          done and killed > 0, f"{left()} left, errors {errors[:5]}")
    check("key_limit under concurrent claims: no key ever had more than 2 leased tasks (sampled in the database)",
          max(db_max.values()) <= 2, repr(db_max))
    check("key_limit under concurrent claims: no key ever had more than 2 tasks at work (counted by the workers)",
          max(seen_max.values()) <= 2, repr(seen_max))
    check("key_limit under concurrent claims: keys did run 2 tasks at once (so the check above can fail)",
          max(seen_max.values()) == 2 or max(db_max.values()) == 2, repr((seen_max, db_max)))
    check("key_limit under concurrent claims: the key table is empty afterwards",
          scalar(c, "SELECT count(*) FROM concurrency.k_kc") == 0)
    c.execute("SELECT concurrency.drop_queue('kc')")


def test_serial_key_order():
    """key_limit 1: a key's tasks run one at a time in enqueue order, a failed one retried before the next."""
    c = connect(COORDINATOR)
    fresh_queue(c, "ko", lease="30 seconds", key_limit="1")
    n = 12
    for i in range(n):
        c.execute("SELECT concurrency.enqueue('ko', %s, concurrency_key => 'serial')",
                  (psycopg.types.json.Jsonb({"n": i}),))
        c.execute("SELECT concurrency.enqueue('ko', '{\"n\": -1}', concurrency_key => %s)", (f"other-{i}",))
    lock = threading.Lock()
    order = []
    overlap = []
    busy = [0]
    stop = threading.Event()

    def worker():
        conn = connect(COORDINATOR)
        while not stop.is_set():
            row = conn.execute("SELECT task_id, lease_token, payload, attempt FROM concurrency.dequeue('ko')").fetchone()
            if row is None:
                time.sleep(0.01)
                continue
            tid, token, payload, attempt = row
            if payload["n"] >= 0:
                with lock:
                    busy[0] += 1
                    overlap.append(busy[0])
                    order.append(payload["n"])
                time.sleep(0.02)
                with lock:
                    busy[0] -= 1
            if payload["n"] == 3 and attempt == 1:
                conn.execute("SELECT concurrency.fail('ko', %s, %s, 'retry me', '0 seconds')", (tid, token))
            else:
                conn.execute("SELECT concurrency.complete('ko', %s, %s)", (tid, token))
        conn.close()

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    done = wait_until(lambda: scalar(c, "SELECT count(*) FROM concurrency.q_ko") == 0, timeout=60, step=0.1)
    stop.set()
    for t in threads:
        t.join()
    check("serial key: every task ran", done and sorted(set(order)) == list(range(n)), repr(order))
    check("serial key: in enqueue order, the failed task retried before the next",
          order == [0, 1, 2, 3, 3] + list(range(4, n)), repr(order))
    check("serial key: one at a time", max(overlap, default=0) == 1, repr(max(overlap, default=0)))
    c.execute("SELECT concurrency.drop_queue('ko')")


# --- max_leased on a distributed queue ---

def leased_count(c, queue):
    return scalar(c, f"SELECT count(*) FROM concurrency.q_{queue} WHERE state = 'leased'")


def sample_leased(queue, stop, peak):
    """Until `stop` is set, samples how many tasks of `queue` are leased, the largest count into peak[0]."""
    m = connect(COORDINATOR)
    while not stop.is_set():
        peak[0] = max(peak[0], leased_count(m, queue))
        time.sleep(0.01)
    m.close()


def claim_with(c, queue, n, lease="30 seconds"):
    """Claims (batches of 10) until n tasks are leased or every shard came back empty twice: {task_id: token}."""
    got = {}
    for _ in range(2 * SHARDS):
        for tid, token in c.execute("SELECT task_id, lease_token FROM concurrency.dequeue(%s, 10, %s)",
                                    (queue, lease)).fetchall():
            got[tid] = token
        if len(got) >= n:
            break
    return got


def test_max_leased():
    c = connect(COORDINATOR)
    fresh_queue(c, "ml", lease="30 seconds", max_leased="3")
    for _ in range(3 * SHARDS):
        c.execute("SELECT concurrency.enqueue('ml', '{}')")
    # (an empty complete_batch runs this connection's purge of the queue, a chunk of one shard at random, at most
    # once a second: the claim below then sends only its own statements)
    c.execute("SELECT concurrency.complete_batch('ml', '{}', '{}')")
    rows, commands = remote_shards(c, "ml", "SELECT task_id, lease_token FROM concurrency.dequeue('ml', 10)")
    check("max_leased: a claim of 10 takes max_leased (3) tasks, with router statements to one shard",
          len(rows) == 3 and len(commands) >= 1 and routed(commands) and len(set().union(*commands)) == 1,
          repr((rows, commands)))
    held = dict(rows)
    check("max_leased: no further claim goes past it", claim_with(c, "ml", 1) == {} and leased_count(c, "ml") == 3)
    x1, x2, x3 = list(held)
    c.execute("SELECT concurrency.complete('ml', %s, %s)", (x1, held.pop(x1)))
    more = claim_with(c, "ml", 2)
    check("max_leased: complete frees its slot for one claim", len(more) == 1, repr(more))
    held.update(more)
    c.execute("SELECT concurrency.fail('ml', %s, %s, 'later', '1 hour')", (x2, held.pop(x2)))
    more = claim_with(c, "ml", 2)
    check("max_leased: fail (a retry) frees its slot for one claim", len(more) == 1, repr(more))
    held.update(more)
    c.execute("SELECT concurrency.cancel('ml', %s)", ([x3],))
    held.pop(x3)
    more = claim_with(c, "ml", 2)
    check("max_leased: cancel frees its slot for one claim", len(more) == 1, repr(more))
    held.update(more)
    x4 = next(iter(more))
    check("max_leased: a release with a lost lease is CE001 and frees no slot", sqlstate_of(
        lambda: c.execute("SELECT concurrency.release('ml', %s, %s)", (x4, held[x4] + 1))) == "CE001"
        and claim_with(c, "ml", 1) == {} and leased_count(c, "ml") == 3)
    c.execute("SELECT concurrency.release('ml', %s, %s)", (x4, held.pop(x4)))
    row = c.execute("SELECT state, attempt FROM concurrency.task_status('ml', %s)", (x4,)).fetchone()
    check("max_leased: release hands the task back (ready, its attempt not counted)", row == ("ready", 0), repr(row))
    more = claim_with(c, "ml", 2)
    check("max_leased: release frees its slot for one claim", len(more) == 1, repr(more))
    held.update(more)
    c.execute("SELECT concurrency.alter_queue('ml', max_leased => 5)")
    more = claim_with(c, "ml", 5)
    check("max_leased: alter_queue raising it lets that many more be claimed", len(more) == 2
          and leased_count(c, "ml") == 5, repr(more))
    held.update(more)
    c.execute("SELECT concurrency.alter_queue('ml', max_leased => 2)")
    check("max_leased: lowered below the running leases, no claim until they end",
          claim_with(c, "ml", 1) == {} and leased_count(c, "ml") == 5)
    c.execute("SELECT concurrency.complete_batch('ml', %s, %s)", (list(held), list(held.values())))
    short = claim_with(c, "ml", 2, lease="1 second")
    check("max_leased: complete_batch frees the slots (2 claimed again)", len(short) == 2, repr(short))
    keep, lapse = list(short)
    # the other ready tasks cancelled: the claim below can take only the task whose lease expires
    others = [r[0] for r in c.execute("SELECT id FROM concurrency.q_ml WHERE state = 'ready'").fetchall()]
    c.execute("SELECT concurrency.cancel('ml', %s)", (others,))
    c.execute("SELECT concurrency.heartbeat('ml', %s, %s, '30 seconds', progress => '{\"step\": 1}')",
              (keep, short[keep]))
    c.execute("SELECT concurrency.heartbeat_batch('ml', %s, %s, progress => ARRAY['{\"step\": 2}'::jsonb])",
              ([keep], [short[keep]]))
    row = c.execute("SELECT state, progress FROM concurrency.task_status('ml', %s)", (keep,)).fetchone()
    check("max_leased: heartbeat and heartbeat_batch keep progress", row == ("leased", {"step": 2}), repr(row))
    time.sleep(1.4)  # the other lease expires
    again = claim_with(c, "ml", 2)
    check("max_leased: the slot of an expired lease is taken again (its task reclaimed and claimed), "
          "the heartbeated one keeps its slot", list(again) == [lapse] and leased_count(c, "ml") == 2,
          repr((again, lapse)))
    check("max_leased: the heartbeated holder still completes",
          sqlstate_of(lambda: c.execute("SELECT concurrency.complete('ml', %s, %s)", (keep, short[keep]))) is None)
    check("max_leased: the expired holder is fenced (CE001)", sqlstate_of(
        lambda: c.execute("SELECT concurrency.complete('ml', %s, %s)", (lapse, short[lapse]))) == "CE001")
    c.execute("SELECT concurrency.alter_queue('ml', max_leased => 0)")
    for _ in range(3 * SHARDS):
        c.execute("SELECT concurrency.enqueue('ml', '{}')")
    rest = claim_with(c, "ml", 3 * SHARDS)
    check("max_leased: removed, claims take every ready task", len(rest) == 3 * SHARDS
          and leased_count(c, "ml") == 3 * SHARDS + 1, repr(len(rest)))
    c.execute("SELECT concurrency.drop_queue('ml')")


def test_max_leased_expired_for_good():
    """A lease slot whose task's lease expired on its last attempt: the claim that takes the slot wakes the task's
    shard with the queue's C++, so the task dies as on a local queue and its waiting child is cancelled."""
    c = connect(COORDINATOR)
    fresh_queue(c, "mld", lease="30 seconds", max_leased="1", max_attempts="1", retain="1 hour")
    parent = scalar(c, "SELECT concurrency.enqueue('mld', '{}')")
    child = scalar(c, "SELECT concurrency.enqueue('mld', '{}', after => ARRAY[%s]::bigint[])", (parent,))
    got = claim_with(c, "mld", 1, lease="1 second")
    check("max_leased 1: the parent is claimed, its slot taken", list(got) == [parent]
          and scalar(c, "SELECT count(*) FROM concurrency.s_mld WHERE task_id IS NOT NULL") == 1, repr(got))
    wait_until(lambda: scalar(c, "SELECT lease_expires_at < clock_timestamp() FROM concurrency.task_status('mld', %s)",
                              (parent,)))
    again = claim_with(c, "mld", 1)
    states = dict(c.execute("SELECT id, state FROM concurrency.q_mld").fetchall())
    err = scalar(c, "SELECT last_error FROM concurrency.task_status('mld', %s)", (child,))
    check("the claim that takes the expired slot reclaims the parent on its shard: dead (its one attempt used), "
          "its waiting child cancelled naming it, the slot empty",
          again == {} and states.get(parent) == "dead" and states.get(child) == "cancelled"
          and str(parent) in (err or "")
          and scalar(c, "SELECT count(*) FROM concurrency.s_mld WHERE task_id IS NOT NULL") == 0,
          repr((again, states, err)))
    c.execute("SELECT concurrency.drop_queue('mld')")


def test_max_leased_concurrent():
    """Six connections claim (batches of 2), hold and complete: the queue never has more than max_leased (3)
    tasks leased."""
    c = connect(COORDINATOR)
    fresh_queue(c, "mc", lease="30 seconds", max_leased="3")
    c.execute("SELECT concurrency.enqueue_batch('mc', array_fill('{}'::jsonb, ARRAY[60]))")
    stop = threading.Event()
    peak = [0]
    errors = []

    def worker():
        conn = connect(COORDINATOR)
        while not stop.is_set():
            try:
                rows = conn.execute("SELECT task_id, lease_token FROM concurrency.dequeue('mc', 2)").fetchall()
                if not rows:
                    time.sleep(0.02)
                    continue
                time.sleep(0.03)
                conn.execute("SELECT concurrency.complete_batch('mc', %s, %s)",
                             ([r[0] for r in rows], [r[1] for r in rows]))
            except psycopg.Error as e:
                errors.append(e.sqlstate)
        conn.close()

    threads = [threading.Thread(target=worker) for _ in range(6)] + [
        threading.Thread(target=sample_leased, args=("mc", stop, peak))]
    for t in threads:
        t.start()
    done = wait_until(lambda: scalar(c, "SELECT count(*) FROM concurrency.q_mc") == 0, timeout=120, step=0.2)
    stop.set()
    for t in threads:
        t.join()
    check("max_leased under concurrent claims: every task done", done, f"errors {errors[:5]}")
    check("max_leased under concurrent claims: never more than 3 leased (sampled in the database)", peak[0] <= 3,
          repr(peak[0]))
    check("max_leased under concurrent claims: 3 were leased at once (so the check above can fail)", peak[0] == 3,
          repr(peak[0]))
    check("max_leased under concurrent claims: no errors", errors == [], repr(errors[:5]))
    c.execute("SELECT concurrency.drop_queue('mc')")


def test_limits_concurrent():
    """Six connections claim (batches of 3) and complete, 30 calls each, on a queue with rate_limit (10 an hour)
    and max_leased (4): exactly 10 tasks are claimed in all, never more than 4 leased at once."""
    c = connect(COORDINATOR)
    fresh_queue(c, "lc", lease="30 seconds", max_leased="4", rate_limit="10", rate_period="1 hour")
    c.execute("SELECT concurrency.enqueue_batch('lc', array_fill('{}'::jsonb, ARRAY[40]))")
    stop = threading.Event()
    peak = [0]
    errors = []

    def worker():
        conn = connect(COORDINATOR)
        for _ in range(30):
            try:
                rows = conn.execute("SELECT task_id, lease_token FROM concurrency.dequeue('lc', 3)").fetchall()
                if rows:
                    conn.execute("SELECT concurrency.complete_batch('lc', %s, %s)",
                                 ([r[0] for r in rows], [r[1] for r in rows]))
            except psycopg.Error as e:
                errors.append(e.sqlstate)
        conn.close()

    workers = [threading.Thread(target=worker) for _ in range(6)]
    sampler = threading.Thread(target=sample_leased, args=("lc", stop, peak))
    sampler.start()
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    stop.set()
    sampler.join()
    left = c.execute("SELECT count(*), count(*) FILTER (WHERE state = 'ready') FROM concurrency.q_lc").fetchone()
    check("rate_limit and max_leased under concurrent claims: exactly 10 of 40 tasks claimed (and completed)",
          left == (30, 30), repr(left))
    check("rate_limit and max_leased under concurrent claims: never more than 4 leased (sampled in the database)",
          peak[0] <= 4, repr(peak[0]))
    check("rate_limit and max_leased under concurrent claims: no errors", errors == [], repr(errors[:5]))
    c.execute("SELECT concurrency.drop_queue('lc')")


def test_worker_claims_stay_and_reach_every_shard():
    """A backend on a worker node stays on the shard that filled its last claim, and still claims a task of any shard."""
    c = connect(COORDINATOR)
    fresh_distributed_queue(c, "dq_stay", 8)
    producer, claimer = connect(WORKER1), connect(WORKER1)
    claim = "SELECT task_id, lease_token FROM concurrency.dequeue('dq_stay')"
    done = "SELECT concurrency.complete('dq_stay', %s, %s)"
    # keyless tasks enqueued on a node go to its shards in turn: 5 in each
    ids = [scalar(producer, "SELECT concurrency.enqueue('dq_stay', '{}')") for _ in range(20)]
    local = positions(ids)
    check("the worker node holds 4 of the 8 shards", len(local) == 4, repr(sorted(local)))
    taken = []
    for _ in range(4):
        task, token = claimer.execute(claim).fetchone()
        claimer.execute(done, (task, token))
        taken.append(task)
    check("successive claims of a worker node's backend stay on a shard with tasks", len(positions(taken)) == 1,
          repr(taken))
    while row := claimer.execute(claim).fetchone():
        claimer.execute(done, row)
        taken.append(row[0])
    check("they take every task of every shard", sorted(taken) == sorted(ids), f"{len(taken)} of {len(ids)}")

    def one_at_a_time(label):
        # each task alone in its shard, the claimer's last claim filled on another
        got, sent = [], []
        for _ in range(2 * len(local)):
            task = scalar(producer, "SELECT concurrency.enqueue('dq_stay', '{}')")
            sent.append(task)
            row = claimer.execute(claim).fetchone()
            if row:
                claimer.execute(done, row)
                got.append(row[0])
        check(f"{label}: a task alone in any shard is claimed at once", got == sent, f"{got} for {sent}")
        check(f"{label}: those tasks were in every shard of the node", positions(sent) == local,
              repr(sorted(positions(sent))))

    one_at_a_time("a backend that stayed")
    restart_node(1)
    producer, claimer = connect(WORKER1), connect(WORKER1)
    one_at_a_time("after the worker node restarted")
    check("nothing is left", scalar(c, "SELECT count(*) FROM concurrency.q_dq_stay") == 0)
    c.execute("SELECT concurrency.drop_queue('dq_stay')")


# --- chaos: exactly-once effects while backends die and a worker restarts ---

TASKS = 300


def chaos_worker(stop, errors, port):
    conn = None
    while not stop.is_set():
        try:
            if conn is None or conn.closed:
                conn = connect(port, autocommit=False)
            with conn.transaction():
                row = conn.execute("SELECT task_id, lease_token, payload FROM concurrency.dequeue('chaos')").fetchone()
                if row is None:
                    time.sleep(0.05)
                    continue
                conn.execute("INSERT INTO chaos_effects (task_id, n) VALUES (%s, %s)", (row[0], row[2]["n"]))
                conn.execute("SELECT concurrency.complete('chaos', %s, %s)", (row[0], row[1]))
        except psycopg.Error as e:
            errors.append(e.sqlstate or type(e).__name__)
            try:
                conn.close()
            except Exception:  # noqa: BLE001
                pass
            conn = None
            time.sleep(0.1)


def test_replace_on_dedupe():
    """enqueue(…, on_conflict => 'replace') on a distributed queue, from the coordinator and from a worker node:
    the dedupe_key's holder takes the new payload and priority on its shard, wherever the call is made."""
    c = connect(COORDINATOR)
    fresh_queue(c, "rp")
    tid = scalar(c, "SELECT concurrency.enqueue('rp', '{\"v\": 1}', dedupe_key => 'k')")
    same = scalar(c, "SELECT concurrency.enqueue('rp', '{\"v\": 2}', priority => 3, dedupe_key => 'k', "
                     "on_conflict => 'replace')")
    row = c.execute("SELECT payload, priority FROM concurrency.q_rp WHERE id = %s", (tid,)).fetchone()
    check("replace from the coordinator: the holder's id, with the new payload and priority",
          same == tid and row == ({"v": 2}, 3), repr((tid, same, row)))
    for port in (WORKER1, WORKER2):
        w = connect(port)
        again = scalar(w, "SELECT concurrency.enqueue('rp', jsonb_build_object('port', %s::int), dedupe_key => 'k', "
                          "on_conflict => 'replace')", (port,))
        row = c.execute("SELECT payload FROM concurrency.q_rp WHERE id = %s", (tid,)).fetchone()
        check(f"replace from worker node {port}: the same holder, replaced on its shard",
              again == tid and row == ({"port": port},), repr((again, row)))
    check("ignore (the default) leaves it", scalar(c, "SELECT concurrency.enqueue('rp', '{}', dedupe_key => 'k')") == tid
          and c.execute("SELECT payload FROM concurrency.q_rp WHERE id = %s", (tid,)).fetchone() == ({"port": WORKER2},))
    check("one task in the queue", scalar(c, "SELECT count(*) FROM concurrency.q_rp") == 1)
    c.execute("SELECT concurrency.drop_queue('rp')")


def test_schedule_on_distributed_queue():
    """A schedule of a distributed queue: the coordinator's dequeue turns its due times into tasks, routed to
    their shards like any enqueue, and claims them (a waiting dequeue wakes at the next due time)."""
    c = connect(COORDINATOR)
    fresh_queue(c, "sd")
    c.execute("SELECT concurrency.schedule('sd-every', 'sd', every => '1 second')")
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 2 and time.monotonic() < deadline:
        got += c.execute("SELECT task_id, lease_token, payload FROM concurrency.dequeue('sd', 10, wait => '3 seconds')"
                         ).fetchall()
    due = [p.get("scheduled_for") for _, _, p in got]
    check("a schedule of a distributed queue gives tasks, claimed through the coordinator",
          len(got) >= 2 and all(d is not None for d in due), repr(got))
    check("one task per due time", len(set(due)) == len(due), repr(due))
    check("the tasks are in the queue's shards", all(
        scalar(c, "SELECT count(*) FROM concurrency.q_sd WHERE id = %s", (t,)) == 1 for t, _, _ in got))
    check("unschedule: true", scalar(c, "SELECT concurrency.unschedule('sd-every')") is True)
    c.execute("SELECT concurrency.drop_queue('sd')")


def test_schedule_runner_on_distributed_queue():
    """With the module preloaded on the coordinator (scripts/citus-cluster.sh), its schedule runner, a background
    worker started at each due time, enqueues a distributed queue's due times with no dequeue anywhere: routed to
    the queue's shards like any enqueue, each due time once."""
    c = connect(COORDINATOR)
    check("the coordinator preloads concurrency_ext",
          "concurrency_ext" in scalar(c, "SHOW shared_preload_libraries"))
    fresh_queue(c, "sr")
    c.execute("SELECT concurrency.schedule('sr-every', 'sr', every => '1 second')")
    deadline = time.monotonic() + 20
    while scalar(c, "SELECT count(*) FROM concurrency.q_sr") < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    n, distinct, late = c.execute(
        "SELECT count(*), count(DISTINCT payload->>'scheduled_for'),"
        " max(extract(epoch FROM enqueued_at - (payload->>'scheduled_for')::timestamptz))::float8"
        " FROM concurrency.q_sr").fetchone()
    check("the runner enqueued the due times with no dequeue, each once", n >= 3 and n == distinct,
          repr((n, distinct)))
    check("each within a second of its due time", late is not None and late < 1, repr(late))
    check("unschedule: true", scalar(c, "SELECT concurrency.unschedule('sr-every')") is True)
    c.execute("SELECT concurrency.drop_queue('sr')")


def test_dependencies():
    """Dependencies on a distributed queue: a child (enqueue with after, or a graph after a task enqueued before)
    goes to its parent's shard and waits; completing the parent on its shard's node makes it ready; a graph of the
    coordinator's local queues works beside it, and queue_stats counts the waiting tasks of both (the details, from
    every node: test_nodes.py)."""
    c = connect(COORDINATOR)
    fresh_queue(c, "dd")
    tid = scalar(c, "SELECT concurrency.enqueue('dd', '{}')")
    child = scalar(c, "SELECT concurrency.enqueue('dd', '{}', after => ARRAY[%s]::bigint[])", (tid,))
    graph = [r[0] for r in c.execute("SELECT task_id FROM concurrency.enqueue_graph('dd', %s)",
                                     (f'[{{"ref": "a", "after": [{tid}]}}]',)).fetchall()]
    check("enqueue(…, after) and enqueue_graph after a task: in its shard",
          positions([child] + graph) == positions([tid]) and len(graph) == 1, repr((tid, child, graph)))
    waiting = c.execute("SELECT count(*) FILTER (WHERE state = 'waiting'), count(*) FROM concurrency.q_dd").fetchone()
    check("both wait for it", waiting == (2, 3), repr(waiting))
    columns = scalar(c, "SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute "
                        "WHERE attrelid = 'concurrency.q_dd'::regclass AND attname IN ('parents_open', 'has_children')")
    check("the distributed table has the columns of dependencies", columns == ["parents_open", "has_children"],
          repr(columns))
    for port in (WORKER1, WORKER2):
        w = connect(port)
        got = first_claim(w, "SELECT task_id, lease_token FROM concurrency.dequeue('dd')")
        if got:
            check("the parent is the one task claimable", got[0] == tid, repr(got))
            w.execute("SELECT concurrency.complete('dd', %s, %s)", got)
            break
    ready = sorted(r[0] for r in c.execute("SELECT id FROM concurrency.q_dd WHERE state = 'ready'").fetchall())
    check("the parent completes on its shard's node, and its children are ready", ready == sorted([child] + graph),
          repr(ready))
    c.execute("SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name IN ('dl1', 'dl2')")
    c.execute("SELECT concurrency.create_queue('dl1')")
    c.execute("SELECT concurrency.create_queue('dl2')")
    rows = c.execute("SELECT ref, task_id FROM concurrency.enqueue_graph('dl1', "
                     "'[{\"ref\": \"a\"}, {\"ref\": \"b\", \"after\": [\"a\"], \"queue\": \"dl2\"}]')").fetchall()
    check("a graph of the coordinator's local queues", [r for r, _ in rows] == ["a", "b"], repr(rows))
    stats = dict(c.execute("SELECT queue, waiting FROM concurrency.queue_stats WHERE queue IN ('dd', 'dl2')").fetchall())
    check("queue_stats counts waiting tasks, distributed or not", stats == {"dd": 0, "dl2": 1}, repr(stats))
    got = c.execute("SELECT task_id, lease_token FROM concurrency.dequeue('dl1')").fetchone()
    c.execute("SELECT concurrency.complete('dl1', %s, %s)", got)
    check("the child is ready when its parent completes",
          scalar(c, "SELECT state FROM concurrency.task_status('dl2', %s)", (rows[1][1],)) == "ready")
    for q in ("dd", "dl1", "dl2"):
        c.execute("SELECT concurrency.drop_queue(%s)", (q,))


def test_chaos_exactly_once():
    c = connect(COORDINATOR)
    c.execute("DROP TABLE IF EXISTS chaos_effects")
    c.execute("CREATE TABLE chaos_effects (task_id bigint, n int)")
    # a distributed table, written from whichever node a worker is on, in
    # the transaction that completes the task
    c.execute("SELECT create_distributed_table('chaos_effects', 'task_id', colocate_with => 'none')")
    c.execute("SELECT concurrency.create_queue('chaos', lease => '3 seconds', max_attempts => 50)")
    c.execute("SELECT concurrency.distribute_queue('chaos', %s)", (SHARDS,))
    c.execute("SELECT concurrency.enqueue_batch('chaos', array_agg(jsonb_build_object('n', g))) "
              "FROM generate_series(1, %s) g", (TASKS,))
    stop = threading.Event()
    errors = []
    threads = start_workers(chaos_worker, stop, errors)  # two connected to each node
    killed = 0
    for _ in range(6):
        time.sleep(0.4)
        killed += kill_worker_backends(WORKER1)
    time.sleep(0.5)
    restart_node(2, down_seconds=1.0)  # the second worker node, while workers claim
    restarted_at = time.monotonic()
    done = wait_until(lambda: scalar(c, "SELECT count(*) FROM concurrency.q_chaos") == 0, timeout=120, step=0.5)
    stop.set()
    for t in threads:
        t.join()
    c.execute("SELECT recover_prepared_transactions()")
    check(f"chaos: backends on a worker were killed ({killed}) and a worker restarted", killed > 0)
    check("chaos: clients saw the faults as errors and went on", len(errors) > 0, "no error seen")
    check("chaos: every task was completed (the queue drained after the faults)", done,
          f"{scalar(c, 'SELECT count(*) FROM concurrency.q_chaos')} left, "
          f"{time.monotonic() - restarted_at:.0f} s after the restart")
    effects = c.execute("SELECT count(*), count(DISTINCT n) FROM chaos_effects").fetchone()
    check("chaos: every task's effect committed exactly once", effects == (TASKS, TASKS), repr(effects))
    dead = scalar(c, "SELECT dead FROM concurrency.queue_stats WHERE queue = 'chaos'")
    check("chaos: no task dead", dead in (0, None), repr(dead))


# Renames the indexes and identity sequence of queue QUEUE's relations to the names 0.3.0 gave them (table first:
# q_<queue>_ready), as a queue made before 0.4.0 has them.
TABLE_FIRST = r"""
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT c.relname AS name, c.relkind AS kind, m[1] AS role, m[2] AS tbl
               FROM pg_class c, regexp_match(c.relname, '^([a-z_]+)_((?:q|k|s|r|rk)_QUEUE)$') AS m
              WHERE c.relnamespace = 'concurrency'::regnamespace AND m IS NOT NULL
    LOOP
        EXECUTE format('ALTER %s concurrency.%I RENAME TO %I', CASE r.kind WHEN 'S' THEN 'SEQUENCE' ELSE 'INDEX' END,
                       r.name, r.tbl || '_' || r.role);
    END LOOP;
END $$"""


def test_derived_names():
    """Queues whose names were each other's derived names before 0.4.0 (nj's index q_nj_keyed was the table of
    nj_keyed, na's k_na_pkey the key table of na_pkey, nj's sequence q_nj_id_seq the table of nj_id_seq) are all
    distributed and work from every node; a queue named as before 0.4.0 (table first) is distributed under its
    names (distribute_queue and distribute_key_rate_slots find them) and works too."""
    c = connect(COORDINATOR)
    names = ("nj", "nj_keyed", "na", "na_pkey", "nj_id_seq", "nold")
    for q in names:
        c.execute("SELECT concurrency.drop_queue(%s) FROM concurrency.queue WHERE name = %s", (q, q))
    for q in names[:5]:
        c.execute("SELECT concurrency.create_queue(%s, key_limit => 1, distributed => true)", (q,))
    c.execute("SELECT concurrency.create_queue('nold', key_limit => 1, key_rate_limit => 10, "
              "key_rate_period => '1 hour')")
    c.execute(TABLE_FIRST.replace("QUEUE", "nold"))
    c.execute("SELECT concurrency.distribute_queue('nold', 2)")
    indexes = scalar(c, "SELECT string_agg(indexrelid::regclass::text, ' ' ORDER BY 1) FROM pg_index "
                        "WHERE indrelid = 'concurrency.q_nj'::regclass")
    check("a new queue's indexes are named role first", "concurrency.ready_q_nj" in indexes
          and "concurrency.pkey_q_nj" in indexes and "concurrency.dedupe_q_nj" in indexes, indexes)
    old = {name: scalar(c, "SELECT pg_get_indexdef(%s::regclass)", (f"concurrency.{name}",))
           for name in ("q_nold_pkey", "q_nold_dedupe", "k_nold_pkey", "rk_nold_pkey")}
    check("the queue named as before 0.4.0 keeps its names, its keys lead with shard_key",
          all("shard_key" in d for d in old.values()), repr(old))
    for i, q in enumerate(names):
        port = (COORDINATOR, WORKER1, WORKER2)[i % 3]
        n = connect(port)
        n.execute("SELECT concurrency.enqueue_batch(%s, ARRAY['{\"n\": 1}', '{\"n\": 2}']::jsonb[], "
                  "concurrency_keys => ARRAY['k', 'k'])", (q,))
        got = []
        for _ in range(40):  # a claim visits one shard at a time; the key's tasks one at a time
            for tid, token, p in n.execute("SELECT task_id, lease_token, payload ->> 'n' FROM concurrency.dequeue(%s, 5)",
                                           (q,)).fetchall():
                n.execute("SELECT concurrency.complete(%s, %s, %s)", (q, tid, token))
                got.append(p)
            if len(got) >= 2:
                break
        check(f"queue {q}: its key's tasks claimed one after the other and completed, from node {port}",
              got == ["1", "2"], repr(got))
    for q in names:
        c.execute("SELECT concurrency.drop_queue(%s)", (q,))


if __name__ == "__main__":
    setup()
    run([test_shape, test_refusals, test_enqueue_places_tasks, test_router_claims_rotate,
         test_worker_claims_stay_and_reach_every_shard,
         test_fencing_leases_retries, test_keys_limits_retention, test_create_queue_distributed,
         test_task_status, test_cancel, test_batches, test_purge, test_purge_by_queue_calls,
         test_key_limit_admission, test_key_limit_batches, test_key_limit_alter, test_key_limit_concurrent,
         test_serial_key_order, test_max_leased, test_max_leased_expired_for_good, test_max_leased_concurrent, test_limits_concurrent,
         test_replace_on_dedupe,
         test_schedule_on_distributed_queue, test_schedule_runner_on_distributed_queue, test_dependencies,
         test_derived_names, test_chaos_exactly_once])
