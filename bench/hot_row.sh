#!/usr/bin/env bash
# Hot rows: many writers on one value (docs/counters.md). Two measurements,
# on the server the PG* environment variables name (it needs the extension;
# durable commits: run it on a server with fsync on, as production runs;
# (a) opens CONNECTIONS (420) connections: max_connections must allow them):
#
# (a) the seed's laboratory (bench/hot_row_lab.py): 20 payments a second on
#     one merchant account for 20 s, each holding its transaction 120 ms;
#     p50/p99 wait for the value with a counter, with SELECT … FOR UPDATE on
#     one row, and with an optimistic version check (and its retries); and,
#     as the baseline, payments that each update a row of their own.
# (b) CLIENTS (64) clients adding to one value as fast as they can for
#     SECONDS_B (10) s (pgbench), ROUNDS (3) rounds alternating the sides:
#     counter_add on a counter of SLOTS (64) slots against UPDATE accounts
#     SET balance = balance + $1 WHERE id = 1; medians of commits/s. As the
#     machine's ceiling, a third side updates one of 64 rows at random (no
#     hot row at all: what the server commits with these clients).
#
# On a throw-away server of its own, as root:
#   source scripts/cluster.sh
#   CLUSTER_DURABLE=1 cluster_start "$PG_CONFIG" "max_connections = 450"   # durable commits
#   psql -c "CREATE EXTENSION concurrency_ext"; bench/hot_row.sh; cluster_stop
#
# Writes docs/results/hot_row-<date>.json (bench/report.py reports it in
# docs/benchmarks.md) and prints a table.
# Everything lives in schema bench_hot and counters bench_hot_*, dropped at
# the end. LAB=0 skips (a), THROUGHPUT=0 skips (b).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
clients=${CLIENTS:-64} seconds=${SECONDS_B:-10} rounds=${ROUNDS:-3} slots=${SLOTS:-64}
psql=(psql -X -q -v ON_ERROR_STOP=1 -At)
work=$(mktemp -d)
cleanup() {
  rm -rf "$work"
  "${psql[@]}" -c "SET client_min_messages = warning" -c "DROP SCHEMA IF EXISTS bench_hot CASCADE" \
    -c "SELECT concurrency.drop_counter(name) FROM concurrency.counter WHERE name LIKE 'bench\_hot\_%'" >/dev/null || true
}
trap cleanup EXIT

"${psql[@]}" >/dev/null <<SQL
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS bench_hot CASCADE;
CREATE SCHEMA bench_hot;
CREATE TABLE bench_hot.accounts (id int PRIMARY KEY, balance bigint NOT NULL, version bigint NOT NULL);
INSERT INTO bench_hot.accounts VALUES (1, 0, 0);
CREATE TABLE bench_hot.spread (id int PRIMARY KEY, balance bigint NOT NULL);
INSERT INTO bench_hot.spread SELECT i, 0 FROM generate_series(1, 64) i;
SQL
settings=$("${psql[@]}" -c "SELECT string_agg(name || '=' || setting, ' ' ORDER BY name) FROM pg_settings
                             WHERE name IN ('fsync', 'synchronous_commit', 'max_connections', 'shared_buffers')")
version=$("${psql[@]}" -c "SELECT current_setting('server_version')")
echo "server $version: $settings"
case " $settings " in *" fsync=off "*) echo "warning: fsync is off: these are not durable commits" >&2 ;; esac

lab='null'
if [ "${LAB:-1}" != 0 ]; then
  echo "== (a) 20 payments a second on one account, 120 ms each (bench/hot_row_lab.py)"
  lab=$(/usr/bin/python3 "$here/hot_row_lab.py")
fi

