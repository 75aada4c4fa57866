#!/usr/bin/env bash
# Finishing-work benchmarks of the task queue, side by side in one run,
# reported as ratios (median over rounds in which the order of the sides
# rotates: the machine's other load shows in the absolute numbers).
#
#   PGHOST=… PGPORT=… PGDATABASE=… bash bench/queue_finish.sh
#
# Needs pgbench and psql on PATH and a server with concurrency_ext installed
# (or a role that may CREATE EXTENSION). It creates and drops its own queues
# (benchfin_*). Environment:
#   BENCH_SECONDS  length of one pgbench run (default 3)
#   BENCH_PAIRS    rounds per comparison (default 5)
#   BENCH_CLIENTS  clients of benchmark 1 (default 1)
#   BENCH_RETAINED retained tasks of benchmark 2 (default 1000000)
#   BENCH_ONLY     run only these benchmarks, e.g. "2" (default: "1 2")
#
# 1. Tasks per second of a worker that
#      single: claims one task and completes it (2 round trips per task),
#      loop50: claims 50 with dequeue(batch => 50) and completes them one by
#              one (51 round trips per 50 tasks),
#      batch50: claims 50 and completes them in one batch complete (2 round
#              trips per 50 tasks).
# 2. A claim (dequeue of one task) on a queue that retains 1,000,000 done
#    tasks against the same claim on a queue that retains none; both have the
#    same ready tasks. The retained tasks are inserted as completed tasks look
#    (state done, finished_at, worker, result) by one INSERT.
set -euo pipefail
cd "$(dirname "$0")"
T=${BENCH_SECONDS:-3}
PAIRS=${BENCH_PAIRS:-5}
CLIENTS=${BENCH_CLIENTS:-1}
RETAINED=${BENCH_RETAINED:-1000000}
ONLY=${BENCH_ONLY:-"1 2"}
work=$(mktemp -d)
sql() { psql -X -q -v ON_ERROR_STOP=1 -o /dev/null "$@"; }
cleanup() {
	psql -X -q -o /dev/null -c "SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name LIKE 'benchfin\_%'" \
		2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
wanted() { [[ " $ONLY " == *" $1 "* ]]; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) printf "%s", v[(NR + 1) / 2]; else printf "%.3f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
range() { sort -g | sed -n '1p;$p' | paste -sd- -; }

sql -c "CREATE EXTENSION IF NOT EXISTS concurrency_ext"
sql -c "SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name LIKE 'benchfin\_%'"

# tps of one pgbench run of script $1 with $2 clients
tps() {
	local out
	out=$(pgbench -n -M extended -f "$work/$1" -c "$2" -j "$([ "$2" -ge 2 ] && echo 2 || echo 1)" -T "$T" 2>&1) || {
		echo "pgbench failed:" >&2; echo "$out" >&2; exit 1; }
	echo "$out" | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | head -1
}
# keeps at least $2 ready tasks in queue $1 (a run that drained its queue
# would flatter itself)
fill() {
	sql -c "SELECT count(*) FROM concurrency.enqueue_batch('$1', array_fill('{\"job\": 1}'::jsonb,
	          ARRAY[greatest(0, $2 - (SELECT count(*) FROM concurrency.\"q_$1\" WHERE state = 'ready'))::int]))"
}
left() { psql -X -At -c "SELECT count(*) FROM concurrency.\"q_$1\" WHERE state = 'ready'"; }

if wanted 1; then
	sql -c "SELECT concurrency.create_queue('benchfin_acks')"
	cat >"$work/single.sql" <<'EOF'
SELECT task_id, lease_token FROM concurrency.dequeue('benchfin_acks') \gset
SELECT concurrency.complete('benchfin_acks', :task_id, :lease_token);
EOF
	{
		printf 'SELECT '
		for i in $(seq 1 50); do
			printf "(array_agg(task_id))[%d] AS i%d, (array_agg(lease_token))[%d] AS t%d%s" "$i" "$i" "$i" "$i" \
				"$([ "$i" -lt 50 ] && echo ', ')"
		done
		printf " FROM concurrency.dequeue('benchfin_acks', 50) \\\\gset\n"
		for i in $(seq 1 50); do
			printf "SELECT concurrency.complete('benchfin_acks', :i%d, :t%d);\n" "$i" "$i"
		done
	} >"$work/loop50.sql"
	cat >"$work/batch50.sql" <<'EOF'
SELECT array_agg(task_id)::text AS ids, array_agg(lease_token)::text AS tokens FROM concurrency.dequeue('benchfin_acks', 50) \gset
SELECT concurrency.complete_batch('benchfin_acks', :ids::bigint[], :tokens::bigint[]);
EOF
	need=$((T * 40000 + 50000))
	: >"$work/s"; : >"$work/l"; : >"$work/b"; : >"$work/lr"; : >"$work/br"; : >"$work/bl"
	for round in $(seq 1 "$PAIRS"); do
		order=("single" "loop50" "batch50")
		shift_by=$(((round - 1) % 3))
		order=("${order[@]:$shift_by}" "${order[@]:0:$shift_by}")
		declare -A got=()
		for side in "${order[@]}"; do
			fill benchfin_acks "$need"
			rate=$(tps "$side.sql" "$CLIENTS")
			[ "$(left benchfin_acks)" -gt 0 ] || { echo "the queue ran dry: raise the fill" >&2; exit 1; }
			case $side in single) got[$side]=$rate ;; *) got[$side]=$(awk -v t="$rate" 'BEGIN { printf "%.1f", t * 50 }') ;; esac
		done
		echo "${got[single]}" >>"$work/s"; echo "${got[loop50]}" >>"$work/l"; echo "${got[batch50]}" >>"$work/b"
		ratio "${got[loop50]}" "${got[single]}" >>"$work/lr"; echo >>"$work/lr"
		ratio "${got[batch50]}" "${got[single]}" >>"$work/br"; echo >>"$work/br"
		ratio "${got[batch50]}" "${got[loop50]}" >>"$work/bl"; echo >>"$work/bl"
	done
	echo "== 1. tasks per second, $CLIENTS client(s), median of $PAIRS rounds of ${T} s"
	printf '%-44s %10s\n' "single: dequeue + complete per task" "$(median <"$work/s")"
	printf '%-44s %10s\n' "loop50: dequeue(50) + 50 single completes" "$(median <"$work/l")"
	printf '%-44s %10s\n' "batch50: dequeue(50) + one batch complete" "$(median <"$work/b")"
	printf '%-44s %10s  (range %s)\n' "ratio loop50 / single" "$(median <"$work/lr")" "$(range <"$work/lr")"
	printf '%-44s %10s  (range %s, goal >= 10)\n' "ratio batch50 / single" "$(median <"$work/br")" "$(range <"$work/br")"
	printf '%-44s %10s  (range %s)\n' "ratio batch50 / loop50" "$(median <"$work/bl")" "$(range <"$work/bl")"
	sql -c "SELECT concurrency.drop_queue('benchfin_acks')"
fi

if wanted 2; then
	sql -c "SELECT concurrency.create_queue('benchfin_empty', lease => '1 hour')" \
		-c "SELECT concurrency.create_queue('benchfin_retained', lease => '1 hour', retain => '7 days')"
	# the retained tasks: done, finished within the retention window
	sql -c "INSERT INTO concurrency.\"q_benchfin_retained\" (state, attempt, worker, finished_at, result, payload)
	        SELECT 'done', 1, 'w', clock_timestamp() - interval '1 hour', '{\"ok\": true}', jsonb_build_object('n', i)
	          FROM generate_series(1, $RETAINED) AS i" \
		-c "VACUUM ANALYZE concurrency.\"q_benchfin_retained\""
	for q in empty retained; do
		printf "SELECT task_id FROM concurrency.dequeue('benchfin_%s');\n" "$q" >"$work/claim_$q.sql"
	done
	need=$((T * 15000 + 20000))
	: >"$work/e"; : >"$work/r"; : >"$work/rr"
	for round in $(seq 1 "$PAIRS"); do
		sides=(empty retained); [ $((round % 2)) = 0 ] && sides=(retained empty)
		declare -A got=()
		for side in "${sides[@]}"; do
			fill "benchfin_$side" "$need"
			got[$side]=$(tps "claim_$side.sql" 1)
			[ "$(left "benchfin_$side")" -gt 0 ] || { echo "the queue ran dry: raise the fill" >&2; exit 1; }
		done
		echo "${got[empty]}" >>"$work/e"; echo "${got[retained]}" >>"$work/r"
		# cost ratio: time per claim with retained tasks / without
		ratio "${got[empty]}" "${got[retained]}" >>"$work/rr"; echo >>"$work/rr"
	done
	done_rows=$(psql -X -At -c "SELECT count(*) FROM concurrency.\"q_benchfin_retained\" WHERE state = 'done'")
	echo "== 2. claims per second, 1 client, median of $PAIRS pairs of ${T} s ($done_rows retained done tasks)"
	printf '%-44s %10s\n' "claim, queue retaining nothing" "$(median <"$work/e")"
	printf '%-44s %10s\n' "claim, queue with the retained tasks" "$(median <"$work/r")"
	printf '%-44s %10s  (range %s, goal <= 1.2)\n' "cost ratio retained / empty" "$(median <"$work/rr")" "$(range <"$work/rr")"
fi
