#!/usr/bin/env bash
# Schedules, measured in one run (docs/benchmarks.md, "Schedules"):
#
#   PGHOST=… PGPORT=… PGDATABASE=… bash bench/schedule.sh
#
# Needs a server with concurrency_ext in shared_preload_libraries (a waiting
# dequeue is woken at commit, and sleeps until the next due time), pgbench
# and psql on PATH. It creates and drops its own queues (benchsched*) and the
# table bench_sched_claims. Environment:
#   BENCH_SECONDS        length of part 1 (default 30)
#   BENCH_ROUND_SECONDS  length of one pgbench run of part 2 (default 10)
#   BENCH_WAITERS  workers waiting on the schedule's queue in part 1 (default 4)
#   BENCH_ROUNDS   rounds of part 2 (default 3; the order of the sides alternates)
#   BENCH_IDLE_SECONDS  length of part 3 (default 20)
#
# 1. Due time to claim: a schedule every second on a queue of its own, and
#    BENCH_WAITERS workers, each calling dequeue(…, wait => '5 seconds') in a
#    loop (pgbench clients): the dequeue that wakes at a due time turns it
#    into a task and claims it. Each claim records clock_timestamp() minus
#    the task's scheduled_for; p50 and p99 over the run, and how many due
#    times became tasks (exactly one each: a due time twice would show as a
#    count above the seconds elapsed).
# 2. The cost of a dequeue on a queue with 100 schedules, none of them due
#    (a yearly cron each), against the same on a queue with none: pgbench,
#    4 clients, one claim and complete per transaction on a queue filled with
#    tasks, the two queues in alternating rounds; the ratio of tasks/s,
#    without / with (the cost of a dequeue with schedules, relative).
# 3. Due time to enqueue with no worker at all: a schedule every second on a
#    queue nobody claims from, for BENCH_IDLE_SECONDS; the schedule runner
#    (a background worker the lock history's worker starts at each due
#    time) enqueues each due time. p50 and p99 of enqueued_at minus the
#    task's scheduled_for, and how many due times became tasks.
set -euo pipefail
cd "$(dirname "$0")"
T1=${BENCH_SECONDS:-30}
T2=${BENCH_ROUND_SECONDS:-10}
WAITERS=${BENCH_WAITERS:-4}
ROUNDS=${BENCH_ROUNDS:-3}
T3=${BENCH_IDLE_SECONDS:-20}
work=$(mktemp -d)
sql() { psql -X -q -v ON_ERROR_STOP=1 -At "$@"; }
cleanup() {
	sql -c "SELECT concurrency.unschedule(name) FROM concurrency.schedules WHERE queue LIKE 'benchsched%'" >/dev/null 2>&1 || true
	sql -c "SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name LIKE 'benchsched%'" >/dev/null 2>&1 || true
	sql -c "DROP TABLE IF EXISTS bench_sched_claims" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
tps() { sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$1" | head -1; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

sql -c "CREATE EXTENSION IF NOT EXISTS concurrency_ext" >/dev/null
case "$(sql -c 'SHOW shared_preload_libraries')" in
*concurrency_ext*) ;;
*) echo "concurrency_ext is not in shared_preload_libraries: waiters would poll" >&2; exit 1 ;;
esac
echo "# server: $(sql -c 'SHOW server_version'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%Y-%m-%dT%H:%MZ)"
cleanup 2>/dev/null || true
work=$(mktemp -d)

echo "## 1. due time to claim: a schedule every second, $WAITERS waiting workers, ${T1} s"
sql -c "CREATE TABLE bench_sched_claims (latency interval, scheduled_for timestamptz)"
sql -c "SELECT concurrency.create_queue('benchsched')" >/dev/null
cat >"$work/claim.sql" <<'SQL'
WITH t AS (SELECT * FROM concurrency.dequeue('benchsched', 1, wait => '5 seconds')),
     c AS (SELECT concurrency.complete('benchsched', t.task_id, t.lease_token) FROM t)
INSERT INTO bench_sched_claims
SELECT clock_timestamp() - (t.payload ->> 'scheduled_for')::timestamptz, (t.payload ->> 'scheduled_for')::timestamptz
  FROM t, c;
