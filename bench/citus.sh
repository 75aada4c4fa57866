#!/usr/bin/env bash
# A distributed queue on Citus against a local queue, on one machine: a
# coordinator and two worker nodes (scripts/citus-cluster.sh), the
# PostgreSQL 18 and Citus builds of scripts/build-pg18.sh and
# scripts/build-citus.sh, concurrency_ext installed into PostgreSQL 18.
#
# Each transaction claims one task and completes it (one statement,
# autocommit). Three kinds of round, with 8 and 32 pgbench clients:
#   local        a local queue, clients on the coordinator (one server);
#   nodes        a distributed queue, the clients split over the two worker
#                nodes (each node serves its own shards);
#   coordinator  the same distributed queue, every client on the coordinator
#                (each call routed to a shard's node, as 0.2.0 did);
#   max_leased   a distributed queue with max_leased (1 000), its clients on
#                the coordinator, which keeps its lease slots (every call
#                routed, and a slot row written on the coordinator).
#   rate_limit   a distributed queue with rate_limit (5 000 per second, more
#                than any round claims: the cost of keeping the limit, not
#                the limit), its clients on the coordinator, which keeps its
#                rate slots (every claim made there, a slot row written).
# Rounds run in turn (PAIRS times, the order rotated each time); each ratio
# reported is the median of the per-turn ratios against the local round.
#
# All nodes share this machine's cores, so tasks/s show the cost of each
# path, not scale. Scale is read from the CPU per task of each node: every
# server runs in a cpuacct cgroup of its own (its postmaster and all its
# processes, including the ones that exit), and each round reports the
# server CPU per completed task on each node. A node whose clients are served
# by its own shards spends CPU on the other nodes only when it runs out of
# local work; what one node spends per task bounds what it serves per core.
#
# Last, scaling: each worker node is confined to a core of its own (taskset:
# worker 1 on CPU 0, worker 2 on CPU 1; pgbench and the idle coordinator
# float), and rounds with one worker node serving (its clients and tasks on
# worker 1 only) alternate with rounds where both do (as many clients again
# on worker 2, with tasks of their own): the ratio of tasks/s, two nodes /
# one, is how far adding a node adds throughput. A machine with more cores
# than nodes would leave pgbench out of the nodes' cores; this one has two.
#
# Usage (root): bench/citus.sh      PAIRS=3 SECONDS_PER_ROUND=5 SHARDS=4 CITUS_PORTS="5621 5622 5623"
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${PAIRS:-3} secs=${SECONDS_PER_ROUND:-5} shards=${SHARDS:-4}
read -r -a ports <<<"${CITUS_PORTS:-5621 5622 5623}"
bin=${PG18_PREFIX:-/opt/concurrency_ext/pg18}/bin
[ -x "$bin/pgbench" ] && [ -f "$("$bin/pg_config" --pkglibdir)/citus.so" ] \
  || { echo "Citus benchmark: skipped, PostgreSQL 18 or Citus not built (scripts/citus-check.sh builds both)"; exit 0; }
cg=/sys/fs/cgroup/cpuacct
[ -w "$cg" ] || { echo "Citus benchmark: skipped, the cgroup v1 cpuacct controller is not writable at $cg"; exit 0; }
dir=$(mktemp -d /var/tmp/concurrency_ext-citus-bench.XXXXXX); chmod 755 "$dir"
groups=()
. scripts/cluster.sh # cpuacct_group, cpuacct_release
cleanup() {
  bash scripts/citus-cluster.sh stop "$dir/cluster" || true
  for g in "${groups[@]}"; do cpuacct_release "$g"; done
  rm -rf "$dir"
}
trap cleanup EXIT
# durable commits, as production runs (BENCH_FSYNC_OFF=1: the CPU-cost variant)
[ "${BENCH_FSYNC_OFF:-0}" = 1 ] || export CLUSTER_DURABLE=1
bash scripts/citus-cluster.sh start "$dir/cluster" "${ports[@]}" >/dev/null
# one cpuacct cgroup per node: its postmaster and every process it has, so
# that the processes it forks later (backends) are counted there too
for i in 0 1 2; do
  groups+=("$(cpuacct_group "concurrency_ext_bench_$$_node$i" "$(head -1 "$dir/cluster/node$i/postmaster.pid")")")
