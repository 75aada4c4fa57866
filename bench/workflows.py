#!/usr/bin/env python3
"""Durable workflows (docs/workflows.md), measured side by side in one run,
sides alternating round by round, medians of the rounds:

  (a) a step: CLIENTS sessions, each holding a leased task, call
      record_step (five step names in turn, so each task keeps five steps)
      against heartbeat on the same tasks, one call per transaction, for
      STEP_SECONDS per round; calls/s of each side, and their ratio (the cost of
      a step over a heartbeat);
  (b) await_task's wake-up: a producer waits in await_task(…, wait => 10 s)
      while a worker completes the task; the time from the worker's COMMIT
      returning to the producer's await_task returning (negative: the
      producer had it first), WAKES times; p50 and p99;
  (c) a five-step workflow end to end against the same five steps as five
      chained tasks of a graph: WORKFLOWS of each, WORKERS workers; one
      workflow is a task whose worker records five steps (one transaction
      each) then completes it; the graph's five tasks are claimed and
      completed one after the other; workflows/s of each side and the ratio.

Run it on a server with durable commits (the server's defaults) and the
module preloaded, as production runs, e.g. as root:

    source scripts/cluster.sh
    CLUSTER_DURABLE=1 cluster_start "$PG_CONFIG" "shared_preload_libraries = 'concurrency_ext'"
    psql -c "CREATE EXTENSION concurrency_ext"; /usr/bin/python3 bench/workflows.py; cluster_stop

Writes docs/results/workflows-<date>.json (bench/report.py reports it in
docs/benchmarks.md) and prints the figures. Uses queues bench_wf_*, dropped
at the end.
"""
import datetime
import json
import os
import statistics
import subprocess
import threading
import time

import psycopg

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLIENTS = int(os.environ.get("CLIENTS", "8"))
SECONDS = float(os.environ.get("STEP_SECONDS", "5"))
ROUNDS = int(os.environ.get("ROUNDS", "5"))
WAKES = int(os.environ.get("WAKES", "200"))
WORKFLOWS = int(os.environ.get("WORKFLOWS", "400"))
WORKERS = int(os.environ.get("WORKERS", "8"))
DBOS_PYTHON = os.path.join(os.environ.get("DBOS_VENV", os.path.join(ROOT, "bench", ".venv-dbos")), "bin", "python")


def connect():
    return psycopg.connect("", autocommit=True)


def setup(conn):
    for q in ("bench_wf_steps", "bench_wf_wake", "bench_wf_flow", "bench_wf_graph"):
        conn.execute("SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name = %s", (q,))
        conn.execute("SELECT concurrency.create_queue(%s, lease => '1 hour')", (q,))


def run_clients(n, body):
    """Runs body(conn, index, stop) in n threads for SECONDS; total calls."""
    stop = threading.Event()
    counts = [0] * n
    conns = [connect() for _ in range(n)]

    def worker(i):
        counts[i] = body(conns[i], i, stop)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    time.sleep(SECONDS)
    stop.set()
    for t in threads:
        t.join()
    for c in conns:
        c.close()
    return sum(counts)


def step_costs(conn):
    held = []
    for _ in range(CLIENTS):
        tid = conn.execute("SELECT concurrency.enqueue('bench_wf_steps', '{}')").fetchone()[0]
    for row in conn.execute("SELECT task_id, lease_token FROM concurrency.dequeue('bench_wf_steps', %s)", (CLIENTS,)):
        held.append(row)

    def heartbeat(c, i, stop):
        tid, tok = held[i]
        n = 0
        while not stop.is_set():
            c.execute("SELECT concurrency.heartbeat('bench_wf_steps', %s, %s)", (tid, tok))
            n += 1
        return n

    def record(c, i, stop):
        tid, tok = held[i]
        n = 0
        while not stop.is_set():
            c.execute("SELECT concurrency.record_step('bench_wf_steps', %s, %s, %s, %s::jsonb)",
                      (tid, tok, f"step-{n % 5}", json.dumps({"n": n})))
            n += 1
        return n

    rounds = {"heartbeat": [], "record_step": []}
    for r in range(ROUNDS):
        order = [("heartbeat", heartbeat), ("record_step", record)]
        if r % 2:
            order.reverse()
        for name, body in order:
            rounds[name].append(run_clients(CLIENTS, body) / SECONDS)
    hb, rs = statistics.median(rounds["heartbeat"]), statistics.median(rounds["record_step"])
    return {"clients": CLIENTS, "seconds": SECONDS, "rounds": rounds,
            "heartbeat_per_s": hb, "record_step_per_s": rs, "cost_ratio": hb / rs}