SQL
started=$(sql -c "SELECT extract(epoch FROM clock_timestamp())")
sql -c "SELECT concurrency.schedule('benchsched_every_second', 'benchsched', every => '1 second')" >/dev/null
pgbench -n -c "$WAITERS" -j "$WAITERS" -T "$T1" -f "$work/claim.sql" >"$work/claims.log" 2>&1 || { tail -5 "$work/claims.log" >&2; exit 1; }
sql -c "SELECT concurrency.unschedule('benchsched_every_second')" >/dev/null
ended=$(sql -c "SELECT extract(epoch FROM clock_timestamp())")
sql -F ' ' -c "SELECT count(*), count(DISTINCT scheduled_for),
                      round((percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM latency)) * 1000)::numeric, 2),
                      round((percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM latency)) * 1000)::numeric, 2),
                      round((max(extract(epoch FROM latency)) * 1000)::numeric, 2)
                 FROM bench_sched_claims" | {
	read -r n distinct p50 p99 worst
	echo "due times claimed: $n ($distinct distinct) in $(awk -v a="$started" -v b="$ended" 'BEGIN {printf "%.1f", b - a}') s"
	echo "due time to claim: p50 ${p50} ms, p99 ${p99} ms, max ${worst} ms"
}

echo "## 2. dequeue with 100 schedules on its queue (none due) / without, 4 clients, ${T2} s runs, $ROUNDS rounds"
for q in benchsched_with benchsched_without; do
	sql -c "SELECT concurrency.create_queue('$q')" >/dev/null
	printf "SELECT concurrency.complete('%s', t.task_id, t.lease_token) FROM concurrency.dequeue('%s') t;\n" "$q" "$q" >"$work/$q.sql"
done
sql -c "SELECT count(concurrency.schedule('benchsched_yearly_' || n, 'benchsched_with', cron => '0 0 1 1 *'))
          FROM generate_series(1, 100) n" >/dev/null
ratios=()
for round in $(seq 1 "$ROUNDS"); do
	sides=(with without)
	[ $((round % 2)) = 0 ] && sides=(without with)
	for side in "${sides[@]}"; do
		q=benchsched_$side
		# the payload names b: without it the function scan would run once
		# and be rescanned (1,000 tasks, not 100,000)
		sql -c "SELECT count(*) FROM generate_series(1, 100) b,
		          LATERAL concurrency.enqueue_batch('$q', array_fill(jsonb_build_object('b', b), ARRAY[1000]))" >/dev/null
		[ "$(sql -c "SELECT count(*) FROM concurrency.q_$q")" = 100000 ] || { echo "$q: not 100,000 tasks" >&2; exit 1; }
		sql -c "ANALYZE concurrency.q_$q; CHECKPOINT" >/dev/null
		pgbench -n -c 4 -j 2 -T "$T2" -f "$work/$q.sql" >"$work/$side-$round.log" 2>&1 || { tail -5 "$work/$side-$round.log" >&2; exit 1; }
		sql -c "DELETE FROM concurrency.q_$q" >/dev/null
	done
	with=$(tps "$work/with-$round.log") without=$(tps "$work/without-$round.log")
	ratio=$(awk -v a="$without" -v b="$with" 'BEGIN {printf "%.3f", a / b}')
	ratios+=("$ratio")
	echo "round $round: with 100 schedules $with tasks/s, without $without tasks/s; cost with / without $ratio"
done
echo "cost of a dequeue with 100 schedules / without: median $(printf '%s\n' "${ratios[@]}" | median) (rounds: ${ratios[*]})"

echo "## 3. due time to enqueue with no worker (the schedule runner), a schedule every second, ${T3} s"
sql -c "SELECT concurrency.create_queue('benchsched_idle')" >/dev/null
started=$(sql -c "SELECT extract(epoch FROM clock_timestamp())")
sql -c "SELECT concurrency.schedule('benchsched_idle_tick', 'benchsched_idle', every => '1 second')" >/dev/null
sleep "$T3"
sql -c "SELECT concurrency.unschedule('benchsched_idle_tick')" >/dev/null
ended=$(sql -c "SELECT extract(epoch FROM clock_timestamp())")
sql -F ' ' -c "SELECT count(*), count(DISTINCT payload->>'scheduled_for'),
                      round((percentile_cont(0.5) WITHIN GROUP (ORDER BY lag) * 1000)::numeric, 2),
                      round((percentile_cont(0.99) WITHIN GROUP (ORDER BY lag) * 1000)::numeric, 2),
                      round((max(lag) * 1000)::numeric, 2)
                 FROM (SELECT payload, extract(epoch FROM enqueued_at - (payload->>'scheduled_for')::timestamptz) AS lag
                         FROM concurrency.q_benchsched_idle) t" | {
	read -r n distinct p50 p99 worst
	echo "due times enqueued: $n ($distinct distinct) in $(awk -v a="$started" -v b="$ended" 'BEGIN {printf "%.1f", b - a}') s"
	echo "due time to enqueue: p50 ${p50} ms, p99 ${p99} ms, max ${worst} ms"
}
