#!/usr/bin/env bash
# Lock-wait history benchmark: what the sampler costs, side by side with
# sampling off, in one run.
#
#  A. The cost to others during an incident: N sessions (300 by default)
#     queued behind a DDL lock that waits behind an idle transaction (as in
#     bench/diag.sh), while pgbench's simple-update workload (-N, 8 clients,
#     synchronous_commit off) runs for one long run that reports its
#     throughput every second. After WARMUP seconds (40), every WINDOW
#     seconds (5) sampling is switched:
#     off (history_interval = 0), every 100 ms, off, 100 ms, ..., off, with
#     ROUNDS (20) sampled windows. Each sampled window is compared with the
#     mean of the unsampled windows just before and after it; the ratio
#     reported is the median of those ratios (goal: >= 0.98).
#  B. The sampler's own CPU per sample, from concurrency.lock_history_status()
#     (CPU time the sampler process spent in its samples, and their count),
#     at a 10 ms interval, with the N waiters of A, then with N_LARGE (1,000)
#     waiters, then with nobody waiting.
#  C. With nobody waiting: pgbench -N with sampling at the default 500 ms vs
#     off, switched as in A.
#  D. The control: as A (the same incident, the same switches, each a
#     configuration reload), but sampling stays off in every window. Its
#     ratio is what the method reports when nothing differs between the two
#     kinds of window: read A against it.
#
# Before each part the script truncates pgbench_history, vacuums the other
# pgbench tables and checkpoints; autovacuum is off for those tables, so that
# it cannot start in one window and not another.
#
# Needs a server with shared_preload_libraries = 'concurrency_ext', a superuser
# connection (the script changes concurrency.history_interval with ALTER SYSTEM
# and reloads; it restores the setting at the end), concurrency_ext installed
# in the database, and max_connections >= N_LARGE + 20. Connection: the usual
# PG* variables. Everything it creates lives in the schema bench_history,
# dropped at the end.
# Usage: PGDATABASE=... bench/history.sh   (N=300 N_LARGE=1000 WINDOW=5 ROUNDS=20 WARMUP=40 CPU_SECONDS=5)
# (D runs right after A, during the same incident.)
set -euo pipefail
N=${N:-300}
N_LARGE=${N_LARGE:-1000}
WINDOW=${WINDOW:-5}
WARMUP=${WARMUP:-40}
ROUNDS=${ROUNDS:-20}
CPU_SECONDS=${CPU_SECONDS:-5}
work=$(mktemp -d)
psqlq() { psql -X -q -A -t "$@"; }

max=$(psqlq -c "SHOW max_connections")
[ "$max" -ge $((N_LARGE + 20)) ] || { echo "max_connections is $max: need at least $((N_LARGE + 20)) for N_LARGE=$N_LARGE" >&2; exit 2; }
psqlq -c "SELECT 1 FROM pg_extension WHERE extname = 'concurrency_ext'" | grep -q 1 \
  || { echo "concurrency_ext is not installed in this database" >&2; exit 2; }
psqlq -c "SELECT sampler_pid FROM concurrency.lock_history_status()" | grep -q '[0-9]' \
  || { echo "the lock-history sampler is not running (shared_preload_libraries?)" >&2; exit 2; }
original_interval=$(psqlq -c "SELECT setting FROM pg_settings WHERE name = 'concurrency.history_interval'")
# enough descriptors for N_LARGE connections from one pgbench
ulimit -n "$(( N_LARGE * 2 + 100 ))" 2>/dev/null || true

