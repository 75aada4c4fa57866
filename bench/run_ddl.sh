#!/usr/bin/env bash
# What run_ddl is for: readers' latency while a migration meets a long
# transaction. CLIENTS (8) pgbench clients read one row by primary key for
# SECONDS (14) s; after 1 s a session opens a transaction, reads the table
# (AccessShareLock) and stays idle in transaction for HOLD_SECONDS (10) s;
# after 2 s an ALTER TABLE … ADD COLUMN is attempted, in three variants, one
# after the other in one run:
#   plain      ALTER TABLE — queues for its AccessExclusiveLock behind the
#              idle transaction, and every reader queues behind it
#   retry      the usual client-side loop: SET lock_timeout = LOCK_TIMEOUT
#              (1 s); ALTER TABLE; on failure sleep 0.2 s and try again
#   run_ddl    CALL concurrency.run_ddl('ALTER TABLE …', lock_timeout => LOCK_TIMEOUT)
# Reported per variant, from pgbench's per-transaction log: reads, the worst
# and the 99th-percentile read latency, reads slower than 100 ms, and when
# the column was added (seconds after the start). The goal of run_ddl: worst
# reader latency within lock_timeout + 100 ms, where plain DDL stalls the
# readers for as long as the blocker lives.
#
# Connection from the PG* environment variables; the database needs the
# extension. Everything lives in schema bench_ddl, dropped at the end.
set -euo pipefail
clients=${CLIENTS:-8} seconds=${SECONDS_TOTAL:-14} hold=${HOLD_SECONDS:-10} lock_timeout=${LOCK_TIMEOUT:-1s}
psql=(psql -X -q -v ON_ERROR_STOP=1 -At)
work=$(mktemp -d)
chmod 777 "$work"
trap 'rm -rf "$work"; "${psql[@]}" -c "SET client_min_messages = warning" -c "DROP SCHEMA IF EXISTS bench_ddl CASCADE" || true' EXIT

"${psql[@]}" >/dev/null <<SQL
SET client_min_messages = warning;
DROP SCHEMA IF EXISTS bench_ddl CASCADE;
CREATE SCHEMA bench_ddl;
CREATE TABLE bench_ddl.items (id int PRIMARY KEY, v text);
INSERT INTO bench_ddl.items SELECT i, md5(i::text) FROM generate_series(1, 10000) i;
VACUUM ANALYZE bench_ddl.items;
SQL
printf '\\set id random(1, 10000)\nSELECT v FROM bench_ddl.items WHERE id = :id;\n' >"$work/read.sql"

ddl() { # variant column
	case $1 in
	plain) "${psql[@]}" -c "ALTER TABLE bench_ddl.items ADD COLUMN $2 int" ;;
	retry)
		until "${psql[@]}" -c "SET lock_timeout = '$lock_timeout'" -c "ALTER TABLE bench_ddl.items ADD COLUMN $2 int" 2>/dev/null; do
			sleep 0.2
		done ;;
	run_ddl) "${psql[@]}" -c "SET client_min_messages = warning" \
		-c "CALL concurrency.run_ddl('ALTER TABLE bench_ddl.items ADD COLUMN $2 int', lock_timeout => '$lock_timeout')" ;;
	esac
}

echo "readers during ALTER TABLE behind a ${hold}s idle transaction: $clients clients, ${seconds}s, lock_timeout $lock_timeout"
printf '  %-8s %8s %12s %12s %14s %12s\n' variant reads 'worst (ms)' 'p99 (ms)' 'reads >100ms' 'added at (s)'
for v in plain retry run_ddl; do
	rm -f "$work"/log*
	start=$(date +%s.%N)
	(cd "$work" && pgbench -n -M prepared -c "$clients" -j "$clients" -T "$seconds" -l --log-prefix=log \
		-f read.sql >/dev/null 2>&1) &
	bench=$!
	sleep 1
	# the long transaction: reads the table, then sits idle in transaction
	("${psql[@]}" -c "BEGIN" -c "SELECT count(*) FROM bench_ddl.items" -c "\\! sleep $hold" -c "COMMIT" >/dev/null) &
	holder=$!
	sleep 1
	ddl "$v" "c_$v" >/dev/null
	added=$(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $start }")
	wait "$holder"
	wait "$bench"
	cat "$work"/log* | awk '{ print $3 / 1000.0 }' | sort -g >"$work/latencies"
	awk -v v="$v" -v added="$added" '
		{ lat[NR] = $1; if ($1 > 100) slow++ }
		END { printf "  %-8s %8d %12.1f %12.1f %14d %12s\n", v, NR, lat[NR], lat[int(NR * 0.99)], slow, added }
	' "$work/latencies"
done
