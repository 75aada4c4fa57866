"""Shared helpers of the Citus suite (test/citus/test_*.py).

scripts/citus-check.sh starts a coordinator and two workers and exports
CITUS_PORTS (coordinator first), CITUS_DIR, CITUS_BIN and CITUS_SCRIPTS.
Each test file prints "ok NAME" or "FAIL NAME: why" per check and ends
with "N passed, M failed".
"""
import os
import re
import subprocess
import sys
import threading
import time
import traceback

import psycopg

PORTS = [int(p) for p in os.environ.get("CITUS_PORTS", "5621 5622 5623").split()]
COORDINATOR, WORKER1, WORKER2 = PORTS[0], PORTS[1], PORTS[2]
NODES = (COORDINATOR, WORKER1, WORKER2)
CLUSTER_DIR = os.environ.get("CITUS_DIR", "")
SCRIPTS = os.environ.get("CITUS_SCRIPTS", os.path.join(os.path.dirname(__file__), "..", "..", "scripts"))

_results = {"passed": 0, "failed": 0}


def connect(port, autocommit=True, user="postgres", dbname="postgres", **kw):
    return psycopg.connect(host="127.0.0.1", port=port, user=user, dbname=dbname,
                           autocommit=autocommit, connect_timeout=10, **kw)


def scalar(conn, sql, params=None):
    row = conn.execute(sql, params).fetchone()
    return None if row is None else row[0]


def sqlstate_of(fn):
    """Runs fn; returns the SQLSTATE of the database error it raised, or None."""
    try:
        fn()
    except psycopg.Error as e:
        return e.sqlstate
    return None


def error_of(fn):
    try:
        fn()
    except psycopg.Error as e:
        return e
    return None


def check(name, condition, why=""):
    if condition:
        _results["passed"] += 1
        print(f"ok {name}", flush=True)
    else:
        _results["failed"] += 1
        print(f"FAIL {name}: {why}", flush=True)
    return condition


def run(tests):
    """Runs each test function; an exception fails that test and the run goes on."""
    for t in tests:
        try:
            t()
        except Exception:  # noqa: BLE001 - report and go on
            _results["failed"] += 1
            print(f"FAIL {t.__name__}: exception", flush=True)
            traceback.print_exc(file=sys.stdout)
    print(f"{_results['passed']} passed, {_results['failed']} failed", flush=True)
    sys.exit(0 if _results["failed"] == 0 else 1)


def restart_node(n, down_seconds=0.0):
    """Stops node n (0 coordinator, 1 and 2 workers) fast, waits, starts it again."""
    data = os.path.join(CLUSTER_DIR, f"node{n}")
    pg_ctl = os.path.join(os.environ.get("CITUS_BIN", "/opt/concurrency_ext/pg18/bin"), "pg_ctl")
    log = os.path.join(CLUSTER_DIR, f"node{n}.log")
    subprocess.run(["runuser", "-u", "postgres", "--", pg_ctl, "-D", data, "-m", "fast", "-w", "stop"],
                   check=True, stdout=subprocess.DEVNULL)
    time.sleep(down_seconds)
    subprocess.run(["runuser", "-u", "postgres", "--", pg_ctl, "-D", data, "-l", log, "-w", "-t", "60", "start"],
                   check=True, stdout=subprocess.DEVNULL)



def fresh_distributed_queue(c, name, shards, **settings):
    """Drops queue `name` if it exists, then creates it with `settings` and distributes it over `shards` shards."""
    c.execute("SELECT concurrency.drop_queue(%s) FROM concurrency.queue WHERE name = %s", (name, name))
    args = "".join(f", {k} => '{v}'" for k, v in settings.items())
    c.execute(f"SELECT concurrency.create_queue('{name}'{args})")
    c.execute("SELECT concurrency.distribute_queue(%s, %s)", (name, shards))

def start_workers(loop, stop, errors, per_node=2):
    """`per_node` threads on each node running loop(stop, errors, port): started, returned."""
    threads = [threading.Thread(target=loop, args=(stop, errors, port)) for port in NODES for _ in range(per_node)]
    for t in threads:
        t.start()
    return threads


def kill_worker_backends(port):
    """Terminates the backends of node `port` that carry other nodes' routed calls (Citus's internal connections):
    how many."""
    return scalar(connect(port), "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                 "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() "
                                 "AND datname = current_database() AND application_name LIKE 'citus_internal%%'")


def wait_until(predicate, timeout=30.0, step=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return False


def remote_shards(c, queue, sql, params=None, tables="q"):
    """Runs sql with citus.log_remote_commands on: its rows, and the shards of q_<queue> (and k_<queue>, its key
    table, with tables="qk") that each remote command names (commands that name none left out)."""
    remote = []

    def handler(d):
        remote.append(d.message_primary or "")
    c.add_notice_handler(handler)
    c.execute("SET citus.log_remote_commands = on")
    c.execute("SET client_min_messages = log")
    try:
        cur = c.execute(sql, params)
        rows = cur.fetchall() if cur.description else []
    finally:
        c.execute("RESET citus.log_remote_commands")
        c.execute("RESET client_min_messages")
        c.remove_notice_handler(handler)
    # shard tables are q_<queue>_<shard id>; Citus names a subquery's table q_<queue>_1 and the like
    shards = [set(re.findall(rf"[{tables}]_{queue}_[0-9]{{5,}}", m)) for m in remote]
    return rows, [s for s in shards if s]


def routed(commands):
    """Whether every remote command names one shard: router statements only."""
    return all(len(s) == 1 for s in commands)