counter_tps=() update_tps=() spread_tps=()
if [ "${THROUGHPUT:-1}" != 0 ]; then
  echo "== (b) $clients clients adding to one value, $seconds s a round, $rounds rounds a side"
  "${psql[@]}" -c "SELECT concurrency.create_counter('bench_hot_total', $slots)" >/dev/null
  printf '\\set d random(1, 100)\nSELECT concurrency.counter_add('"'"'bench_hot_total'"'"', :d);\n' >"$work/counter.sql"
  printf '\\set d random(1, 100)\nUPDATE bench_hot.accounts SET balance = balance + :d WHERE id = 1;\n' >"$work/update.sql"
  printf '\\set d random(1, 100)\n\\set r random(1, 64)\nUPDATE bench_hot.spread SET balance = balance + :d WHERE id = :r;\n' >"$work/spread.sql"
  tps() { sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$1" | head -1; }
  for r in $(seq 1 "$rounds"); do
    # alternate which side goes first
    if [ $((r % 2)) = 1 ]; then order="counter update spread"; else order="spread update counter"; fi
    for side in $order; do
      pgbench -n -c "$clients" -j 2 -T "$seconds" -f "$work/$side.sql" >"$work/$side-$r.log" 2>&1 \
        || { cat "$work/$side-$r.log" >&2; exit 1; }
      t=$(tps "$work/$side-$r.log")
      echo "   round $r $side: $t commits/s"
      case $side in counter) counter_tps+=("$t") ;; update) update_tps+=("$t") ;; *) spread_tps+=("$t") ;; esac
    done
  done
fi

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "null"; else if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
list() { local IFS=,; echo "[$*]"; }
cm=$(median "${counter_tps[@]}") um=$(median "${update_tps[@]}") sm=$(median "${spread_tps[@]}")
out="$here/../docs/results/hot_row-$(date -u +%Y%m%dT%H%M%SZ).json"
/usr/bin/python3 - "$out" "$lab" "$cm" "$um" "$(list "${counter_tps[@]}")" "$(list "${update_tps[@]}")" \
  "$clients" "$seconds" "$slots" "$version" "$settings" "$sm" "$(list "${spread_tps[@]}")" "$(uptime)" <<'PY'
import json, sys
out, lab, cm, um, cl, ul, clients, seconds, slots, version, settings, sm, sl, load = sys.argv[1:]
lab = json.loads(lab)
num = lambda s: None if s == "null" else float(s)
res = {"server": version, "settings": settings, "load_after": load.strip(), "lab": lab,
       "throughput": {"clients": int(clients), "seconds": int(seconds), "slots": int(slots),
                      "counter_add_commits_per_s": json.loads(cl), "update_commits_per_s": json.loads(ul),
                      "spread_64_rows_commits_per_s": json.loads(sl), "spread_median": num(sm),
                      "counter_median": num(cm), "update_median": num(um),
                      "ratio": round(num(cm) / num(um), 1) if num(cm) and num(um) else None}}
json.dump(res, open(out, "w"), indent=2)
print()
if lab:
    print(f"(a) {lab['rate_per_s']:g} payments/s, {lab['hold_ms']:g} ms each, {lab['seconds']:g} s")
    print(f"    {'variant':<12}{'p50 wait ms':>12}{'p99 wait ms':>12}{'max ms':>10}{'done':>6}{'retries':>9}  exact")
    for v in ("own_row", "counter", "for_update", "optimistic"):
        r = lab.get(v)
        if r:
            print(f"    {v:<12}{r['wait_p50_ms']!s:>12}{r['wait_p99_ms']!s:>12}{r['wait_max_ms']!s:>10}"
                  f"{r['done']:>6}{'' if r['retries'] is None else r['retries']!s:>9}  {r['exact']}")
t = res["throughput"]
if t["counter_median"] is not None:
    print(f"(b) {t['clients']} clients, {t['seconds']} s rounds: counter_add ({t['slots']} slots) "
          f"{t['counter_median']:g} commits/s (median of {t['counter_add_commits_per_s']}), "
          f"UPDATE one row {t['update_median']:g} (median of {t['update_commits_per_s']}): {t['ratio']}x")
    print(f"    ceiling, UPDATE one of 64 rows at random: {t['spread_median']:g} (median of {t['spread_64_rows_commits_per_s']})")
print(f"written: {out}")
PY
