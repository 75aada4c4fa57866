#!/usr/bin/env bash
# A distributed queue on Citus against a plain PostgreSQL server, on one
# machine: a coordinator and two worker nodes (scripts/citus-cluster.sh, every
# node preloading 'citus,concurrency_ext' as docs/scaling-out.md asks) and,
# beside them, a plain server of the same PostgreSQL 18 build without Citus
# (preloading concurrency_ext), all with durable commits (the servers'
# defaults; BENCH_FSYNC_OFF=1 is the CPU-cost variant). The builds of
# scripts/build-pg.sh 18 and scripts/build-citus.sh, concurrency_ext installed
# into that PostgreSQL 18 (PG18_PREFIX chooses another install, e.g. a copy
# made by scripts/dev-cluster.sh).
#
# Each pgbench transaction takes one task and completes it, as a worker does:
# "2" rounds send dequeue and then complete as two statements (each its own
# transaction, as the runtimes do), "1" rounds one statement
# (SELECT complete(...) FROM dequeue(...)). Kinds of round, with 8 and 32
# pgbench clients:
#   plain2, plain1   a queue on the plain server: the baseline;
#   local1           a local queue on the Citus coordinator (one statement);
#   nodes2@S, nodes1@S  a queue distributed over S shards (SHARDS, default
#                    "4 32"), the clients split over the two worker nodes,
#                    each node serving its own shards;
#   coordinator1     the first of those queues, every client on the
#                    coordinator (each call routed to a shard's node);
#   max_leased1      a distributed queue with max_leased (1 000), its clients
#                    on the coordinator, which keeps its lease slots;
#   rate_limit1      a distributed queue with rate_limit (5 000 per second,
#                    more than any round claims: the cost of keeping the
#                    limit), its clients on the coordinator.
# Rounds run in turn (PAIRS times, the order rotated each time); each ratio
# is the median of the per-turn ratios against the plain server's round of
# the same statement form. The disk's flush time varies from minute to
# minute: that is why the rounds alternate and the ratios are per turn.
#
# All servers share this machine's cores, so tasks/s show the cost of each
# path, not scale. Scale is read from the CPU per task: every server runs in
# a cpuacct cgroup of its own (its postmaster and all its processes,
# including the ones that exit), and each round reports the server CPU per
# completed task on each node, their sum against the plain server's, and the
# coordinator's share of it.
#
# Last, scaling: each worker node is confined to a core of its own (taskset:
# worker 1 on CPU 0, worker 2 on CPU 1; pgbench and the idle coordinator
# float), and rounds with one worker node serving (its clients and tasks on
# worker 1 only) alternate with rounds where both do (as many clients again
# on worker 2, with tasks of their own), two statements per task: the ratio
# of tasks/s, two nodes / one, is how far adding a node adds throughput. A
# machine with more cores than nodes would leave pgbench out of the nodes'
# cores; this one has two.
#
# Writes docs/results/citus-<time>.json (RESULT_DIR chooses another folder;
# -fsync-off in its name for that variant), which bench/report.py renders.
#
# Usage (root): bench/citus.sh      PAIRS=5 SECONDS_PER_ROUND=5 SHARDS="4 32" CITUS_PORTS="5621 5622 5623"
#   SCALING=0 leaves the scaling rounds out.
#   KINDS="plain2 nodes2@4 ..." runs only those kinds (plain2 and plain1 are
#   added: the ratios need them).
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${PAIRS:-5} secs=${SECONDS_PER_ROUND:-5}
read -r -a shard_counts <<<"${SHARDS:-4 32}"
read -r -a ports <<<"${CITUS_PORTS:-5621 5622 5623}"
bin=${PG18_PREFIX:-/opt/concurrency_ext/pg18}/bin
[ -x "$bin/pgbench" ] && [ -f "$("$bin/pg_config" --pkglibdir)/citus.so" ] \
  || { echo "Citus benchmark: skipped, PostgreSQL 18 or Citus not built (scripts/citus-check.sh builds both)"; exit 0; }
