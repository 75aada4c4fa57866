#!/usr/bin/env bash
# Builds Citus from the vendored source tarball against a PostgreSQL 18 built
# under a prefix (scripts/build-pg18.sh), and installs it into that prefix.
# Reuses a finished build of the same tarball. Needs root (apt, install).
#
# Usage: scripts/build-citus.sh [PG_CONFIG]
#   CITUS_TARBALL  the source (default shared/vendor/citus-14.0.1.tar.xz in
#                  the checkout's parent directory: ../shared/vendor/… from the
#                  top of the tree, found from this script's own location)
#   CITUS_WORK     where it is unpacked and built (default /var/tmp/concurrency_ext-citus)
# Exit status 3 with a line "Citus: skipped, <why>" when the tarball or
# PostgreSQL 18 is missing; 0 with the installed citus.so on the last line.
set -uo pipefail
cd "$(dirname "$0")/.."
pg_config=${1:-${PG18_PREFIX:-/opt/concurrency_ext/pg18}/bin/pg_config}
tarball=${CITUS_TARBALL:-}
if [ -z "$tarball" ]; then
  t=../shared/vendor/citus-14.0.1.tar.xz
  [ -f "$t" ] && tarball=$(readlink -f "$t")
fi
[ -n "$tarball" ] && [ -f "$tarball" ] || { echo "Citus: skipped, source tarball citus-14.0.1.tar.xz not found (set CITUS_TARBALL)"; exit 3; }
prefix=$(dirname "$(dirname "$pg_config")")
[ -x "$pg_config" ] && [ -f "$prefix/.complete" ] \
  || { echo "Citus: skipped, PostgreSQL 18 is not built at $prefix (run scripts/build-pg18.sh)"; exit 3; }

libdir=$("$pg_config" --pkglibdir)
stamp="$libdir/citus.build-stamp"
want="$(basename "$tarball") $(stat -c %s "$tarball") $("$pg_config" --version)"
if [ -f "$libdir/citus.so" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$libdir/citus.so"; exit 0
fi

export DEBIAN_FRONTEND=noninteractive
need=(libcurl4-openssl-dev liblz4-dev libzstd-dev libkrb5-dev libssl-dev)
missing=()
for p in "${need[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1; apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; } \
    || { echo "Citus: skipped, build dependencies could not be installed: ${missing[*]}"; exit 3; }
fi

work=${CITUS_WORK:-/var/tmp/concurrency_ext-citus}
mkdir -p "$work" && cd "$work" || exit 1
src=$work/citus-14.0.1
[ -f "$src/configure" ] || tar xf "$tarball" || exit 1
cd "$src" || exit 1
# configure again when it was run against another server
if [ ! -f config.status ] || ! grep -q "$pg_config" config.status; then
  ./configure PG_CONFIG="$pg_config" >configure.log 2>&1 || { tail -20 configure.log; exit 1; }
fi
make -j2 -s >build.log 2>&1 && make -s install >>build.log 2>&1 || { tail -30 build.log; exit 1; }
echo "$want" >"$stamp"
echo "$libdir/citus.so"