def wake_ups(conn):
    producer = connect()
    worker = connect()
    worker.autocommit = False
    samples = []
    for _ in range(WAKES):
        tid = conn.execute("SELECT concurrency.enqueue('bench_wf_wake', '{}')").fetchone()[0]
        tok = conn.execute("SELECT lease_token FROM concurrency.dequeue('bench_wf_wake')").fetchone()[0]
        out = {}

        def wait():
            row = producer.execute("SELECT state FROM concurrency.await_task('bench_wf_wake', %s, wait => '10 s')",
                                   (tid,)).fetchone()
            out["at"] = time.perf_counter()
            out["state"] = row[0] if row else None

        t = threading.Thread(target=wait)
        t.start()
        # the producer is asleep in await_task before the worker completes
        for _ in range(1000):
            busy = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Extension' "
                                "AND query LIKE '%%await_task(''bench_wf_wake''%%'").fetchone()[0]
            if busy:
                break
            time.sleep(0.001)
        worker.execute("SELECT concurrency.complete('bench_wf_wake', %s, %s, '{\"ok\": true}')", (tid, tok))
        worker.commit()
        committed = time.perf_counter()
        t.join()
        if out.get("state") != "done":
            raise SystemExit(f"await_task returned {out.get('state')!r}")
        samples.append((out["at"] - committed) * 1000)
    producer.close()
    worker.close()
    samples.sort()
    return {"wakes": WAKES, "p50_ms": samples[len(samples) // 2], "p99_ms": samples[int(len(samples) * 0.99) - 1],
            "max_ms": samples[-1]}


def run_workers(body, total):
    """WORKERS threads call body(conn) until it returns False; seconds taken."""
    conns = [connect() for _ in range(WORKERS)]
    start = time.perf_counter()
    threads = [threading.Thread(target=lambda c=c: [None for _ in iter(lambda: body(c), False)]) for c in conns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    for c in conns:
        c.close()
    return total / elapsed


def workflow_round(conn):
    conn.execute("SELECT count(*) FROM concurrency.enqueue_batch('bench_wf_flow', array_fill('{}'::jsonb, ARRAY[%s]))",
                 (WORKFLOWS,))

    def body(c):
        row = c.execute("SELECT task_id, lease_token FROM concurrency.dequeue('bench_wf_flow')").fetchone()
        if not row:
            return False
        tid, tok = row
        for s in range(5):
            if c.execute("SELECT concurrency.step_result('bench_wf_flow', %s, %s, %s)",
                         (tid, tok, f"s{s}")).fetchone()[0] is None:
                c.execute("SELECT concurrency.record_step('bench_wf_flow', %s, %s, %s, '{\"done\": true}')",
                          (tid, tok, f"s{s}"))
        c.execute("SELECT concurrency.complete('bench_wf_flow', %s, %s)", (tid, tok))
        return True

    return run_workers(body, WORKFLOWS)


def graph_round(conn):
    graph = json.dumps([{"ref": f"s{s}", "payload": {"step": s}, **({"after": [f"s{s - 1}"]} if s else {})}
                        for s in range(5)])
    with conn.transaction():
        for _ in range(WORKFLOWS):
            conn.execute("SELECT count(*) FROM concurrency.enqueue_graph('bench_wf_graph', %s::jsonb)", (graph,))
    left = [WORKFLOWS * 5]
    lock = threading.Lock()

    def body(c):
        row = c.execute("SELECT task_id, lease_token FROM concurrency.dequeue('bench_wf_graph', wait => '50 ms')").fetchone()
        if not row:
            with lock:
                return left[0] > 0
        c.execute("SELECT concurrency.complete('bench_wf_graph', %s, %s)", row)
        with lock:
            left[0] -= 1
        return True

    return run_workers(body, WORKFLOWS)


def workflows_vs_graph(conn):
    rounds = {"workflow": [], "graph": []}
    for r in range(max(ROUNDS // 2, 2)):
        order = [("workflow", workflow_round), ("graph", graph_round)]
        if r % 2:
            order.reverse()
        for name, fn in order:
            rounds[name].append(fn(conn))
    wf, gr = statistics.median(rounds["workflow"]), statistics.median(rounds["graph"])
    return {"workflows": WORKFLOWS, "workers": WORKERS, "rounds": rounds,
            "workflow_per_s": wf, "graph_per_s": gr, "ratio": wf / gr}


def dbos_url(conn):
    """The URL of database bench_dbos on this server (made when missing), for DBOS's system database."""
    if not conn.execute("SELECT FROM pg_database WHERE datname = 'bench_dbos'").fetchone():
        conn.execute("CREATE DATABASE bench_dbos")
    info = conn.info
    host = info.host if not info.host.startswith("/") else ""
    query = f"?host={info.host}" if info.host.startswith("/") else ""
    return f"postgresql+psycopg://{info.user}@{host}:{info.port}/bench_dbos{query}"


def dbos_round(url):
    out = subprocess.run([DBOS_PYTHON, os.path.join(ROOT, "bench", "workflows_dbos.py"), url, str(WORKFLOWS),
                          str(WORKERS)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])["per_s"]


def workflows_vs_dbos(conn):
    if not os.access(DBOS_PYTHON, os.X_OK):
        return {"skipped": f"no DBOS: {DBOS_PYTHON} is missing"}
    url = dbos_url(conn)
    rounds = {"workflow": [], "dbos": []}
    for r in range(max(ROUNDS // 2, 2)):
        order = [("workflow", workflow_round), ("dbos", lambda c: dbos_round(url))]
        if r % 2:
            order.reverse()
        for name, fn in order:
            rounds[name].append(fn(conn))
    wf, db = statistics.median(rounds["workflow"]), statistics.median(rounds["dbos"])
    version = subprocess.run([DBOS_PYTHON, "-c", "import importlib.metadata as m; print(m.version('dbos'))"],
                             capture_output=True, text=True).stdout.strip()
    return {"workflows": WORKFLOWS, "workers": WORKERS, "dbos_version": version, "rounds": rounds,
            "workflow_per_s": wf, "dbos_per_s": db, "ratio": wf / db}


def main():
    conn = connect()
    settings = conn.execute("SELECT string_agg(name || '=' || setting, ' ' ORDER BY name) FROM pg_settings "
                            "WHERE name IN ('fsync', 'synchronous_commit', 'shared_preload_libraries')").fetchone()[0]
    server = conn.execute("SHOW server_version").fetchone()[0]
    setup(conn)
    load_before = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    result = {"server": server, "settings": settings,
              "command": "CLUSTER_DURABLE=1 cluster_start … shared_preload_libraries; /usr/bin/python3 bench/workflows.py"}
    result["step"] = step_costs(conn)
    print(f"(a) heartbeat {result['step']['heartbeat_per_s']:.0f}/s, record_step {result['step']['record_step_per_s']:.0f}/s: "
          f"a step costs {result['step']['cost_ratio']:.2f} heartbeats")
    result["await_task"] = wake_ups(conn)
    print(f"(b) await_task wakes p50 {result['await_task']['p50_ms']:.2f} ms, p99 {result['await_task']['p99_ms']:.2f} ms "
          "after the completing commit returns")
    result["end_to_end"] = workflows_vs_graph(conn)
    e = result["end_to_end"]
    print(f"(c) 5-step workflows {e['workflow_per_s']:.1f}/s, as 5-task graphs {e['graph_per_s']:.1f}/s: ratio {e['ratio']:.2f}")
    result["dbos"] = workflows_vs_dbos(conn)
    d = result["dbos"]
    if "skipped" in d:
        print("(d)", d["skipped"])
    else:
        print(f"(d) 5-step workflows {d['workflow_per_s']:.1f}/s, in DBOS {d['dbos_version']} "
              f"{d['dbos_per_s']:.1f}/s: ratio {d['ratio']:.2f}")
    result["load_before"] = load_before
    result["load_after"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    for q in ("bench_wf_steps", "bench_wf_wake", "bench_wf_flow", "bench_wf_graph"):
        conn.execute("SELECT concurrency.drop_queue(%s)", (q,))
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    label = "" if "fsync=on" in settings else "-fsync-off"
    path = os.path.join(ROOT, "docs", "results", f"workflows-{stamp}{label}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print("wrote", os.path.relpath(path, ROOT))


if __name__ == "__main__":
    main()
