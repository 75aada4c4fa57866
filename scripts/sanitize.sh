#!/usr/bin/env bash
# Runs the pg_regress suites and isolation specs against a build of the module
# with UndefinedBehaviorSanitizer, in a private server (a relocated copy of the
# Debian server, pg-sanitize beside the checkout: scripts/dev-cluster.sh)
# running under valgrind memcheck. Any UBSan report, and any valgrind error
# with a frame in our module, fails the run. Ends with "N passed, M failed".
# Usage: sudo scripts/sanitize.sh
set -uo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root: sudo $0" >&2; exit 2; }
name=sanitize port=${SANITIZE_PORT:-5690}
# One run at a time: the private server copy (pg-sanitize) is shared.
exec 8>/var/tmp/concurrency_ext-sanitize.lock
flock 8
# a suite that did not run must not count as passed: every step that the
# run needs fails it loudly
setup=$(bash scripts/dev-cluster.sh "$name" "$port") || { echo "the private server did not start"; echo "0 passed, 1 failed"; exit 1; }
eval "$setup"
root=$PGHOST
bin=$(dirname "$PG_CONFIG")
data=$root/data
log=$root/server.log

# Restart the server under valgrind memcheck. (AddressSanitizer cannot be
# used: a preloaded libasan deadlocks in glibc's bindtextdomain at postgres
# start-up on this platform.) Backends are forked, so each runs under valgrind.
runuser -u postgres -- "$bin/pg_ctl" -D "$data" -w stop >/dev/null
rm -f "$root"/valgrind.*.log
# valgrind runs as postgres: its suppressions go where postgres can read them
install -m 644 scripts/valgrind.supp "$root/valgrind.supp"
: >"$log"; chown postgres "$log"
runuser -u postgres -- sh -c "UBSAN_OPTIONS=print_stacktrace=1 valgrind --quiet --tool=memcheck \
    --trace-children=yes --leak-check=no --track-origins=no --num-callers=30 \
    --suppressions='$root/valgrind.supp' \
    --error-limit=no --log-file='$root/valgrind.%p.log' \
    '$bin/postgres' -D '$data' >>'$log' 2>&1 &"
for i in $(seq 1 120); do "$bin/pg_isready" -q -h "$PGHOST" -p "$port" && break; sleep 1; done
"$bin/pg_isready" -q -h "$PGHOST" -p "$port" || { tail -20 "$log"; echo "the server under valgrind did not start"; echo "0 passed, 1 failed"; exit 1; }

build=$(mktemp -d)
cp -r . "$build/src"; rm -rf "$build/src/build"
cd "$build/src"
make -s clean >/dev/null 2>&1
make -s -j2 SANITIZE=undefined >/dev/null 2>&1 && make -s install SANITIZE=undefined >/dev/null 2>&1 \
  && make -s test-module install-test-module >/dev/null 2>&1 || { echo "sanitizer build failed"; echo "0 passed, 1 failed"; exit 1; }
out=$(mktemp)
{ make -s installcheck ISOLATION=; make -s installcheck REGRESS=; make -s installcheck-border; } >"$out" 2>&1
grep -E '\.\.\. |tests? (passed|failed)' "$out"
started=$(grep -cE '^(test |     )\S+ +\.\.\. ' "$out")
ok=$(grep -cE '^(test |     )\S+ +\.\.\. +ok ' "$out")
failed=$((started - ok)); passed=$ok
[ "$started" -gt 0 ] || { tail -30 "$out"; echo "no suite ran"; failed=$((failed + 1)); }
[ -s regression.diffs ] && cat regression.diffs
[ -s output_iso/regression.diffs ] && cat output_iso/regression.diffs
[ -s test/module/regression.diffs ] && cat test/module/regression.diffs
[ -s test/module/output_iso/regression.diffs ] && cat test/module/output_iso/regression.diffs
# valgrind: an error block is the lines between blank-ish "==pid== " lines;
# count blocks that have a frame in one of our modules.
ours=$(cat "$root"/valgrind.*.log 2>/dev/null | awk -v ours='concurrency|[.](cpp|hpp):[0-9]+[)]' '
  /^==[0-9]+== [A-Z]/ && !/^==[0-9]+== +(at|by) / { if (blk ~ ours) n++; blk="" }
  { blk = blk "\n" $0 }
  END { if (blk ~ ours) n++; print n+0 }')
ubsan=$(grep -c 'runtime error:' "$log")
echo "valgrind errors in concurrency_ext: $ours; UBSan reports: $ubsan"
if [ "$ours" -gt 0 ] || [ "$ubsan" -gt 0 ]; then
  grep -h -B2 -A25 -E 'concurrency|[.](cpp|hpp):[0-9]+[)]' "$root"/valgrind.*.log | head -80
  grep -A20 'runtime error:' "$log" | head -40
  failed=$((failed + 1))
else
  passed=$((passed + 1))
fi
crashes=$(grep -c 'terminated by signal' "$log")
if [ "$crashes" -gt 0 ]; then failed=$((failed + 1)); grep 'terminated by signal' "$log"; else passed=$((passed + 1)); fi
cd /
runuser -u postgres -- "$bin/pg_ctl" -D "$data" -w -t 300 stop >/dev/null
 rm -rf "$build" "$out"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