holder=
readers=
alter=
stop_incident() {
  [ -n "$holder" ] && { exec {holder}>&-; holder=; }
  for p in $alter $readers; do kill "$p" 2>/dev/null || true; done
  wait $alter $readers 2>/dev/null || true
  alter= readers=
}
cleanup() {
  stop_incident
  PGOPTIONS= psql -X -q -c "DROP SCHEMA IF EXISTS bench_history CASCADE" 2>/dev/null || true
  PGOPTIONS= psql -X -q -c "ALTER SYSTEM SET concurrency.history_interval = $original_interval" \
                         -c "SELECT pg_reload_conf()" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# set_interval MS: changes the interval and waits until the sampler has it
set_interval() {
  psqlq -c "ALTER SYSTEM SET concurrency.history_interval = $1" -c "SELECT pg_reload_conf()" >/dev/null
  wait_until "interval $1" interval_is "$1"
}
interval_is() { [ "$(psqlq -c "SELECT interval_ms FROM concurrency.lock_history_status()")" = "$1" ]; }
waiting() { psqlq -c "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"; }
wait_until() {
  local what=$1; shift
  for _ in $(seq 1 1200); do "$@" && return 0; sleep 0.1; done
  echo "gave up waiting for: $what" >&2; exit 1
}
holder_idle() { [ "$(psqlq -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'bench_holder' AND state = 'idle in transaction'")" = 1 ]; }
waiting_at_least() { [ "$(waiting)" -ge "$1" ]; }
nobody_waits() { [ "$(waiting)" = 0 ]; }

psqlq -c "DROP SCHEMA IF EXISTS bench_history CASCADE" -c "CREATE SCHEMA bench_history" \
      -c "CREATE TABLE bench_history.incident (id int PRIMARY KEY)" -c "INSERT INTO bench_history.incident VALUES (1)"
printf '%s\n' 'BEGIN;' 'LOCK TABLE bench_history.incident IN ACCESS SHARE MODE;' 'COMMIT;' >"$work/reader.sql"

# start_incident N: an idle transaction, a DDL lock waiting for it, N readers queued behind the DDL
start_incident() {
  exec {holder}> >(PGAPPNAME=bench_holder psql -X -q >/dev/null 2>&1)
  echo "BEGIN; LOCK TABLE bench_history.incident IN ACCESS SHARE MODE;" >&"$holder"
  wait_until "the idle transaction" holder_idle
  PGAPPNAME=bench_ddl psql -X -q -c "BEGIN; LOCK TABLE bench_history.incident IN ACCESS EXCLUSIVE MODE; COMMIT" >/dev/null 2>&1 &
  alter=$!
  wait_until "the DDL to wait" waiting_at_least 1
  PGAPPNAME=bench_reader pgbench -n -c "$1" -j 2 -t 1 -f "$work/reader.sql" >/dev/null 2>&1 &
  readers=$!
  wait_until "$1 readers to wait" waiting_at_least $(($1 + 1))
  echo "   $(waiting) sessions wait for a lock; $(psqlq -c "SELECT count(*) FROM pg_stat_activity") backends in all"
}

median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

# interleave NAME INTERVAL: one pgbench -N run (8 clients) that reports its
# throughput every second (--progress-timestamp), while sampling is switched
# between off and INTERVAL ms every WINDOW seconds: off, on, off, ..., off
# (ROUNDS sampled windows). INTERVAL 0 is the control: the same switches
# (each a configuration reload), but off in every window. A window's
# throughput is the mean of the seconds that lie wholly inside it, after its
# switch has reached the sampler; each sampled window is compared with the
# mean of the off windows on either side of it, and the ratio reported is the
# median of those ratios. The first WARMUP seconds after the checkpoint, while
# nearly every update writes a full-page image, belong to no window. One long
# run, rather than one run per window, keeps connection set-up, checkpoints
# and vacuum out of the comparison.
interleave() {
  local name=$1 interval=$2 label="every $2 ms"
  [ "$interval" = 0 ] && label="off (control)"
  local windows=$((2 * ROUNDS + 1)) pid
  set_interval 0
  PGOPTIONS="-c search_path=bench_history" psqlq -c "TRUNCATE pgbench_history" \
    -c "VACUUM pgbench_branches, pgbench_tellers, pgbench_accounts" -c "CHECKPOINT"
  : >"$work/${name}_switches"
  PGOPTIONS="-c search_path=bench_history -c synchronous_commit=off" \
    pgbench -n -N -c 8 -j 2 -T $((WARMUP + WINDOW * windows + 60)) -P 1 --progress-timestamp >"$work/${name}_progress" 2>&1 &
  pid=$!
  wait_until "pgbench's first report" grep -q '^progress:' "$work/${name}_progress"
  sleep "$WARMUP"
  # the switches keep to a fixed schedule (however long a switch takes), and
  # pgbench is stopped after the last window
  local t0 ms
  t0=$(date +%s.%N)
  echo "$t0 $t0 0" >>"$work/${name}_switches"
  for w in $(seq 1 "$windows"); do
    sleep "$(awk -v t0="$t0" -v w="$w" -v len="$WINDOW" -v now="$(date +%s.%N)" 'BEGIN { d = t0 + w * len - now; print (d > 0 ? d : 0) }')"
    if [ "$w" = "$windows" ]; then
      echo "$(date +%s.%N) - end" >>"$work/${name}_switches"
      break
    fi
    ms=0
    [ $((w % 2)) = 1 ] && ms=$interval
    local asked
    asked=$(date +%s.%N)
    set_interval "$ms"
    echo "$asked $(date +%s.%N) $ms" >>"$work/${name}_switches"
  done
  sleep 1.5
  kill -INT "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  sed -n 's/^progress: \([0-9.]*\) s, \([0-9.]*\) tps.*/\1 \2/p' "$work/${name}_progress" >"$work/${name}_seconds"
  # window means: a second (t - 1, t] counts for window k if it starts after
  # switch k has reached the sampler and ends before switch k + 1 was asked for
  awk 'NR == FNR { asked[n] = $1; reached[n] = $2; n++; next }
       { for (k = 0; k < n - 1; k++)
           if ($1 - 1 >= reached[k] && $1 <= asked[k + 1]) { sum[k] += $2; cnt[k]++ } }
       END { for (k = 0; k < n - 1; k++) print (cnt[k] ? sum[k] / cnt[k] : 0) }' \
    "$work/${name}_switches" "$work/${name}_seconds" >"$work/${name}_windows"
  printf "   %-14s tps: %s\n" "off" "$(awk 'NR % 2 == 1 {printf "%.0f ", $1}' "$work/${name}_windows")"
  printf "   %-14s tps: %s\n" "$label" "$(awk 'NR % 2 == 0 {printf "%.0f ", $1}' "$work/${name}_windows")"
  awk '{tps[NR] = $1}
       END { for (i = 2; i < NR; i += 2)
               if (tps[i] > 0 && tps[i - 1] > 0 && tps[i + 1] > 0) print tps[i] / ((tps[i - 1] + tps[i + 1]) / 2) }' \
    "$work/${name}_windows" | median >"$work/${name}_ratio"
  printf "   %s / off around it (median of %s windows of %s s): %.3fx\n" "$label" "$ROUNDS" "$WINDOW" "$(cat "$work/${name}_ratio")"
}

# cpu_per_sample LABEL: the sampler's CPU per sample over CPU_SECONDS at a 10 ms interval
cpu_per_sample() {
  set_interval 10
  local before after
  before=$(psqlq -c "SELECT samples, sampler_cpu_seconds FROM concurrency.lock_history_status()")
  sleep "$CPU_SECONDS"
  after=$(psqlq -c "SELECT samples, sampler_cpu_seconds FROM concurrency.lock_history_status()")
  awk -F'|' -v b="$before" -v a="$after" -v label="$1" 'BEGIN {
    split(b, x, "|"); split(a, y, "|"); n = y[1] - x[1]; cpu = y[2] - x[2];
    printf "   %-28s %6d samples, %.3f ms CPU per sample (%.1f %% of one core at 100 ms)\n",
           label, n, 1000 * cpu / n, 100 * (cpu / n) / 0.1 }'
}

echo "== setting up pgbench's tables (scale 10) in bench_history"
PGOPTIONS="-c search_path=bench_history" pgbench -i -q -s 10 >/dev/null 2>&1
for t in pgbench_branches pgbench_tellers pgbench_accounts pgbench_history; do
  psqlq -c "ALTER TABLE bench_history.$t SET (autovacuum_enabled = off)"
done
psqlq -c "CHECKPOINT"

echo
echo "== A. pgbench -N, 8 clients, ${WINDOW}s windows, during an incident with $N waiters: sampling every 100 ms vs off"
start_incident "$N"
interleave A 100

echo
echo "== D. the control: as A, with sampling off in every window"
interleave D 0

echo
echo "== B. sampler CPU per sample (10 ms interval, ${CPU_SECONDS}s each)"
cpu_per_sample "$N waiters"
stop_incident
wait_until "the incident to clear" nobody_waits
start_incident "$N_LARGE"
cpu_per_sample "$N_LARGE waiters"
stop_incident
wait_until "the incident to clear" nobody_waits
cpu_per_sample "nobody waiting"

echo
echo "== C. pgbench -N, 8 clients, nobody waiting: sampling every 500 ms (the default) vs off"
interleave C 500
