"""Clients for bench/wait.sh (psycopg 3; libpq's PG* variables say where).

  latency N      wake-up latency of dequeue(…, wait) and of LISTEN/NOTIFY + dequeue,
                 N samples each, measured the same way: from just before the
                 producer's COMMIT (once the waiter is seen asleep, or idle
                 listening) to the waiter's return; prints one line per kind
"""
import random
import statistics
import sys
import threading
import time

import psycopg

QUEUE = "benchwait"


def percentile(values, p):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100.0 * (len(ordered) - 1))))]


def latency(samples):
    for kind in ("wait", "listen"):
        waiter = psycopg.connect(autocommit=True)
        producer = psycopg.connect()
        if kind == "listen":
            waiter.execute(f'LISTEN "concurrency_{QUEUE}"')
        returned = [0.0]

        def wait_one():
            if kind == "wait":
                waiter.execute(f"SELECT task_id FROM concurrency.dequeue('{QUEUE}', wait => '10 seconds')").fetchall()
            else:
                for _ in waiter.notifies():
                    break
                waiter.execute(f"SELECT task_id FROM concurrency.dequeue('{QUEUE}')").fetchall()
            returned[0] = time.perf_counter()

        pid = waiter.info.backend_pid
        # asleep in dequeue (wait event Extension), or idle listening
        asleep = ("SELECT wait_event_type = 'Extension' FROM pg_stat_activity WHERE pid = %s" if kind == "wait"
                  else "SELECT state = 'idle' FROM pg_stat_activity WHERE pid = %s")
        observer = psycopg.connect(autocommit=True)
        lat = []
        for _ in range(samples):
            t = threading.Thread(target=wait_one)
            t.start()
            time.sleep(0.002 + random.random() * 0.003)
            while not observer.execute(asleep, (pid,)).fetchone()[0]:
                time.sleep(0.001)
            producer.execute(f"SELECT concurrency.enqueue('{QUEUE}', '{{}}')")
            before_commit = time.perf_counter()
            producer.commit()
            t.join()
            lat.append((returned[0] - before_commit) * 1000.0)
        print(f"{kind} samples={len(lat)} p50_ms={statistics.median(lat):.3f} p99_ms={percentile(lat, 99):.3f} "
              f"max_ms={max(lat):.3f}")
        waiter.close()
        producer.close()
        observer.close()


if __name__ == "__main__":
    if sys.argv[1] == "latency":
        latency(int(sys.argv[2]))
