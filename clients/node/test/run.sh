#!/usr/bin/env bash
# Runs the Node.js client's tests (node:test) against a throw-away cluster
# with the extension installed (scripts/cluster.sh) and a PgBouncer in
# transaction mode in front of it (Debian's pgbouncer; its test is skipped
# without it), after `npm ci`. Ends with one line "N passed, M failed".
# Usage: sudo PG_CONFIG=/path/to/pg_config clients/node/test/run.sh
#   (the extension must be installed into that server: make install)
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
root=$(cd "$here/../.." && pwd)
PG_CONFIG=${PG_CONFIG:-pg_config}
. "$root/scripts/cluster.sh"

bouncer_pid=
cleanup() {
  [ -n "$bouncer_pid" ] && kill "$bouncer_pid" 2>/dev/null
  cluster_stop
}
trap cleanup EXIT
fail() { echo "$*"; echo "0 passed, 1 failed"; exit 1; }

command -v node >/dev/null || fail "node is missing (scripts/deps.sh installs Debian's nodejs and npm)"
(cd "$here" && npm ci --no-audit --no-fund --loglevel=error) || fail "npm ci failed"
cluster_start "$PG_CONFIG" || fail "the cluster did not start"
psql -Xq -v ON_ERROR_STOP=1 -c 'CREATE EXTENSION concurrency_ext' || fail "CREATE EXTENSION failed"

pgbouncer=$(command -v pgbouncer || ls /usr/sbin/pgbouncer 2>/dev/null)
if [ -n "$pgbouncer" ]; then
  bport=$(free_port)
  cat >"$CLUSTER_DIR/pgbouncer.ini" <<INI
[databases]
pooled = host=$PGHOST port=$PGPORT dbname=$PGDATABASE pool_size=6
[pgbouncer]
unix_socket_dir = $CLUSTER_DIR
listen_addr =
listen_port = $bport
auth_type = trust
auth_file = $CLUSTER_DIR/userlist.txt
pool_mode = transaction
max_client_conn = 100
ignore_startup_parameters = extra_float_digits,options
logfile = $CLUSTER_DIR/pgbouncer.log
pidfile = $CLUSTER_DIR/pgbouncer.pid
INI
  echo "\"$PGUSER\" \"\"" >"$CLUSTER_DIR/userlist.txt"
  chown postgres "$CLUSTER_DIR/pgbouncer.ini" "$CLUSTER_DIR/userlist.txt"
  runuser -u postgres -- "$pgbouncer" "$CLUSTER_DIR/pgbouncer.ini" >"$CLUSTER_DIR/pgbouncer.out" 2>&1 &
  bouncer_pid=$!
  for _ in $(seq 1 100); do
    psql -Xqtc 'SELECT 1' "host=$CLUSTER_DIR port=$bport dbname=pooled" >/dev/null 2>&1 && break
    sleep 0.1
  done
  export PGBOUNCER_HOST=$CLUSTER_DIR PGBOUNCER_PORT=$bport PGBOUNCER_DATABASE=pooled
fi

log=$(mktemp)
(cd "$here" && node --test --test-reporter=spec test/*.test.js) 2>&1 | tee "$log"
passed=$(grep -E '^ℹ pass [0-9]+' "$log" | awk '{print $3}')
failed=$(grep -E '^ℹ fail [0-9]+' "$log" | awk '{print $3}')
rm -f "$log"
[ -n "$passed" ] && [ -n "$failed" ] || fail "node --test ended without its summary"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
