#!/usr/bin/env bash
# The cost of the queue permission check, side by side in one run: the same
# calls as a role that holds the permission through grant_queue (the whole
# check: pending invalidations, the cached grants of the queue, a role
# membership test, the switch to the queue's owner) and as the queue's owner
# (who holds every permission: one ownership test).
#
# 1. In one session, no commit per call, the two sides interleaved:
#    microseconds per call of the cheapest calls (dequeue from an empty
#    queue, enqueue), where the check weighs most. Ratio granted / owner.
# 2. pgbench, a transaction per call as workers run them: tps. Ratio
#    granted / owner; 1.00 means the check costs nothing measurable.
#
#   PGHOST=… PGPORT=… PGDATABASE=… bash bench/queue_permissions.sh
#
# Needs pgbench and psql on PATH and a superuser (it creates two roles,
# bench_perm_worker and bench_perm_producer, and drops them at the end; the
# roles act through "-c role=…", so they need no LOGIN). Environment:
#   BENCH_SECONDS  length of one pgbench run (default 3)
#   BENCH_ROUNDS   rounds, each side first in every other one (default 4)
#   BENCH_CLIENTS  client counts of part 2 (default "1 4")
#   BENCH_CALLS    calls per side and turn in part 1 (default 200)
set -euo pipefail
cd "$(dirname "$0")"
T=${BENCH_SECONDS:-3}
ROUNDS=${BENCH_ROUNDS:-4}
CLIENTS=${BENCH_CLIENTS:-"1 4"}
CALLS=${BENCH_CALLS:-200}
work=$(mktemp -d)
sql() { psql -X -q -v ON_ERROR_STOP=1 -o /dev/null "$@"; }
cleanup() {
	sql -c "SELECT concurrency.drop_queue('bench_perm') FROM concurrency.queue WHERE name = 'bench_perm'" \
		-c "DROP ROLE IF EXISTS bench_perm_worker" -c "DROP ROLE IF EXISTS bench_perm_producer" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

sql -c "CREATE EXTENSION IF NOT EXISTS concurrency_ext"
cleanup; work=$(mktemp -d)
sql <<'SQL'
CREATE ROLE bench_perm_worker;
CREATE ROLE bench_perm_producer;
SELECT concurrency.create_queue('bench_perm');
SELECT concurrency.grant_queue('bench_perm', 'bench_perm_worker', '{work}');
SELECT concurrency.grant_queue('bench_perm', 'bench_perm_producer', '{enqueue}');
SQL

cat >"$work/work.sql" <<'EOF2'
SELECT task_id, lease_token FROM concurrency.dequeue('bench_perm') \gset
SELECT concurrency.complete('bench_perm', :task_id, :lease_token);
EOF2
cat >"$work/enqueue.sql" <<'EOF2'
SELECT concurrency.enqueue('bench_perm', '{"n": 1}');
EOF2

load() { # rows
	sql -c 'TRUNCATE concurrency."q_bench_perm"' \
		-c "INSERT INTO concurrency.\"q_bench_perm\" (payload) SELECT jsonb_build_object('n', i) FROM generate_series(1, $1) AS i" \
		-c 'VACUUM ANALYZE concurrency."q_bench_perm"'
}
# both sides commit without waiting for the WAL flush: the disk is not what is measured
run() { # script clients role(or empty) -> tps
	local out
	out=$(PGOPTIONS="${PGOPTIONS:-} -c synchronous_commit=off ${3:+-c role=$3}" pgbench -n -f "$work/$1" -c "$2" -j "$(($2 > 1 ? 2 : 1))" -T "$T" 2>&1) || {
		echo "pgbench failed:" >&2; echo "$out" >&2; exit 1
	}
	sed -n 's/^tps = \([0-9]*\).*/\1/p' <<<"$out"
}
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

# ---- 1. in one session, interleaved ---------------------------------------------
# One backend alternates between the granted role and the owner every $CALLS
# calls, BENCH_ROUNDS × 10 times, so that the machine's other load falls on
# both sides alike; the sums give microseconds per call.
interleaved() { # what role -> "granted_us owner_us"
	local call
	case $1 in
	poll) call="PERFORM count(*) FROM concurrency.dequeue('bench_perm', 1 + 0 * i)" ;;
	enqueue) call="PERFORM concurrency.enqueue('bench_perm', '{\"n\": 1}')" ;;
	esac
	psql -X -q -At -v ON_ERROR_STOP=1 <<SQL
DO \$\$
DECLARE
  t timestamptz; granted float8 := 0; owner float8 := 0;
BEGIN
  FOR r IN 1 .. $((ROUNDS * 10)) LOOP
    EXECUTE 'SET ROLE $2';
    t := clock_timestamp();
    FOR i IN 1 .. $CALLS LOOP $call; END LOOP;
    granted := granted + extract(epoch FROM clock_timestamp() - t);
    RESET ROLE;
    t := clock_timestamp();
    FOR i IN 1 .. $CALLS LOOP $call; END LOOP;
    owner := owner + extract(epoch FROM clock_timestamp() - t);
  END LOOP;
  RAISE NOTICE '% %', round((granted * 1e6 / ($CALLS * $ROUNDS * 10))::numeric, 2),
                      round((owner * 1e6 / ($CALLS * $ROUNDS * 10))::numeric, 2);
END
\$\$;
SQL
}
printf '%-44s %10s %10s %8s\n' "1. µs per call, one session, interleaved" "granted" "owner" "ratio"
for what in poll enqueue; do
	load 0
	role=$([ "$what" = poll ] && echo bench_perm_worker || echo bench_perm_producer)
	read -r g o < <(interleaved "$what" "$role" 2>&1 | sed -n 's/^NOTICE: *//p')
	label=$([ "$what" = poll ] && echo "dequeue from an empty queue (work)" || echo "enqueue (enqueue)")
	printf '%-44s %10s %10s %8.2f\n' "$label" "$g" "$o" "$(awk -v g="$g" -v o="$o" 'BEGIN { print g / o }')"
done

# ---- 2. pgbench ----------------------------------------------------------------
printf '\n%-44s %10s %10s %8s\n' "2. tps, median of $ROUNDS rounds of ${T} s" "granted" "owner" "ratio"
measure() { # label script role clients rows
	: >"$work/ratios" >"$work/granted" >"$work/owner"
	for ((r = 0; r < ROUNDS; r++)); do
		local g o
		if ((r % 2 == 0)); then
			load "$5"; g=$(run "$2" "$4" "$3")
			load "$5"; o=$(run "$2" "$4" "")
		else
			load "$5"; o=$(run "$2" "$4" "")
			load "$5"; g=$(run "$2" "$4" "$3")
		fi
		echo "$g" >>"$work/granted"; echo "$o" >>"$work/owner"
		awk -v g="$g" -v o="$o" 'BEGIN { printf "%.3f\n", g / o }' >>"$work/ratios"
	done
	printf '%-44s %10s %10s %8.2f\n' "$1" "$(median <"$work/granted")" "$(median <"$work/owner")" "$(median <"$work/ratios")"
}
for c in $CLIENTS; do
	measure "dequeue + complete, work, $c client(s)" work.sql bench_perm_worker "$c" $((T * 5000 * c + 20000))
	measure "enqueue, enqueue, $c client(s)" enqueue.sql bench_perm_producer "$c" 0
done