done
usage() { cat "${groups[$1]}/cpuacct.usage"; } # nanoseconds
c=${ports[0]} w1=${ports[1]} w2=${ports[2]}
sql() { "$bin/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -U postgres -p "$1" -d postgres -c "$2"; }
sql "$c" "CREATE EXTENSION concurrency_ext"
sql "$c" "SELECT concurrency.create_queue('bench_local'), concurrency.create_queue('bench_dist'),
                 concurrency.create_queue('bench_slots', max_leased => 1000),
                 concurrency.create_queue('bench_rate', rate_limit => 5000, rate_period => '1 second')" >/dev/null
sql "$c" "SELECT concurrency.distribute_queue('bench_dist', $shards), concurrency.distribute_queue('bench_slots', $shards),
                 concurrency.distribute_queue('bench_rate', $shards)" >/dev/null
# tasks for one round (more than any round completes), enqueued where its
# producers would be: the local queue's on the coordinator, the distributed
# queue's on both worker nodes (each batch to the next of the node's shards;
# the payload names its batch, so that each batch is a call of its own)
batches() { # port queue tasks
  local n
  n=$(sql "$1" "SELECT count(*) FROM generate_series(1, $(($3 / 1000))) b,
                 LATERAL concurrency.enqueue_batch('$2', array_fill(jsonb_build_object('batch', b), ARRAY[1000]))")
  [ "$n" = "$3" ] || { echo "enqueued $n tasks into $2, not $3" >&2; exit 1; }
}
fill() { # queue tasks
  if [ "$1" = bench_local ] || [ "$1" = bench_slots ] || [ "$1" = bench_rate ]; then batches "$c" "$1" "$2"
  else batches "$w1" bench_dist $(($2 / 2)); batches "$w2" bench_dist $(($2 / 2)); fi
  # statistics as autovacuum would have them for a queue that filled up
  # over time (without them the claims' plans sort the whole table)
  sql "$c" "ANALYZE concurrency.q_$1"
}
for q in bench_local bench_dist bench_slots bench_rate; do
  printf "SELECT concurrency.complete('%s', t.task_id, t.lease_token) FROM concurrency.dequeue('%s') t;\n" "$q" "$q" >"$dir/$q.sql"
done
pgb() { # port script clients out
  "$bin/pgbench" -n -h 127.0.0.1 -U postgres -p "$1" -d postgres -f "$dir/$2.sql" -c "$3" -j 1 -T "$secs" >"$4" 2>&1 \
    || { tail -5 "$4" >&2; return 1; }
}
processed() { sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$1"; }
# one round: prints "tasks_per_second cpu_us_per_task_node0 node1 node2"
round() { # kind clients
  local before=() after=() n=0 f
  local q=bench_dist; [ "$1" = local ] && q=bench_local; [ "$1" = max_leased ] && q=bench_slots
  [ "$1" = rate_limit ] && q=bench_rate
  fill "$q" 80000
  for i in 0 1 2; do before[$i]=$(usage "$i"); done
  case $1 in
    local) pgb "$c" "$q" "$2" "$dir/out0" ;;
    coordinator | max_leased | rate_limit) pgb "$c" "$q" "$2" "$dir/out0" ;;
    nodes) pgb "$w1" "$q" $(($2 / 2)) "$dir/out1" & a=$!
           pgb "$w2" "$q" $(($2 / 2)) "$dir/out2" & b=$!
           wait "$a"; wait "$b" ;;
  esac
  sleep 0.5 # the backends of pgbench's connections exit
  for i in 0 1 2; do after[$i]=$(usage "$i"); done
  for f in "$dir"/out?; do n=$((n + $(processed "$f"))); done
  rm -f "$dir"/out?
  [ "$n" -gt 0 ] || { echo "no task completed" >&2; exit 1; }
  sql "$c" "TRUNCATE concurrency.q_$q"
  awk -v n="$n" -v s="$secs" -v c0="$((after[0] - before[0]))" -v c1="$((after[1] - before[1]))" \
      -v c2="$((after[2] - before[2]))" 'BEGIN {printf "%.1f %.1f %.1f %.1f\n", n / s, c0 / n / 1000, c1 / n / 1000, c2 / n / 1000}'
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
col() { printf '%s\n' "$@" | median; }
echo "Citus 14 on one machine ($(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start):"
echo "coordinator + 2 worker nodes, $shards shards; claim + complete per transaction, ${pairs} turns of ${secs} s rounds"
echo "server CPU per task in microseconds, per node (cpuacct cgroups): coordinator / worker 1 / worker 2"
kinds=(local nodes coordinator max_leased rate_limit)
for clients in 8 32; do
  declare -A tps=() cpu=() ratio=() cpur=()
  for ((i = 0; i < pairs; i++)); do
    declare -A got=()
    for ((k = 0; k < ${#kinds[@]}; k++)); do
      kind=${kinds[$(((i + k) % ${#kinds[@]}))]}
      got[$kind]=$(round "$kind" "$clients")
    done
    read -r lt l0 _ _ <<<"${got[local]}"
    for kind in "${kinds[@]}"; do
      read -r t c0 c1 c2 <<<"${got[$kind]}"
      tps[$kind]+="$t " cpu[$kind,0]+="$c0 " cpu[$kind,1]+="$c1 " cpu[$kind,2]+="$c2 "
      ratio[$kind]+="$(awk -v a="$t" -v b="$lt" 'BEGIN {printf "%.3f", a / b}') "
      cpur[$kind]+="$(awk -v a="$c0" -v x="$c1" -v y="$c2" -v b="$l0" 'BEGIN {printf "%.3f", (a + x + y) / b}') "
    done
  done
  for kind in "${kinds[@]}"; do
    # shellcheck disable=SC2086
    printf "%2d clients, %-11s %8s tasks/s (x%s of local); CPU per task %s / %s / %s us, total x%s of local\n" \
      "$clients" "$kind:" "$(col ${tps[$kind]})" "$(col ${ratio[$kind]})" "$(col ${cpu[$kind,0]})" \
      "$(col ${cpu[$kind,1]})" "$(col ${cpu[$kind,2]})" "$(col ${cpur[$kind]})"
  done
  unset tps cpu ratio cpur
done
# scaling: one worker node against two, each on a core of its own
pin() { # node cpu
  local pm p
  pm=$(head -1 "$dir/cluster/node$1/postmaster.pid")
  for p in "$pm" $(ps -o pid= --ppid "$pm"); do taskset -a -p -c "$2" "$p" >/dev/null 2>&1 || true; done
}
pin 1 0
pin 2 1
scale_round() { # nodes clients_per_node: prints tasks/s
  local n=0 f a b
  batches "$w1" bench_dist 40000
  [ "$1" = 2 ] && batches "$w2" bench_dist 40000
  sql "$c" "ANALYZE concurrency.q_bench_dist"
  pgb "$w1" bench_dist "$2" "$dir/out1" & a=$!
  if [ "$1" = 2 ]; then pgb "$w2" bench_dist "$2" "$dir/out2" & b=$!; wait "$b"; fi
  wait "$a"
  for f in "$dir"/out?; do n=$((n + $(processed "$f"))); done
  rm -f "$dir"/out?
  sql "$c" "TRUNCATE concurrency.q_bench_dist"
  awk -v n="$n" -v s="$secs" 'BEGIN {printf "%.1f\n", n / s}'
}
echo "scaling: worker 1 pinned to CPU 0, worker 2 to CPU 1 (taskset); clients per serving node, tasks of its own"
for clients in 4 8; do
  ones=() twos=() ratios=()
  for ((i = 0; i < pairs; i++)); do
    if ((i % 2)); then two=$(scale_round 2 "$clients"); one=$(scale_round 1 "$clients")
    else one=$(scale_round 1 "$clients"); two=$(scale_round 2 "$clients"); fi
    ones+=("$one") twos+=("$two")
    ratios+=("$(awk -v a="$two" -v b="$one" 'BEGIN {printf "%.3f", a / b}')")
  done
  printf "%2d clients per node: one worker node %s tasks/s, two %s tasks/s (medians); two / one median ratio %s (turns: %s)\n" \
    "$clients" "$(col "${ones[@]}")" "$(col "${twos[@]}")" "$(col "${ratios[@]}")" "${ratios[*]}"
done
