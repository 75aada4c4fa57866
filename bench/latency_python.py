#!/usr/bin/env python3
"""The Python runtime's enqueue-to-start latency with an idle worker.

For each worker (the threaded Worker and the AsyncWorker, rounds alternating
between them), the worker is started on an empty queue with one slot and
left idle; then, SAMPLES times, the producer calls enqueue (autocommit: the
call returns after its commit) and the sample is the time from that call to
the handler's start; 5 ms pass before the next one. Connection from PG*
variables; the module must be preloaded (the waiting dequeue is woken by
commits). Each round also gives the p50 from the enqueue call's return (its
commit done) to the handler's start: the worker's part. Prints a table and,
as its last line, a JSON object: {"sides": {side: {"p50_ms": [per round],
"p99_ms": [...], "after_commit_p50_ms": [...]}}, ...}.

    python3 bench/latency_python.py [ROUNDS] [SAMPLES]
"""
import asyncio
import json
import os
import queue as queues
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python"))

import psycopg  # noqa: E402

from concurrency_ext import AsyncWorker, Worker, enqueue  # noqa: E402

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
SAMPLES = int(sys.argv[2]) if len(sys.argv) > 2 else 200
QUEUE = "latency_py"


def percentile(xs, p):
    s = sorted(xs)
    return s[min(len(s) - 1, int(p / 100 * len(s)))]


def sample(producer, started):
    """SAMPLES enqueues, each timed to its handler's start (a perf_counter
    value the handler puts into started): from the call, and from its return
    (the commit done)."""
    ms, after_commit = [], []
    for _ in range(SAMPLES):
        t0 = time.perf_counter()
        enqueue(producer, QUEUE, {})
        t1 = time.perf_counter()
        t = started.get(timeout=10)
        ms.append((t - t0) * 1000)
        after_commit.append((t - t1) * 1000)
        time.sleep(0.005)
    return ms, after_commit


def threaded(producer):
    started = queues.Queue()
    worker = Worker("", QUEUE, lambda task, conn: started.put(time.perf_counter()), concurrency=1)
    worker.start()
    time.sleep(0.3)  # started, idle, waiting
    try:
        return sample(producer, started)
    finally:
        worker.stop()


def asynchronous(producer):
    started = queues.Queue()
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    holder = {}

    async def handler(task, conn):
        started.put(time.perf_counter())

    async def main():
        holder["stop"] = asyncio.Event()
        worker = AsyncWorker("", QUEUE, handler, concurrency=1)
        await worker.start()
        ready.set()
        await holder["stop"].wait()
        await worker.stop()

    t = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    t.start()
    ready.wait(10)
    time.sleep(0.3)
    try:
        return sample(producer, started)
    finally:
        loop.call_soon_threadsafe(holder["stop"].set)
        t.join(30)


def main():
    producer = psycopg.connect(autocommit=True)
    producer.execute("SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name = %s", (QUEUE,))
    producer.execute("SELECT concurrency.create_queue(%s)", (QUEUE,))
    sides = {"Worker": threaded, "AsyncWorker": asynchronous}
    results = {name: {"p50_ms": [], "p99_ms": [], "after_commit_p50_ms": []} for name in sides}
    order = list(sides)
    for _ in range(ROUNDS):
        for name in order:
            ms, after_commit = sides[name](producer)
            results[name]["p50_ms"].append(statistics.median(ms))
            results[name]["after_commit_p50_ms"].append(statistics.median(after_commit))
            results[name]["p99_ms"].append(percentile(ms, 99))
            print(f"{name}: p50 {results[name]['p50_ms'][-1]:.2f} ms, p99 {results[name]['p99_ms'][-1]:.2f} ms",
                  file=sys.stderr)
        order.reverse()
    print("| enqueue-to-start, idle worker | rounds × samples | p50 ms, median of rounds (range) | p99 ms, median "
          "| p50 ms from the commit's return |")
    print("|---|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {ROUNDS} × {SAMPLES} | {statistics.median(r['p50_ms']):.2f} "
              f"({min(r['p50_ms']):.2f}–{max(r['p50_ms']):.2f}) | {statistics.median(r['p99_ms']):.2f} "
              f"| {statistics.median(r['after_commit_p50_ms']):.2f} |")
    producer.execute("SELECT concurrency.drop_queue(%s)", (QUEUE,))
    print(json.dumps({"rounds": ROUNDS, "samples": SAMPLES, "psycopg": psycopg.__version__, "sides": results}))


if __name__ == "__main__":
    main()