cg=/sys/fs/cgroup/cpuacct
[ -w "$cg" ] || { echo "Citus benchmark: skipped, the cgroup v1 cpuacct controller is not writable at $cg"; exit 0; }
dir=$(mktemp -d /var/tmp/concurrency_ext-citus-bench.XXXXXX); chmod 755 "$dir"
groups=()
. scripts/cluster.sh # cluster_start, cluster_stop, cpuacct_group, cpuacct_release
cleanup() {
  bash scripts/citus-cluster.sh stop "$dir/cluster" || true
  cluster_stop || true
  for g in "${groups[@]}"; do cpuacct_release "$g"; done
  rm -rf "$dir"
}
trap cleanup EXIT
# durable commits, as production runs (BENCH_FSYNC_OFF=1: the CPU-cost variant)
durability="durable commits (the servers' defaults)"
if [ "${BENCH_FSYNC_OFF:-0}" = 1 ]; then durability="fsync = off: the CPU cost, not durable throughput"
else export CLUSTER_DURABLE=1; fi
CITUS_NODE_PRELOAD=1 bash scripts/citus-cluster.sh start "$dir/cluster" "${ports[@]}" >/dev/null
# the plain server: no Citus, the module preloaded, the same memory settings
cluster_start "$bin/pg_config" "listen_addresses = '127.0.0.1'" "shared_preload_libraries = 'concurrency_ext'" \
  "max_connections = 300" "shared_buffers = 64MB" >/dev/null
p=$PGPORT
# one cpuacct cgroup per server: its postmaster and every process it has, so
# that the processes it forks later (backends) are counted there too;
# node 3 is the plain server
for i in 0 1 2; do
  groups+=("$(cpuacct_group "concurrency_ext_bench_$$_node$i" "$(head -1 "$dir/cluster/node$i/postmaster.pid")")")
done
groups+=("$(cpuacct_group "concurrency_ext_bench_$$_plain" "$(head -1 "$CLUSTER_DIR/data/postmaster.pid")")")
usage() { cat "${groups[$1]}/cpuacct.usage"; } # nanoseconds
c=${ports[0]} w1=${ports[1]} w2=${ports[2]}
sql() { "$bin/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -U postgres -p "$1" -d postgres -c "$2"; }
for port in "$c" "$w1" "$w2" "$p"; do
  sql "$port" "SELECT name FROM pg_settings WHERE name = 'shared_preload_libraries' AND setting LIKE '%concurrency_ext%'" \
    | grep -q . || { echo "the server on port $port does not preload concurrency_ext" >&2; exit 1; }
done
sql "$p" "CREATE EXTENSION concurrency_ext"
sql "$p" "SELECT concurrency.create_queue('bench_plain')" >/dev/null
sql "$c" "CREATE EXTENSION concurrency_ext"
sql "$c" "SELECT concurrency.create_queue('bench_local'),
                 concurrency.create_queue('bench_slots', max_leased => 1000),
                 concurrency.create_queue('bench_rate', rate_limit => 5000, rate_period => '1 second')" >/dev/null
for s in "${shard_counts[@]}"; do
  sql "$c" "SELECT concurrency.create_queue('bench_dist_$s'), concurrency.distribute_queue('bench_dist_$s', $s)" >/dev/null
done
s0=${shard_counts[0]}
sql "$c" "SELECT concurrency.distribute_queue('bench_slots', $s0), concurrency.distribute_queue('bench_rate', $s0)" >/dev/null
# tasks for one round (more than any round completes), enqueued where its
# producers would be: a local queue's on its server, a distributed queue's
# on both worker nodes (each batch to the next of the node's shards; the
# payload names its batch, so that each batch is a call of its own)
batches() { # port queue tasks
  local n
  n=$(sql "$1" "SELECT count(*) FROM generate_series(1, $(($3 / 1000))) b,
                 LATERAL concurrency.enqueue_batch('$2', array_fill(jsonb_build_object('batch', b), ARRAY[1000]))")
  [ "$n" = "$3" ] || { echo "enqueued $n tasks into $2, not $3" >&2; exit 1; }
}
home() { # queue: the port of the server that holds it (the coordinator for a distributed one)
  if [ "$1" = bench_plain ]; then echo "$p"; else echo "$c"; fi
}
fill() { # queue tasks
  case $1 in
    bench_plain | bench_local | bench_slots | bench_rate) batches "$(home "$1")" "$1" "$2" ;;
    *) batches "$w1" "$1" $(($2 / 2)); batches "$w2" "$1" $(($2 / 2)) ;;
  esac
  # statistics as autovacuum would have them for a queue that filled up
  # over time (without them the claims' plans sort the whole table)
  sql "$(home "$1")" "ANALYZE concurrency.q_$1"
}
for q in bench_plain bench_local bench_slots bench_rate $(printf 'bench_dist_%s ' "${shard_counts[@]}"); do
  printf "SELECT concurrency.complete('%s', t.task_id, t.lease_token) FROM concurrency.dequeue('%s') t;\n" "$q" "$q" >"$dir/$q.1.sql"
  printf "SELECT task_id, lease_token FROM concurrency.dequeue('%s') \\gset\nSELECT concurrency.complete('%s', :task_id, :lease_token);\n" \
    "$q" "$q" >"$dir/$q.2.sql"
