#!/usr/bin/env bash
# Instructions per task on a Citus worker node against a plain server,
# counted by valgrind's callgrind (bench/instructions.sh explains why a count
# and not a time): one backend on worker node 1 of a coordinator + two
# workers (scripts/citus-cluster.sh, every node preloading
# 'citus,concurrency_ext'), taking and completing tasks of a distributed
# queue as two statements each (dequeue, then complete), with the queue
# distributed over each of SHARDS shard counts; beside it the same on a plain
# server of the same PostgreSQL 18 build (preloading concurrency_ext). Only
# worker node 1 runs under callgrind; its tasks are enqueued on it, spread
# over its shards as bench/citus.sh spreads them. Each figure is the
# difference between a session of HIGH and one of LOW tasks, divided by
# HIGH - LOW (start-up and first plans drop out). Every server runs with
# fsync = off: these are instruction counts, the CPU cost of a task, not
# durable throughput; the durable figures are bench/citus.sh's.
#
# Usage (root): PG18_PREFIX=… bench/citus_instructions.sh
#   SHARDS (default "4 32"), LOW (100), HIGH (600), CITUS_PORTS (three free
#   ports, default "5631 5632 5633"), PLAIN_PORT (default 5634),
#   KEEP=1 keeps the directory with the callgrind files (the files of each
#   session: <side>.<n>.out), TOP=N prints the N inclusive functions whose
#   cost per task differs most between the first and the last shard count.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
prefix=${PG18_PREFIX:-/opt/concurrency_ext/pg18}
bin=$prefix/bin
read -r -a shard_counts <<<"${SHARDS:-4 32}"
read -r -a ports <<<"${CITUS_PORTS:-5631 5632 5633}"
plain_port=${PLAIN_PORT:-5634}
LOW=${LOW:-100} HIGH=${HIGH:-600}
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
[ -f "$("$bin/pg_config" --pkglibdir)/citus.so" ] || { echo "Citus is not installed in $prefix" >&2; exit 1; }
dir=$(mktemp -d /var/tmp/concurrency_ext-citus-instr.XXXXXX)
chmod 755 "$dir"; chown postgres "$dir"
cleanup() {
  # (the servers under valgrind too: pg_ctl signals the postmaster of its postmaster.pid)
  PG18_PREFIX=$prefix bash "$root/scripts/citus-cluster.sh" stop "$dir/cluster" || true
  [ -f "$dir/plain/postmaster.pid" ] && as_pg "$bin/pg_ctl" -D "$dir/plain" -m immediate -w stop >/dev/null 2>&1
  sleep 2
  if [ -z "${KEEP:-}" ]; then rm -rf "$dir"; else echo "kept $dir"; fi
}
trap cleanup EXIT
as_pg() { runuser -u postgres -- "$@"; }
sql() { "$bin/psql" -X -q -At -v ON_ERROR_STOP=1 -h 127.0.0.1 -U postgres -p "$1" -d postgres -c "$2"; }
ready() { for _ in $(seq 1 300); do "$bin/pg_isready" -q -h 127.0.0.1 -p "$1" && return 0; sleep 1; done; return 1; }
callgrind() { # data port log: the postmaster of data under callgrind, in the background
  as_pg valgrind --quiet --tool=callgrind --callgrind-out-file="$dir/cg.%p.out" \
    "$bin/postgres" -D "$1" -c port="$2" >"$3" 2>&1 &
  ready "$2"
}

# the cluster; worker node 1 then restarted under callgrind
CITUS_NODE_PRELOAD=1 PG18_PREFIX=$prefix bash scripts/citus-cluster.sh start "$dir/cluster" "${ports[@]}" >/dev/null
c=${ports[0]} w1=${ports[1]}
sql "$c" "CREATE EXTENSION concurrency_ext"
for s in "${shard_counts[@]}"; do
  sql "$c" "SELECT concurrency.create_queue('instr_$s'), concurrency.distribute_queue('instr_$s', $s)" >/dev/null
done
as_pg "$bin/pg_ctl" -D "$dir/cluster/node1" -m fast -w stop >/dev/null
callgrind "$dir/cluster/node1" "$w1" "$dir/node1-callgrind.log"
# the plain server
as_pg "$bin/initdb" -D "$dir/plain" -A trust -U postgres --no-sync >/dev/null
cat >>"$dir/plain/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
shared_preload_libraries = 'concurrency_ext'
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = 64MB
CONF
callgrind "$dir/plain" "$plain_port" "$dir/plain-callgrind.log"
sql "$plain_port" "CREATE EXTENSION concurrency_ext"
sql "$plain_port" "SELECT concurrency.create_queue('instr_plain')" >/dev/null

