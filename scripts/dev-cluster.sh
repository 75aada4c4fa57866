#!/usr/bin/env bash
# A private PostgreSQL 15 for development: a relocated copy of the Debian
# server (bin, lib, share, include) under /work/pg-NAME, so that `make install
# PG_CONFIG=…` there does not touch the system install, plus a running cluster
# on PORT owned by postgres with a superuser role for root.
# Usage: sudo scripts/dev-cluster.sh NAME PORT   (then: eval "$(… env)")
set -euo pipefail
name=$1 port=$2
base=${DEV_CLUSTER_BASE:-/work}
[ -d "$base" ] && [ -w "$base" ] || base=/var/tmp
root=$base/pg-$name
usr=$root/usr
if [ ! -x "$usr/lib/postgresql/15/bin/postgres" ]; then
  mkdir -p "$usr/lib/postgresql" "$usr/share/postgresql" "$usr/include/postgresql"
  cp -a /usr/lib/postgresql/15 "$usr/lib/postgresql/"
  cp -a /usr/share/postgresql/15 "$usr/share/postgresql/"
  cp -a /usr/include/postgresql/15 "$usr/include/postgresql/"
  # includedir (not server) holds libpq and friends' headers
  for f in /usr/include/postgresql/*.h; do ln -sf "$f" "$usr/include/postgresql/"; done
  chmod -R a+rX "$root"
fi
bin=$usr/lib/postgresql/15/bin
data=$root/data
if [ ! -d "$data" ]; then
  install -d -o postgres "$data"
  runuser -u postgres -- "$bin/initdb" -D "$data" -A trust >/dev/null
  cat >>"$data/postgresql.conf" <<CONF
port = $port
unix_socket_directories = '$root'
listen_addresses = ''
max_connections = 400
max_prepared_transactions = 10
CONF
  chmod 777 "$root"
fi
runuser -u postgres -- "$bin/pg_ctl" -D "$data" -l "$root/server.log" -w status >/dev/null 2>&1 \
  || runuser -u postgres -- "$bin/pg_ctl" -D "$data" -l "$root/server.log" -w start >/dev/null
"$bin/psql" -h "$root" -p "$port" -U postgres -d postgres -Atqc \
  "DO \$\$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname='root') THEN CREATE ROLE root SUPERUSER LOGIN; END IF; END\$\$"
echo "export PG_CONFIG=$bin/pg_config PATH=$bin:\$PATH PGHOST=$root PGPORT=$port PGDATABASE=postgres"
