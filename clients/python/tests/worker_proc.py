"""A worker process for the tests that kill or signal one:
    worker_proc.py CONNINFO QUEUE CONCURRENCY BATCH
Each task prints "started <id>" when its handler begins, waits
payload["sleep"] seconds, hangs forever if payload["hang"] and the
environment has CE_HANG=1, and records itself in the queue's results table.
CE_LEASE, when set, is the lease in seconds its claims ask for."""
import os
import sys
import threading

import psycopg

from concurrency_ext import Worker

conninfo, queue, concurrency, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])


# print() writes a line and its newline apart: two slots printing at once
# could run two lines into one, which the tests would never read
_out = threading.Lock()


def say(line):
    with _out:
        print(line, flush=True)


def handler(task, conn):
    say(f"started {task.id}")
    if task.payload.get("hang") and os.environ.get("CE_HANG") == "1":
        threading.Event().wait()
    threading.Event().wait(task.payload.get("sleep", 0))
    conn.execute(f'INSERT INTO "r_{queue}" VALUES (%s, %s, %s, %s)',
                 (task.id, task.attempt, psycopg.types.json.Jsonb(task.payload), "proc"))


lease = float(os.environ["CE_LEASE"]) if os.environ.get("CE_LEASE") else None
Worker(conninfo, queue, handler, concurrency=concurrency, batch=batch, lease=lease, poll_interval=0.2).run()
say("stopped")
