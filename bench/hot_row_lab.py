#!/usr/bin/python3
"""The seed's laboratory for bench/hot_row.sh: RATE (20) payments a second on
one merchant account for LAB_SECONDS (20) s, each holding its transaction
HOLD_MS (120) ms (pg_sleep inside), arriving on schedule whatever the
server does (an open loop: each payment on a connection of its own, opened
and warmed before the run — the module loaded, the plans prepared — as an
application's pool keeps them; CONNECTIONS (420) of them). Three
ways to write the payment, one after the other:

  counter     BEGIN; counter_add('bench_hot_merchant', amount); pg_sleep; COMMIT
  for_update  BEGIN; SELECT … FOR UPDATE (the row); UPDATE; pg_sleep; COMMIT
  optimistic  BEGIN; SELECT balance, version; pg_sleep; UPDATE … WHERE
              version = v; COMMIT — 0 rows: ROLLBACK and try again
  own_row     BEGIN; UPDATE a row of its own (one of 64, in turn); pg_sleep;
              COMMIT — no hot row at all: the baseline, what the statement
              itself costs on this machine

The wait of a payment is the time it spent before its write went through,
beyond its own work: for counter and for_update, from its start until the
write returned (the row lock, or the slot); for optimistic, from its start
until its successful write returned, less its own hold (the time lost to
failed attempts). Prints one JSON object: per variant p50, p99 and max wait
(ms), payments done, retries (optimistic), and the account's final balance
against the sum of the amounts (must be equal)."""
import asyncio
import json
import os
import random
import sys
import time

import psycopg

RATE = float(os.environ.get("RATE", 20))
SECONDS = float(os.environ.get("LAB_SECONDS", 20))
HOLD = float(os.environ.get("HOLD_MS", 120)) / 1000
CONNECTIONS = int(os.environ.get("CONNECTIONS", 420))
DRAIN_LIMIT = float(os.environ.get("DRAIN_LIMIT", 90))  # s after the last arrival
VARIANTS = sys.argv[1:] or ["own_row", "counter", "for_update", "optimistic"]


def pct(values, p):
    if not values:
        return None
    v = sorted(values)
    return round(v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))], 2)


async def payment(pool, variant, amount, waits, retries, row):
    conn = await pool.get()
    try:
        start = time.perf_counter()
        attempts = 0
        while True:
            attempts += 1
            await conn.execute("BEGIN")
            if variant == "counter":
                await conn.execute("SELECT concurrency.counter_add('bench_hot_merchant', %s)", (amount,))
                waits.append((time.perf_counter() - start) * 1000)
                await conn.execute("SELECT pg_sleep(%s)", (HOLD,))
            elif variant == "own_row":
                await conn.execute("UPDATE bench_hot.spread SET balance = balance + %s WHERE id = %s", (amount, row))
                waits.append((time.perf_counter() - start) * 1000)
                await conn.execute("SELECT pg_sleep(%s)", (HOLD,))
            elif variant == "for_update":
                await conn.execute("SELECT balance FROM bench_hot.accounts WHERE id = 1 FOR UPDATE")
                waits.append((time.perf_counter() - start) * 1000)
                await conn.execute("UPDATE bench_hot.accounts SET balance = balance + %s WHERE id = 1", (amount,))
                await conn.execute("SELECT pg_sleep(%s)", (HOLD,))
            else:
                cur = await conn.execute("SELECT version FROM bench_hot.accounts WHERE id = 1")
                (version,) = await cur.fetchone()
                await conn.execute("SELECT pg_sleep(%s)", (HOLD,))
                cur = await conn.execute(
                    "UPDATE bench_hot.accounts SET balance = balance + %s, version = version + 1 "
                    "WHERE id = 1 AND version = %s", (amount, version))
                if cur.rowcount == 0:
                    await conn.execute("ROLLBACK")
                    retries[0] += 1
                    continue
                waits.append((time.perf_counter() - start) * 1000 - HOLD * 1000)
            await conn.execute("COMMIT")
            return
    finally:
        pool.put_nowait(conn)


async def open_pool(n):
    pool = asyncio.Queue()
    for _ in range(n):
        conn = await psycopg.AsyncConnection.connect(autocommit=True)
        # load the module and prepare counter_add's plans in this backend
        await conn.execute("BEGIN")
        await conn.execute("SELECT concurrency.counter_add('bench_hot_warm', 1)")
        await conn.execute("SELECT concurrency.counter_add('bench_hot_warm', -1)")
        await conn.execute("SELECT balance FROM bench_hot.accounts WHERE id = 1")
        await conn.execute("ROLLBACK")
        pool.put_nowait(conn)
    return pool


async def run(pool, variant):
    waits, retries, amounts, tasks = [], [0], [], []
    t0 = time.perf_counter()
    n = int(RATE * SECONDS)
    for i in range(n):
        delay = t0 + i / RATE - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        amount = random.randint(1, 100)
        amounts.append(amount)
        tasks.append(asyncio.create_task(payment(pool, variant, amount, waits, retries, i % 64 + 1)))
    done, pending = await asyncio.wait(tasks, timeout=DRAIN_LIMIT)
    for t in pending:
        t.cancel()
    failed = sum(1 for t in done if t.exception() is not None)
    for t in done:
        if t.exception() is not None:
            print(f"{variant}: {t.exception()!r}", file=sys.stderr)
            break
    elapsed = time.perf_counter() - t0
    return {
        "payments": n, "done": len(done) - failed, "failed": failed, "unfinished": len(pending),
        "wait_p50_ms": pct(waits, 50), "wait_p99_ms": pct(waits, 99), "wait_max_ms": pct(waits, 100),
        "retries": retries[0] if variant == "optimistic" else None,
        "seconds": round(elapsed, 1), "amounts": sum(amounts) if not pending and not failed else None,
    }


async def main():
    out = {"rate_per_s": RATE, "seconds": SECONDS, "hold_ms": HOLD * 1000, "connections": CONNECTIONS}
    with psycopg.connect(autocommit=True) as c:
        c.execute("SELECT concurrency.drop_counter('bench_hot_warm') FROM concurrency.counter "
                  "WHERE name = 'bench_hot_warm'")
        c.execute("SELECT concurrency.create_counter('bench_hot_warm')")
    pool = await open_pool(CONNECTIONS)
    for variant in VARIANTS:
        with psycopg.connect(autocommit=True) as c:
            c.execute("UPDATE bench_hot.accounts SET balance = 0, version = 0 WHERE id = 1")
            c.execute("UPDATE bench_hot.spread SET balance = 0")
            c.execute("SELECT concurrency.drop_counter('bench_hot_merchant') FROM concurrency.counter "
                      "WHERE name = 'bench_hot_merchant'")
            c.execute("SELECT concurrency.create_counter('bench_hot_merchant')")
        r = await run(pool, variant)
        with psycopg.connect(autocommit=True) as c:
            if variant == "own_row":
                final = c.execute("SELECT sum(balance) FROM bench_hot.spread").fetchone()[0]
            elif variant == "counter":
                final = c.execute("SELECT concurrency.counter_value('bench_hot_merchant')").fetchone()[0]
            else:
                final = c.execute("SELECT balance FROM bench_hot.accounts WHERE id = 1").fetchone()[0]
        r["final_value"] = int(final)
        r["exact"] = r["amounts"] is not None and int(final) == r["amounts"]
        out[variant] = r
        print(f"{variant}: {r}", file=sys.stderr)
    print(json.dumps(out))


asyncio.run(main())
