#!/usr/bin/env python3
"""Writes docs/benchmarks.md (and its plots in docs/figures/) from the last
run's result files in docs/results/: for each workload, the newest file of
its kind. Run it after a benchmark has written a result file:

    python3 bench/report.py

Each kind of result file has a renderer below; a file of a kind without one
is listed at the end. Nothing here measures anything: every figure comes
from a result file, which names the command that made it.
"""
import glob
import json
import os
import re
import statistics

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "docs", "results")
FIGURES = os.path.join(ROOT, "docs", "figures")


def newest(kind):
    files = sorted(glob.glob(os.path.join(RESULTS, f"{kind}-*.json")))
    files = [f for f in files if "fsync-off" not in os.path.basename(f)]
    return files[-1] if files else None


def fmt(x, digits=0):
    return "—" if x is None else f"{x:,.{digits}f}"


def met(ratio, goal, at_least=True):
    if ratio is None:
        return "—"
    ok = ratio >= goal if at_least else ratio <= goal
    return f"{'≥' if at_least else '≤'} {goal:g}: {'met' if ok else 'missed'}"


def bar_chart(path, title, groups, series, unit):
    """A grouped bar chart as SVG: groups = [(label, {series: value})]."""
    colors = ["#4c72b0", "#dd8452", "#55a868", "#c44e52"]
    w, h, left, bottom, top = 640, 300, 60, 40, 30
    top_value = max((v for _, vals in groups for v in vals.values() if v), default=1) * 1.1
    gw = (w - left - 20) / max(len(groups), 1)
    bw = gw * 0.8 / max(len(series), 1)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<text x="{w / 2}" y="18" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{left}" y1="{h - bottom}" x2="{w - 10}" y2="{h - bottom}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="black"/>']
    for k in range(5):
        v = top_value * k / 4
        y = h - bottom - (h - bottom - top) * k / 4
        out.append(f'<text x="{left - 5}" y="{y + 4}" text-anchor="end">{v:,.0f}</text>')
    for g, (label, vals) in enumerate(groups):
        x0 = left + g * gw + gw * 0.1
        for i, s in enumerate(series):
            v = vals.get(s) or 0
            bh = (h - bottom - top) * v / top_value
            out.append(f'<rect x="{x0 + i * bw:.1f}" y="{h - bottom - bh:.1f}" width="{bw * 0.95:.1f}" '
                       f'height="{bh:.1f}" fill="{colors[i % len(colors)]}"/>')
        out.append(f'<text x="{x0 + gw * 0.4:.1f}" y="{h - bottom + 16}" text-anchor="middle">{label}</text>')
    for i, s in enumerate(series):
        out.append(f'<rect x="{left + 10 + i * 170}" y="{top}" width="10" height="10" fill="{colors[i % len(colors)]}"/>'
                   f'<text x="{left + 24 + i * 170}" y="{top + 10}">{s}</text>')
    out.append(f'<text x="12" y="{top - 8}">{unit}</text></svg>')
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def durable(path):
    d = json.load(open(path))
    name = os.path.basename(path)
    lines = [
        "## Durable commits: producers, workers and LISTEN",
        "",
        f"`{d['command']}` — result file [{name}](results/{name}); {d['server']}, commit {d['commit']}; "
        f"durable commits: {'yes' if d['durable'] else 'no (fsync = off: the CPU cost only)'}; "
        f"{d['rounds']} rounds, the order of the sides turning every round; a figure is the median of the rounds, "
        "a ratio the median of the rounds' ratios.",
        "",
        "**Producers**: pgbench clients, each transaction one `SELECT concurrency.enqueue('benchq', '{\"n\": 1}')`, "
        f"{d['seconds']} s a run, against a plain `INSERT` of the same payload into a table with the same columns "
        "and indexes (`CREATE TABLE … (LIKE concurrency.q_benchq INCLUDING ALL)`), and against `enqueue` with "
        "`concurrency.notify = commit` (a `NOTIFY` in every transaction, as 0.3.0 did).",
        "",
        "| producers | INSERT commits/s | enqueue commits/s | enqueue with notify = commit | enqueue / INSERT | goal | notify = commit / INSERT | server CPU per commit: INSERT / enqueue / notify = commit |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in d["producers"]:
        old = p.get("ratios_notify_commit")
        old_ratio = sorted(old)[len(old) // 2] if old else (p["enqueue_notify_commit"] / p["insert"])
        cpu = p.get("cpu_us") or {}
        cpus = " / ".join(f"{cpu[k]:.0f} µs" if cpu.get(k) else "—" for k in ("insert", "enqueue", "enqueue_notify_commit"))
        lines.append(f"| {p['clients']} | {fmt(p['insert'])} | {fmt(p['enqueue'])} | {fmt(p['enqueue_notify_commit'])} | "
                     f"{p['ratio']:.2f} | {met(p['ratio'], p['goal'])} | {old_ratio:.2f} | {cpus} |")
    lines += ["", "Each round's enqueue / INSERT: " + "; ".join(
        f"{p['clients']} producers " + ", ".join(f"{r:.2f}" for r in p["ratios"]) for p in d["producers"]) + ".", ""]
    missed = [p for p in d["producers"] if p["ratio"] < p["goal"]]
    if missed:
        lines += ["What bounds a missed row: with 32 and 64 producers the server is busy on both cores, so commits/s "
                  "follow the server's CPU per commit (counted by a cpuacct cgroup around the server, the last column), "
                  "which is 7-10 % more for `enqueue` than for the plain `INSERT`, although the backend's own "
                  "instructions per call are the same for both (callgrind, `bench/instructions.sh` row 9: about 290,600 "
                  "against 289,300 in one run); and a round's ratio moves by more "
                  "than that between rounds (above).", ""]
    plot = f"durable-producers.svg"
    bar_chart(os.path.join(FIGURES, plot), "Producers: commits/s (durable, medians)",
              [(f"{p['clients']}", {"INSERT": p["insert"], "enqueue": p["enqueue"],
                                     "enqueue, notify = commit": p["enqueue_notify_commit"]}) for p in d["producers"]],
              ["INSERT", "enqueue", "enqueue, notify = commit"], "commits/s")
    lines += [f"![Producers: commits/s by number of producers](figures/{plot})", ""]
    lines += [
        "**Workers**: pgbench clients draining a prefilled queue, each task two transactions as the runtimes do "
        "(`dequeue`, then `complete`), against the seeds' raw SQL on a table with the same columns and indexes "
        "(`UPDATE … WHERE id = (SELECT id … ORDER BY … FOR UPDATE SKIP LOCKED LIMIT 1) RETURNING id`, then `DELETE`).",
        "",
        "| workers | raw claim + delete tasks/s | dequeue + complete tasks/s | ours / raw | goal | server CPU per task: raw / ours |",
        "|---|---|---|---|---|---|",
    ]
    for w in d["workers"]:
        cpu = w.get("cpu_us") or {}
        cpus = " / ".join(f"{cpu[k]:.0f} µs" if cpu.get(k) else "—" for k in ("raw", "ours"))
        lines.append(f"| {w['clients']} | {fmt(w['raw'])} | {fmt(w['ours'])} | {w['ratio']:.2f} | {met(w['ratio'], w['goal'])} | {cpus} |")
    lines += ["", "Each round's ratio: " + "; ".join(
        f"{w['clients']} workers " + ", ".join(f"{r:.2f}" for r in w["ratios"]) for w in d["workers"]) + ".", ""]
    l = d["listen"]
    lines += [
        f"**LISTEN**: one enqueue every {l['spacing_ms']} ms, the time from its commit (the statement's return to the "
        f"producer) to a listener hearing `concurrency_benchq` (`bench/listen_latency.py`): {l['samples']} samples, "
        f"p50 {l['p50_ms']} ms, p99 {l['p99_ms']} ms, max {l['max_ms']} ms; {l['lost']} not heard within 5 s.",
        "",
    ]
    return lines


def hot_row(path):
    d = json.load(open(path))
    name = os.path.basename(path)
    lab, tp = d["lab"], d["throughput"]
    lines = [
        "## Hot rows: many writers on one value (counters)",
        "",
        f"`bench/hot_row.sh` on a server with durable commits ({d['settings']}), PostgreSQL {d['server']} — "
        f"result file [{name}](results/{name}); the machine's load at the end: `{d.get('load_after', '?')}`. "
        "How to run it: the script's header; what the figures mean: [counters.md](counters.md).",
        "",
        f"**The seed's laboratory**: {lab['rate_per_s']:g} payments a second on one merchant account for "
        f"{lab['seconds']:g} s, each holding its transaction {lab['hold_ms']:g} ms; the wait for the value "
        "(from the payment's start to its write going through).",
        "",
        "| payment written as | p50 wait | p99 wait | max | retries | exact | goal |",
        "|---|---|---|---|---|---|---|",
    ]
    names = {"own_row": "a row of its own (baseline)", "counter": "counter_add", "for_update": "SELECT … FOR UPDATE on one row",
             "optimistic": "version check, retried"}
    for key in ("own_row", "counter", "for_update", "optimistic"):
        r = lab.get(key)
        if not r:
            continue
        goal = met(r["wait_p99_ms"], 10, at_least=False) if key == "counter" else "—"
        lines.append(f"| {names[key]} | {r['wait_p50_ms']:,.2f} ms | {r['wait_p99_ms']:,.2f} ms | {r['wait_max_ms']:,.2f} ms | "
                     f"{fmt(r['retries']) if r['retries'] is not None else '—'} | {'yes' if r['exact'] else 'NO'} | {goal} |")
    ratio = tp["counter_median"] / tp["update_median"]
    lines += [
        "",
        f"**Many writers**: {tp['clients']} clients adding to one value as fast as they can, {tp['seconds']} s a run, "
        f"{len(tp['counter_add_commits_per_s'])} rounds alternating the sides; medians.",
        "",
        "| side | commits/s (rounds) | median |",
        "|---|---|---|",
        f"| counter_add, {tp['slots']} slots | {', '.join(fmt(x) for x in tp['counter_add_commits_per_s'])} | {fmt(tp['counter_median'])} |",
        f"| `UPDATE accounts SET balance = balance + $1 WHERE id = 1` | {', '.join(fmt(x) for x in tp['update_commits_per_s'])} | {fmt(tp['update_median'])} |",
        f"| one of 64 rows at random (no hot row: the machine's ceiling) | {', '.join(fmt(x) for x in tp['spread_64_rows_commits_per_s'])} | {fmt(tp['spread_median'])} |",
        "",
        f"counter / one row: **{ratio:.1f}×** ({met(ratio, 10)}). What bounds it: with no hot row at all the same "
        f"clients commit {tp['spread_median'] / tp['update_median']:.1f}× the single row on this machine (2 cores, "
        "durable commits), so 10× is above what the server commits here; the counter reaches "
        f"{tp['counter_median'] / tp['spread_median']:.0%} of that ceiling.",
        "",
    ]
    return lines


def peers_go(path):
    d = json.load(open(path))
    name = os.path.basename(path)
    env = d["environment"]
    present = {r["row"] for r in d["rows"]}
    # older result files count no write transactions
    has_writes = any("write_transactions" in x for r in d["rows"] for x in r.get("runs", []))
    sides = [
        "`runtime` (clients/go: the handler's writes and `complete` in one transaction; in (c) `HandleBatch` of 10, "
        "the batch's writes and `complete_batch` in one transaction; `Enqueue`, `EnqueueBatch` in the enqueue rows)",
        "`raw` (the same SQL loop written by hand)",
        "`river` (River's worker, completion batched by River; in (c) 10 workers, since River has no batch handler "
        "in its open-source version and its fetch claims as many jobs as it has free workers: the same 10 jobs in "
        "flight; `Client.Insert`, and `Client.InsertMany` in bulk, which like `EnqueueBatch` is one INSERT that "
        "returns the jobs)",
        "`river-tx` (River completing in the handler's transaction, `JobCompleteTx`)",
    ]
    if "e" in present:
        sides.append("`river-copy` (`Client.InsertManyFast`: COPY, returning only a count; River's fastest bulk "
                     "insert, shown beside the goal's side)")
    lines = [
        "## The Go runtime against River",
        "",
        f"`sudo bash bench/peers/go/peers-go.sh` — result file [{name}](results/{name}); {env['summary']}; "
        f"{d['jobs']} jobs a run after an untimed warm-up, {d['rounds']} rounds, the order of the sides alternating; "
        f"load average at the start {env['loadavg_at_start']}, at the end {env['loadavg_at_end']}. Sides: "
        + ", ".join(sides) + ". Every run checked each job handled (or, enqueueing, stored) exactly once.",
        "",
        "| row | side | jobs/s (median) | runtime's speed / side's (median of rounds, range) | goal |"
        + (" write transactions a job |" if has_writes else ""),
        "|---|---|---|---|---|" + ("---|" if has_writes else ""),
    ]
    missed, alone = [], []
    latency = [r for r in d["rows"] if "median_p50_ms" in r]
    for r in d["rows"]:
        if "median_p50_ms" in r:
            continue
        if "no_equivalent" in r:
            alone.append(r)
            lines.append(f"| {r['label']} | {r['side']} | — | no equivalent (below) | not comparable |" + (" |" if has_writes else ""))
            continue
        ratio = r.get("side_seconds_over_runtime_seconds")
        # the side's seconds over the runtime's: the runtime's speed over the side's
        if r["side"] == "runtime":
            cell, goal = "—", "—"
        else:
            cell = f"{ratio['median']:.2f} ({ratio['min']:.2f}–{ratio['max']:.2f})" if ratio else "—"
            goal = met(ratio["median"], 1.5) if ratio and r["side"] == "river" else "—"
            if ratio and r["side"] == "river" and ratio["median"] < 1.5:
                missed.append(r["row"])
        once = "" if r.get("exactly_once", True) else " (NOT exactly once)"
        # the transactions that took an id over the median run, a job (older result files have none)
        run = next((x for x in r["runs"] if x["seconds"] == r["median_seconds"] and "write_transactions" in x), None)
        w = f" {run['write_transactions'] / run['jobs']:.2f} |" if run else (" |" if has_writes else "")
        lines.append(f"| {r['label']} | {r['side']} | {fmt(r['median_jobs_per_second'])}{once} | {cell} | {goal} |{w}")
    lines.append("")
    for r in alone:
        lines += [f"{r['label']}: the runtime alone. {r['no_equivalent']}. As in the Node.js peers' keyed row, "
                  "job i has key i mod 100 and tasks are claimed in order, so 8 workers never hold two tasks of a "
                  "key: the row measures what the key limit's bookkeeping costs.", ""]
    if latency:
        lines += ["| (g) enqueue-to-start, idle worker | rounds × samples | p50 ms, median of rounds (range) | "
                  "p99 ms, median of rounds | goal (p50) |", "|---|---|---|---|---|"]
        for r in latency:
            p50s = [x["p50_ms"] for x in r["runs"]]
            goal = met(r["median_p50_ms"], 2, at_least=False) if r["side"] == "runtime" else "—"
            lines.append(f"| {r['side']} | {len(r['runs'])} × {r['samples']} | {r['median_p50_ms']:.2f} "
                         f"({min(p50s):.2f}–{max(p50s):.2f}) | {r['median_p99_ms']:.2f} | {goal} |")
        lines += ["", "From the call that enqueues a job (its own transaction) to its handler's start, the worker "
                  "idle and waiting, one job at a time, 5 ms apart. The runtime's producer is a pool of its own; `river`'s a "
                  "client of its own (an application's producer); `river-one-client` inserts with the worker's client, "
                  "which tells its own fetcher in the process.", ""]
    if has_writes:
        lines += ["Write transactions a job: the transactions that took an id during the median run, over its jobs "
                  "(every client's then, so a peer's maintenance counts); with durable commits each is a WAL flush, "
                  "shared by the commits that group with it.", ""]
    drains = [row for row in missed if row in ("a", "b", "c")]
    for row in drains:
        by_side = {r["side"]: r for r in d["rows"] if r["row"] == row and "median_seconds" in r}

        def median_run(side):
            r = by_side.get(side)
            return next((x for x in r["runs"] if x["seconds"] == r["median_seconds"]), None) if r else None

        ours, river, raw = median_run("runtime"), median_run("river"), by_side.get("raw")
        if not (ours and river and "write_transactions" in ours):
            lines += [f"Where ({row}) misses its goal: River completes jobs in batches; the runtime commits once a "
                      "task so that a handler's writes and `complete` are one transaction (exactly-once effects), "
                      "which River does only with `JobCompleteTx` (the `river-tx` side).", ""]
            continue
        a_job = lambda run, key: run[key] / run["jobs"]  # noqa: E731
        cpu = a_job(ours, "client_cpu_ms") + a_job(ours, "rest_of_machine_cpu_ms")
        cores = int(env.get("cores") or 1)
        lines += [f"What bounds ({row}): both sides commit about once a job (write transactions a job: the runtime "
                  f"{a_job(ours, 'write_transactions'):.2f}, River {a_job(river, 'write_transactions'):.2f}: River's "
                  "handler writes in a transaction of its own and River completes jobs in batches), so with durable "
                  "commits neither gets far ahead by commits. The runtime is within "
                  f"{abs(1 - raw['side_seconds_over_runtime_seconds']['median']) * 100:.0f} % of the same SQL loop "
                  f"written by hand (`raw`), and that loop is near the machine's CPU: {cpu:.2f} ms a job for the client "
                  "and the rest of the machine (the server, and anything else that ran then) on "
                  f"{cores} cores, at most about {cores * 1000 / cpu:,.0f} jobs/s, against River's "
                  f"{a_job(river, 'client_cpu_ms') + a_job(river, 'rest_of_machine_cpu_ms'):.2f} ms a job with its "
                  "cores not saturated. More than that takes fewer durable commits a job: the batch handler (row (c)) "
                  "writes and completes ten jobs in one.", ""]
    return lines


def claim_after_burst(path):
    d = json.load(open(path))
    name = os.path.basename(path)
    cpu = " fsync=off " in f" {d['settings']} "
    lines = [
        "## An empty claim after a burst",
        "",
        f"`bench/claim_after_burst.sh` on PostgreSQL {d['server']} ({d['settings']}"
        f"{': the CPU and buffer cost, not durable commits' if cpu else ''}) — result file "
        f"[{name}](results/{name}); the machine's load at the end: `{d.get('load_after', '?')}`. "
        f"{d['burst']:,} tasks enqueued, claimed and completed, then `dequeue` calls that find nothing, each its "
        f"own transaction: the first, then {d['claims']} more (a claim on average), with no VACUUM in between (the "
        "ready index then had "
        f"{d['ready_index_pages_after_burst']:,} pages), against the same on a queue that never held a task and "
        "on the burst's queue after VACUUM. The bound and why: docs/queue.md, \"Honest limits\".",
        "",
        "| claim | fresh queue: ms / index buffers a claim | the first after the burst | the next ones after the burst | after VACUUM |",
        "|---|---|---|---|---|",
    ]
    label = {"on": "without the executor (`direct_claim` on)", "off": "claim statement (`direct_claim` off; a distributed queue's shards)"}
    for r in d["rows"]:
        lines.append(f"| {label.get(r['direct_claim'], r['direct_claim'])} | {r['fresh_ms']:.3f} / {r['fresh_buffers']} | "
                     f"{r['burst_first_ms']:.3f} / {r['burst_first_buffers']} | "
                     f"{r['burst_ms']:.3f} / {r['burst_buffers']} | {r['vacuumed_ms']:.3f} / {r['vacuumed_buffers']} |")
    p = d.get("pinned_horizon")
    if p:
        lines += ["", f"Under a pinned xmin horizon (a transaction with an xid open from before the burst), the claim "
                  f"without the executor: the first empty claim {p['first_ms']:.3f} ms / {p['first_buffers']} index "
                  f"buffers, then {p['ms']:.3f} ms / {p['buffers']} a claim on average over {p['claims']}."]
    lines.append("")
    return lines


def workflows(path):
    d = json.load(open(path))
    name = os.path.basename(path)
    st, aw, e = d["step"], d["await_task"], d["end_to_end"]
    return [
        "## Durable workflows",
        "",
        f"`{d['command']}` — result file [{name}](results/{name}); PostgreSQL {d['server']}, {d['settings']}; "
        f"load at the end: {d['load_after']}.",
        "",
        "| workload | sides (medians of alternating rounds) | figure | goal |",
        "|---|---|---|---|",
        f"| a step: {st['clients']} sessions each on a leased task, one call a transaction, {st['seconds']:g} s a round, "
        f"{len(st['rounds']['heartbeat'])} rounds | `heartbeat` {fmt(st['heartbeat_per_s'])}/s, `record_step` "
        f"{fmt(st['record_step_per_s'])}/s | a step costs **{st['cost_ratio']:.2f}** heartbeats | "
        f"{met(st['cost_ratio'], 1.3, at_least=False)} |",
        f"| `await_task` woken by the completing commit, {aw['wakes']} times | from the worker's `COMMIT` returning "
        f"to `await_task` returning (negative: it returned first) | p50 **{aw['p50_ms']:.2f} ms**, p99 "
        f"{aw['p99_ms']:.2f} ms, max {aw['max_ms']:.2f} ms | {met(aw['p50_ms'], 2, at_least=False)} |",
        f"| {e['workflows']} five-step workflows end to end, {e['workers']} workers | one task recording five steps "
        f"{fmt(e['workflow_per_s'], 1)}/s; five chained tasks of a graph {fmt(e['graph_per_s'], 1)}/s | workflow / "
        f"graph **{e['ratio']:.2f}** | — |",
    ] + workflows_peers(d)


def workflows_peers(d):
    p = d.get("dbos")
    if not p:
        return ["", "DBOS and Absurd were not run here: a comparison with them is still to be made.", ""]
    if "skipped" in p:
        return ["", f"DBOS was not run: {p['skipped']}. Absurd was not run.", ""]
    return [
        f"| {p['workflows']} five-step workflows end to end, {p['workers']} workers, against DBOS Transact "
        f"{p['dbos_version']} (Python, its workflows started by direct calls, the same server) | concurrency_ext "
        f"{fmt(p['workflow_per_s'], 1)}/s; DBOS {fmt(p['dbos_per_s'], 1)}/s | concurrency_ext / DBOS "
        f"**{p['ratio']:.2f}** | {met(p['ratio'], 1.5)} |",
        "",
        f"Load when the run began: {d.get('load_before', 'not recorded')}. Absurd was not run.",
        "",
    ]


def release(path):
    d = json.load(open(path))
    name = os.path.basename(path)
    lines = [
        "## A parent's complete that releases a child",
        "",
        f"`{d['command']}` — result file [{name}](results/{name}); {d['server']}, commit {d['commit']}; "
        f"durable commits: {'yes' if d['durable'] else 'no (fsync = off: the CPU cost only)'}; "
        f"{d['rounds']} rounds, the order of the sides turning every round; {d['tasks_per_client']} tasks a worker.",
        "",
        "pgbench workers draining a prefilled queue, each task two transactions (`dequeue`, then `complete`): "
        "tasks that stand alone against tasks each with one child (enqueued with `after`, due a day later so "
        "that the drain claims parents only), which the parent's `complete` releases.",
        "",
        "| workers | plain tasks/s | parents tasks/s | time a task: parent / plain | server CPU a task: plain / parent | goal |",
        "|---|---|---|---|---|---|",
    ]
    for r in d["rows"]:
        cpu = r.get("cpu_us") or {}
        cpus = " / ".join(f"{cpu[k]:.0f} µs" if cpu.get(k) else "—" for k in ("plain", "parent"))
        lines.append(f"| {r['clients']} | {fmt(r['plain'])} | {fmt(r['parent'])} | {r['ratio']:.2f} | {cpus} | "
                     f"{met(r['ratio'], r['goal'], at_least=False)} |")
    lines += ["", "Each round's ratio: " + "; ".join(
        f"{r['clients']} workers " + ", ".join(f"{x:.2f}" for x in r["ratios"]) for r in d["rows"]) + ".", "",
        f"Load average when the run began: {d.get('load_before', 'not recorded')}; when it ended: "
        f"{d.get('load_after', 'not recorded')} (2 cores, shared). The disk's flush time varies several-fold "
        "from minute to minute: the ratio within each round, its two sides run back to back, is what compares.", ""]
    return lines

CITUS_KINDS = {
    "local1": "local queue on the coordinator, one statement",
    "coordinator1": "distributed, every client on the coordinator, one statement",
    "max_leased1": "distributed with max_leased, clients on the coordinator",
    "rate_limit1": "distributed with rate_limit, clients on the coordinator",
}


def citus_kind(kind):
    if kind.startswith("nodes"):
        form, shards = kind[len("nodes"):].split("@")
        return (f"distributed over {shards} shards, clients on the worker nodes, "
                f"{'two statements' if form == '2' else 'one statement'}")
    return CITUS_KINDS.get(kind, kind)


def citus(path):
    d = json.load(open(path))
    name = os.path.basename(path)
    lines = [
        "## Distributed queues on Citus against a plain server",
        "",
        f"`{d['command']}` — result file [{name}](results/{name}); {d['server']}, Citus 14, commit {d['commit']}; "
        f"durable commits: {'yes' if d['durable'] else 'no (fsync = off: the CPU cost only)'}; "
        f"{d['rounds']} turns of {d['seconds_per_round']:g} s rounds, the order of the kinds turning every turn.",
        "",
        "A coordinator and two worker nodes, each preloading `citus,concurrency_ext`, beside a plain PostgreSQL "
        "server of the same build without Citus (preloading `concurrency_ext`), all on one machine; each server in "
        "a cpuacct cgroup of its own. pgbench clients take a task and complete it: two statements (`dequeue`, "
        "then `complete`, as the runtimes do) or one (`SELECT complete(…) FROM dequeue(…)`). Ratios are against "
        "the plain server's round of the same form in the same turn (medians of the turns); server CPU counts "
        "every node.",
        "",
        "| clients | round | tasks/s | tasks/s ÷ plain | server CPU a task (coordinator / worker 1 / worker 2) "
        "| CPU ÷ plain | coordinator's share |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in d["rows"]:
        cpu = r["cpu_us"]
        if r["ratio"] is None:
            form = "two statements" if r["kind"].endswith("2") else "one statement"
            lines.append(f"| {r['clients']} | plain server, {form} | {fmt(r['tasks_per_s'])} | 1 | "
                         f"{cpu['plain']:.0f} µs | 1 | — |")
            continue
        lines.append(f"| {r['clients']} | {citus_kind(r['kind'])} | {fmt(r['tasks_per_s'])} | {r['ratio']:.2f} | "
                     f"{cpu['coordinator']:.0f} / {cpu['worker1']:.0f} / {cpu['worker2']:.0f} µs | "
                     f"{r['cpu_ratio']:.2f} | {r['coordinator_share']:.1f} % |")
    if d.get("scaling"):
        lines += ["", "Scaling: each worker node pinned to a core of its own (taskset), rounds with one worker node "
                  "serving alternating with rounds where both serve (as many clients again, tasks of their own), "
                  "two statements a task:", "",
                  "| clients per node | one node tasks/s | two nodes tasks/s | two ÷ one (median) | each turn |",
                  "|---|---|---|---|---|"]
        for r in d["scaling"]:
            lines.append(f"| {r['clients_per_node']} | {fmt(r['one_node'])} | {fmt(r['two_nodes'])} | "
                         f"{r['ratio']:.2f} | {', '.join(f'{x:.2f}' for x in r['ratios'])} |")
    lines += ["", f"Load average when the run began: {d.get('load_before')}; when it ended: {d.get('load_after')} "
              f"({d.get('cores')} cores, shared by the four servers and pgbench, so tasks/s show the cost of each "
              "path, not a cluster's scale; the CPU a task costs is what a cluster of real machines would divide).", ""]
    return lines + citus_earlier(path, d)


def citus_earlier(path, d):
    """A run of some kinds only (KINDS=, SCALING=0): the other kinds and the scaling from the newest run that has
    them, named with its commit."""
    kinds = {(r["clients"], r["kind"]) for r in d["rows"]}
    for other in reversed(sorted(glob.glob(os.path.join(RESULTS, "citus-*.json")))):
        if other == path or "fsync-off" in other:
            continue
        e = json.load(open(other))
        rows = [r for r in e["rows"] if (r["clients"], r["kind"]) not in kinds and r["ratio"] is not None]
        scaling = e.get("scaling") if not d.get("scaling") else None
        if not rows and not scaling:
            continue
        name = os.path.basename(other)
        lines = [f"Not in that run, from the run of commit {e['commit']} ([{name}](results/{name}), {e['rounds']} "
                 f"turns; load at its start {e.get('load_before')}):", ""]
        if rows:
            lines += ["| clients | round | tasks/s ÷ plain | server CPU a task (coordinator / worker 1 / worker 2) "
                      "| CPU ÷ plain | coordinator's share |", "|---|---|---|---|---|---|"]
            lines += [f"| {r['clients']} | {citus_kind(r['kind'])} | {r['ratio']:.2f} | "
                      f"{r['cpu_us']['coordinator']:.0f} / {r['cpu_us']['worker1']:.0f} / {r['cpu_us']['worker2']:.0f}"
                      f" µs | {r['cpu_ratio']:.2f} | {r['coordinator_share']:.1f} % |" for r in rows]
            lines.append("")
        if scaling:
            lines += ["| scaling: clients per node | one node tasks/s | two nodes tasks/s | two ÷ one (median) |",
                      "|---|---|---|---|"]
            lines += [f"| {r['clients_per_node']} | {fmt(r['one_node'])} | {fmt(r['two_nodes'])} | {r['ratio']:.2f} |"
                      for r in scaling]
            lines.append("")
        return lines
    return []


def peers_node():
    """The newest output of bench/peers/peers.sh (a Markdown table as the run printed it)."""
    files = sorted(f for f in glob.glob(os.path.join(RESULTS, "peers-node-*.md")) if "fsync-off" not in f)
    if not files:
        return [], None
    path = files[-1]
    name = os.path.basename(path)
    text = open(path).read().rstrip("\n").split("\n")
    lines = ["## The Node.js runtime against graphile-worker, pg-boss and pgmq", "",
             f"`{text[0]}` — result file [{name}](results/{name}).", ""]
    prev = ""
    for t in text[1:]:
        if prev.startswith("|") and not t.startswith("|"):
            lines.append("")  # a table ends at a blank line
        lines.append(t if t.startswith("|") or not t else t + "  ")
        prev = t
    lines += ["", "Each row's label says what it runs (bench/peers/peers.js). `runtime ÷ side` is how much faster the "
              "runtime was than that side (time of the side's run ÷ the runtime's, median of the rounds and range). "
              "pgmq's `send`, where it is a side, is a message queue's enqueue (no scheduling, keys or dependencies "
              "behind it).", ""]
    return lines, path


def node_runtime_cpu(path):
    """What bounds the Node.js runtime's rows (a) and (b): its CPU a job and its server backends' (bench/peers/runtime-cpu.js)."""
    d = json.load(open(path))
    name = os.path.basename(path)
    lines = ["## What bounds the Node.js runtime's rows (a) and (b)", "",
             f"`{d['command']}` — result file [{name}](results/{name}); commit {d['commit']}, PostgreSQL "
             f"{d['server']} ({d['settings']}), node {d['node']}, {d['cores']} cores, load average {d['load_at_end']} "
             "at the end. CPU time, not wall time: it holds on a loaded machine.", "",
             "| row | runs | client CPU ms a job (median) | its server backends' CPU ms a job (median; system part) "
             "| messages a job | statements a job |", "|---|---|---|---|---|---|"]
    for row in ("a", "b"):
        runs = [r for r in d["runs"] if r["row"] == row]
        timed = [r for r in runs if not r.get("messages")] or runs
        counted = next((r for r in runs if r.get("messages")), None)
        lines.append(f"| ({row}) | {len(timed)} | {statistics.median(r['client'] for r in timed):.3f} | "
                     f"{statistics.median(r['server'] for r in timed):.3f} "
                     f"({statistics.median(r['serverSys'] for r in timed):.3f}) | "
                     f"{counted['messages']:.2f} | {counted['statements']:.2f} |" if counted else
                     f"| ({row}) | {len(timed)} | {statistics.median(r['client'] for r in timed):.3f} | "
                     f"{statistics.median(r['server'] for r in timed):.3f} | | |")
    lines += ["", "A busy slot spends two round trips a job, the floor for a handler that writes: the handler's "
              "statement, and one message that completes the task, claims the next, commits and begins "
              "(`complete; dequeue; COMMIT; BEGIN`: the five statements). Its server backend spends about twice "
              "the client's CPU: parsing and planning those statements as simple-protocol text, `complete` and "
              "`dequeue`, and a durable commit a job. A V8 profile of the client (`--profile`) puts about two "
              "thirds of its time in socket writes and most of the rest in node-postgres's protocol code; the "
              "runtime's own JavaScript is about 9 µs a job (with no tracer provider or context manager "
              "registered it makes no spans). One slot waits for its commit's flush before its next handler "
              "starts (the claim commits with the completion): row (a) is a chain of two round trips and a flush a job, which faster code "
              "on either side shortens only a little. What would shorten it: prepared statements for the "
              "completing message (not behind PgBouncer in transaction mode before its 1.21), or a batch claim "
              "(row (c)).", ""]
    return lines


def latency_python(path):
    d = json.load(open(path))
    name = os.path.basename(path)
    lines = [
        "## The Python runtime's enqueue-to-start latency",
        "",
        f"`{d['command']}` — result file [{name}](results/{name}); {d['server']}, {d['settings']}, psycopg "
        f"{d['psycopg']}; load at the end: {d['load_after']}. One slot, idle and waiting; {d['samples']} jobs a "
        "round, each enqueued with `enqueue` (autocommit) 5 ms after the last one started; a sample is the time "
        "from that call to the handler's start. The Node.js runtime's figure is in its peers' latency table, the "
        "Go runtime's in row (g) against River.",
        "",
        "| worker | rounds × samples | p50 ms, median of rounds (range) | p99 ms, median of rounds | goal (p50) "
        "| p50 ms from the enqueue's return (its commit done) |",
        "|---|---|---|---|---|---|",
    ]
    for side, r in d["sides"].items():
        p50 = statistics.median(r["p50_ms"])
        lines.append(f"| `{side}` | {d['rounds']} × {d['samples']} | {p50:.2f} ({min(r['p50_ms']):.2f}–"
                     f"{max(r['p50_ms']):.2f}) | {statistics.median(r['p99_ms']):.2f} | "
                     f"{met(p50, 2, at_least=False)} | {statistics.median(r['after_commit_p50_ms']):.2f} |")
    return lines + ["", "The last column is the worker's part: the rest is the producer's call and its durable "
                    "commit, which the disk's flush time bounds.", ""]


RENDERERS = {"durable": durable, "hot_row": hot_row, "peers-go": peers_go, "latency-python": latency_python,
             "workflows": workflows, "claim_after_burst": claim_after_burst, "release": release, "citus": citus}


def main():
    out = [
        "# Benchmarks",
        "",
        "Generated by `python3 bench/report.py` from the newest result file of each benchmark in "
        "[docs/results](results/); edit the benchmarks or the report script, not this page. Earlier runs and "
        "their discussion are in the git history of this page and of docs/results; the figures measured up to "
        "0.3.0, with `fsync = off` (the CPU cost, not production figures), are kept in "
        "[benchmarks-0.3.0.md](benchmarks-0.3.0.md).",
        "",
        "**How.** Every benchmark runs on a throw-away cluster with the server's durable defaults (`fsync`, "
        "`synchronous_commit` and `full_page_writes` on) and the module preloaded, as the docs ask; a variant "
        "with `fsync = off` is labelled as the CPU cost. The machine has 2 cores, and its disk's flush time varies "
        "several-fold from minute to minute: the sides of a comparison alternate within a run, their order "
        "turning every round, and a figure is the median of the rounds.",
        "",
    ]
    rendered = set()
    for kind, render in RENDERERS.items():
        path = newest(kind)
        if path:
            out += render(path)
            rendered.add(path)
    lines, path = peers_node()
    out += lines
    cpu = newest("node-runtime-cpu")
    if cpu:
        out += node_runtime_cpu(cpu)
        rendered.add(cpu)
    others = sorted(set(glob.glob(os.path.join(RESULTS, "*.json"))) - rendered)
    kinds = sorted({re.sub(r"-\d{8}T\d{6}Z.*$", "", os.path.basename(f)) for f in others} - set(RENDERERS))
    if kinds:
        out += ["## Other result files", ""] + [f"- `{k}`: see docs/results/" for k in kinds] + [""]
    with open(os.path.join(ROOT, "docs", "benchmarks.md"), "w") as f:
        f.write("\n".join(out))
    print("wrote docs/benchmarks.md")


if __name__ == "__main__":
    main()
