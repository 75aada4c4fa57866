#!/usr/bin/env python3
"""Chaos test of durable workflows (SPEC 9.2) on the Python runtime.

N five-step workflows, each a task of one queue:
  1. a plain step,
  2. a step that writes a row in its own transaction (exactly once),
  3. a durable sleep of 1 s,
  4. a wait for the event chaos:<n>, which a separate emitter process emits
     (in random order, so that some come before the wait and some after),
  5. a plain step with the event's payload.
Several worker processes run them; the test SIGKILLs one at random every
few seconds and starts it again, and restarts the server once in the middle
(pg_ctl restart -m immediate). At the end: every workflow done, every
database step's row exactly once, every event's payload in its workflow's
result, nothing left waiting for an event. Conditions are waited for, with
one generous deadline for the whole run; nothing is timed.

    test/chaos/workflows.py --pg-bin DIR --pgdata DIR [--workflows 1000] [--workers 3]
    (PG* environment variables say where the server is; test/chaos/workflows.sh runs it on a cluster of its own)

Ends with "N passed, M failed" (one per check).
"""
import argparse
import os
import random
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "clients", "python"))

import psycopg  # noqa: E402

QUEUE = "chaos_workflows"
WRITES = "chaos_workflow_writes"
STEPS = ["one", "write", "sleep:1", "five"]  # and event:chaos:<n>


def event_name(wf):
    return f"chaos:{wf}"


# --- a worker process -------------------------------------------------------

def worker_main(args):
    from concurrency_ext import Worker

    def handler(task, conn):
        wf = task.payload["wf"]
        first = task.step("one", lambda: {"wf": wf})

        def write(tx):
            tx.execute(f"INSERT INTO {WRITES} (wf, task_id) VALUES (%s, %s)", (wf, task.id))
            return {"written": wf}

        task.step("write", write, transaction=True)
        task.sleep(1)
        reply = task.wait_for_event(event_name(wf))
        last = task.step("five", lambda: {"wf": wf, "reply": reply})
        return {"wf": wf, "first": first, "reply": reply, "last": last}

    Worker("", QUEUE, handler, concurrency=args.concurrency, wait=2.0, on_error=lambda e, t: None).run()


# --- the emitter process ----------------------------------------------------

def emitter_main(args):
    from concurrency_ext import emit_event

    order = list(range(args.workflows))
    random.shuffle(order)
    pause = args.emit_over / max(1, len(order))
    woke = 0
    conn = None
    for wf in order:
        while True:  # an emit whose commit was not confirmed is made again (the same payload)
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = psycopg.connect("", autocommit=True)
                woke += emit_event(conn, event_name(wf), {"wf": wf})
                break
            except psycopg.OperationalError:
                conn = None
                time.sleep(0.2)
        time.sleep(pause)
    print(f"emitted {len(order)} woke {woke}", flush=True)


# --- the test ---------------------------------------------------------------

class Admin:
    """The test's own connection, made again after the server's restart."""

    def __init__(self):
        self.conn = None

    def query(self, sql, params=None):
        for _ in range(600):
            try:
                if self.conn is None or self.conn.closed or self.conn.broken:
                    self.conn = psycopg.connect("", autocommit=True)
                cur = self.conn.execute(sql, params)
                return cur.fetchall() if cur.description else []
            except psycopg.OperationalError:
                self.conn = None
                time.sleep(0.2)
        raise RuntimeError("the server did not come back")


def spawn(role, args):
    cmd = [sys.executable, os.path.abspath(__file__), "--role", role, "--workflows", str(args.workflows),
           "--concurrency", str(args.concurrency), "--emit-over", str(args.emit_over)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE if role == "emitter" else subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, text=True)


def restart_server(args):
    pg_ctl = [os.path.join(args.pg_bin, "pg_ctl"), "-D", args.pgdata, "-w", "-m", "immediate", "restart"]
    if args.server_log:
        pg_ctl[1:1] = ["-l", args.server_log]
    if os.geteuid() == 0:
        pg_ctl = ["runuser", "-u", "postgres", "--"] + pg_ctl
    subprocess.run(pg_ctl, check=True, stdout=subprocess.DEVNULL)


