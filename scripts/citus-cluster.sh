#!/usr/bin/env bash
# A Citus cluster on this machine for tests and benchmarks: a coordinator and
# two workers of the PostgreSQL 18 build, each with shared_preload_libraries =
# 'citus' (the coordinator 'citus,concurrency_ext': its lock history and
# schedule runner; the module must be installed first; CITUS_NODE_PRELOAD=1:
# every node 'citus,concurrency_ext', as docs/scaling-out.md asks of a
# production cluster), in a directory owned
# by postgres, listening on 127.0.0.1 only, the workers added with
# citus_add_node.
#
# Usage (root):
#   scripts/citus-cluster.sh start DIR [PORT...]   (default ports 5621 5622 5623;
#       prints "export CITUS_PORTS=… CITUS_DIR=… CITUS_BIN=…" on its last line)
#   scripts/citus-cluster.sh stop DIR
#   scripts/citus-cluster.sh restart-node DIR N    (N = 0 coordinator, 1, 2 workers; fast shutdown)
# The first port is the coordinator's.
set -euo pipefail
bin=${PG18_PREFIX:-/opt/concurrency_ext/pg18}/bin
cmd=$1 dir=$2
shift 2
as_pg() { runuser -u postgres -- "$@"; }

case $cmd in
start)
  ports=("$@")
  [ ${#ports[@]} -gt 0 ] || ports=(5621 5622 5623)
  install -d -o postgres -m 755 "$dir"
  echo "${ports[*]}" >"$dir/ports"
  for i in "${!ports[@]}"; do
    data=$dir/node$i
    if [ ! -d "$data" ]; then
      # the tests' clusters skip the flushes; a benchmark's (CLUSTER_DURABLE=1)
      # keeps the server's durable defaults
      durability=$'fsync = off\nsynchronous_commit = off\nfull_page_writes = off'
      [ "${CLUSTER_DURABLE:-0}" = 1 ] && durability='# durable commits: the server defaults'
      preload=citus
      { [ "$i" = 0 ] || [ "${CITUS_NODE_PRELOAD:-0}" = 1 ]; } && preload=citus,concurrency_ext
      as_pg "$bin/initdb" -D "$data" -A trust -U postgres >/dev/null
      cat >>"$data/postgresql.conf" <<CONF
port = ${ports[$i]}
listen_addresses = '127.0.0.1'
unix_socket_directories = '$dir'
shared_preload_libraries = '$preload'
max_connections = 300
max_prepared_transactions = 200
$durability
shared_buffers = 64MB
log_min_messages = warning
log_line_prefix = '%m [%p] '
citus.log_distributed_deadlock_detection = on
CONF
    fi
    as_pg "$bin/pg_ctl" -D "$data" -l "$dir/node$i.log" -w status >/dev/null 2>&1 \
      || as_pg "$bin/pg_ctl" -D "$data" -l "$dir/node$i.log" -w -t 60 start >/dev/null
  done
  psql_node() { "$bin/psql" -X -v ON_ERROR_STOP=1 -h 127.0.0.1 -U postgres -p "$1" -d postgres -Atqc "$2"; }
  for p in "${ports[@]}"; do psql_node "$p" "CREATE EXTENSION IF NOT EXISTS citus"; done
  c=${ports[0]}
  psql_node "$c" "SELECT citus_set_coordinator_host('127.0.0.1', $c)" >/dev/null
  for p in "${ports[@]:1}"; do
    psql_node "$c" "SELECT citus_add_node('127.0.0.1', $p) WHERE NOT EXISTS
                      (SELECT FROM pg_dist_node WHERE nodeport = $p)" >/dev/null
  done
  echo "export CITUS_PORTS='${ports[*]}' CITUS_DIR=$dir CITUS_BIN=$bin"
  ;;
stop)
  for data in "$dir"/node*/; do
    [ -f "$data/postmaster.pid" ] && as_pg "$bin/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1 || true
  done
  ;;
restart-node)
  n=$1
  as_pg "$bin/pg_ctl" -D "$dir/node$n" -l "$dir/node$n.log" -m fast -w -t 60 restart >/dev/null
  ;;
*)
  echo "usage: $0 start|stop|restart-node DIR …" >&2; exit 2
  ;;
esac
