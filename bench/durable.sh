#!/usr/bin/env bash
# The production figures (SPEC 9.1), in one run on a throw-away cluster with
# the server's durable defaults (fsync, synchronous_commit, full_page_writes
# on) and the module preloaded, as the docs ask:
#
#   sudo bash bench/durable.sh            # writes docs/results/durable-<time>.json
#
# 1. Producers: 1, 8, 32 and 64 pgbench clients, each transaction one
#    `SELECT concurrency.enqueue('benchq', '{"n": 1}')`, against a plain
#    INSERT of the same payload into a table with the same columns and
#    indexes (CREATE TABLE … (LIKE concurrency.q_benchq INCLUDING ALL)); and,
#    for reference, enqueue with concurrency.notify = commit (a NOTIFY in
#    every transaction, as 0.3.0 did).
# 2. Workers: 8 and 32 pgbench clients draining a prefilled queue, each task
#    two transactions as the runtimes do (`dequeue`, then `complete`),
#    against the seeds' raw SQL (UPDATE … WHERE id = (SELECT … FOR UPDATE
#    SKIP LOCKED LIMIT 1), then DELETE) on a table with the same columns and
#    indexes.
# 3. LISTEN users: the time from an enqueue's commit (its return to the
#    producer) to the notification reaching a listener, one commit every
#    50 ms (bench/listen_latency.py).
#
# The disk's flush time varies several-fold from minute to minute, so the
# sides alternate within each round (their order turns every round) and the
# figures are medians of the rounds; ratios are taken per round, then their
# median. Environment: BENCH_ROUNDS (default 5), BENCH_SECONDS (a producer
# run, default 5), BENCH_FSYNC_OFF=1 (the CPU-cost variant, labelled so),
# PG_CONFIG (default pg_config on PATH), BENCH_CLIENTS (producers, default
# "1 8 32 64"), BENCH_PARTS (default "1 2 3"; a result file is written only
# with all three).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
. scripts/cluster.sh
rounds=${BENCH_ROUNDS:-5}
seconds=${BENCH_SECONDS:-5}
pg_config=${PG_CONFIG:-$(command -v pg_config)}
durable=1
[ "${BENCH_FSYNC_OFF:-0}" = 1 ] && durable=0
export CLUSTER_DURABLE=$durable
cluster_start "$pg_config" "shared_preload_libraries = 'concurrency_ext'" "max_connections = 200" \
  "shared_buffers = '512MB'" "max_wal_size = '4GB'" "checkpoint_timeout = '30min'" || exit 1
# the server's CPU (every process of it, in a cpuacct cgroup where the
# controller is writable): per commit, the cost each side pays
cg=$(cpuacct_group "concurrency_ext_durable_$$" "$(head -1 "$CLUSTER_DIR/data/postmaster.pid")")
trap 'cpuacct_release "$cg"; cluster_stop' EXIT
export PATH="$CLUSTER_BIN:$PATH"
cpu_ns() { if [ -n "$cg" ]; then cat "$cg/cpuacct.usage"; else echo 0; fi; }
work=$(mktemp -d /tmp/concurrency_ext-durable.XXXXXX); chmod 755 "$work"
suffix=; [ $durable = 1 ] || suffix=-fsync-off
out=$root/docs/results/durable-$(date -u +%Y%m%dT%H%M%SZ)$suffix.json

