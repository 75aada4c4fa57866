#!/usr/bin/env bash
# Runs every suite of concurrency_ext and ends with one line "N passed, M failed":
#   pg_regress suites and isolation specs (a throw-away cluster, pg_virtualenv),
#   GoogleTest unit tests (CTest), TAP tests (PostgreSQL::Test::Cluster, run as
#   the postgres user because initdb refuses root).
# Usage: sudo scripts/test.sh        (installs missing packages first)
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
[ "$(id -u)" = 0 ] || { echo "run as root (it installs packages and the extension): sudo $0" >&2; exit 2; }

bash scripts/deps.sh || exit 1
logs=$(mktemp -d)
passed=0 failed=0
count() { passed=$((passed + $1)); failed=$((failed + $2)); echo "== $3: $1 passed, $2 failed"; }
# Adds the closing "N passed, M failed" line of a suite's log; a log without
# one (the suite died) counts as one failure and shows its tail.
count_summary() { # name log
  local line
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$2" | tail -1)
  if [ -n "$line" ]; then count "$(echo "$line" | cut -d' ' -f1)" "$(echo "$line" | cut -d' ' -f3)" "$1"
  else tail -n 30 "$2"; count 0 1 "$1"; fi
}

echo "== build and install (PGXS)"
# The test-only border module (test/module) is installed for its suites and
# removed again however this script ends: it must not stay in the server.
trap 'make -s uninstall-test-module >/dev/null 2>&1' EXIT
make -s -j2 >"$logs/build.log" 2>&1 && make -s install >>"$logs/build.log" 2>&1 \
  && make -s test-module >>"$logs/build.log" 2>&1 && make -s install-test-module >>"$logs/build.log" 2>&1 \
  || { cat "$logs/build.log"; echo "0 passed, 1 failed"; exit 1; }

echo "== regression and isolation suites"
rm -rf results output_iso regression.diffs test/module/results test/module/output_iso test/module/regression.diffs
pg_virtualenv -v 15 sh -c 'make -s installcheck ISOLATION=; make -s installcheck REGRESS=; make -s installcheck-border' >"$logs/installcheck.log" 2>&1
make -s uninstall-test-module >/dev/null 2>&1
grep -E '\.\.\. |tests? (passed|failed)' "$logs/installcheck.log"
started=$(grep -cE '^(test |     )\S+ +\.\.\. ' "$logs/installcheck.log")
ok=$(grep -cE '^(test |     )\S+ +\.\.\. +ok ' "$logs/installcheck.log")
bad=$((started - ok))
# each of the four runs (regress, isolation, the border's regress and
# isolation) must end with its summary; a run that died early fails
summaries=$(grep -cE 'tests? (passed|failed)' "$logs/installcheck.log")
[ "$summaries" -lt 4 ] && bad=$((bad + 4 - summaries))
for d in regression.diffs output_iso/regression.diffs test/module/regression.diffs test/module/output_iso/regression.diffs; do [ -s "$d" ] && { echo "---- $d"; cat "$d"; }; done
count "$ok" "$bad" "pg_regress + isolation"

echo "== hostile-input fuzzing (test/fuzz)"
pg_virtualenv -v 15 sh -c 'psql -Xqc "CREATE EXTENSION concurrency_ext" && /usr/bin/python3 test/fuzz/fuzz.py' >"$logs/fuzz.log" 2>&1
grep -E '^(ok|FAIL) ' "$logs/fuzz.log"
count_summary fuzz "$logs/fuzz.log"

echo "== upgrades from every released version (scripts/upgrade-check.sh)"
pg_virtualenv -v 15 bash scripts/upgrade-check.sh >"$logs/upgrade.log" 2>&1
grep -E '^(ok|FAIL) ' "$logs/upgrade.log"
count_summary upgrade "$logs/upgrade.log"

echo "== memory safety: suites under valgrind with a UBSan build (scripts/sanitize.sh)"
bash scripts/sanitize.sh >"$logs/sanitize.log" 2>&1
grep -E 'valgrind errors|Invalid|runtime error|\.\.\. +FAILED|\.\.\. +failed' "$logs/sanitize.log" | head -20
grep -q -E '\.\.\. +(FAILED|failed)' "$logs/sanitize.log" && sed -n '/^diff /,$p' "$logs/sanitize.log" | head -80
count_summary sanitize "$logs/sanitize.log"

echo "== unit tests (CMake + CTest)"
if cmake -S . -B build -DCMAKE_BUILD_TYPE=Debug >"$logs/cmake.log" 2>&1 && cmake --build build -j2 >>"$logs/cmake.log" 2>&1; then
  (cd build && ctest --output-on-failure) >"$logs/ctest.log" 2>&1
  tail -n 20 "$logs/ctest.log"
  line=$(grep -E 'tests passed, [0-9]+ tests? failed out of' "$logs/ctest.log")
  total=$(echo "$line" | sed -E 's/.*out of ([0-9]+).*/\1/')
  nfail=$(echo "$line" | sed -E 's/.* ([0-9]+) tests? failed.*/\1/')
  [ -n "$total" ] && count $((total - nfail)) "$nfail" "unit" || count 0 1 "unit"
else
  cat "$logs/cmake.log"; count 0 1 "unit (build)"
fi

echo "== TAP tests"
tap=$(mktemp -d); chmod 755 "$tap"
cp -r "$root" "$tap/src"; rm -rf "$tap/src/build"; chown -R postgres "$tap"
(cd "$tap/src" && runuser -u postgres -- make -s installcheck-tap) >"$logs/tap.log" 2>&1
cat "$logs/tap.log" | grep -vE '^(echo|\+\+\+)' | tail -n 40
total=$(grep -oE 'Tests=[0-9]+' "$logs/tap.log" | tail -1 | cut -d= -f2)
nfail=$(grep -oE 'Failed [0-9]+/[0-9]+ subtests' "$logs/tap.log" | awk '{split($2,a,"/"); s+=a[1]} END {print s+0}')
dubious=$(grep -c 'Dubious' "$logs/tap.log")
if [ -z "$total" ]; then count 0 1 "TAP"; else
  [ "$nfail" = 0 ] && [ "$dubious" -gt 0 ] && nfail=$dubious
  count $((total - nfail)) "$nfail" "TAP"
  [ "$nfail" = 0 ] && ! grep -q 'Result: PASS' "$logs/tap.log" && count 0 1 "TAP (result)"
fi
[ "${KEEP_TAP_LOGS:-}" ] || rm -rf "$tap"

echo "== Citus: named locks, diagnostics and distributed queues on a coordinator and two workers (scripts/citus-check.sh)"
bash scripts/citus-check.sh >"$logs/citus.log" 2>&1
grep -E '^(ok|FAIL|skip) |^Citus' "$logs/citus.log"
count_summary Citus "$logs/citus.log"

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
