#!/usr/bin/env bash
# The dashboard's browser tests: starts a throw-away cluster of PG_CONFIG's
# server (scripts/cluster.sh; the extension must be installed in it) with
# the lock history sampled every 100 ms and the queues' counts every second
# (queue_stats_history), installs the package's locked
# dependencies (npm ci), runs test/*.test.js with node's test runner in
# headless Chromium (/usr/bin/chromium, or CHROMIUM), and ends with one line
# "N passed, M failed". Needs root (the cluster runs as postgres).
#   PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config clients/dashboard/test/run.sh
#   SCREENSHOT_DIR=docs/figures ... also writes the pages' screenshots there
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
root=$(cd "$here/../.." && pwd)
PG_CONFIG=${PG_CONFIG:-$(command -v pg_config)}
fail() { echo "$1"; echo "0 passed, 1 failed"; exit 1; }

. "$root/scripts/cluster.sh"
trap cluster_stop EXIT
cluster_start "$PG_CONFIG" "shared_preload_libraries = 'concurrency_ext'" \
  "concurrency.history_interval = '100ms'" "concurrency.stats_history_interval = '1s'" || fail "the cluster did not start"

cd "$here" || fail "no $here"
npm ci --no-audit --no-fund --loglevel=error >/tmp/dashboard-npm.$$.log 2>&1 \
  || { cat /tmp/dashboard-npm.$$.log; rm -f /tmp/dashboard-npm.$$.log; fail "npm ci failed"; }
rm -f /tmp/dashboard-npm.$$.log
[ -n "${SCREENSHOT_DIR:-}" ] && export SCREENSHOT_DIR=$(cd "$root" && mkdir -p "$SCREENSHOT_DIR" && cd "$SCREENSHOT_DIR" && pwd)

# TAP output on every node version (18 and later): "# pass N", "# fail M"
log=$(mktemp)
node --test --test-reporter=tap test/*.test.js 2>&1 | tee "$log"
pass=$(grep -E '^# pass [0-9]+$' "$log" | tail -1 | awk '{print $3}')
failed=$(grep -E '^# fail [0-9]+$' "$log" | tail -1 | awk '{print $3}')
cancelled=$(grep -E '^# cancelled [0-9]+$' "$log" | tail -1 | awk '{print $3}')
rm -f "$log"
[ -n "$pass" ] && [ -n "$failed" ] || fail "the test runner ended without a summary"
failed=$((failed + ${cancelled:-0}))   # a test cancelled by a failed hook did not pass
echo "$pass passed, $failed failed"
[ "$failed" = 0 ]
