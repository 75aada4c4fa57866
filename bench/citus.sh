#!/usr/bin/env bash
# A distributed queue on Citus against a local queue on the coordinator, on
# one machine: a coordinator and two worker nodes (scripts/citus-cluster.sh),
# the PostgreSQL 18 and Citus builds of scripts/build-pg18.sh and
# scripts/build-citus.sh, concurrency_ext installed into PostgreSQL 18.
#
# Each transaction claims one task and completes it (one statement,
# autocommit), with 8 and 32 pgbench clients connected to the coordinator.
# Rounds alternate local / distributed (PAIRS pairs of SECONDS_PER_ROUND
# each, the order swapped every other pair) and the ratio reported is the
# median of the pairs' ratios. All nodes share this machine's cores, so this
# measures the overhead of routing through the coordinator, not scale.
#
# For the projection in docs/scaling-out.md, each round also records the CPU
# time that each node's server processes used per completed task (from
# /proc, summed over the postmaster's children), and a last run times the
# same claim + complete statements directly on one worker against one shard
# table: what a worker node does per task, without the coordinator.
#
# Usage (root): bench/citus.sh      PAIRS=3 SECONDS_PER_ROUND=5 SHARDS=4 CITUS_PORTS="5621 5622 5623"
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${PAIRS:-3} secs=${SECONDS_PER_ROUND:-5} shards=${SHARDS:-4}
read -r -a ports <<<"${CITUS_PORTS:-5621 5622 5623}"
bin=${PG18_PREFIX:-/opt/concurrency_ext/pg18}/bin
[ -x "$bin/pgbench" ] && [ -f "$("$bin/pg_config" --pkglibdir)/citus.so" ] \
  || { echo "Citus benchmark: skipped, PostgreSQL 18 or Citus not built (scripts/citus-check.sh builds both)"; exit 0; }
