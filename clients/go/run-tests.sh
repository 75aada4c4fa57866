#!/usr/bin/env bash
# Runs the Go client's checks against a throw-away cluster of the server
# PG_CONFIG names (with concurrency_ext installed into it, preloaded), with a
# PgBouncer in transaction mode in front of it when one is installed:
# go vet ./..., then go test -race -count=1 -v ./... . Ends with one line
# "N passed, M failed" counting the test functions (a failing vet, or a test
# binary that dies outside any test, counts as one failure; skipped tests in
# neither).
# Usage (as root, like scripts/cluster.sh): clients/go/run-tests.sh [PG_CONFIG] [go test args...]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
pg_config=${1:-${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}}
shift || true
export PATH=$PATH:/usr/local/go/bin
export GOFLAGS=${GOFLAGS:--mod=mod} GOTOOLCHAIN=${GOTOOLCHAIN:-local}
command -v go >/dev/null || { echo "go not found (looked on PATH and in /usr/local/go/bin)"; echo "0 passed, 1 failed"; exit 1; }
go version
. "$root/scripts/cluster.sh"

bouncer_pid=
cleanup() { [ -n "$bouncer_pid" ] && kill "$bouncer_pid" 2>/dev/null; cluster_stop; }
trap cleanup EXIT
cluster_start "$pg_config" "shared_preload_libraries = 'concurrency_ext'" || { echo "0 passed, 1 failed"; exit 1; }
# the tests create their own database (concurrency_ext_gotest) with the
# extension; creating it here first checks that the module is installed
psql -Xq -c 'CREATE EXTENSION concurrency_ext' || { echo "0 passed, 1 failed"; exit 1; }

# PgBouncer (Debian's) on a Unix socket in the cluster's directory, in
# transaction mode; it refuses to run as root.
pgbouncer=$(command -v pgbouncer || ls /usr/sbin/pgbouncer 2>/dev/null)
if [ -n "$pgbouncer" ]; then
  bport=$(free_port)
  printf '"postgres" ""\n' >"$CLUSTER_DIR/userlist.txt"
  cat >"$CLUSTER_DIR/pgbouncer.ini" <<INI
[databases]
* = host=$CLUSTER_DIR port=$PGPORT pool_size=4
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
  chown postgres "$CLUSTER_DIR"/pgbouncer.ini "$CLUSTER_DIR"/userlist.txt
  runuser -u postgres -- "$pgbouncer" "$CLUSTER_DIR/pgbouncer.ini" >"$CLUSTER_DIR/pgbouncer.out" 2>&1 &
  bouncer_pid=$!
  export CE_PGBOUNCER="host=$CLUSTER_DIR port=$bport dbname=concurrency_ext_gotest user=postgres"
  for _ in $(seq 100); do
    psql -Xq "host=$CLUSTER_DIR port=$bport dbname=postgres user=postgres" -c 'SELECT 1' >/dev/null 2>&1 && break
    sleep 0.1
  done
else
  echo "pgbouncer not installed: its test is skipped"
fi

cd "$here" || exit 1
vet_failed=0
echo "== go vet ./..."
go vet ./... || vet_failed=1
log=$(mktemp)
echo "== go test -race -count=1 -v ./..."
go test -race -count=1 -v ./... "$@" 2>&1 | tee "$log"
# top-level test functions only: subtests' lines are indented
passed=$(grep -cE '^--- PASS: ' "$log")
failed=$(grep -cE '^--- FAIL: ' "$log")
# a package that failed without a failing test (a build error, a panic outside a test)
if [ "$failed" = 0 ] && grep -qE '^(FAIL|panic:)' "$log"; then failed=1; fi
rm -f "$log"
failed=$((failed + vet_failed))
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
