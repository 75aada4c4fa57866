#!/usr/bin/env bash
# A parent's `complete` that releases a child, against a plain `complete`
# (SPEC 9.1: at most 1.2x), on a throw-away cluster with the server's durable
# defaults and the module preloaded:
#
#   sudo bash bench/release.sh            # writes docs/results/release-<time>.json
#
# pgbench clients drain two prefilled queues, each task two transactions as
# the runtimes do (`dequeue`, then `complete`): on `benchplain` every task
# stands alone; on `benchparent` every task has one child (enqueued with
# after => ARRAY[parent], due a day later, so that the drain claims parents
# only), which its parent's `complete` releases. The sides alternate within
# each round (their order turns every round); figures are medians of the
# rounds, a ratio the median of the rounds' ratios. The server's CPU per task
# comes from a cpuacct cgroup around the server where the controller is
# writable. Environment: BENCH_ROUNDS (default 5), BENCH_CLIENTS (default
# "8 32"), BENCH_TASKS (tasks per client, default 1000), BENCH_FSYNC_OFF=1
# (the CPU-cost variant, labelled so), PG_CONFIG (default pg_config on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
. scripts/cluster.sh
rounds=${BENCH_ROUNDS:-5}
per=${BENCH_TASKS:-1000}
pg_config=${PG_CONFIG:-$(command -v pg_config)}
durable=1
[ "${BENCH_FSYNC_OFF:-0}" = 1 ] && durable=0
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
export CLUSTER_DURABLE=$durable
cluster_start "$pg_config" "shared_preload_libraries = 'concurrency_ext'" "max_connections = 200" \
  "shared_buffers = '512MB'" "max_wal_size = '4GB'" "checkpoint_timeout = '30min'" || exit 1
cg=$(cpuacct_group "concurrency_ext_release_$$" "$(head -1 "$CLUSTER_DIR/data/postmaster.pid")")
trap 'cpuacct_release "$cg"; cluster_stop' EXIT
export PATH="$CLUSTER_BIN:$PATH"
cpu_ns() { if [ -n "$cg" ]; then cat "$cg/cpuacct.usage"; else echo 0; fi; }
work=$(mktemp -d /tmp/concurrency_ext-release.XXXXXX); chmod 755 "$work"
suffix=; [ $durable = 1 ] || suffix=-fsync-off
out=$root/docs/results/release-$(date -u +%Y%m%dT%H%M%SZ)$suffix.json

psql -Xq >/dev/null <<'SQL'
CREATE EXTENSION concurrency_ext;
SELECT concurrency.create_queue('benchplain', lease => '5 minutes');
SELECT concurrency.create_queue('benchparent', lease => '5 minutes');
SQL
for q in plain parent; do
  cat >"$work/$q.sql" <<SQL
SELECT task_id, lease_token FROM concurrency.dequeue('bench$q') \gset
SELECT concurrency.complete('bench$q', :task_id, :lease_token);
SQL
done
tps() { sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$1" | head -1; }
per_tx() { # log cpu_before cpu_after
  local n; n=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$1" | head -1)
  awk -v n="$n" -v a="$2" -v b="$3" 'BEGIN { printf "%.1f", (n > 0 && b > a) ? (b - a) / 1000 / n : 0 }'
}
results=$work/results.txt; : >"$results"
echo "== a parent's complete releasing a child against a plain complete ($rounds rounds, durable=$durable)"
for clients in ${BENCH_CLIENTS:-8 32}; do
  n=$((clients * per))
  for r in $(seq 1 "$rounds"); do
    order=(plain parent); [ $((r % 2)) = 0 ] && order=(parent plain)
    for side in "${order[@]}"; do
      if [ "$side" = plain ]; then fill="SELECT count(*) FROM concurrency.enqueue_batch('benchplain', array_fill('{\"n\": 1}'::jsonb, ARRAY[$n]))"
      else fill="SELECT count(concurrency.enqueue('benchparent', '{\"child\": true}', run_at => now() + interval '1 day',
                                  after => ARRAY[concurrency.enqueue('benchparent', '{\"n\": 1}')])) FROM generate_series(1, $n)"; fi
      psql -Xq >/dev/null <<SQL
SELECT concurrency.purge('bench$side'); DELETE FROM concurrency.q_bench$side;
$fill;
VACUUM ANALYZE concurrency.q_bench$side;
CHECKPOINT;
SQL
      c0=$(cpu_ns)
      pgbench -n -f "$work/$side.sql" -c "$clients" -j 2 -t "$per" >"$work/run.log" 2>&1 || { cat "$work/run.log"; exit 1; }
      echo "$clients $r $side $(tps "$work/run.log") $(per_tx "$work/run.log" "$c0" "$(cpu_ns)")" | tee -a "$results"
      [ "$side" = parent ] || continue
      # every parent done, every child released (due tomorrow: none claimed)
      left=$(psql -XAtc "SELECT ready + leased FROM concurrency.queue_stats WHERE queue = 'benchparent'")
      released=$(psql -XAtc "SELECT scheduled FROM concurrency.queue_stats WHERE queue = 'benchparent'")
      [ "$left" = 0 ] && [ "$released" = "$n" ] || { echo "benchparent: $left parents left, $released children released of $n"; exit 1; }
    done
  done
done

/usr/bin/python3 - "$results" "$out" "$durable" "$rounds" "$per" "$("$pg_config" --version)" "$load_before" \
  "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, statistics, sys, subprocess
results, out, durable, rounds, per, version, load_before, load_after = sys.argv[1:]
by = {}
for clients, r, side, tps, us in (l.split() for l in open(results) if l.strip()):
    by.setdefault(int(clients), {}).setdefault(int(r), {})[side] = (float(tps), float(us))
med = statistics.median
report = {"durable": durable == "1", "rounds": int(rounds), "tasks_per_client": int(per), "server": version,
          "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip(),
          "command": "sudo bash bench/release.sh" + ("" if durable == "1" else "  # BENCH_FSYNC_OFF=1"),
          "load_before": load_before, "load_after": load_after, "rows": []}
print("\n| workers | plain tasks/s | parent tasks/s | time a task: parent / plain | server CPU a task: parent / plain | goal |")
print("|---|---|---|---|---|---|")
for clients, rs in sorted(by.items()):
    ratios = [v["plain"][0] / v["parent"][0] for v in rs.values()]
    cpu = {s: med([v[s][1] for v in rs.values()]) for s in ("plain", "parent")}
    row = {"clients": clients, "plain": med([v["plain"][0] for v in rs.values()]),
           "parent": med([v["parent"][0] for v in rs.values()]), "ratio": med(ratios), "ratios": ratios,
           "cpu_us": cpu, "goal": 1.2}
    report["rows"].append(row)
    cpu_ratio = f"{cpu['parent'] / cpu['plain']:.2f}" if cpu["plain"] > 0 else "—"
    print(f"| {clients} | {row['plain']:,.0f} | {row['parent']:,.0f} | {row['ratio']:.2f} | {cpu_ratio} | ≤ 1.2 {'met' if row['ratio'] <= 1.2 else 'missed'} |")
json.dump(report, open(out, "w"), indent=1)
print("\nwritten", out)
PY
