#!/usr/bin/env bash
# The seeds' transfer workload: CLIENTS (8) clients move random amounts
# between two random accounts of ACCOUNTS (20) for PHASE_SECONDS (10) s, in
# three variants, one after the other in one run (ROUNDS > 1 repeats them in
# rotated order):
#   call_order   BEGIN; UPDATE a; UPDATE b; COMMIT — rows locked in call
#                order: crossed transfers deadlock (each costs deadlock_timeout)
#                and the victim's transfer is lost (pgbench --max-tries=1)
#   lock_all     BEGIN; SELECT concurrency.xact_lock_all('bench_account',
#                ARRAY[a, b]); UPDATE a; UPDATE b; COMMIT — no deadlock
#   run_txn      CALL concurrency.run_transaction('UPDATE a; UPDATE b',
#                'serializable', 10) — conflicts retried in the server
# Reported per variant: transfers per second, committed and failed
# transfers, deadlocks (pg_stat_database), retries (run_transaction's
# NOTICEs), and the sum of all balances before and after, which must not
# change: the script fails if money was lost or doubled.
#
# Connection from the PG* environment variables; the database needs the
# extension and a role that may register subsystems. Everything lives in
# schema bench_txn, dropped at the end.
set -euo pipefail
clients=${CLIENTS:-8} accounts=${ACCOUNTS:-20} phase=${PHASE_SECONDS:-10} rounds=${ROUNDS:-1}
psql=(psql -X -q -v ON_ERROR_STOP=1 -At)
work=$(mktemp -d)
trap 'rm -rf "$work"; "${psql[@]}" -c "SET client_min_messages = warning" -c "DROP SCHEMA IF EXISTS bench_txn CASCADE" || true' EXIT

"${psql[@]}" >/dev/null <<SQL
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS bench_txn CASCADE;
CREATE SCHEMA bench_txn;
CREATE TABLE bench_txn.accounts (id int PRIMARY KEY, balance bigint NOT NULL);
INSERT INTO bench_txn.accounts SELECT i, 1000 FROM generate_series(1, $accounts) i;
SELECT concurrency.register_subsystem('bench_account', 7428101, 'bench/transfer.sh');
SQL

vars=$(printf '\\set a random(1, %d)\n\\set b random(1, %d)\n\\set amount random(1, 100)\n' "$accounts" "$accounts")
cat >"$work/call_order.sql" <<SQL
$vars
BEGIN;
UPDATE bench_txn.accounts SET balance = balance - :amount WHERE id = :a;
UPDATE bench_txn.accounts SET balance = balance + :amount WHERE id = :b;
COMMIT;
SQL
cat >"$work/lock_all.sql" <<SQL
$vars
BEGIN;
SELECT concurrency.xact_lock_all('bench_account', ARRAY[:a, :b]::bigint[]);
UPDATE bench_txn.accounts SET balance = balance - :amount WHERE id = :a;
UPDATE bench_txn.accounts SET balance = balance + :amount WHERE id = :b;
COMMIT;
SQL
cat >"$work/run_txn.sql" <<SQL
$vars
CALL concurrency.run_transaction('UPDATE bench_txn.accounts SET balance = balance - :amount WHERE id = :a; UPDATE bench_txn.accounts SET balance = balance + :amount WHERE id = :b', 'serializable', 10);
SQL

total() { "${psql[@]}" -c "SELECT sum(balance) FROM bench_txn.accounts"; }
deadlocks() { "${psql[@]}" -c "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"; }
field() { sed -n "s/^$1[^0-9]*\([0-9.]*\).*/\1/p" "$2" | head -1; }

echo "transfers: $clients clients, $accounts accounts, ${phase}s per variant, $rounds round(s)"
printf '  %-10s %10s %10s %8s %9s %8s %14s\n' variant 'tps' committed failed deadlocks retries 'sum before/after'
variants=(call_order lock_all run_txn)
status=0
for ((r = 0; r < rounds; r++)); do
	for ((i = 0; i < 3; i++)); do
		v=${variants[$(((i + r) % 3))]}
		before=$(total) d0=$(deadlocks)
		pgbench -n -M simple --max-tries=1 --failures-detailed -c "$clients" -j "$clients" -T "$phase" \
			-f "$work/$v.sql" >"$work/out" 2>"$work/err" || true
		after=$(total) d1=$(deadlocks)
		tps=$(field 'tps = ' "$work/out")
		committed=$(field 'number of transactions actually processed: ' "$work/out")
		failed=$(field 'number of failed transactions: ' "$work/out")
		retries=$(grep -c 'run_transaction: attempt' "$work/err" || true)
		printf '  %-10s %10.0f %10s %8s %9s %8s %7s/%s\n' "$v" "${tps:-0}" "${committed:-?}" "${failed:-0}" \
			"$((d1 - d0))" "$retries" "$before" "$after"
		if [ "$before" != "$after" ]; then
			echo "  MONEY CHANGED in $v: $before -> $after" >&2
			status=1
		fi
		if grep -q 'client [0-9]* aborted' "$work/err"; then
			echo "  $v: a client aborted: $(grep -m1 'aborted' "$work/err")" >&2
		fi
	done
done
"${psql[@]}" -c "SELECT concurrency.unregister_subsystem('bench_account')" >/dev/null
exit $status