psql -Xq <<'SQL'
CREATE EXTENSION concurrency_ext;
SELECT concurrency.create_queue('benchq');
SELECT concurrency.create_queue('benchw', lease => '5 minutes');
CREATE TABLE bench_plain (LIKE concurrency.q_benchq INCLUDING ALL);
CREATE TABLE bench_raw (LIKE concurrency.q_benchw INCLUDING ALL);
SQL
echo "SELECT concurrency.enqueue('benchq', '{\"n\": 1}');" >"$work/enqueue.sql"
echo "INSERT INTO bench_plain (payload) VALUES ('{\"n\": 1}');" >"$work/insert.sql"
cat >"$work/ours.sql" <<'SQL'
SELECT task_id, lease_token FROM concurrency.dequeue('benchw') \gset
SELECT concurrency.complete('benchw', :task_id, :lease_token);
SQL
cat >"$work/raw.sql" <<'SQL'
UPDATE bench_raw SET state = 'leased', attempt = attempt + 1, lease_token = 1,
       lease_expires_at = clock_timestamp() + interval '5 minutes'
 WHERE id = (SELECT id FROM bench_raw WHERE state = 'ready' AND run_at <= clock_timestamp()
              ORDER BY (- priority::bigint), run_at, id FOR UPDATE SKIP LOCKED LIMIT 1)
RETURNING id AS task_id \gset
DELETE FROM bench_raw WHERE id = :task_id;
SQL

