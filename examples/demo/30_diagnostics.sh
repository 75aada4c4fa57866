#!/usr/bin/env bash
# Lock diagnostics: the DDL lock-queue trap, seen and freed with lock_waits and lock_tree
# Runs against the server psql connects to by default (scripts/demo.sh starts
# a throw-away one). Five sessions are started in the background and are all
# gone when the script ends.
set -euo pipefail

psql -X -q -c "SET client_min_messages = warning" -c "DROP TABLE IF EXISTS demo_accounts" \
     -c "CREATE TABLE demo_accounts (id int PRIMARY KEY, balance numeric)" \
     -c "INSERT INTO demo_accounts SELECT g, 100 FROM generate_series(1, 1000) g"

pids=()
report=
cleanup() {
  [ -n "$report" ] && exec {report}>&-   # the report's psql reads its stdin to the end, then quits
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

waiting() { psql -X -A -t -c "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"; }
until_waiting() { for _ in $(seq 1 500); do [ "$(waiting)" -ge "$1" ] && return 0; sleep 0.02; done; echo "timed out" >&2; exit 1; }

echo "1. A report reads demo_accounts in a transaction and then sits idle, the transaction left open."
exec {report}> >(PGAPPNAME=report psql -X -q >/dev/null 2>&1)
echo "BEGIN; SELECT count(*) FROM demo_accounts;" >&"$report"
for _ in $(seq 1 500); do
  [ "$(psql -X -A -t -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'report' AND state = 'idle in transaction'")" = 1 ] && break
  sleep 0.02
done

echo "2. A migration runs ALTER TABLE: it needs AccessExclusiveLock and waits for the report."
PGAPPNAME=migration psql -X -q -c "ALTER TABLE demo_accounts ADD COLUMN note text" >/dev/null &
pids+=($!)
until_waiting 1

echo "3. Ordinary reads arrive. They do not conflict with the report, yet they queue behind the ALTER."
for i in 1 2 3; do
  PGAPPNAME=api psql -X -q -c "SELECT sum(balance) FROM demo_accounts" >/dev/null &
  pids+=($!)
done
until_waiting 4

echo
echo "Who waits for whom (lock_waits): blocking_holds = f marks the lock-queue effect."
psql -X -c "SELECT waiting_pid, waiting_application AS waiting_app, waiting_mode, locked_object,
                   blocking_pid, blocking_application AS blocking_app, blocking_state,
                   blocking_mode, blocking_holds, blocking_waiting
              FROM concurrency.lock_waits"

echo "The tree (lock_tree): one root, and what to run about it; the ALTER, which holds the"
echo "readers up only by its place in the queue, has an action too (cancel it: the readers go on)."
psql -X -c "SELECT pid, depth, path, blocks_total, state, left(query, 40) AS query, action
              FROM concurrency.lock_tree"

echo "4. Run the root's action (here: terminate the idle transaction, so that the ALTER goes through too)."
psql -X <<'SQL'
SELECT action FROM concurrency.lock_tree WHERE depth = 0 \gexec
SQL
for _ in $(seq 1 500); do [ "$(waiting)" -eq 0 ] && break; sleep 0.02; done
echo "Sessions still waiting for a lock: $(waiting)"
psql -X -A -t -c "SELECT 'demo_accounts now has a column note: ' || (count(*) = 1)::text
                    FROM pg_attribute WHERE attrelid = 'demo_accounts'::regclass AND attname = 'note'"
psql -X -q -c "DROP TABLE demo_accounts"
