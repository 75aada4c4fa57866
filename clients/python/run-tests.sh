#!/usr/bin/env bash
# Runs the Python client's tests (pytest) against a throw-away cluster of the
# server PG_CONFIG names (with concurrency_ext installed into it), with a
# PgBouncer in transaction mode in front of it, and ends with one line
# "N passed, M failed" (pytest's errors count as failed; skipped tests in neither).
# Usage (as root, like scripts/cluster.sh): clients/python/run-tests.sh [PG_CONFIG] [pytest args...]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
pg_config=${1:-${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}}
shift || true
. "$root/scripts/cluster.sh"

# pytest runs in a virtual environment over Debian's python3 (its psycopg,
# psycopg_pool and pytest), with the test dependencies of
# tests/requirements.txt (the OpenTelemetry API and SDK) from PyPI: made once,
# and again when that file changes
venv=$here/.venv
if ! cmp -s "$here/tests/requirements.txt" "$venv/requirements.txt"; then
  rm -rf "$venv"
  if ! { /usr/bin/python3 -m venv --system-site-packages "$venv" &&
         "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/tests/requirements.txt" &&
         cp "$here/tests/requirements.txt" "$venv/requirements.txt"; }; then
    echo "could not install the test dependencies (tests/requirements.txt)"
    echo "0 passed, 1 failed"
    exit 1
  fi
fi
python=$venv/bin/python

bouncer_pid=
cleanup() { [ -n "$bouncer_pid" ] && kill "$bouncer_pid" 2>/dev/null; cluster_stop; }
trap cleanup EXIT
cluster_start "$pg_config" || { echo "0 passed, 1 failed"; exit 1; }

# PgBouncer (Debian's) on a Unix socket in the cluster's directory, every
# database of the cluster behind it; it refuses to run as root.
pgbouncer=$(command -v pgbouncer || ls /usr/sbin/pgbouncer 2>/dev/null)
if [ -n "$pgbouncer" ]; then
  bport=$(free_port)
  printf '"postgres" ""\n' >"$CLUSTER_DIR/userlist.txt"
  cat >"$CLUSTER_DIR/pgbouncer.ini" <<INI
[databases]
one_server = host=$CLUSTER_DIR port=$PGPORT dbname=concurrency_ext_pytest pool_size=1
* = host=$CLUSTER_DIR port=$PGPORT pool_size=6
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
  export CE_PGBOUNCER="host=$CLUSTER_DIR port=$bport dbname=concurrency_ext_pytest user=postgres"
  # the same database through a pool of one server connection, which every
  # client's transactions share
  export CE_PGBOUNCER_ONE_SERVER="host=$CLUSTER_DIR port=$bport dbname=one_server user=postgres"
  for _ in $(seq 100); do
    psql -Xq "host=$CLUSTER_DIR port=$bport dbname=postgres user=postgres" -c 'SELECT 1' >/dev/null 2>&1 && break
    sleep 0.1
  done
else
  echo "pgbouncer not installed: its tests are skipped"
fi

log=$(mktemp)
(cd "$here" && PYTHONPATH="$here" "$python" -m pytest -p no:cacheprovider -q -rfEs "$@") 2>&1 | tee "$log"
summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed|errors?|skipped).* in [0-9.]+s' "$log" | tail -1)
passed=$(echo "$summary" | grep -oE '[0-9]+ passed' | cut -d' ' -f1)
failed=$(echo "$summary" | grep -oE '[0-9]+ failed' | cut -d' ' -f1)
errors=$(echo "$summary" | grep -oE '[0-9]+ errors?' | cut -d' ' -f1)
rm -f "$log"
if [ -z "$summary" ]; then echo "0 passed, 1 failed"; exit 1; fi
failed=$(( ${failed:-0} + ${errors:-0} ))
echo "${passed:-0} passed, $failed failed"
[ "$failed" = 0 ]
