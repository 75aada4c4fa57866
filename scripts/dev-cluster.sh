#!/usr/bin/env bash
# A private PostgreSQL server for development: a relocated copy of the server
# that PG_CONFIG (default: pg_config on the PATH) describes, under pg-NAME in
# the directory that holds this checkout (DEV_CLUSTER_BASE chooses another;
# /var/tmp when it is not writable, or postgres cannot enter it), so that `make install PG_CONFIG=…` there
# does not touch that install, plus a running cluster on PORT owned by postgres with a superuser
# role for root. The major version and every path come from pg_config: a
# Debian server (/usr/lib/postgresql/N, /usr/share/postgresql/N,
# /usr/include/postgresql/N) is copied part by part into the same layout; a
# server installed under one prefix (./configure --prefix=…, e.g.
# scripts/build-pg.sh) is copied whole. Both find their files relative to
# their binaries, so the copy works where it lands.
# Usage: sudo [PG_CONFIG=…] scripts/dev-cluster.sh NAME PORT   (then: eval "$(…)")
set -euo pipefail
name=$1 port=$2
pg_config=${PG_CONFIG:-pg_config}
major=$("$pg_config" --version | sed -E 's/^PostgreSQL ([0-9]+).*/\1/')
src_bin=$("$pg_config" --bindir)
base=${DEV_CLUSTER_BASE:-$(cd "$(dirname "$0")/../.." && pwd)}
# the server runs as postgres: it must reach its files (a checkout in a
# directory made by mktemp -d, mode 0700, is not reachable)
[ -d "$base" ] && [ -w "$base" ] && runuser -u postgres -- test -x "$base" || base=/var/tmp
root=$base/pg-$name
usr=$root/usr
case "$src_bin" in
*/lib/postgresql/"$major"/bin) # Debian's layout
  bin=$usr/lib/postgresql/$major/bin
  if [ ! -x "$bin/postgres" ]; then
    src_share=$("$pg_config" --sharedir) src_include=$(dirname "$("$pg_config" --includedir-server)")
    mkdir -p "$usr/lib/postgresql" "$usr/share/postgresql" "$usr/include/postgresql"
    cp -a "$(dirname "$src_bin")" "$usr/lib/postgresql/"
    cp -a "$src_share" "$usr/share/postgresql/"
    cp -a "$src_include" "$usr/include/postgresql/"
    # includedir (not server) holds libpq and friends' headers
    for f in "$("$pg_config" --includedir)"/*.h; do ln -sf "$f" "$usr/include/postgresql/"; done
    chmod -R a+rX "$root"
  fi
  ;;
*) # one prefix
  bin=$root/prefix/bin
  if [ ! -x "$bin/postgres" ]; then
    mkdir -p "$root"
    cp -a "$(dirname "$src_bin")" "$root/prefix"
    chmod -R a+rX "$root"
  fi
  ;;
esac
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
