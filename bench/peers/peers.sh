#!/usr/bin/env bash
# The Node.js runtime of concurrency_ext against graphile-worker and pg-boss
# (and the raw SQL loop the runtime wraps), on one throw-away server: see
# peers.js for the rows. The peers come from the npm registry into
# bench/peers/.deps (not tracked). pgmq is compared in row (g), enqueueing,
# when PGMQ_DIR names a checkout's pgmq-extension directory (its SQL is not
# in a package registry): peers.sh installs it into the server first.
#
#   sudo PG_CONFIG=/path/to/pg_config bash bench/peers/peers.sh
#
# The extension must be installed into that server (make install). Environment:
#   PEERS_JOBS   jobs per run (default 20000)
#   PEERS_ROWS   rows to run (default "a b c d e f g latency"; (f): 32
#                producers enqueue one job a commit while 8 workers drain;
#                (g): 32 producers enqueue only)
#   PGMQ_DIR     a pgmq checkout's pgmq-extension directory: pgmq in row (g)
#   PEERS_LATENCY_SAMPLES  enqueue-to-start samples per side (default 200)
#   PEERS_ROUNDS  each row this many times, the order alternating; the table
#                 shows the round of median time and the range (default 1)
#   PEERS_SIDES   only the sides whose names start with these words
#                 (e.g. "runtime raw graphile"); "raw" is two loops: one
#                 whose claim returns ids and lease tokens only, one that
#                 returns every column the runtime's does (not in the
#                 enqueue rows, where it would enqueue as the other)
#   PEERS_FSYNC_OFF=1  fsync = off (the CPU cost only; default: durable commits)
# Writes its output to docs/results/peers-node-<time>.md (bench/report.py shows it).
#   PEERS_VERBOSE  set: each run's time and CPU on stderr, as it ends
#   PEERS_WARMUP  jobs each run handles first, untimed, in its own Node.js
#                 process (default: PEERS_JOBS; 0: none)
#   PEERS_WARMUP_RUNS  the runs those jobs are split into (default 2: V8
#                 optimises again what a run's end first takes)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PG_CONFIG=${PG_CONFIG:-pg_config}
GRAPHILE_WORKER=${GRAPHILE_WORKER:-graphile-worker@0.17.3}
PG_BOSS=${PG_BOSS:-pg-boss@10.4.2}   # pg-boss 11 and later need Node.js 22
. "$root/scripts/cluster.sh"

deps=$here/.deps
if [ ! -d "$deps/node_modules/graphile-worker" ] || [ ! -d "$deps/node_modules/pg-boss" ]; then
  mkdir -p "$deps"
  (cd "$deps" && [ -f package.json ] || echo '{"private": true}' >package.json)
  (cd "$deps" && npm install --no-audit --no-fund --loglevel=error "$GRAPHILE_WORKER" "$PG_BOSS" pg)
fi
(cd "$root/clients/node" && [ -d node_modules/pg ] || npm ci --no-audit --no-fund --loglevel=error)

if [ -n "${PGMQ_DIR:-}" ]; then
  # (its install script is made by "all"; install lists the files it finds)
  make -s -C "$PGMQ_DIR" PG_CONFIG="$PG_CONFIG" >/dev/null && make -s -C "$PGMQ_DIR" install PG_CONFIG="$PG_CONFIG" >/dev/null
  export PEERS_PGMQ=1
fi

trap cluster_stop EXIT
# durable commits, as production runs (PEERS_FSYNC_OFF=1: the CPU-cost variant)
[ "${PEERS_FSYNC_OFF:-0}" = 1 ] || export CLUSTER_DURABLE=1
cluster_start "$PG_CONFIG" "max_connections = 150" "shared_buffers = 256MB" "synchronous_commit = on" \
  "shared_preload_libraries = 'concurrency_ext'"  # the waiting dequeue is woken by commits only with the preload
psql -Xq -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION concurrency_ext'
# the run's output is also its result file (bench/report.py shows the newest)
mkdir -p "$root/docs/results"
suffix=; [ "${PEERS_FSYNC_OFF:-0}" = 1 ] && suffix=-fsync-off
out=$root/docs/results/peers-node-$(date -u +%Y%m%dT%H%M%SZ)$suffix.md
{
  echo "PEERS_JOBS=${PEERS_JOBS:-20000} PEERS_ROWS=\"${PEERS_ROWS:-a b c d e f g latency}\" PEERS_ROUNDS=${PEERS_ROUNDS:-1}$([ -n "${PGMQ_DIR:-}" ] && echo " PGMQ_DIR=…") bash bench/peers/peers.sh; commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown); durable commits: $([ "${PEERS_FSYNC_OFF:-0}" = 1 ] && echo no || echo yes)"
  echo "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at start; PostgreSQL $("$PG_CONFIG" --version | cut -d' ' -f2); node $(node --version)"
  echo "graphile-worker $(node -p "require('$deps/node_modules/graphile-worker/package.json').version"), pg-boss $(node -p "require('$deps/node_modules/pg-boss/package.json').version"), pg $(node -p "require('$deps/node_modules/pg/package.json').version")$([ -n "${PGMQ_DIR:-}" ] && echo ", pgmq $(sed -n "s/^default_version *= *'\(.*\)'/\1/p" "$PGMQ_DIR/pgmq.control")")"
  node "$here/peers.js" "${PEERS_JOBS:-20000}" "$deps" "${PEERS_ROWS:-a b c d e f g latency}"
  echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
} | tee "$out" || { rm -f "$out"; exit 1; }