fill() { # port queue tasks: batches of 25, each to the next of the node's shards
  local n
  n=$(sql "$1" "SELECT count(*) FROM generate_series(1, $(($3 / 25))) b,
                 LATERAL concurrency.enqueue_batch('$2', array_fill(jsonb_build_object('batch', b), ARRAY[25]))")
  [ "$n" = "$3" ] || { echo "enqueued $n tasks into $2, not $3" >&2; exit 1; }
}
session() { # port queue n -> instructions of the backend that took and completed n tasks
  local port=$1 q=$2 n=$3 f=$dir/session.sql pid out
  if [ "$q" = instr_plain ]; then sql "$port" "TRUNCATE concurrency.q_instr_plain"
  else sql "$c" "TRUNCATE concurrency.q_$q"; fi
  fill "$port" "$q" $(((n + 100) / 25 * 25 + 25))
  if [ "$q" = instr_plain ]; then sql "$port" "VACUUM ANALYZE concurrency.q_instr_plain"
  else sql "$c" "VACUUM ANALYZE concurrency.q_$q"; fi
  {
    echo "SELECT pg_backend_pid() AS pid \\gset"
    echo "\\setenv BENCH_PID :pid"
    echo "\\! echo \$BENCH_PID >$dir/pid"
    for _ in $(seq 1 "$n"); do
      printf "SELECT task_id, lease_token FROM concurrency.dequeue('%s') \\\\gset\nSELECT concurrency.complete('%s', :task_id, :lease_token);\n" "$q" "$q"
    done
  } >"$f"
  "$bin/psql" -X -q -o /dev/null -v ON_ERROR_STOP=1 -h 127.0.0.1 -U postgres -p "$port" -d postgres -f "$f"
  pid=$(cat "$dir/pid") out=$dir/cg.$pid.out
  for _ in $(seq 1 120); do grep -qs '^totals:' "$out" && break; sleep 1; done
  cp "$out" "$dir/$q.$n.out"
  awk '/^totals:/ { print $2 }' "$out"
}
per_task() { # port queue -> instructions per task
  local a b
  a=$(session "$1" "$2" "$LOW")
  b=$(session "$1" "$2" "$HIGH")
  echo $(((b - a) / (HIGH - LOW)))
}
echo "instructions per task (dequeue; complete: two statements), callgrind, fsync = off; PostgreSQL $("$bin/pg_config" --version | awk '{print $2}')"
plain=$(per_task "$plain_port" instr_plain)
printf "%-40s %10.1f thousand\n" "plain server, local queue" "$(echo "$plain / 1000" | bc -l)"
for s in "${shard_counts[@]}"; do
  t=$(per_task "$w1" "instr_$s")
  printf "%-40s %10.1f thousand  x%.3f of plain\n" "worker node, $s shards" "$(echo "$t / 1000" | bc -l)" "$(echo "$t / $plain" | bc -l)"
done
if [ -n "${TOP:-}" ]; then
  first=${shard_counts[0]} last=${shard_counts[-1]}
  incl() { callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
    awk '$1 ~ /^[0-9,]+$/ { n = $1; gsub(",", "", n); $1 = ""; if ($2 ~ /^\(/) $2 = ""; sub(/^ +/, ""); print n "\t" $0 }'; }
  for s in "$first" "$last"; do
    for n in "$LOW" "$HIGH"; do incl "$dir/instr_$s.$n.out" >"$dir/incl_$s.$n.txt"; done
  done
  python3 - "$dir" "$first" "$last" "$LOW" "$HIGH" "$TOP" <<'PY'
import sys
d, first, last, low, high, top = sys.argv[1:]
low, high, top = int(low), int(high), int(top)
def per(s):
    def load(n):
        out = {}
        for line in open(f"{d}/incl_{s}.{n}.txt"):
            v, _, f = line.rstrip("\n").partition("\t")
            out[f] = max(out.get(f, 0), int(v))
        return out
    a, b = load(low), load(high)
    return {f: (b[f] - a.get(f, 0)) / (high - low) for f in b}
p1, p2 = per(first), per(last)
rows = sorted(((p2.get(f, 0) - p1.get(f, 0), f) for f in set(p1) | set(p2)), reverse=True)
print(f"inclusive instructions per task, {first} shards -> {last} shards (the {top} that grew most):")
for diff, f in rows[:top]:
    print(f"  {p1.get(f, 0):10.0f} {p2.get(f, 0):10.0f} {diff:+10.0f}  {f[:110]}")
PY
fi