tps() { sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$1" | head -1; }
# the server's CPU microseconds per pgbench transaction of the last run
# (0 where no cgroup counts it)
per_tx() { # log cpu_before cpu_after
  local n; n=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$1" | head -1)
  awk -v n="$n" -v a="$2" -v b="$3" 'BEGIN { printf "%.1f", (n > 0 && b > a) ? (b - a) / 1000 / n : 0 }'
}
fresh() { psql -Xqc "TRUNCATE bench_plain; SELECT concurrency.purge('benchq'); DELETE FROM concurrency.q_benchq;" -c "VACUUM ANALYZE bench_plain, concurrency.q_benchq" -c CHECKPOINT >/dev/null; }
results=$work/results.txt; : >"$results"

parts=" ${BENCH_PARTS:-1 2 3} "
if [[ $parts == *" 1 "* ]]; then
echo "== 1. producers: enqueue against a plain INSERT ($rounds rounds of ${seconds} s, durable=$durable)"
sides=(insert enqueue enqueue_notify_commit)
for clients in ${BENCH_CLIENTS:-1 8 32 64}; do
  for r in $(seq 1 "$rounds"); do
    order=("${sides[@]}"); [ $((r % 2)) = 0 ] && order=(enqueue_notify_commit enqueue insert)
    for side in "${order[@]}"; do
      fresh
      script=$work/enqueue.sql; opts=
      [ $side = insert ] && script=$work/insert.sql
      [ $side = enqueue_notify_commit ] && opts='-c concurrency.notify=commit'
      c0=$(cpu_ns)
      PGOPTIONS=$opts pgbench -n -f "$script" -c "$clients" -j "$(( clients < 2 ? 1 : 2 ))" -T "$seconds" >"$work/run.log" 2>&1 \
        || { cat "$work/run.log"; exit 1; }
      echo "producers $clients $r $side $(tps "$work/run.log") $(per_tx "$work/run.log" "$c0" "$(cpu_ns)")" | tee -a "$results"
    done
  done
done

fi
if [[ $parts == *" 2 "* ]]; then
echo "== 2. workers: dequeue + complete against the raw claim + delete"
for clients in 8 32; do
  per=$(( clients == 8 ? 2000 : 700 )); n=$((clients * per))
  for r in $(seq 1 "$rounds"); do
    order=(raw ours); [ $((r % 2)) = 0 ] && order=(ours raw)
    for side in "${order[@]}"; do
      psql -Xq >/dev/null <<SQL
TRUNCATE bench_raw; SELECT concurrency.purge('benchw'); DELETE FROM concurrency.q_benchw;
SELECT count(*) FROM concurrency.enqueue_batch('benchw', array_fill('{"n": 1}'::jsonb, ARRAY[$n]));
INSERT INTO bench_raw (payload) SELECT '{"n": 1}' FROM generate_series(1, $n);
VACUUM ANALYZE bench_raw, concurrency.q_benchw;
CHECKPOINT;
SQL
      c0=$(cpu_ns)
      pgbench -n -f "$work/$side.sql" -c "$clients" -j 2 -t "$per" >"$work/run.log" 2>&1 || { cat "$work/run.log"; exit 1; }
      # pgbench's "transaction" is the script: one task (two commits)
      echo "workers $clients $r $side $(tps "$work/run.log") $(per_tx "$work/run.log" "$c0" "$(cpu_ns)")" | tee -a "$results"
    done
  done
done

fi
[[ $parts == " 1 2 3 " ]] || { echo "(no result file: only parts$parts)"; exit 0; }
echo "== 3. LISTEN users: from an enqueue's commit to the notification"
/usr/bin/python3 bench/listen_latency.py >"$work/listen.txt"
cat "$work/listen.txt"

/usr/bin/python3 - "$results" "$work/listen.txt" "$out" "$durable" "$rounds" "$seconds" "$("$pg_config" --version)" <<'PY'
import json, statistics, sys, subprocess
results, listen, out, durable, rounds, seconds, version = sys.argv[1:]
rows = [l.split() for l in open(results) if l.strip()]
data = {}
cpu = {}
for kind, clients, r, side, tps, us in rows:
    data.setdefault((kind, int(clients)), {}).setdefault(int(r), {})[side] = float(tps)
    cpu.setdefault((kind, int(clients), side), []).append(float(us))
def cpu_of(kind, c, side):
    xs = [x for x in cpu.get((kind, c, side), []) if x > 0]
    return med(xs)
def med(xs): return statistics.median(xs) if xs else None
report = {"durable": durable == "1", "rounds": int(rounds), "seconds": int(seconds), "server": version,
          "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
          "command": "sudo bash bench/durable.sh" + ("" if durable == "1" else "  # BENCH_FSYNC_OFF=1"),
          "producers": [], "workers": [], "listen": json.loads(open(listen).read().splitlines()[-1])}
print()
print("| producers | INSERT commits/s | enqueue commits/s | enqueue, notify = commit | enqueue / INSERT (median of rounds) | goal |")
print("|---|---|---|---|---|---|")
for (kind, c), by_round in sorted(data.items()):
    if kind != "producers": continue
    ins = [v["insert"] for v in by_round.values()]; enq = [v["enqueue"] for v in by_round.values()]
    old = [v["enqueue_notify_commit"] for v in by_round.values()]
    ratio = med([v["enqueue"] / v["insert"] for v in by_round.values()])
    report["producers"].append({"clients": c, "insert": med(ins), "enqueue": med(enq), "enqueue_notify_commit": med(old),
                                "ratio": ratio, "ratios": [v["enqueue"] / v["insert"] for v in by_round.values()], "goal": 0.9,
                                "ratios_notify_commit": [v["enqueue_notify_commit"] / v["insert"] for v in by_round.values()],
                                "cpu_us": {s: cpu_of("producers", c, s) for s in ("insert", "enqueue", "enqueue_notify_commit")}})
    print(f"| {c} | {med(ins):,.0f} | {med(enq):,.0f} | {med(old):,.0f} | {ratio:.2f} | ≥ 0.9 {'met' if ratio >= 0.9 else 'missed'} |")
print()
print("| workers | raw claim + delete tasks/s | dequeue + complete tasks/s | ours / raw | goal |")
print("|---|---|---|---|---|")
for (kind, c), by_round in sorted(data.items()):
    if kind != "workers": continue
    raw = [v["raw"] for v in by_round.values()]; ours = [v["ours"] for v in by_round.values()]
    ratio = med([v["ours"] / v["raw"] for v in by_round.values()])
    report["workers"].append({"clients": c, "raw": med(raw), "ours": med(ours), "ratio": ratio,
                              "ratios": [v["ours"] / v["raw"] for v in by_round.values()], "goal": 1.0,
                              "cpu_us": {s: cpu_of("workers", c, s) for s in ("raw", "ours")}})
    print(f"| {c} | {med(raw):,.0f} | {med(ours):,.0f} | {ratio:.2f} | ≥ 1.0 {'met' if ratio >= 1.0 else 'missed'} |")
json.dump(report, open(out, "w"), indent=1)
print("\nwritten", out)
PY
