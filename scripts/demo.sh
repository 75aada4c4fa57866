#!/usr/bin/env bash
# Installs concurrency_ext and shows it working on a throw-away cluster of its
# own (scripts/cluster.sh: a private directory and a free port, so it runs
# beside any other server): each capability has a part in examples/demo/*.sh,
# run in order.
# Usage: sudo scripts/demo.sh          (PG_CONFIG=… for another server)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root (it installs packages and the extension): sudo $0" >&2; exit 2; }
pg_config=${PG_CONFIG:-/usr/lib/postgresql/15/bin/pg_config}
. scripts/cluster.sh
bash scripts/deps.sh
make -s -j2 PG_CONFIG="$pg_config" >/dev/null && make -s install PG_CONFIG="$pg_config" >/dev/null
echo "concurrency_ext built and installed; starting a throw-away cluster"
cluster_start "$pg_config" "max_connections = 200"
trap cluster_stop EXIT
export PATH="$CLUSTER_BIN:$PATH"
psql -X -q -c "CREATE EXTENSION concurrency_ext"
psql -X -c "SELECT concurrency.version()"
for part in examples/demo/*.sh; do
  [ -e "$part" ] || continue
  echo; echo "######## $(sed -n "2s/^# //p" "$part")"
  bash "$part"
done
