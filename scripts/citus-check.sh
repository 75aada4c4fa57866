#!/usr/bin/env bash
# The Citus suite: builds Citus 14 (scripts/build-citus.sh) and concurrency_ext
# against PostgreSQL 18, starts a coordinator and two workers
# (scripts/citus-cluster.sh) in a throw-away directory, runs every
# test/citus/test_*.py against it and ends with "N passed, M failed".
# test/citus/test_upgrade.py (last) updates a cluster from 0.2.0, whose
# install script is written from the release commit (git).
# Prints "Citus: skipped, <why>" (and "0 passed, 0 failed") when the Citus
# tarball or PostgreSQL 18 is missing.
#
# Usage (root): scripts/citus-check.sh [test/citus/test_x.py ...]
#   CITUS_PORTS  three ports, coordinator first (default "5621 5622 5623")
#   KEEP_CITUS=1 leaves the cluster running and its directory in place
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
[ "$(id -u)" = 0 ] || { echo "run as root: sudo $0" >&2; exit 2; }
pg18=${PG18_PREFIX:-/opt/concurrency_ext/pg18}
if [ ! -f "$pg18/.complete" ]; then
  echo "Citus: skipped, PostgreSQL 18 is not built at $pg18 (scripts/build-pg18.sh)"
  echo "0 passed, 0 failed"; exit 0
fi
out=$(bash scripts/build-citus.sh "$pg18/bin/pg_config" 2>&1); rc=$?
if [ $rc = 3 ]; then echo "$out" | grep '^Citus: skipped'; echo "0 passed, 0 failed"; exit 0; fi
[ $rc = 0 ] || { echo "$out"; echo "Citus: build failed"; echo "0 passed, 1 failed"; exit 1; }

work=$(mktemp -d /var/tmp/concurrency_ext-citus-run.XXXXXX)
chmod 755 "$work"
# concurrency_ext for PostgreSQL 18, built in a copy so that the tree's own
# objects (built for another server) stay as they are
mkdir -p "$work/src"
tar -C "$root" --exclude=./build --exclude='*.o' --exclude='*.so' --exclude='*.bc' --exclude=./results \
  --exclude=./output_iso --exclude=./.git -cf - . | tar -C "$work/src" -xf -
if ! (cd "$work/src" && make -s -j2 PG_CONFIG="$pg18/bin/pg_config" && make -s PG_CONFIG="$pg18/bin/pg_config" install) \
     >"$work/build.log" 2>&1; then
  tail -30 "$work/build.log"; echo "Citus: concurrency_ext build for PostgreSQL 18 failed"; echo "0 passed, 1 failed"; exit 1
fi
# test/citus/test_upgrade.py updates from the last released version: its
# install script, from the release commit's parts (as scripts/upgrade-check.sh
# makes it)
extdir=$("$pg18/bin/pg_config" --sharedir)/extension
read -r from_version commit < <(grep -vE '^(#|$)' src/sql/RELEASES | tail -1)
export CITUS_UPGRADE_FROM=$from_version
old=$work/old-$from_version
mkdir -p "$old"
if git archive "$commit" src | tar -x -C "$old"; then
  { printf '%s\n' '\echo Use "CREATE EXTENSION concurrency_ext" to load this file. \quit'
    cat "$old"/src/sql/[0-9][0-9]_*.sql; } >"$extdir/concurrency_ext--$from_version.sql"
else
  echo "Citus: the $from_version release commit $commit is not in this checkout; test_upgrade.py will fail"
fi

read -r -a ports <<<"${CITUS_PORTS:-5621 5622 5623}"
cleanup() {
  if [ -z "${KEEP_CITUS:-}" ]; then
    bash "$root/scripts/citus-cluster.sh" stop "$work/cluster"; rm -rf "$work"
  else
    echo "cluster left running in $work/cluster"
  fi
}
trap cleanup EXIT
if ! env_line=$(bash scripts/citus-cluster.sh start "$work/cluster" "${ports[@]}" 2>"$work/cluster.err" | tail -1); then
  cat "$work/cluster.err"; tail -20 "$work/cluster"/node*.log; echo "0 passed, 1 failed"; exit 1
fi
eval "$env_line"
export CITUS_PORTS CITUS_DIR CITUS_BIN CITUS_SCRIPTS="$root/scripts"
echo "Citus 14 cluster: coordinator 127.0.0.1:${ports[0]}, workers ${ports[*]:1}"

tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(test/citus/test_*.py)
passed=0 failed=0
for t in "${tests[@]}"; do
  log=$work/$(basename "$t").log
  timeout 600 /usr/bin/python3 "$t" >"$log" 2>&1
  # the results, and each failure's traceback (run() prints it after its FAIL line)
  awk '/^(ok|FAIL|skip) /{tb = 0; print; next} /^Traceback/{tb = 1} tb' "$log"
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -1)
  if [ -n "$line" ]; then
    passed=$((passed + $(echo "$line" | cut -d' ' -f1))); failed=$((failed + $(echo "$line" | cut -d' ' -f3)))
  else
    tail -30 "$log"; echo "FAIL $t: ended without its summary"; failed=$((failed + 1))
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
