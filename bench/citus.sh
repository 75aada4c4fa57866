#!/usr/bin/env bash
# A distributed queue on Citus against a local queue on the coordinator, on
# one machine: a coordinator and two worker nodes (scripts/citus-cluster.sh),
# the PostgreSQL 18 and Citus builds of scripts/build-pg18.sh and
# scripts/build-citus.sh, concurrency_ext installed into PostgreSQL 18.
#
# Each transaction claims one task and completes it (one statement,
# autocommit), with 8 and 32 pgbench clients connected to the coordinator.
# Rounds alternate local / distributed (PAIRS pairs of SECONDS each) and the
# ratio reported is the median of the pairs' ratios. All nodes share this
# machine's cores, so this measures the overhead of routing through the
# coordinator, not scale. Per-shard figure: the same claim + complete run
# directly on one worker against one shard table (what a worker node does per
# task, without the coordinator), the input of the projection in
# docs/benchmarks.md.
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
c=${ports[0]} w1=${ports[1]}
sql() { "$bin/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -U postgres -p "$1" -d postgres -c "$2"; }
sql "$c" "CREATE EXTENSION concurrency_ext"
sql "$c" "SELECT concurrency.create_queue('bench_local'), concurrency.create_queue('bench_dist')"
sql "$c" "SELECT concurrency.distribute_queue('bench_dist', $shards)" >/dev/null
fill() { # tasks for one round (more than any round completes)
  sql "$c" "INSERT INTO concurrency.q_bench_local (payload) SELECT '{}' FROM generate_series(1, $1)"
  sql "$c" "INSERT INTO concurrency.q_bench_dist (id, shard_key, payload)
            SELECT n * 1024 + p, (d.shard_keys)[p + 1], '{}'
              FROM concurrency.distributed_queue d,
                   LATERAL (SELECT nextval('concurrency.lease_token') AS n, g % $shards AS p
                              FROM generate_series(1, $1) g) x
             WHERE d.queue = 'bench_dist'"
}
printf "SELECT concurrency.complete('bench_local', t.task_id, t.lease_token) FROM concurrency.dequeue('bench_local') t;\n" >"$dir/local.sql"
printf "SELECT concurrency.complete('bench_dist', t.task_id, t.lease_token) FROM concurrency.dequeue('bench_dist') t;\n" >"$dir/dist.sql"
tps() { # port script clients
  "$bin/pgbench" -n -h 127.0.0.1 -U postgres -p "$1" -d postgres -f "$2" -c "$3" -j 2 -T "$secs" 2>/dev/null \
    | sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
echo "Citus 14 on one machine ($(nproc) cores): coordinator + 2 workers, $shards shards; claim + complete per transaction"
for clients in 8 32; do
  ratios=() locals=() dists=()
  for ((i = 1; i <= pairs; i++)); do
    fill 60000
    l=$(tps "$c" "$dir/local.sql" "$clients"); d=$(tps "$c" "$dir/dist.sql" "$clients")
    locals+=("$l"); dists+=("$d"); ratios+=("$(awk -v a="$d" -v b="$l" 'BEGIN {printf "%.3f", a / b}')")
    sql "$c" "TRUNCATE concurrency.q_bench_local, concurrency.q_bench_dist"
  done
  printf "%2d clients: local %s tasks/s, distributed %s tasks/s (median of %d); distributed/local median ratio %s (pairs: %s)\n" \
    "$clients" "$(printf '%s\n' "${locals[@]}" | median)" "$(printf '%s\n' "${dists[@]}" | median)" "$pairs" \
    "$(printf '%s\n' "${ratios[@]}" | median)" "${ratios[*]}"
done
# per shard: the claim + complete statements on one shard table, run on its worker directly
key=$(sql "$c" "SELECT shard_keys[1] FROM concurrency.distributed_queue WHERE queue = 'bench_dist'")
read -r shard w1 <<<"$(sql "$c" "SELECT shard_name, nodeport FROM citus_shards
                                 WHERE shardid = get_shard_id_for_distribution_column('concurrency.q_bench_dist', $key)" | tr '|' ' ')"
shard=${shard#concurrency.}
sql "$w1" "INSERT INTO concurrency.$shard (id, shard_key, payload) SELECT g * 1024, $key, '{}' FROM generate_series(1, 200000) g"
cat >"$dir/shard.sql" <<SQL
WITH c AS (UPDATE concurrency.$shard t SET state = 'leased', attempt = t.attempt + 1, lease_token = 1,
                  lease_expires_at = now() + interval '30 s'
            WHERE t.shard_key = $key AND t.id = ANY (ARRAY(SELECT id FROM concurrency.$shard WHERE shard_key = $key AND state = 'ready'
                                       ORDER BY (-(priority::int8)), run_at, id LIMIT 1 FOR UPDATE SKIP LOCKED))
           RETURNING t.id)
DELETE FROM concurrency.$shard d USING c WHERE d.shard_key = $key AND d.id = c.id;
SQL
for clients in 8; do
  printf "per shard, on one worker without the coordinator, %d clients: %s tasks/s\n" "$clients" "$(tps "$w1" "$dir/shard.sql" "$clients")"
done
