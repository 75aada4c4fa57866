#!/usr/bin/env python3
"""A worker for a concurrency_ext task queue, with psycopg 3.

Needs Python 3.8 or later and psycopg 3.1 or later (Debian 12: the python3
and python3-psycopg packages; elsewhere: pip install "psycopg[binary]").

    python3 examples/worker.py --queue emails --name w1        # PG* env vars say where

Behind PgBouncer in transaction mode (before 1.21, or without
max_prepared_statements) add --no-prepare: psycopg prepares a statement on
the server after five executions, and the next client of that server
connection then fails with DuplicatePreparedStatement "_pg3_0". LISTEN does
not work through a transaction-mode pooler either: give the listener a
direct (or session-mode) connection with --listen-conninfo, or poll only
with --listen-conninfo none.

What it shows:
  * the claim is its own short transaction: once committed, the lease is
    visible, and if this process dies the task comes back after the lease
    (with attempt + 1) instead of being lost or stuck;
  * the work's own writes and `complete` share one transaction: if the lease
    was taken over meanwhile, `complete` raises SQLSTATE CE001 and the writes
    roll back with it, so a task's effect lands exactly once;
  * the cheapest loop: that same transaction also claims the next task, so a
    busy worker commits once per task instead of twice (the claim of task N+1
    rolls back with task N's work if that fails, and is claimed again);
  * long tasks are kept alive by heartbeats from a second connection;
  * it sleeps on LISTEN concurrency_<queue> (with a timeout: scheduled tasks
    and expired leases send no notification) instead of polling hard;
  * SIGTERM / SIGINT: it finishes the task in hand, gives back the tasks it
    claimed but did not start, and exits 0.

The work itself is `do_work`: here it sleeps for payload["sleep"] seconds (or
fails if payload["fail"] is set) and records the task in the table
worker_results, which it creates at start if it is missing (RESULTS_TABLE).
At start it also checks that the extension and the queue exist, and stops
with a clear message otherwise. Replace the work with yours. A lost connection ends the process with an error: run
it under a supervisor (systemd, a container runtime) that starts it again.
"""
import argparse
import json
import logging
import os
import select
import signal
import sys
import threading

if sys.version_info < (3, 8):
    sys.exit("worker.py needs Python 3.8 or later")
try:
    import psycopg
    from psycopg import rows, sql
except ImportError:
    sys.exit('worker.py needs psycopg 3: apt-get install python3-psycopg (Debian 12), or pip install "psycopg[binary]"')

LEASE_LOST = "CE001"  # concurrency_ext: another worker holds the task now, or it is gone

# What do_work writes to; created at start when missing.
RESULTS_TABLE = """
    CREATE TABLE IF NOT EXISTS worker_results (task_id bigint, attempt int, worker text, payload jsonb,
                                               done_at timestamptz DEFAULT now())"""

log = logging.getLogger("worker")


def do_work(conn, task, name):
    """The task's work, inside the transaction that will complete it."""
    seconds = float(task["payload"].get("sleep", 0))
    if task["payload"].get("fail"):
        raise RuntimeError(f"payload asked to fail: {task['payload']['fail']}")
    if seconds:
        threading.Event().wait(seconds)
    conn.execute(
        "INSERT INTO worker_results (task_id, attempt, worker, payload) VALUES (%s, %s, %s, %s)",
        (task["task_id"], task["attempt"], name, json.dumps(task["payload"])),
    )


class Heartbeat:
    """Extends the lease of the task in hand, from a connection of its own, while the work runs."""

    def __init__(self, connect, queue):
        self.conn = connect()
        self.queue = queue
        self.lock = threading.Lock()
        self.task, self.every, self.lost = None, None, None
        self.changed = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def watch(self, task, every):
        """Context manager: heartbeats for `task` every `every` seconds until the block ends."""
        heartbeat = self

        class Watch:
            def __enter__(self):
                with heartbeat.lock:
                    heartbeat.task, heartbeat.every, heartbeat.lost = task, every, None
                heartbeat.changed.set()
                return heartbeat

            def __exit__(self, *exc):
                with heartbeat.lock:  # waits for a heartbeat in flight
                    heartbeat.task = None
                heartbeat.changed.set()

        return Watch()

    def _run(self):
        while True:
            with self.lock:
                task, every = self.task, self.every
            self.changed.clear()
            if self.changed.wait(every if task else None):
                continue  # a new task, or the task is done
            with self.lock:
                if self.task is not task:
                    continue
                try:
                    self.conn.execute(
                        "SELECT concurrency.heartbeat(%s, %s, %s)", (self.queue, task["task_id"], task["lease_token"])
                    )
                except psycopg.Error as e:
                    if e.sqlstate != LEASE_LOST:
                        raise
                    self.lost = e.diag.message_primary
                    self.task = None