def main(args):
    random.seed(args.seed)
    admin = Admin()
    admin.query(f"SELECT concurrency.drop_queue('{QUEUE}') FROM concurrency.queue_stats WHERE queue = '{QUEUE}'")
    admin.query(f"SELECT concurrency.create_queue('{QUEUE}', lease => '3 seconds', max_attempts => 1000, "
                "retain => '1 day')")
    admin.query(f"DROP TABLE IF EXISTS {WRITES}")
    # no unique constraint: a second write of a step would be a second row, counted below
    admin.query(f"CREATE TABLE {WRITES} (wf int NOT NULL, task_id bigint NOT NULL)")
    admin.query("DELETE FROM concurrency.event WHERE name LIKE 'chaos:%%'")
    admin.query("SELECT count(*) FROM concurrency.enqueue_batch(%s, ARRAY(SELECT jsonb_build_object('wf', n) "
                "FROM generate_series(0, %s - 1) AS n))", (QUEUE, args.workflows))

    started = time.monotonic()
    deadline = started + args.deadline
    emitter = spawn("emitter", args)
    workers = [spawn("worker", args) for _ in range(args.workers)]
    kills = restarts_of_workers = 0
    server_restarted_at = None
    next_kill = time.monotonic() + random.uniform(0.5, 2 * args.kill_every)
    done = 0
    while time.monotonic() < deadline:
        done = admin.query(f"SELECT count(*) FROM concurrency.\"q_{QUEUE}\" WHERE state = 'done'")[0][0]
        if done >= args.workflows and emitter.poll() is not None:
            break
        if server_restarted_at is None and done >= args.workflows // 2:
            restart_server(args)
            server_restarted_at = time.monotonic() - started
        if kills == 0 and done >= args.workflows // 4:
            next_kill = time.monotonic()  # a short run has at least one kill
        if time.monotonic() >= next_kill and (done < args.workflows or kills == 0):
            victim = random.randrange(len(workers))
            workers[victim].send_signal(signal.SIGKILL)
            workers[victim].wait()
            kills += 1
            workers[victim] = spawn("worker", args)
            next_kill = time.monotonic() + random.uniform(0.5, 2 * args.kill_every)
        for i, proc in enumerate(workers):  # a worker started while the server was down ends: again
            if proc.poll() is not None:
                workers[i] = spawn("worker", args)
                restarts_of_workers += 1
        time.sleep(0.2)
    duration = time.monotonic() - started
    for proc in workers:
        proc.send_signal(signal.SIGTERM)
    for proc in workers:
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
    if emitter.poll() is None:
        emitter.kill()
    emitted = emitter.communicate()[0].strip()

    checks = []

    def check(ok, what, detail=""):
        checks.append(ok)
        print(f"{'ok' if ok else 'FAIL'} - {what}{'' if ok or not detail else ': ' + str(detail)}", flush=True)

    n = args.workflows
    states = dict(admin.query(f'SELECT state, count(*) FROM concurrency."q_{QUEUE}" GROUP BY state'))
    check(states == {"done": n}, f"every workflow finished: {n} done", states)
    writes = admin.query(f"SELECT count(*), count(DISTINCT wf), coalesce(max(c), 0) FROM "
                         f"(SELECT wf, count(*) AS c FROM {WRITES} GROUP BY wf) AS w")[0]
    total = admin.query(f"SELECT count(*) FROM {WRITES}")[0][0]
    check(total == n and writes[1] == n and writes[2] == 1,
          "every database step's row exactly once", f"{total} rows for {writes[1]} workflows, at most {writes[2]} each")
    results = admin.query(f'SELECT (payload->>\'wf\')::int, result FROM concurrency."q_{QUEUE}" WHERE state = \'done\'')
    wrong = [wf for wf, result in results
             if result != {"wf": wf, "first": {"wf": wf}, "reply": {"wf": wf}, "last": {"wf": wf, "reply": {"wf": wf}}}]
    check(len(results) == n and not wrong, "no event lost: every workflow's result has its event's payload",
          f"{len(wrong)} wrong, e.g. {wrong[:5]}")
    kept = admin.query(f'SELECT count(*) FROM concurrency."q_{QUEUE}" WHERE steps ?& %s '
                       "AND steps ? ('event:chaos:' || (payload->>'wf'))", (STEPS,))[0][0]
    check(kept == n, "every workflow kept its five steps", f"{kept} of {n}")
    parked = admin.query("SELECT count(*) FROM concurrency.event_wait WHERE queue = %s", (QUEUE,))[0][0]
    check(parked == 0, "none stuck: no task left waiting for an event", parked)
    check(server_restarted_at is not None, "the server was restarted once in the middle")
    check(kills > 0, "workers were killed")

    again = admin.query(f'SELECT count(*) FROM concurrency."q_{QUEUE}" WHERE attempt > 1')[0][0]
    restart = "none" if server_restarted_at is None else f"at {server_restarted_at:.1f} s"
    print(f"workflows {n} ({again} ran again after a lost worker or a failed attempt), "
          f"worker processes {args.workers} x {args.concurrency} slots, SIGKILLs {kills}, "
          f"workers that ended on their own and were started again {restarts_of_workers}, server restart {restart}, "
          f"{emitted or 'emitter did not finish'}, duration {duration:.1f} s")
    failed = checks.count(False)
    print(f"{len(checks) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--role", choices=["test", "worker", "emitter"], default="test")
    parser.add_argument("--workflows", type=int, default=int(os.environ.get("CHAOS_WORKFLOWS", 1000)))
    parser.add_argument("--workers", type=int, default=3, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=4, help="slots per worker process")
    parser.add_argument("--kill-every", type=float, default=2.0, help="mean seconds between SIGKILLs")
    parser.add_argument("--emit-over", type=float, default=None,
                        help="seconds over which the events are emitted (default: one per 20 ms)")
    parser.add_argument("--deadline", type=float, default=900.0, help="seconds the whole run may take")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--pg-bin", help="the server's bin directory (pg_ctl)")
    parser.add_argument("--pgdata", help="the server's data directory")
    parser.add_argument("--server-log", help="the server's log file (pg_ctl -l)")
    args = parser.parse_args()
    if args.emit_over is None:
        args.emit_over = args.workflows / 50
    if args.role == "worker":
        worker_main(args)
    elif args.role == "emitter":
        emitter_main(args)
    else:
        if not (args.pg_bin and args.pgdata):
            parser.error("--pg-bin and --pgdata are needed to restart the server")
        sys.exit(main(args))
