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
#   BENCH_IDLE     idle sessions in 2 (default 500)
#   BENCH_IDLE_WAIT  the wait of each idle waiter's dequeue in 2 (default 5 seconds)
#   BENCH_PARTS    which of 1, 2, 3 to run (default "1 2 3")
#
# 1. Wake-up latency, from just before the producer's COMMIT (sent once the
#    waiter is seen asleep) to the waiter's return: dequeue(…, wait) against
#    LISTEN concurrency_<queue> followed by a dequeue, one waiter, one task at
#    a time (bench/wait_clients.py).
# 2. pgbench (TPC-B-like, 4 clients) alone, beside BENCH_IDLE waiters on an
#    empty queue (each calls dequeue(…, wait => BENCH_IDLE_WAIT) again when
#    its wait passes, as a worker loop does), and beside as many sessions that
#    each run SELECT pg_sleep(BENCH_IDLE_WAIT) in a loop (the same wake-ups,
#    without the extension: what the machine charges for waking a process),
#    and beside as many connections that run nothing (what PostgreSQL
#    charges for the backends being there); the idle sessions of a side are
#    one pgbench process, which uses no CPU while they sleep. Per side: TPS, and where the server runs on this
#    machine and the cgroup v1 cpuacct controller is writable (as root), the
#    server's CPU per pgbench transaction (every process of the server,
#    counted by a cpuacct cgroup) and the idle sessions' own share of it
#    (their backends' /proc/<pid>/schedstat). Ratios to pgbench alone,
#    medians of the rounds; the order of the sides turns each round.
# 3. Drain rate: one producer enqueues batches of 10 as fast as it can while
#    8 or 32 workers claim and complete (one statement per task); tasks
#    completed per second by workers that wait (dequeue(…, wait => '1 second'))
#    against workers that call dequeue in a tight loop.
set -euo pipefail
cd "$(dirname "$0")"
. ../scripts/cluster.sh # cpuacct_group, cpuacct_release
SAMPLES=${BENCH_SAMPLES:-300}
T=${BENCH_SECONDS:-10}
ROUNDS=${BENCH_ROUNDS:-3}
IDLE=${BENCH_IDLE:-500}
IDLE_WAIT=${BENCH_IDLE_WAIT:-5 seconds}
PARTS=${BENCH_PARTS:-"1 2 3"}
PY=${PYTHON:-/usr/bin/python3}
work=$(mktemp -d)
idle_pid= cg= idle_pids=()
sql() { psql -X -q -v ON_ERROR_STOP=1 -At "$@"; }
stop_idle() {
	idle_pids=()
	if [ -n "$idle_pid" ]; then kill "$idle_pid" 2>/dev/null || true; wait "$idle_pid" 2>/dev/null || true; idle_pid=; fi
	# (a waiter whose session ended meanwhile: a WARNING, not shown)
	PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=error" \
		sql -c "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = 'bench_idle'" >/dev/null
}
cleanup() {
	stop_idle 2>/dev/null || true
	cpuacct_release "$cg" # the server's processes back where they were
	sql -c "SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name LIKE 'benchwait%'" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
tps() { sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$1" | head -1; }
txns() { sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' "$1"; }
wanted() { [[ " $PARTS " == *" $1 "* ]]; }

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

if wanted 1; then
	echo "## 1. wake-up latency, $SAMPLES wake-ups each"
	"$PY" wait_clients.py latency "$SAMPLES"
fi

if wanted 2; then
	# the server's processes, and those it forks later, in a cpuacct cgroup
	# of their own, where it runs here and that can be done
	pm=$(head -1 "$(sql -c 'SHOW data_directory')/postmaster.pid" 2>/dev/null || true)
	if [ -n "$pm" ] && [ -d "/proc/$pm" ]; then
		cg=$(cpuacct_group "concurrency_ext_wait_$$" "$pm")
	fi
	server_cpu() { if [ -n "$cg" ]; then cat "$cg/cpuacct.usage"; else echo 0; fi; } # ns
	idle_cpu() { # ns on CPU of the idle sessions' backends (read by one process, at once)
		if [ ${#idle_pids[@]} = 0 ]; then echo 0; return; fi
		printf '/proc/%s/schedstat\n' "${idle_pids[@]}" | xargs cat 2>/dev/null | awk '{t += $1} END {printf "%.0f", t}'
	}
	echo "## 2. pgbench beside $IDLE idle sessions, each waking every $IDLE_WAIT (${T}s runs, $ROUNDS rounds)"
	echo "# server CPU: $([ -n "$cg" ] && echo "cpuacct cgroup" || echo "not measured (the server is not on this machine, or cgroup v1 cpuacct is not writable)")"
	pgbench -q -i -s 10 >/dev/null 2>&1
	secs=$(sql -c "SELECT extract(epoch FROM interval '$IDLE_WAIT')")
	echo "SELECT task_id FROM concurrency.dequeue('benchwait_idle', wait => '$IDLE_WAIT');" >"$work/waiters.sql"
	echo "SELECT pg_sleep($secs);" >"$work/sleepers.sql"
	echo "\\sleep 86400 s" >"$work/connected.sql"
	# IDLE sessions of one kind (waiters, sleepers, connected), asleep on return
	start_idle() {
		# one pgbench process runs them: it sleeps in poll() while they wait
		# (a client library that wakes to poll its connections, as psycopg
		# does every 0.1 s, would spend the cores that the server shares)
		PGAPPNAME=bench_idle pgbench -n -c "$IDLE" -j 1 -f "$work/$1.sql" -T 86400 -P 1 >/dev/null 2>"$work/idle-progress" &
		idle_pid=$!
		local event
		case $1 in
		waiters) event="wait_event_type = 'Extension'" ;;
		sleepers) event="wait_event = 'PgSleep'" ;;
		*) event="state = 'idle'" ;;
		esac
		until [ "$(sql -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'bench_idle' AND $event")" -ge "$IDLE" ]; do
			sleep 0.5
		done
		mapfile -t idle_pids < <(sql -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'bench_idle'")
	}
	# calls of the idle sessions since their start: the sum of the
	# per-second rates that their pgbench has reported (-P 1)
	calls() { sed -n 's/^progress: [0-9.]* s, \([0-9.]*\) tps.*/\1/p' "$work/idle-progress" | awk '{t += $1} END {printf "%.0f", t}'; }
	# Without pgbench: the idle sessions' CPU per call (a call: one wake-up
	# at the end of its wait, and the next call's start), where a run of T
	# seconds sees their calls end
	if awk -v s="$secs" -v t="$T" 'BEGIN {exit !(s <= t / 2)}'; then
		for side in waiters sleepers; do
			start_idle "$side"
			sleep "$secs" # each one's first call, which made its connection, ends
			x0=$(calls) i0=$(idle_cpu)
			sleep "$T"
			i1=$(idle_cpu) x1=$(calls)
			stop_idle
			echo "without pgbench, $IDLE $side: $(awk -v i=$((i1 - i0)) -v x=$((x1 - x0)) 'BEGIN {printf "%d calls, %.0f µs CPU per call", x, (x > 0 ? i / x / 1000 : 0)}')"
		done
	fi
	sides=(alone waiters sleepers connected)
	declare -A ratio_tps ratio_cpu
	for round in $(seq 1 "$ROUNDS"); do
		line="round $round:"
		for i in 0 1 2 3; do
			side=${sides[$(((i + round - 1) % 4))]}
			if [ "$side" != alone ]; then start_idle "$side"; fi
			sql -c "CHECKPOINT" >/dev/null
			i0=$(idle_cpu) c0=$(server_cpu)
			pgbench -n -c 4 -j 2 -T "$T" >"$work/pgbench-$side" 2>&1
			c1=$(server_cpu) i1=$(idle_cpu)
			n=$(txns "$work/pgbench-$side")
			eval "tps_$side=$(tps "$work/pgbench-$side")"
			eval "cpu_$side=$(awk -v c=$((c1 - c0)) -v n="$n" 'BEGIN {printf "%.1f", c / n / 1000}')" # µs per transaction
			share=$(awk -v i=$((i1 - i0)) -v c=$((c1 - c0)) 'BEGIN {printf "%.1f", (c > 0 ? 100 * i / c : 0)}')
			if [ "$side" != alone ]; then stop_idle; fi
			line+=" $side $(eval echo "\$tps_$side") TPS"
			if [ -n "$cg" ]; then
				line+=" $(eval echo "\$cpu_$side") µs CPU/txn"
				if [ "$side" != alone ]; then line+=" (idle sessions $share %)"; fi
			fi
			line+=";"
		done
		echo "$line"
		for side in waiters sleepers connected; do
			ratio_tps[$side]+="$(awk -v a="$(eval echo "\$tps_$side")" -v b="$tps_alone" 'BEGIN {printf "%.4f", a / b}') "
			ratio_cpu[$side]+="$(awk -v a="$(eval echo "\$cpu_$side")" -v b="$cpu_alone" 'BEGIN {printf "%.4f", (b > 0 ? a / b : 0)}') "
		done
	done
	for side in waiters sleepers connected; do
		summary="beside $side: TPS / TPS alone, median of $ROUNDS: $(printf '%s\n' ${ratio_tps[$side]} | median)"
		if [ -n "$cg" ]; then summary+="; server CPU per transaction / alone: $(printf '%s\n' ${ratio_cpu[$side]} | median)"; fi
		echo "$summary"
	done
fi

wanted 3 || exit 0
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