done
pgb() { # port script clients out
  "$bin/pgbench" -n -h 127.0.0.1 -U postgres -p "$1" -d postgres -f "$dir/$2.sql" -c "$3" -j 1 -T "$secs" >"$4" 2>&1 \
    || { tail -5 "$4" >&2; return 1; }
}
processed() { sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$1"; }
# one round: prints "tasks_per_second cpu_us_per_task_coordinator worker1 worker2 plain"
round() { # kind clients
  local before=() after=() n=0 f q spec=${1%@*} form kind
  form=${spec: -1} kind=${spec%?}
  case $kind in
    plain) q=bench_plain ;; local) q=bench_local ;; max_leased) q=bench_slots ;; rate_limit) q=bench_rate ;;
    coordinator) q=bench_dist_$s0 ;; nodes) q=bench_dist_${1#*@} ;;
  esac
  fill "$q" 80000
  for i in 0 1 2 3; do before[$i]=$(usage "$i"); done
  case $kind in
    plain) pgb "$p" "$q.$form" "$2" "$dir/out0" ;;
    local | coordinator | max_leased | rate_limit) pgb "$c" "$q.$form" "$2" "$dir/out0" ;;
    nodes) pgb "$w1" "$q.$form" $(($2 / 2)) "$dir/out1" & a=$!
           pgb "$w2" "$q.$form" $(($2 / 2)) "$dir/out2" & b=$!
           wait "$a"; wait "$b" ;;
  esac
  sleep 0.5 # the backends of pgbench's connections exit
  for i in 0 1 2 3; do after[$i]=$(usage "$i"); done
  for f in "$dir"/out?; do n=$((n + $(processed "$f"))); done
  rm -f "$dir"/out?
  [ "$n" -gt 0 ] || { echo "no task completed" >&2; exit 1; }
  sql "$(home "$q")" "TRUNCATE concurrency.q_$q"
  awk -v n="$n" -v s="$secs" -v c0="$((after[0] - before[0]))" -v c1="$((after[1] - before[1]))" \
      -v c2="$((after[2] - before[2]))" -v c3="$((after[3] - before[3]))" \
      'BEGIN {printf "%.1f %.1f %.1f %.1f %.1f\n", n / s, c0 / n / 1000, c1 / n / 1000, c2 / n / 1000, c3 / n / 1000}'
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
col() { printf '%s\n' "$@" | median; }
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "Citus 14 on one machine ($(nproc) cores, load average $load_before at the start), $durability:"
echo "coordinator + 2 worker nodes (each preloading citus,concurrency_ext) beside a plain PostgreSQL 18 server (preloading concurrency_ext);"
echo "one task taken and completed per pgbench transaction (2: dequeue, then complete; 1: one statement); ${pairs} turns of ${secs} s rounds"
echo "server CPU per task in microseconds (cpuacct cgroups): coordinator / worker 1 / worker 2; the plain server's in its own rows"
if [ -n "${KINDS:-}" ]; then read -r -a kinds <<<"plain2 plain1 $KINDS"
else
  kinds=(plain2 plain1 local1)
  for s in "${shard_counts[@]}"; do kinds+=("nodes2@$s" "nodes1@$s"); done
  kinds+=(coordinator1 max_leased1 rate_limit1)
