#!/usr/bin/env python3
"""A worker for a concurrency_ext task queue, on the Python runtime
(clients/python: psycopg 3, Debian 12's python3-psycopg).

    psql -c "SELECT concurrency.create_queue('emails')" -f examples/worker_setup.sql   # once: the queue, the table
    python3 examples/worker.py --queue emails --name w1              # PG* environment variables say where
    python3 examples/worker.py --queue emails --conninfo "host=pgbouncer dbname=app"   # PgBouncer, transaction mode

The runtime claims with dequeue (waiting for work where the server has
dequeue(wait), polling every --poll seconds at most where it has not), runs
do_work in a transaction whose last statement is complete (so its write lands
exactly once), heartbeats a third of the lease, and on SIGTERM or SIGINT
finishes the task in hand, hands the claimed tasks it did not start back
(release) and exits 0. --drain ends at the first claim that finds nothing.

It needs only `work` on the queue and INSERT on worker_results: it creates
nothing, reads no statistics, prepares no statement on the server and does
not LISTEN, so it runs as a least-privileged role and through a
transaction-mode pooler alike. The work is do_work: it waits payload["sleep"]
seconds, fails if payload["fail"] is set, and records the task in
worker_results. Replace it with yours.
"""
import argparse
import os
import sys
import threading

if sys.version_info < (3, 8):
    sys.exit("worker.py needs Python 3.8 or later")
# the runtime from this repository (not needed once it is installed: pip install clients/python)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python"))
try:
    import psycopg
    from psycopg.types.json import Jsonb

    from concurrency_ext import LeaseLostError, Worker
except ImportError as e:
    sys.exit(f"worker.py needs psycopg 3 (apt-get install python3-psycopg): {e}")


def do_work(task, conn, name):
    """The task's work, inside the transaction that will complete it."""
    payload = task.payload if isinstance(task.payload, dict) else {}
    print(f"{name}: claimed task {task.id} (attempt {task.attempt})", flush=True)
    if payload.get("fail"):
        raise RuntimeError(f"payload asked to fail: {payload['fail']}")
    if payload.get("sleep"):
        threading.Event().wait(float(payload["sleep"]))
    conn.execute("INSERT INTO worker_results (task_id, attempt, worker, payload) VALUES (%s, %s, %s, %s)",
                 (task.id, task.attempt, name, Jsonb(task.payload)))


def check_setup(conninfo, queue):
    """Stops at start, saying what to do, rather than burning every task's attempts."""
    with psycopg.connect(conninfo, autocommit=True, prepare_threshold=None) as conn:
        if not conn.execute("SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'concurrency_ext')").fetchone()[0]:
            sys.exit("worker.py: the extension is not installed in this database: CREATE EXTENSION concurrency_ext")
        if not conn.execute("SELECT EXISTS (SELECT FROM concurrency.queue WHERE name = %s)", (queue,)).fetchone()[0]:
            quoted = queue.replace("'", "''")
            sys.exit(f"worker.py: queue {queue!r} does not exist: SELECT concurrency.create_queue('{quoted}')")
        if conn.execute("SELECT to_regclass('worker_results')").fetchone()[0] is None:
            sys.exit("worker.py: table worker_results, which do_work writes to, does not exist: "
                     "run examples/worker_setup.sql")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--queue", required=True)
    p.add_argument("--name", default=f"worker-{os.getpid()}")
    p.add_argument("--concurrency", type=int, default=1, help="tasks run at once (threads)")
    p.add_argument("--batch", type=int, default=1, help="tasks per claim, completed together")
    p.add_argument("--wait", type=float, default=5.0, help="longest wait of one claim for work (seconds)")
    p.add_argument("--poll", type=float, default=1.0,
                   help="longest pause between claims on a server without dequeue(wait) (seconds)")
    p.add_argument("--drain", action="store_true", help="exit at the first claim that finds nothing")
    p.add_argument("--conninfo", default="", help="libpq connection string (default: PG* environment)")
    args = p.parse_args()
    check_setup(args.conninfo, args.queue)

    def said(text):
        return lambda error, task: print(f"{args.name}: {text.format(task=task, error=error)}", flush=True)

    lost = said("fenced off task {task.id}: {error.message}; its writes were rolled back")
    failed = said("failed task {task.id}: {error!r}")
    worker = Worker(args.conninfo, args.queue, lambda task, conn: do_work(task, conn, args.name),
                    concurrency=args.concurrency, batch=args.batch, wait=args.wait, poll_interval=args.poll,
                    name=args.name,
                    on_error=lambda e, t: (lost if isinstance(e, LeaseLostError) else failed)(e, t),
                    on_complete=lambda task: print(f"{args.name}: completed task {task.id}", flush=True))
    print(f"{args.name}: working queue {args.queue}", flush=True)
    worker.run(drain=args.drain)
    if args.drain and not worker.stopping:
        print(f"{args.name}: queue is empty", flush=True)
    print(f"{args.name}: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