class Worker:
    def __init__(self, args):
        self.args = args
        self.conninfo = args.conninfo
        self.stopping = False
        self.wake_r, self.wake_w = os.pipe()
        # prepare_threshold=None: no server-side prepared statements (for
        # PgBouncer in transaction mode); psycopg's default prepares after 5 runs
        options = {"autocommit": True, "application_name": args.name}
        if args.no_prepare:
            options["prepare_threshold"] = None
        self.connect = lambda conninfo=self.conninfo: psycopg.connect(conninfo, **options)
        self.conn = self.connect()
        self.check_setup()
        self.listener = None
        if args.listen_conninfo != "none":
            self.listener = self.connect(self.conninfo if args.listen_conninfo is None else args.listen_conninfo)
            # the channel is an identifier: quoted, so that its case is kept
            self.listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier("concurrency_" + args.queue)))
        self.heartbeat = Heartbeat(self.connect, args.queue)

    def check_setup(self):
        """Fails at start, with what to do, rather than burning retries later."""
        has_extension = self.conn.execute(
            "SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'concurrency_ext')"
        ).fetchone()[0]
        if not has_extension:
            sys.exit("worker.py: the extension is not installed in this database: CREATE EXTENSION concurrency_ext")
        if self.conn.execute("SELECT FROM concurrency.queue_stats WHERE queue = %s", (self.args.queue,)).fetchone() is None:
            sys.exit(
                f"worker.py: queue {self.args.queue!r} does not exist: "
                "SELECT concurrency.create_queue('{}')".format(self.args.queue.replace("'", "''"))
            )
        try:
            self.conn.execute(RESULTS_TABLE)
        except psycopg.Error as e:
            sys.exit(f"worker.py: cannot create worker_results, which do_work writes to: {e.diag.message_primary}")

    def say(self, text):
        print(f"{self.args.name}: {text}", flush=True)

    def stop(self, signum, frame):
        self.stopping = True
        os.write(self.wake_w, b"x")

    def wait_for_work(self):
        """Sleeps until a notification, a signal, or the poll interval."""
        watched = [self.wake_r] + ([self.listener.fileno()] if self.listener else [])
        ready, _, _ = select.select(watched, [], [], self.args.poll)
        if self.listener and self.listener.fileno() in ready:
            self.listener.execute("SELECT 1")  # reads (and discards) the pending notifications

    def claim(self):
        """Claims up to --batch tasks in a transaction of its own."""
        with self.conn.transaction():
            return self.claim_here()

    def claim_here(self):
        """Claims up to --batch tasks in the current transaction."""
        cur = self.conn.cursor(row_factory=rows.dict_row)
        return cur.execute(
            "SELECT task_id, lease_token, attempt, payload, lease_expires_at, "
            "       extract(epoch FROM lease_expires_at - clock_timestamp()) AS lease_seconds "
            "  FROM concurrency.dequeue(%s, %s, worker => %s)",
            (self.args.queue, self.args.batch, self.args.name),
        ).fetchall()

    def queue_is_empty(self):
        row = self.conn.execute(
            "SELECT ready + scheduled + leased + expired FROM concurrency.queue_stats WHERE queue = %s",
            (self.args.queue,),
        ).fetchone()
        return row is not None and row[0] == 0

    def process(self, task, claim_next):
        """Runs the task; with claim_next, returns the tasks claimed in the same transaction."""
        tid = task["task_id"]
        self.say(f"claimed task {tid} (attempt {task['attempt']})")
        every = max(0.05, float(task["lease_seconds"]) / 3)
        try:
            with self.conn.transaction():
                with self.heartbeat.watch(task, every) as hb:
                    do_work(self.conn, task, self.args.name)
                if hb.lost:
                    self.say(f"lease on task {tid} lost while working: {hb.lost}")
                # if the lease was lost, this raises CE001 and the work's writes roll back
                self.conn.execute(
                    "SELECT concurrency.complete(%s, %s, %s)", (self.args.queue, tid, task["lease_token"])
                )
                # one commit for this task's work, its completion and the next claim
                following = self.claim_here() if claim_next and not self.stopping else []
            self.say(f"completed task {tid}")
            return following
        except psycopg.Error as e:
            if e.sqlstate == LEASE_LOST:
                self.say(f"fenced off task {tid}: {e.diag.message_primary}; its writes were rolled back")
                return []
            self.give_up(task, f"{type(e).__name__}: {e.diag.message_primary or e}")
        except Exception as e:  # the work failed: record it, retry later (or dead letter)
            self.give_up(task, f"{type(e).__name__}: {e}")
        return []

    def give_up(self, task, error, retry_in=None):
        try:
            state = self.conn.execute(
                "SELECT concurrency.fail(%s, %s, %s, %s, %s)",
                (self.args.queue, task["task_id"], task["lease_token"], error, retry_in),
            ).fetchone()[0]
            self.say(f"failed task {task['task_id']}: {error} -> {state}")
        except psycopg.Error as e:
            if e.sqlstate != LEASE_LOST:
                raise
            self.say(f"could not fail task {task['task_id']}: {e.diag.message_primary}")

    def run(self):
        self.say(f"working queue {self.args.queue}")
        tasks = []  # claimed, not started
        while not self.stopping:
            if not tasks:
                tasks = self.claim()
            if not tasks:
                if self.args.drain and self.queue_is_empty():
                    self.say("queue is empty")
                    break
                self.wait_for_work()
                continue
            task = tasks.pop(0)
            # the last task in hand claims the next ones in its own transaction
            tasks.extend(self.process(task, claim_next=not tasks))
        # claimed but not started: hand back at once
        for task in tasks:
            self.give_up(task, "worker stopped before starting it", retry_in="0 seconds")
        self.say("stopped")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--queue", required=True)
    p.add_argument("--name", default=f"worker-{os.getpid()}")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--poll", type=float, default=1.0, help="longest sleep between claims (seconds)")
    p.add_argument("--drain", action="store_true", help="exit when the queue has no task left")
    p.add_argument("--conninfo", default="", help="libpq connection string (default: PG* environment)")
    p.add_argument(
        "--no-prepare",
        action="store_true",
        help="no server-side prepared statements (psycopg prepare_threshold=None): "
        "needed behind PgBouncer in transaction mode",
    )
    p.add_argument(
        "--listen-conninfo",
        default=None,
        help="connection for LISTEN (default: --conninfo); behind a transaction-mode pooler give a direct "
        "or session-mode one, or 'none' to poll every --poll seconds instead",
    )
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO)
    worker = Worker(args)
    signal.signal(signal.SIGTERM, worker.stop)
    signal.signal(signal.SIGINT, worker.stop)
    worker.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
