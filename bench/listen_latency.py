#!/usr/bin/env python3
"""LISTEN users' wake-up: from an enqueue's commit to its notification.

A producer enqueues one task every 50 ms (autocommit: the statement's return
is its commit) while a listener on concurrency_<queue> records when each
notification arrives; a sample is the time from the producer's return to the
first notification after it. Prints the samples' p50, p99 and max in ms, and
as its last line a JSON object. Connection from PG* variables; needs the
queue benchq (bench/durable.sh makes it).
"""
import json
import select
import statistics
import threading
import time

import psycopg

SAMPLES = 400
arrivals = []
stop = False


def listen():
    conn = psycopg.connect(autocommit=True)
    conn.add_notify_handler(lambda n: arrivals.append(time.perf_counter()))
    conn.execute("LISTEN concurrency_benchq")
    ready.set()
    while not stop:
        r, _, _ = select.select([conn.fileno()], [], [], 0.2)
        if r:
            conn.execute("SELECT 1")  # reads what arrived, runs the handler


ready = threading.Event()
t = threading.Thread(target=listen, daemon=True)
t.start()
ready.wait()
producer = psycopg.connect(autocommit=True)
samples = []
for i in range(SAMPLES):
    seen = len(arrivals)
    producer.execute("SELECT concurrency.enqueue('benchq', '{\"listen\": 1}')")
    committed = time.perf_counter()
    deadline = committed + 5
    while len(arrivals) == seen and time.perf_counter() < deadline:
        time.sleep(0.0002)
    if len(arrivals) > seen:
        samples.append(max(0.0, arrivals[seen] - committed) * 1000)
    time.sleep(0.05)
stop = True
samples.sort()
q = statistics.quantiles(samples, n=100)
result = {"samples": len(samples), "lost": SAMPLES - len(samples), "p50_ms": round(q[49], 3),
          "p99_ms": round(q[98], 3), "max_ms": round(samples[-1], 3), "spacing_ms": 50}
print(f"{len(samples)} samples: p50 {result['p50_ms']} ms, p99 {result['p99_ms']} ms, max {result['max_ms']} ms")
print(json.dumps(result))
