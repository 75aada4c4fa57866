#!/usr/bin/env bash
# The Go runtime of concurrency_ext (clients/go) against River, on one
# throw-away server with durable commits (fsync = on, synchronous_commit =
# on): see main.go for the rows and sides. River comes from the Go module
# proxy into this directory's module (bench/peers/go/go.mod), so that
# clients/go does not depend on it.
#
#   sudo PG_CONFIG=/path/to/pg_config bash bench/peers/go/peers-go.sh
#
# The extension must be installed into that server. Environment:
#   PEERS_JOBS     jobs per run (default 5000)
#   PEERS_WARMUP   jobs each run handles first, untimed (default 1000)
#   PEERS_ROUNDS   rounds per row, the order alternating (default 3)
#   PEERS_ROWS     rows to run (default "a b c d e f g")
#   PEERS_SAMPLES  row (g): enqueue-to-start samples a run (default 200)
# Writes docs/results/peers-go-<UTC time>.json (bench/report.py reports it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
PG_CONFIG=${PG_CONFIG:-pg_config}
export PATH=$PATH:/usr/local/go/bin GOFLAGS=${GOFLAGS:--mod=mod}
. "$root/scripts/cluster.sh"

bin=$(mktemp -d)/peers-go
(cd "$here" && go build -o "$bin" .)
trap 'cluster_stop; rm -rf "$(dirname "$bin")"' EXIT
# durable commits (scripts/cluster.sh keeps the server's defaults with CLUSTER_DURABLE=1)
export CLUSTER_DURABLE=1
cluster_start "$PG_CONFIG" "max_connections = 100" "shared_buffers = 256MB" "fsync = on" "synchronous_commit = on" \
  "shared_preload_libraries = 'concurrency_ext'"  # the waiting dequeue is woken by commits only with the preload
psql -Xq -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION concurrency_ext'
mkdir -p "$root/docs/results"
out=$root/docs/results/peers-go-$(date -u +%Y%m%dT%H%M%SZ).json
echo "$(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at start"
"$bin" -jobs "${PEERS_JOBS:-5000}" -warmup "${PEERS_WARMUP:-1000}" -rounds "${PEERS_ROUNDS:-3}" \
  -rows "${PEERS_ROWS:-a b c d e f g}" -samples "${PEERS_SAMPLES:-200}" -out "$out"
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
