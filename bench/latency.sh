#!/usr/bin/env bash
# The Python runtime's enqueue-to-start latency with an idle worker
# (bench/latency_python.py: the threaded Worker and the AsyncWorker, rounds
# alternating), on a throw-away cluster with durable commits and the module
# preloaded, as the docs ask. (The Node.js runtime's is bench/peers/peers.sh's
# latency row, the Go runtime's bench/peers/go's row (g).)
#
#   sudo [PG_CONFIG=…] bash bench/latency.sh    # writes docs/results/latency-python-<time>.json
#
# Environment: BENCH_ROUNDS (default 5), BENCH_SAMPLES (a round, default 200).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
. scripts/cluster.sh
pg_config=${PG_CONFIG:-$(command -v pg_config)}
export CLUSTER_DURABLE=1
cluster_start "$pg_config" "shared_preload_libraries = 'concurrency_ext'" || exit 1
trap cluster_stop EXIT
export PATH="$CLUSTER_BIN:$PATH"
psql -Xq -c 'CREATE EXTENSION concurrency_ext'
out=$root/docs/results/latency-python-$(date -u +%Y%m%dT%H%M%SZ).json
work=$(mktemp -d)
/usr/bin/python3 bench/latency_python.py "${BENCH_ROUNDS:-5}" "${BENCH_SAMPLES:-200}" | tee "$work/out"
/usr/bin/python3 - "$work/out" "$out" "$("$pg_config" --version)" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
d.update(server=sys.argv[3], settings="fsync on, synchronous_commit on, module preloaded", load_after=sys.argv[4],
         command="bash bench/latency.sh")
json.dump(d, open(sys.argv[2], "w"), indent=2)
print("written to", sys.argv[2])
PY
rm -rf "$work"
