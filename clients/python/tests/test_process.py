"""Worker processes killed and stopped: SIGKILL mid-task and a restart do
every task exactly once; SIGTERM finishes the task in hand and spends no
attempt on the tasks it claimed but did not start."""
import os
import signal
import socket
import subprocess
import sys

import pytest

from concurrency_ext import enqueue_batch
from conftest import results_table, states, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))


def start(dsn, queue, concurrency=1, batch=1, hang=False, lease=None):
    env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE), CE_HANG="1" if hang else "0",
               CE_LEASE="" if lease is None else str(lease))
    return subprocess.Popen([sys.executable, os.path.join(HERE, "worker_proc.py"), dsn, queue, str(concurrency),
                             str(batch)], stdout=subprocess.PIPE, text=True, env=env)


def read_until(proc, line):
    seen = []
    for out in proc.stdout:
        seen.append(out.strip())
        if out.strip() == line:
            return seen
    raise AssertionError(f"the worker ended before printing {line!r}: {seen}")


def results(admin, queue):
    return admin.execute(f"SELECT task_id, attempt FROM {results_table(queue)} ORDER BY task_id").fetchall()


def test_sigkill_mid_task_and_restart_every_task_once(admin, dsn, queue):
    payloads = [{"n": i, "sleep": 0.01} for i in range(40)]
    payloads[12] = {"n": 12, "hang": True}
    ids = enqueue_batch(admin, queue, payloads)
    # leases of two minutes for both workers: a stall of a loaded machine
    # cannot let one lapse while its worker runs and count another attempt
    # (with the queue's 2-second lease, the hanging task's heartbeats were
    # once late enough for the killed worker's other slot to claim it again
    # before the kill)
    first = start(dsn, queue, concurrency=2, hang=True, lease=120)
    read_until(first, f"started {ids[12]}")
    first.send_signal(signal.SIGKILL)
    first.wait(30)
    # the killed worker's leases run out: once its sessions are gone (the
    # last message it sent may still have claimed a task), they end now
    name = f"{socket.gethostname()}-{first.pid}"
    wait_until(lambda: admin.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                                     (name,)).fetchone()[0] == 0, "the killed worker's sessions to end")
    admin.execute(f'UPDATE concurrency."q_{queue}" SET lease_expires_at = clock_timestamp(), '
                  "lease_extended_to = NULL WHERE state = 'leased'")
    # the killed task comes back (attempt 2)
    second = start(dsn, queue, concurrency=2, lease=120)
    wait_until(lambda: len(results(admin, queue)) >= 40, "every task")
    second.send_signal(signal.SIGTERM)
    assert second.wait(30) == 0
    done = results(admin, queue)
    assert [task_id for task_id, _ in done] == sorted(ids), "every task exactly once"
    assert dict(done)[ids[12]] == 2, "the task killed mid-run ran again, once"
    assert states(admin, queue) == {}


def test_sigterm_finishes_the_task_in_hand(admin, dsn, queue):
    ids = enqueue_batch(admin, queue, [{"n": i, "sleep": 0.3} for i in range(4)])
    proc = start(dsn, queue)
    read_until(proc, f"started {ids[0]}")
    proc.send_signal(signal.SIGTERM)
    assert proc.communicate(timeout=60)[0].strip().endswith("stopped")
    assert proc.returncode == 0
    assert results(admin, queue) == [(ids[0], 1)]
    rest = admin.execute(f'SELECT state, attempt FROM concurrency."q_{queue}" ORDER BY id').fetchall()
    assert rest == [("ready", 0)] * 3, "no attempt spent, nothing left leased"


def test_sigterm_releases_claimed_tasks_not_started(admin, dsn, queue):
    has_release = admin.execute("SELECT EXISTS (SELECT FROM pg_proc WHERE proname = 'release' "
                                "AND pronamespace = 'concurrency'::regnamespace)").fetchone()[0]
    if not has_release:
        pytest.skip("the server has no concurrency.release: unstarted tasks are left to their leases")
    ids = enqueue_batch(admin, queue, [{"n": i, "sleep": 0.3} for i in range(5)])
    proc = start(dsn, queue, batch=5)
    read_until(proc, f"started {ids[0]}")
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert results(admin, queue) == [(ids[0], 1)]
    rest = admin.execute(f'SELECT state, attempt FROM concurrency."q_{queue}" ORDER BY id').fetchall()
    assert rest == [("ready", 0)] * 4, "released: ready again, the attempt not counted"
