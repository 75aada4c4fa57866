#!/usr/bin/env bash
# Task-queue benchmarks: concurrency_ext side by side with the raw SKIP LOCKED
# SQL it replaces, in one run, reported as ratios.
#
#   PGHOST=… PGPORT=… PGDATABASE=… bash bench/queue.sh
#
# Needs pgbench and psql on PATH, a server with concurrency_ext installed and a
# role that may CREATE EXTENSION (or an existing one). It creates and drops its
# own queues (bench_*) and table (bench_raw_jobs). Environment:
#   BENCH_SECONDS         length of one pgbench run (default 3)
#   BENCH_ROUNDS          rounds of benchmarks 1 and 3, averaged (default 2)
#   BENCH_PINNED_SECONDS  length of the runs of the pinned-xmin benchmark (default 5)
#   BENCH_CLIENTS         client counts of the first benchmark (default "1 4 16")
#
# 1. dequeue + complete (two transactions, as a worker does) against the raw
#    SQL: UPDATE … WHERE id = (SELECT … ORDER BY id LIMIT 1 FOR UPDATE SKIP
#    LOCKED) RETURNING, then DELETE — on a plain jobs table with a primary key
#    ("seed"), and on the queue's own table with its indexes ("same table").
# 2. claim latency with 100,000 leased and scheduled tasks ahead of the first
#    claimable one, against an empty backlog (and the raw SQL's, for contrast).
# 3. throughput while another session holds an old snapshot (pinned xmin) for
#    the whole run, against none.
# 4. dequeue(batch => 50) against single claims, in tasks per second.
#
# The machine's other load shows in the absolute numbers; the runs compared
# run back to back, each on freshly loaded data, and the first benchmark
# alternates its sides over several rounds and averages them.
set -euo pipefail
cd "$(dirname "$0")"
T=${BENCH_SECONDS:-3}
ROUNDS=${BENCH_ROUNDS:-2}
TP=${BENCH_PINNED_SECONDS:-5}
CLIENTS=${BENCH_CLIENTS:-"1 4 16"}
work=$(mktemp -d)
pin_pid=
cleanup() {
	[ -n "$pin_pid" ] && kill "$pin_pid" 2>/dev/null
	psql -X -q -o /dev/null -c "SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name LIKE 'bench\_%'" \
		-c "DROP TABLE IF EXISTS bench_raw_jobs" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

sql() { psql -X -q -v ON_ERROR_STOP=1 -o /dev/null "$@"; }
jobs_for() { [ "$1" -ge 2 ] && echo 2 || echo 1; } # pgbench threads: this is for small machines

sql -c "CREATE EXTENSION IF NOT EXISTS concurrency_ext"
sql <<'SQL'
SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name LIKE 'bench\_%';
DROP TABLE IF EXISTS bench_raw_jobs;
SELECT concurrency.create_queue('bench_q');
SELECT concurrency.create_queue('bench_ahead');
-- the seed's job table: what teams write by hand
CREATE TABLE bench_raw_jobs (
    id       bigserial PRIMARY KEY,
    status   text        NOT NULL DEFAULT 'pending',
    payload  jsonb       NOT NULL,
    attempts integer     NOT NULL DEFAULT 0,
    taken_at timestamptz
);
SQL

# ---- the scripts -------------------------------------------------------------
cat >"$work/ours.sql" <<'EOF2'
SELECT task_id, lease_token FROM concurrency.dequeue('bench_q') \gset
SELECT concurrency.complete('bench_q', :task_id, :lease_token);
EOF2
cat >"$work/ours_ahead.sql" <<'EOF2'
SELECT task_id, lease_token FROM concurrency.dequeue('bench_ahead') \gset
SELECT concurrency.complete('bench_ahead', :task_id, :lease_token);
EOF2
cat >"$work/raw_seed.sql" <<'EOF2'
UPDATE bench_raw_jobs SET status = 'running', attempts = attempts + 1, taken_at = now()
 WHERE id = (SELECT id FROM bench_raw_jobs WHERE status = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id, payload \gset
DELETE FROM bench_raw_jobs WHERE id = :id;
EOF2
cat >"$work/raw_same.sql" <<'EOF2'
UPDATE concurrency."q_bench_q" SET state = 'leased', attempt = attempt + 1, lease_expires_at = now() + interval '30 seconds'
 WHERE id = (SELECT id FROM concurrency."q_bench_q" WHERE state = 'ready' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id, payload \gset
DELETE FROM concurrency."q_bench_q" WHERE id = :id;
EOF2
cat >"$work/batch50.sql" <<'EOF2'
SELECT count(concurrency.complete('bench_q', task_id, lease_token)) FROM concurrency.dequeue('bench_q', 50);
EOF2
cat >"$work/batch1.sql" <<'EOF2'
SELECT count(concurrency.complete('bench_q', task_id, lease_token)) FROM concurrency.dequeue('bench_q', 1);
EOF2

# ---- data ---------------------------------------------------------------------
# Fresh rows before every run, so that each side starts from the same state.
load() { # what (queue|raw), rows
	if [ "$1" = queue ]; then
		sql -c 'TRUNCATE concurrency."q_bench_q"' \
			-c "INSERT INTO concurrency.\"q_bench_q\" (payload) SELECT jsonb_build_object('n', i) FROM generate_series(1, $2) AS i" \
			-c 'VACUUM ANALYZE concurrency."q_bench_q"'
	else
		sql -c 'TRUNCATE bench_raw_jobs' \
			-c "INSERT INTO bench_raw_jobs (payload) SELECT jsonb_build_object('n', i) FROM generate_series(1, $2) AS i" \
			-c 'VACUUM ANALYZE bench_raw_jobs'
	fi
}
rows_for() { echo $((${2:-$T} * 4000 * ($1 > 4 ? 4 : $1) + 20000)); } # comfortably more than a run can take
left() { # rows still claimable in the table of a run; a run that drained it would flatter itself
	psql -X -At -c "SELECT count(*) FROM $1 WHERE ${2:-state = 'ready'}"
}
check_left() {
	if [ "$(left "$@")" -lt 100 ]; then
		echo "warning: $1 ran out of tasks during the run; raise the row counts in bench/queue.sh" >&2
	fi
}

# ---- running pgbench ----------------------------------------------------------
# run <script> <clients> [seconds] [transactions per client] -> "tps latency_ms dequeue_ms"
run() {
	local out c=$2 s=${3:-$T} length
	length=(-T "$s")
	[ -n "${4:-}" ] && length=(-t "$4")
	out=$(pgbench -n -r -f "$work/$1" -c "$c" -j "$(jobs_for "$c")" "${length[@]}" 2>&1) || {
		echo "pgbench failed:" >&2
		echo "$out" >&2
		exit 1
	}
	local tps lat first
	tps=$(sed -n 's/^tps = \([0-9]*\).*/\1/p' <<<"$out")
	lat=$(sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' <<<"$out")
	first=$(sed -n '/statement latencies/{n;p;q}' <<<"$out" | awk '{print $1}')
	echo "$tps $lat $first"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
declare -a summary
line() { summary+=("$(printf '%-58s %12s %12s %7s   %s' "$@")"); printf '%-58s %12s %12s %7s   %s\n' "$@"; }
header() { printf '\n== %s\n' "$1"; printf '%-58s %12s %12s %7s   %s\n' "" "$2" "$3" "ratio" "goal"; summary+=("" "== $1" "$(printf '%-58s %12s %12s %7s   %s' "" "$2" "$3" ratio goal)"); }

# ---- 1. dequeue + complete vs raw SQL ------------------------------------------
header "1. dequeue + complete vs raw SQL (tps, mean of $ROUNDS rounds of ${T} s)" "extension" "raw SQL"
one() { # side clients -> tps
	case $1 in
	ours) load queue "$(rows_for "$2")"; read -r tps _ <<<"$(run ours.sql "$2")"; check_left 'concurrency."q_bench_q"' ;;
	seed) load raw "$(rows_for "$2")"; read -r tps _ <<<"$(run raw_seed.sql "$2")"; check_left bench_raw_jobs "status = 'pending'" ;;
	same) load queue "$(rows_for "$2")"; read -r tps _ <<<"$(run raw_same.sql "$2")"; check_left 'concurrency."q_bench_q"' ;;
	esac
	echo "$tps"
}
mean() { awk '{ s += $1 } END { printf "%.0f", s / NR }'; }
for c in $CLIENTS; do
	: >"$work/ours" >"$work/seed" >"$work/same"
	for ((r = 0; r < ROUNDS; r++)); do
		sides=(ours seed same)
		for ((k = 0; k < 3; k++)); do # a different side goes first in each round
			side=${sides[$(((k + r) % 3))]}
			one "$side" "$c" >>"$work/$side"
		done
	done
	ours=$(mean <"$work/ours") seed=$(mean <"$work/seed") same=$(mean <"$work/same")
	line "$c client(s), raw on a jobs table (pk only, the seed)" "$ours" "$seed" "$(ratio "$ours" "$seed")" ">= 1.2"
	line "$c client(s), raw on the queue's own table" "$ours" "$same" "$(ratio "$ours" "$same")" ">= 1.2"
done

# ---- 2. 100,000 leased and scheduled tasks ahead ---------------------------------
header "2. claim latency, 100k tasks ahead vs empty backlog (ms, 1 client)" "empty" "100k ahead"
ready=$((T * 4000 + 20000))
# 50,000 leased (the lowest ids, long leases) and 50,000 scheduled at a higher
# priority: all ahead of the first claimable task, by id and by priority
sql <<SQL
TRUNCATE concurrency."q_bench_ahead";
INSERT INTO concurrency."q_bench_ahead" (state, attempt, lease_token, lease_expires_at, worker, payload)
  SELECT 'leased', 1, nextval('concurrency.lease_token'), clock_timestamp() + interval '1 day', 'busy', '{}'
    FROM generate_series(1, 50000);
INSERT INTO concurrency."q_bench_ahead" (state, priority, run_at, payload)
  SELECT 'scheduled', 10, clock_timestamp() + interval '1 day', '{}' FROM generate_series(1, 50000);
INSERT INTO concurrency."q_bench_ahead" (payload) SELECT jsonb_build_object('n', i) FROM generate_series(1, $ready) AS i;
VACUUM ANALYZE concurrency."q_bench_ahead";
SQL
load queue "$ready"
read -r _ lat_empty deq_empty <<<"$(run ours.sql 1)"
read -r _ lat_ahead deq_ahead <<<"$(run ours_ahead.sql 1)"
line "dequeue statement" "$deq_empty" "$deq_ahead" "$(ratio "$deq_ahead" "$deq_empty")" "<= 1.2"
line "dequeue + complete" "$lat_empty" "$lat_ahead" "$(ratio "$lat_ahead" "$lat_empty")" "<= 1.2"
# the raw SQL on the seed's table, 100,000 running jobs ahead (for contrast)
load raw "$ready"
read -r _ raw_empty raw_deq_empty <<<"$(run raw_seed.sql 1)"
sql <<SQL
TRUNCATE bench_raw_jobs;
INSERT INTO bench_raw_jobs (status, payload, taken_at) SELECT 'running', '{}', now() FROM generate_series(1, 100000);
INSERT INTO bench_raw_jobs (payload) SELECT jsonb_build_object('n', i) FROM generate_series(1, $ready) AS i;
VACUUM ANALYZE bench_raw_jobs;
SQL
read -r _ raw_ahead raw_deq_ahead <<<"$(run raw_seed.sql 1)"
line "raw SQL on the seed's table: claim statement (contrast)" "$raw_deq_empty" "$raw_deq_ahead" "$(ratio "$raw_deq_ahead" "$raw_deq_empty")" "-"

# ---- 3. pinned xmin ----------------------------------------------------------------
header "3. throughput with a pinned xmin vs none (tps, 4 clients, ${TP} s)" "no pin" "pinned"
pinned_run() { # script, kind -> tps while a REPEATABLE READ snapshot stays open
	psql -X -q -o /dev/null -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT count(*) FROM pg_class" \
		-c "SELECT pg_sleep($TP + 5)" 2>/dev/null &
	pin_pid=$!
	sleep 0.5
	read -r tps _ <<<"$(run "$1" 4 "$TP")"
	kill "$pin_pid" 2>/dev/null; wait "$pin_pid" 2>/dev/null || true
	pin_pid=
	psql -X -q -o /dev/null -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(%' AND datname = current_database() AND pid <> pg_backend_pid()"
	echo "$tps"
}
# alternating over the rounds, which of the two goes first
: >"$work/free" >"$work/pinned"
for ((r = 0; r < ROUNDS; r++)); do
	for ((k = 0; k < 2; k++)); do
		load queue "$(rows_for 4 "$TP")"
		if [ $(((k + r) % 2)) = 0 ]; then
			read -r tps _ <<<"$(run ours.sql 4 "$TP")"; echo "$tps" >>"$work/free"
		else
			pinned_run ours.sql >>"$work/pinned"
		fi
		check_left 'concurrency."q_bench_q"'
	done
done
free=$(mean <"$work/free") pinned=$(mean <"$work/pinned")
line "dequeue + complete (mean of $ROUNDS rounds)" "$free" "$pinned" "$(ratio "$pinned" "$free")" ">= 0.8"
load raw "$(rows_for 4 "$TP")"; read -r raw_free _ <<<"$(run raw_seed.sql 4 "$TP")"
load raw "$(rows_for 4 "$TP")"; raw_pinned=$(pinned_run raw_seed.sql)
line "raw SQL on the seed's table (contrast)" "$raw_free" "$raw_pinned" "$(ratio "$raw_pinned" "$raw_free")" "-"

# ---- 4. batch claims --------------------------------------------------------------
header "4. dequeue(batch => 50) vs single claims (tasks/s, 4 clients)" "single" "batch 50"
# a fixed amount of work (not a duration): 4 × 1500 single claims, 4 × 300 claims of 50
load queue 8000; read -r single _ <<<"$(run batch1.sql 4 "" 1500)"
load queue 62000; read -r batch _ <<<"$(run batch50.sql 4 "" 300)"
check_left 'concurrency."q_bench_q"'
batch_tasks=$(awk -v t="$batch" 'BEGIN { printf "%.0f", t * 50 }')
line "claim + complete in one statement" "$single" "$batch_tasks" "$(ratio "$batch_tasks" "$single")" "-"

printf '\n==== summary (%s)\n' "$(psql -X -At -c 'SELECT version()' | cut -d' ' -f1-2)"
printf '%s\n' "${summary[@]}"
