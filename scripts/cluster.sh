# Throw-away PostgreSQL clusters for the test and demo scripts (source this
# file). Each cluster is initdb'd by the postgres user into a fresh temporary
# directory, listens only on a Unix socket in that directory, on a port chosen
# free at run time (55xx), so that any number of them run side by side with
# each other and with any other server or pg_virtualenv on the machine. Works
# with any PG_CONFIG (Debian's 15, a PostgreSQL built from source).
#
#   cluster_start PG_CONFIG [postgresql.conf lines...]
#       (fsync = off unless CLUSTER_DURABLE=1: tests skip the flushes,
#       benchmarks keep the server's durable defaults)
#       starts one and exports PGHOST PGPORT PGUSER PGDATABASE, CLUSTER_DIR
#       (its directory) and CLUSTER_BIN (the server's bin directory)
#   cluster_stop
#       stops the current one and removes its directory
#   cpuacct_group NAME PID
#       a cgroup v1 cpuacct group /sys/fs/cgroup/cpuacct/NAME holding process
#       PID and its children (the processes they fork later are counted there
#       too: a server's CPU, its backends' that exit included); prints its
#       path, nothing where the controller is not writable
#   cpuacct_release GROUP
#       its processes back in the root group, and the group removed
# Needs root (it runs the server as postgres).

# A TCP port that nothing listens on, from 5500-5599 (5611-5625 and 5432 stay
# clear), starting at a random point so that parallel runs spread out; never
# the current cluster's (it listens on a Unix socket only, in its own
# directory, where a PgBouncer given the same port would put its socket).
free_port() {
  local start=$((RANDOM % 100)) i port
  for i in $(seq 0 99); do
    port=$((5500 + (start + i) % 100))
    [ "$port" = "${PGPORT:-}" ] && continue
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null \
       && ! ls /tmp/.s.PGSQL."$port" /var/run/postgresql/.s.PGSQL."$port" ${CLUSTER_DIR:+"$CLUSTER_DIR"/.s.PGSQL."$port"} >/dev/null 2>&1; then
      echo "$port"; return 0
    fi
  done
  return 1
}

cluster_start() { # pg_config [conf lines...]
  local pg_config=$1; shift
  local bin dir port line
  bin=$("$pg_config" --bindir) || return 1
  dir=$(mktemp -d /tmp/concurrency_ext-cluster.XXXXXX) || return 1
  chmod 755 "$dir"; chown postgres "$dir"
  port=$(free_port) || { echo "no free port in 5500-5599" >&2; return 1; }
  runuser -u postgres -- "$bin/initdb" -D "$dir/data" -A trust -U postgres --no-sync >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; return 1; }
  {
    echo "port = $port"
    echo "unix_socket_directories = '$dir'"
    echo "listen_addresses = ''"
    # the tests' clusters skip the flushes; a benchmark's (CLUSTER_DURABLE=1)
    # keeps the server's durable defaults
    [ "${CLUSTER_DURABLE:-0}" = 1 ] || echo "fsync = off"
    echo "max_prepared_transactions = 10"
    for line in "$@"; do echo "$line"; done
  } >>"$dir/data/postgresql.conf"
  runuser -u postgres -- "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w start >/dev/null \
    || { tail -n 20 "$dir/server.log" >&2; return 1; }
  export PGHOST=$dir PGPORT=$port PGUSER=postgres PGDATABASE=postgres CLUSTER_DIR=$dir CLUSTER_BIN=$bin
}

cluster_stop() {
  [ -n "${CLUSTER_DIR:-}" ] && [ -d "$CLUSTER_DIR/data" ] || return 0
  runuser -u postgres -- "$CLUSTER_BIN/pg_ctl" -D "$CLUSTER_DIR/data" -m fast -w stop >/dev/null 2>&1
  rm -rf "$CLUSTER_DIR"
  unset CLUSTER_DIR
}

cpuacct_group() { # name pid
  local g=/sys/fs/cgroup/cpuacct/$1 p
  [ -w /sys/fs/cgroup/cpuacct ] || return 0
  mkdir -p "$g" || return 0
  for p in "$2" $(ps -o pid= --ppid "$2"); do echo "$p" >"$g/cgroup.procs" 2>/dev/null || true; done
  echo "$g"
}

cpuacct_release() { # group
  local p
  [ -n "$1" ] && [ -d "$1" ] || return 0
  while read -r p; do echo "$p" >/sys/fs/cgroup/cpuacct/cgroup.procs 2>/dev/null || true; done <"$1/cgroup.procs"
  rmdir "$1" 2>/dev/null || true
}