fi
for clients in 8 32; do
  declare -A tps=() cpu=() ratio=() cpur=() share=()
  for ((i = 0; i < pairs; i++)); do
    declare -A got=()
    for ((k = 0; k < ${#kinds[@]}; k++)); do
      kind=${kinds[$(((i + k) % ${#kinds[@]}))]}
      got[$kind]=$(round "$kind" "$clients")
    done
    for kind in "${kinds[@]}"; do
      read -r t c0 c1 c2 c3 <<<"${got[$kind]}"
      form=${kind%@*}; form=${form: -1}
      read -r pt _ _ _ pc <<<"${got[plain$form]}"
      tps[$kind]+="$t " cpu[$kind,0]+="$c0 " cpu[$kind,1]+="$c1 " cpu[$kind,2]+="$c2 " cpu[$kind,3]+="$c3 "
      ratio[$kind]+="$(awk -v a="$t" -v b="$pt" 'BEGIN {printf "%.3f", a / b}') "
      cpur[$kind]+="$(awk -v a="$c0" -v x="$c1" -v y="$c2" -v z="$c3" -v b="$pc" 'BEGIN {printf "%.3f", (a + x + y + z) / b}') "
      share[$kind]+="$(awk -v a="$c0" -v x="$c1" -v y="$c2" -v z="$c3" 'BEGIN {t = a + x + y + z; printf "%.3f", (t > 0) ? 100 * a / t : 0}') "
    done
  done
  for kind in "${kinds[@]}"; do
    # shellcheck disable=SC2086
    echo "$clients $kind $(col ${tps[$kind]}) $(col ${ratio[$kind]}) $(col ${cpu[$kind,0]}) $(col ${cpu[$kind,1]}) $(col ${cpu[$kind,2]}) $(col ${cpu[$kind,3]}) $(col ${cpur[$kind]}) $(col ${share[$kind]}) ${ratio[$kind]}" >>"$dir/rows.txt"
    if [ "${kind#plain}" != "$kind" ]; then
      printf "%2d clients, %-13s %8s tasks/s; CPU per task %s us on the plain server\n" \
        "$clients" "$kind:" "$(col ${tps[$kind]})" "$(col ${cpu[$kind,3]})"
    else
      printf "%2d clients, %-13s %8s tasks/s (x%s of plain); CPU per task %s / %s / %s us, total x%s of plain, coordinator %s%%\n" \
        "$clients" "$kind:" "$(col ${tps[$kind]})" "$(col ${ratio[$kind]})" "$(col ${cpu[$kind,0]})" \
        "$(col ${cpu[$kind,1]})" "$(col ${cpu[$kind,2]})" "$(col ${cpur[$kind]})" "$(col ${share[$kind]})"
    fi
  done
  unset tps cpu ratio cpur share
done
# scaling: one worker node against two, each on a core of its own
pin() { # node cpu
  local pm p
  pm=$(head -1 "$dir/cluster/node$1/postmaster.pid")
  for p in "$pm" $(ps -o pid= --ppid "$pm"); do taskset -a -p -c "$2" "$p" >/dev/null 2>&1 || true; done
}
[ "${SCALING:-1}" = 1 ] && { pin 1 0; pin 2 1; }
scale_round() { # nodes clients_per_node: prints tasks/s
  local n=0 f a b
  local q=bench_dist_$s0
  batches "$w1" "$q" 40000
  if [ "$1" = 2 ]; then batches "$w2" "$q" 40000; fi
  sql "$c" "ANALYZE concurrency.q_$q"
  pgb "$w1" "$q.2" "$2" "$dir/out1" & a=$!
  if [ "$1" = 2 ]; then pgb "$w2" "$q.2" "$2" "$dir/out2" & b=$!; wait "$b"; fi
  wait "$a"
  for f in "$dir"/out?; do n=$((n + $(processed "$f"))); done
  rm -f "$dir"/out?
  sql "$c" "TRUNCATE concurrency.q_$q"
  awk -v n="$n" -v s="$secs" 'BEGIN {printf "%.1f\n", n / s}'
}
[ "${SCALING:-1}" = 1 ] && echo "scaling ($s0 shards, two statements per task): worker 1 pinned to CPU 0, worker 2 to CPU 1 (taskset); clients per serving node, tasks of its own"
: >"$dir/scaling.txt"
[ "${SCALING:-1}" = 1 ] || echo "scaling: not run (SCALING=0)"
for clients in $([ "${SCALING:-1}" = 1 ] && echo 4 8); do
  ones=() twos=() ratios=()
  for ((i = 0; i < pairs; i++)); do
    if ((i % 2)); then two=$(scale_round 2 "$clients"); one=$(scale_round 1 "$clients")
    else one=$(scale_round 1 "$clients"); two=$(scale_round 2 "$clients"); fi
    ones+=("$one") twos+=("$two")
    ratios+=("$(awk -v a="$two" -v b="$one" 'BEGIN {printf "%.3f", a / b}')")
  done
  printf "%2d clients per node: one worker node %s tasks/s, two %s tasks/s (medians); two / one median ratio %s (turns: %s)\n" \
    "$clients" "$(col "${ones[@]}")" "$(col "${twos[@]}")" "$(col "${ratios[@]}")" "${ratios[*]}"
  echo "$clients $(col "${ones[@]}") $(col "${twos[@]}") $(col "${ratios[@]}") ${ratios[*]}" >>"$dir/scaling.txt"
done
# the result file bench/report.py renders into docs/benchmarks.md
suffix=; [ "${BENCH_FSYNC_OFF:-0}" = 1 ] && suffix=-fsync-off
out=${RESULT_DIR:-docs/results}/citus-$(date -u +%Y%m%dT%H%M%SZ)$suffix.json
python3 - "$dir/rows.txt" "$dir/scaling.txt" "$out" "$("$bin/pg_config" --version)" "$pairs" "$secs" \
  "$([ "${BENCH_FSYNC_OFF:-0}" = 1 ] && echo false || echo true)" "$load_before" "$(cut -d' ' -f1-3 /proc/loadavg)" \
  "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$(nproc)" \
  "$(for v in KINDS SHARDS SCALING PAIRS; do [ -n "${!v:-}" ] && printf '%s="%s" ' "$v" "${!v}"; done)" <<'PY'
import json, sys
rows, scaling, out, version, pairs, secs, durable, load_before, load_after, commit, cores, env = sys.argv[1:]
report = {"durable": durable == "true", "server": version, "rounds": int(pairs), "seconds_per_round": float(secs),
          "commit": commit, "cores": int(cores), "command": f"sudo {env}bash bench/citus.sh",
          "load_before": load_before, "load_after": load_after, "rows": [], "scaling": []}
for line in open(rows):
    f = line.split()
    plain = f[1].startswith("plain")
    report["rows"].append({
        "clients": int(f[0]), "kind": f[1], "tasks_per_s": float(f[2]),
        "ratio": None if plain else float(f[3]), "ratios": None if plain else [float(x) for x in f[10:]],
        "cpu_us": {"coordinator": float(f[4]), "worker1": float(f[5]), "worker2": float(f[6]), "plain": float(f[7])},
        "cpu_ratio": None if plain else float(f[8]), "coordinator_share": None if plain else float(f[9])})
for line in open(scaling):
    f = line.split()
    report["scaling"].append({"clients_per_node": int(f[0]), "one_node": float(f[1]), "two_nodes": float(f[2]),
                              "ratio": float(f[3]), "ratios": [float(x) for x in f[4:]]})
json.dump(report, open(out, "w"), indent=1)
print("result file:", out)
PY
