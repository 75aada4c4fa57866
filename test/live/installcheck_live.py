#!/usr/bin/env python3
"""make installcheck against a live server must pass and leave the server's
state alone. Run against a server with shared_preload_libraries =
'concurrency_ext' (the lock-history sampler running), as scripts/test.sh does:

  1. makes a real lock-wait episode (a session holds an advisory lock, another
     waits for it, the holder commits) and notes it and the history's status;
  2. runs `make installcheck` (regress and isolation suites) in the source tree;
  3. checks that both suites passed, that the episode is still in the history
     as it was, and that the history was not reset (episodes_recorded did not
     go down).

Prints "ok"/"FAIL" per check and "N passed, M failed".
Usage: test/live/installcheck_live.py PG_CONFIG SOURCE_TREE
Needs PGHOST/PGPORT/PGUSER of a superuser, and psycopg 3 (python3-psycopg).
"""
import re
import subprocess
import sys
import threading
import time

import psycopg

LOCK_KEY = 727_272_001  # an advisory key no suite uses
results = []


def check(ok, name, detail=""):
    results.append(ok)
    print(("ok " if ok else "FAIL ") + name + ("" if ok or not detail else ": " + detail))


def wait_for(conn, sql, params=(), timeout=60):
    """Polls a condition (the sampler runs on its own clock)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = conn.execute(sql, params).fetchone()
        if row and row[0]:
            return True
        time.sleep(0.05)
    return False


def make_episode(conn):
    holder = psycopg.connect(autocommit=False)
    waiter = psycopg.connect(autocommit=False)
    holder.execute("SET application_name = 'installcheck_live holder'")
    holder.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
    holder_pid = holder.info.backend_pid
    t = threading.Thread(target=lambda: (waiter.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,)), waiter.commit()))
    t.start()
    seen = wait_for(conn, "SELECT count(*) > 0 FROM concurrency.lock_history WHERE root_pid = %s AND ended_at IS NULL",
                    (holder_pid,))
    holder.commit()
    t.join()
    ended = seen and wait_for(conn, "SELECT bool_and(ended_at IS NOT NULL) FROM concurrency.lock_history WHERE root_pid = %s",
                              (holder_pid,))
    holder.close()
    waiter.close()
    if not ended:
        return None
    return conn.execute("SELECT episode_id, started_at, ended_at, max_waiters FROM concurrency.lock_history "
                        "WHERE root_pid = %s ORDER BY episode_id DESC LIMIT 1", (holder_pid,)).fetchone()


def suite_summaries(output):
    """pg_regress's closing lines (15: "All N tests passed.", 18: "# All N tests passed.")."""
    return re.findall(r"All \d+ tests passed|\d+ of \d+ tests failed", output)


def main():
    pg_config, tree = sys.argv[1], sys.argv[2]
    conn = psycopg.connect(autocommit=True, dbname="postgres")
    conn.execute("CREATE EXTENSION IF NOT EXISTS concurrency_ext")
    preloaded = conn.execute("SELECT sampler_pid IS NOT NULL FROM concurrency.lock_history_status()").fetchone()[0]
    check(preloaded, "the server has the preload and the history sampler runs")
    episode = make_episode(conn)
    check(episode is not None, "a lock-wait episode is recorded before installcheck")
    recorded = conn.execute("SELECT episodes_recorded FROM concurrency.lock_history_status()").fetchone()[0]

    r = subprocess.run(["make", "-s", "installcheck", f"PG_CONFIG={pg_config}"], cwd=tree,
                       capture_output=True, text=True)
    out = r.stdout + r.stderr
    summaries = suite_summaries(out)
    passed = len(summaries) >= 2 and all("passed" in s for s in summaries)
    check(passed and r.returncode == 0, "make installcheck (regress and isolation) passes on the preloaded server",
          "; ".join(summaries) or out[-2000:])
    if not passed:
        try:
            print(open(f"{tree}/regression.diffs").read()[:4000])
        except OSError:
            pass

    if episode is not None:
        after = conn.execute("SELECT episode_id, started_at, ended_at, max_waiters FROM concurrency.lock_history "
                             "WHERE episode_id = %s", (episode[0],)).fetchone()
        check(after == episode, "the episode recorded before installcheck is still there, unchanged",
              f"before {episode}, after {after}")
    recorded_after = conn.execute("SELECT episodes_recorded FROM concurrency.lock_history_status()").fetchone()[0]
    check(recorded_after >= recorded, "the history was not reset (episodes_recorded did not go down)",
          f"{recorded} before, {recorded_after} after")
    print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
