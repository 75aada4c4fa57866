#!/usr/bin/env bash
# dequeue(…, wait), measured in one run (docs/benchmarks.md, "Waiting for
# work"):
#
#   PGHOST=… PGPORT=… PGDATABASE=… bash bench/wait.sh
#
# Needs a server with concurrency_ext in shared_preload_libraries (waiters
# woken through shared memory) and max_connections of at least 560,
# pgbench and psql on PATH, python3 with psycopg 3. It creates and drops its
# own queues (benchwait*) and pgbench's tables. Environment:
#   BENCH_SAMPLES  wake-ups measured per kind in 1 (default 300)
#   BENCH_SECONDS  length of one pgbench run in 2 and 3 (default 10)
#   BENCH_ROUNDS   rounds of 2 and 3 (default 3; the order of the sides alternates)
#   BENCH_IDLE     idle waiters in 2 (default 500)
#
# 1. Wake-up latency, from just before the producer's COMMIT (sent once the
#    waiter is seen asleep) to the waiter's return: dequeue(…, wait) against
#    LISTEN concurrency_<queue> followed by a dequeue, one waiter, one task at
#    a time (bench/wait_clients.py).
# 2. pgbench (TPC-B-like, 4 clients) with and without BENCH_IDLE waiters on an
#    empty queue beside it (each calls dequeue(…, wait => '5 seconds') again
#    when its wait passes, as a worker loop does; all of them one pgbench
#    process, which uses no CPU while they sleep); TPS with / TPS without.
# 3. Drain rate: one producer enqueues batches of 10 as fast as it can while
#    8 or 32 workers claim and complete (one statement per task); tasks
#    completed per second by workers that wait (dequeue(…, wait => '1 second'))
#    against workers that call dequeue in a tight loop.
set -euo pipefail
cd "$(dirname "$0")"
SAMPLES=${BENCH_SAMPLES:-300}
T=${BENCH_SECONDS:-10}
ROUNDS=${BENCH_ROUNDS:-3}
IDLE=${BENCH_IDLE:-500}
PY=${PYTHON:-/usr/bin/python3}
work=$(mktemp -d)
idle_pid=
sql() { psql -X -q -v ON_ERROR_STOP=1 -At "$@"; }
stop_idle() {
	if [ -n "$idle_pid" ]; then kill "$idle_pid" 2>/dev/null || true; wait "$idle_pid" 2>/dev/null || true; idle_pid=; fi
	# (a waiter whose session ended meanwhile: a WARNING, not shown)
	PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=error" \
		sql -c "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'bench_idle_waiter'" >/dev/null
}
cleanup() {
	stop_idle 2>/dev/null || true
	sql -c "SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name LIKE 'benchwait%'" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
tps() { sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$1" | head -1; }

sql -c "CREATE EXTENSION IF NOT EXISTS concurrency_ext" >/dev/null
case "$(sql -c 'SHOW shared_preload_libraries')" in
*concurrency_ext*) ;;
*) echo "concurrency_ext is not in shared_preload_libraries: waiters would poll" >&2; exit 1 ;;
esac
echo "# server: $(sql -c 'SHOW server_version'), $(nproc) cores, $(date -u +%Y-%m-%dT%H:%MZ)"
for q in benchwait benchwait_idle benchwait_drain; do
	sql -c "SELECT concurrency.drop_queue('$q') FROM concurrency.queue WHERE name = '$q'" >/dev/null
	sql -c "SELECT concurrency.create_queue('$q')" >/dev/null
done

echo "## 1. wake-up latency, $SAMPLES wake-ups each"
"$PY" wait_clients.py latency "$SAMPLES"

echo "## 2. pgbench TPS beside $IDLE idle waiters (${T}s runs, $ROUNDS rounds)"
pgbench -q -i -s 10 >/dev/null 2>&1
ratios=()
for round in $(seq 1 "$ROUNDS"); do
	for side in without with; do
		if [ $((round % 2)) = 0 ]; then side=$([ "$side" = with ] && echo without || echo with); fi
		if [ "$side" = with ]; then
			# one pgbench process runs the waiters: it sleeps in poll() while
			# they wait (a client library that wakes to poll its connections,
			# as psycopg does every 0.1 s, would spend the cores that the
			# server shares with it: 500 such threads took 11 % of a core)
			echo "SELECT task_id FROM concurrency.dequeue('benchwait_idle', wait => '5 seconds');" >"$work/idle.sql"
			PGAPPNAME=bench_idle_waiter pgbench -n -c "$IDLE" -j 1 -f "$work/idle.sql" -T 86400 >/dev/null 2>&1 &
			idle_pid=$!
			until [ "$(sql -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'bench_idle_waiter' AND wait_event_type = 'Extension'")" -ge "$IDLE" ]; do
				sleep 0.5
			done
		fi
		sql -c "CHECKPOINT" >/dev/null
		pgbench -n -c 4 -j 2 -T "$T" >"$work/pgbench-$side" 2>&1
		eval "tps_$side=$(tps "$work/pgbench-$side")"
		[ "$side" = with ] && stop_idle
	done
	echo "round $round: tps without $tps_without, with $tps_with"
	ratios+=("$(awk -v a="$tps_with" -v b="$tps_without" 'BEGIN {printf "%.4f", a / b}')")
done
echo "TPS with / without idle waiters, median of $ROUNDS: $(printf '%s\n' "${ratios[@]}" | median)"

echo "## 3. drain rate, waiting workers / workers in a tight loop (${T}s runs, $ROUNDS rounds)"
echo "SELECT count(*) FROM concurrency.enqueue_batch('benchwait_drain', array_fill('{}'::jsonb, ARRAY[10]));" >"$work/produce.sql"
echo "SELECT concurrency.complete('benchwait_drain', task_id, lease_token) FROM concurrency.dequeue('benchwait_drain', wait => '1 second');" >"$work/wait.sql"
echo "SELECT concurrency.complete('benchwait_drain', task_id, lease_token) FROM concurrency.dequeue('benchwait_drain');" >"$work/poll.sql"
for workers in 8 32; do
	ratios=()
	for round in $(seq 1 "$ROUNDS"); do
		for mode in wait poll; do
			if [ $((round % 2)) = 0 ]; then mode=$([ "$mode" = wait ] && echo poll || echo wait); fi
			sql -c "SELECT concurrency.drop_queue('benchwait_drain')" -c "SELECT concurrency.create_queue('benchwait_drain')" >/dev/null
			pgbench -n -c 1 -T "$T" -f "$work/produce.sql" >"$work/produce-$mode" 2>&1 &
			producer=$!
			pgbench -n -c "$workers" -j 2 -T "$T" -f "$work/$mode.sql" >"$work/workers-$mode" 2>&1
			wait "$producer"
			made=$(( $(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$work/produce-$mode") * 10 ))
			left=$(sql -c 'SELECT count(*) FROM concurrency."q_benchwait_drain"')
			eval "rate_$mode=$(awk -v d="$((made - left))" -v t="$T" 'BEGIN {printf "%.1f", d / t}')"
			eval "made_$mode=$made"
		done
		echo "$workers workers, round $round: tasks/s waiting $rate_wait (of $made_wait made), tight loop $rate_poll (of $made_poll made)"
		ratios+=("$(awk -v a="$rate_wait" -v b="$rate_poll" 'BEGIN {printf "%.3f", a / b}')")
	done
	echo "$workers workers: drain rate waiting / tight loop, median of $ROUNDS: $(printf '%s\n' "${ratios[@]}" | median)"
done
