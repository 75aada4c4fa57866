#!/usr/bin/env bash
# Counters: twenty payments at once on one account, a locked row against a counter
# Runs against the server psql connects to by default (scripts/demo.sh starts
# a throw-away one), with pgbench on PATH. Each payment holds its transaction
# 100 ms, as a payment that calls a card network would.
set -euo pipefail
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

psql -X -q -o /dev/null <<'SQL'
SET client_min_messages = warning;
DROP TABLE IF EXISTS demo_account;
CREATE TABLE demo_account (id int PRIMARY KEY, balance numeric NOT NULL);
INSERT INTO demo_account VALUES (1, 0);
SELECT concurrency.drop_counter(name) FROM concurrency.counters WHERE name = 'demo_balance';
SELECT concurrency.create_counter('demo_balance', slots => 32, min_value => 0);
SQL

cat >"$work/row.sql" <<'SQL'
BEGIN;
UPDATE demo_account SET balance = balance + 10 WHERE id = 1;
SELECT pg_sleep(0.1);
COMMIT;
SQL
cat >"$work/counter.sql" <<'SQL'
BEGIN;
SELECT concurrency.counter_add('demo_balance', 10);
SELECT pg_sleep(0.1);
COMMIT;
SQL

elapsed() { # script -> seconds for 20 clients, one payment each
  local t0 t1
  t0=$(date +%s.%N)
  pgbench -n -c 20 -j 2 -t 1 -f "$1" >"$work/pgbench.log" 2>&1 || { cat "$work/pgbench.log" >&2; exit 1; }
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }'
}

echo "1. Twenty payments at once, each adding to one account's balance and holding its transaction 100 ms."
echo "   With the balance in one row, each payment waits for the one before: $(elapsed "$work/row.sql") s for all twenty."
echo "   With a counter of 32 slots, the payments do not wait for each other: $(elapsed "$work/counter.sql") s."
psql -X -A -t -c "SELECT '   Both are exact: the row holds ' || (SELECT balance FROM demo_account) || ', the counter ' || concurrency.counter_value('demo_balance') || '.'"

echo "2. A withdrawal larger than the balance fails with SQLSTATE 23514 and changes nothing (min_value => 0):"
psql -X -q -v VERBOSITY=verbose -c "SELECT concurrency.counter_add('demo_balance', -1000)" 2>&1 | grep -v "^LOCATION" | sed 's/^/   /' || true
psql -X -A -t -c "SELECT '   The balance is still ' || concurrency.counter_value('demo_balance') || '.'"

psql -X -q -c "SELECT concurrency.drop_counter('demo_balance')" -c "DROP TABLE demo_account" >/dev/null
