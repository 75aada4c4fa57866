#!/usr/bin/env bash
# Runs the durable-workflow chaos test (test/chaos/workflows.py) and ends with
# its "N passed, M failed" line. On the cluster the environment names
# (CLUSTER_DIR and CLUSTER_BIN of scripts/cluster.sh, with the module
# preloaded, as scripts/test.sh starts it), in a database of its own; without
# one, on a throw-away cluster of the server PG_CONFIG names (the extension
# installed into it). CHAOS_WORKFLOWS sets how many workflows (default 1000).
# Usage (as root): test/chaos/workflows.sh [PG_CONFIG] [workflows.py options...]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
own=
if [ -z "${CLUSTER_DIR:-}" ]; then
  pg_config=${1:-${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}}
  . "$root/scripts/cluster.sh"
  cluster_start "$pg_config" "shared_preload_libraries = 'concurrency_ext'" || { echo "0 passed, 1 failed"; exit 1; }
  own=1
  trap cluster_stop EXIT
fi
[ $# -gt 0 ] && [ -x "$1" ] && shift  # a PG_CONFIG given with a cluster already there
export PGDATABASE=concurrency_ext_chaos
psql -Xq -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $PGDATABASE WITH (FORCE)" -c "CREATE DATABASE $PGDATABASE" \
  && psql -Xq -c "CREATE EXTENSION concurrency_ext" || { echo "0 passed, 1 failed"; exit 1; }
/usr/bin/python3 "$here/workflows.py" --pg-bin "$CLUSTER_BIN" --pgdata "$CLUSTER_DIR/data" \
  --server-log "$CLUSTER_DIR/server.log" "$@"
status=$?
[ -n "$own" ] || psql -Xq -d postgres -c "DROP DATABASE IF EXISTS $PGDATABASE WITH (FORCE)" >/dev/null 2>&1
exit $status