dir=$(mktemp -d /var/tmp/concurrency_ext-citus-bench.XXXXXX); chmod 755 "$dir"
trap 'bash scripts/citus-cluster.sh stop "$dir/cluster"; rm -rf "$dir"' EXIT
bash scripts/citus-cluster.sh start "$dir/cluster" "${ports[@]}" >/dev/null
c=${ports[0]}
sql() { "$bin/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -U postgres -p "$1" -d postgres -c "$2"; }
sql "$c" "CREATE EXTENSION concurrency_ext"
sql "$c" "SELECT concurrency.create_queue('bench_local'), concurrency.create_queue('bench_dist')" >/dev/null
sql "$c" "SELECT concurrency.distribute_queue('bench_dist', $shards)" >/dev/null
fill() { # queue tasks: tasks for one round (more than any round completes)
  if [ "$1" = bench_local ]; then
    sql "$c" "INSERT INTO concurrency.q_bench_local (payload) SELECT '{}' FROM generate_series(1, $2)"
  else # ids and shard keys as distributed_enqueue gives them
    sql "$c" "INSERT INTO concurrency.q_bench_dist (id, shard_key, payload)
              SELECT x.n * 1024 + x.p, (d.shard_keys)[x.p + 1], '{}'
                FROM concurrency.distributed_queue d,
                     LATERAL (SELECT nextval('concurrency.lease_token') AS n, g % $shards AS p
                                FROM generate_series(1, $2) g) x
               WHERE d.queue = 'bench_dist'"
  fi
  # statistics as autovacuum would have them for a queue that filled up
  # over time (without them the claims' plans sort the whole table)
  sql "$c" "ANALYZE concurrency.q_$1"
}
for q in bench_local bench_dist; do
  printf "SELECT concurrency.complete('%s', t.task_id, t.lease_token) FROM concurrency.dequeue('%s') t;\n" "$q" "$q" >"$dir/$q.sql"
done
# CPU time (clock ticks) of the server processes of node $1 (0 coordinator):
# the postmaster's own and its exited children's (cutime, cstime), and the
# live children's
ticks() {
  local pm; pm=$(head -1 "$dir/cluster/node$1/postmaster.pid")
  { awk '{sub(/^.*\) /, ""); print $12 + $13 + $14 + $15}' "/proc/$pm/stat"
    ps -o pid= --ppid "$pm" | while read -r p; do
      awk '{sub(/^.*\) /, ""); print $12 + $13}' "/proc/$p/stat" 2>/dev/null || true
    done; } | awk '{s += $1} END {print s + 0}'
}
hz=$(getconf CLK_TCK)
# one round: prints "tps coordinator_ms_per_task workers_ms_per_task"
round() { # queue clients
  local before=() after=() out tps n
  fill "$1" 60000
  for i in 0 1 2; do before[$i]=$(ticks "$i"); done
  out=$("$bin/pgbench" -n -h 127.0.0.1 -U postgres -p "$c" -d postgres -f "$dir/$1.sql" -c "$2" -j 2 -T "$secs" 2>&1) \
    || { echo "$out" | tail -5 >&2; exit 1; }
  sleep 0.5 # the postmasters reap pgbench's backends (their CPU time moves to cutime)
  for i in 0 1 2; do after[$i]=$(ticks "$i"); done
  tps=$(echo "$out" | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
  n=$(echo "$out" | sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p')
  [ -n "$tps" ] && [ "${n:-0}" -gt 0 ] || { echo "$out" | tail -5 >&2; exit 1; }
  sql "$c" "TRUNCATE concurrency.q_$1"
  awk -v t="$tps" -v n="$n" -v hz="$hz" -v c="$((after[0] - before[0]))" -v w="$((after[1] - before[1] + after[2] - before[2]))" \
    'BEGIN {printf "%s %.3f %.3f\n", t, 1000 * c / hz / n, 1000 * w / hz / n}'
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
echo "Citus 14 on one machine ($(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start):"
echo "coordinator + 2 workers, $shards shards; claim + complete per transaction, ${pairs} pairs of ${secs} s"
for clients in 8 32; do
  ratios=() locals=() dists=() lcpu=() dcpu=() wcpu=()
  for ((i = 1; i <= pairs; i++)); do
    if ((i % 2)); then read -r l lc _ <<<"$(round bench_local "$clients")"; read -r d dc dw <<<"$(round bench_dist "$clients")"
    else read -r d dc dw <<<"$(round bench_dist "$clients")"; read -r l lc _ <<<"$(round bench_local "$clients")"; fi
    locals+=("$l") dists+=("$d") lcpu+=("$lc") dcpu+=("$dc") wcpu+=("$dw")
    ratios+=("$(awk -v a="$d" -v b="$l" 'BEGIN {printf "%.3f", a / b}')")
  done
  printf "%2d clients: local %s tasks/s, distributed %s tasks/s (medians); distributed/local median ratio %s (pairs: %s)\n" \
    "$clients" "$(printf '%s\n' "${locals[@]}" | median)" "$(printf '%s\n' "${dists[@]}" | median)" \
    "$(printf '%s\n' "${ratios[@]}" | median)" "${ratios[*]}"
  printf "            server CPU per task (medians): local %s ms on the coordinator; distributed %s ms on the coordinator + %s ms on the workers\n" \
    "$(printf '%s\n' "${lcpu[@]}" | median)" "$(printf '%s\n' "${dcpu[@]}" | median)" "$(printf '%s\n' "${wcpu[@]}" | median)"
done
# per shard: the claim and the complete of one task, in one transaction, on
# one shard table, run on its worker directly
key=$(sql "$c" "SELECT shard_keys[1] FROM concurrency.distributed_queue WHERE queue = 'bench_dist'")
read -r shard w <<<"$(sql "$c" "SELECT shard_name, nodeport FROM citus_shards
                                WHERE shardid = get_shard_id_for_distribution_column('concurrency.q_bench_dist', $key)" | tr '|' ' ')"
shard=${shard#concurrency.}
sql "$w" "INSERT INTO concurrency.$shard (id, shard_key, payload) SELECT g * 1024, $key, '{}' FROM generate_series(1, 200000) g"
sql "$w" "ANALYZE concurrency.$shard"
cat >"$dir/shard.sql" <<SQL
BEGIN;
UPDATE concurrency.$shard t SET state = 'leased', attempt = t.attempt + 1, lease_token = 1,
       lease_expires_at = now() + interval '30 s'
 WHERE t.shard_key = $key AND t.id = ANY (ARRAY(SELECT id FROM concurrency.$shard WHERE shard_key = $key AND state = 'ready'
                                               ORDER BY (-(priority::int8)), run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED))
RETURNING t.id AS task \gset
DELETE FROM concurrency.$shard WHERE shard_key = $key AND id = :task AND lease_token = 1;
COMMIT;
SQL
node=0
for i in 1 2; do [ "${ports[$i]}" = "$w" ] && node=$i; done
before=$(ticks "$node")
out=$("$bin/pgbench" -n -h 127.0.0.1 -U postgres -p "$w" -d postgres -f "$dir/shard.sql" -c 8 -j 2 -T "$secs" 2>&1) \
  || { echo "$out" | tail -5 >&2; exit 1; }
sleep 0.5
after=$(ticks "$node")
n=$(echo "$out" | sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p')
printf "per shard, on one worker without the coordinator, 8 clients: %s tasks/s, %s ms of that worker's server CPU per task\n" \
  "$(echo "$out" | sed -n 's/^tps = \([0-9.]*\).*/\1/p')" \
  "$(awk -v t="$((after - before))" -v n="$n" -v hz="$hz" 'BEGIN {printf "%.3f", 1000 * t / hz / n}')"
