#!/usr/bin/env bash
# Task-queue benchmarks: concurrency_ext side by side with the raw SKIP LOCKED
# SQL it replaces, in one run, reported as ratios (median over alternating
# A/B pairs: the machine's other load shows in the absolute numbers, and the
# order of the two sides changes from pair to pair).
#
#   PGHOST=… PGPORT=… PGDATABASE=… bash bench/queue.sh
#
# Needs pgbench and psql on PATH, a server with concurrency_ext installed (or a
# role that may CREATE EXTENSION), max_connections ≥ 300 for benchmark 2, and
# for benchmark 4 a server on this machine (it reads the backend's CPU time
# from /proc). It creates and drops its own queues (bench_*) and table
# (bench_raw_jobs). Environment:
#   BENCH_SECONDS  length of one pgbench run (default 3)
#   BENCH_PAIRS    A/B pairs per comparison (default 5)
#   BENCH_CLIENTS  client counts of benchmark 1 (default "1 8 32")
#   BENCH_ONLY     run only these benchmarks, e.g. "1 3" (default: all)
#   BENCH_SYNC     synchronous_commit of every session (default on; "off"
#                  takes the WAL flush out of the figures: CPU-bound)
#
# 1. dequeue + complete, two autocommit calls per task (as a worker without
#    the combined loop does), against the seed's raw SQL: UPDATE … WHERE id =
#    (SELECT … ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING, then
#    DELETE, on a jobs table with a primary key only.
# 2. the same at 8 clients with 250 idle connections open, against the same
#    without them, for each side.
# 3. the worker loop of one transaction per task — complete task N and claim
#    task N+1, then COMMIT — against the raw SQL doing the same (DELETE + the
#    next claim in one transaction), 8 clients.
# 4. backend CPU time per task (synchronous_commit = off, one client sending
#    benchmark 1's statements), read from /proc/<backend pid>/stat.
# 5. claim latency with 100,000 leased and scheduled tasks ahead of the first
#    claimable one, against an empty backlog; for contrast, the raw SQL's
#    claim with 100,000 running jobs ahead, against none.
# 6. throughput while another session holds an old snapshot (pinned xmin
#    horizon) for the whole run, against none, 4 clients.
# 7. keyed concurrency: the latency of a claim that finds the one claimable
#    task behind 100,000 ready tasks of one busy serial key, against a claim
#    of the one task of an otherwise empty queue (BEGIN; dequeue; ROLLBACK).
# 8. keyed concurrency: dequeue + complete on a queue of 1,000 serial keys
#    (key_limit 1) against the same queue without keys, 8 clients.
# 9. what the guarantees cost, at the largest client count of benchmark 1:
#    the extension against the raw SQL on a jobs table that has the two
#    indexes the extension keeps for its guarantees — (id) WHERE status =
#    'pending', so that claims stay flat behind leased tasks (benchmark 5),
#    and (taken_at) WHERE status = 'running', so that expired leases are found
#    without a scan — and the WAL each of the three sides writes per task.
# 10. fair claims (alter_queue(…, fair => true)): dequeue + complete on a
#    queue of 1,000 keys with 100 ready tasks each, fair against the same
#    queue not fair, 8 clients.
# 11. fair claims: how many claims it takes until a lone task enqueued
#    behind another key's 100,000 ready tasks is claimed, fair and not fair
#    (one session, one claim per transaction; counted up to 1,000).
set -euo pipefail
cd "$(dirname "$0")"
T=${BENCH_SECONDS:-3}
PAIRS=${BENCH_PAIRS:-5}
CLIENTS=${BENCH_CLIENTS:-"1 8 32"}
ONLY=${BENCH_ONLY:-"1 2 3 4 5 6 7 8 9 10 11"}
export PGOPTIONS="${PGOPTIONS:-} -c synchronous_commit=${BENCH_SYNC:-on}"
work=$(mktemp -d)
bg_pids=()
cleanup() {
	for p in "${bg_pids[@]}"; do kill "$p" 2>/dev/null || true; done
	psql -X -q -o /dev/null -c "SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name LIKE 'bench\_%'" \
		-c "DROP TABLE IF EXISTS bench_raw_jobs, bench_raw_indexed" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
wanted() { [[ " $ONLY " == *" $1 "* ]]; }

sql() { psql -X -q -v ON_ERROR_STOP=1 -o /dev/null "$@"; }
jobs_for() { [ "$1" -ge 2 ] && echo 2 || echo 1; } # pgbench threads: this is for small machines

sql -c "CREATE EXTENSION IF NOT EXISTS concurrency_ext"
sql <<'SQL'
SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name LIKE 'bench\_%';
DROP TABLE IF EXISTS bench_raw_jobs, bench_raw_indexed;
SELECT concurrency.create_queue('bench_q');
SELECT concurrency.create_queue('bench_ahead');
SELECT concurrency.create_queue('bench_keys', key_limit => 1);
SELECT concurrency.create_queue('bench_one');
SELECT concurrency.create_queue('bench_fair');
SELECT concurrency.alter_queue('bench_fair', fair => true);
SELECT concurrency.create_queue('bench_unfair');
-- the seed's job table: what teams write by hand
CREATE TABLE bench_raw_jobs (
    id       bigserial PRIMARY KEY,
    status   text        NOT NULL DEFAULT 'pending',
    payload  jsonb       NOT NULL,
    attempts integer     NOT NULL DEFAULT 0,
    taken_at timestamptz
);
-- the same with the indexes of the extension's guarantees (benchmark 9); its
-- own bigserial (LIKE … INCLUDING ALL would share bench_raw_jobs' sequence)
CREATE TABLE bench_raw_indexed (
    id       bigserial PRIMARY KEY,
    status   text        NOT NULL DEFAULT 'pending',
    payload  jsonb       NOT NULL,
    attempts integer     NOT NULL DEFAULT 0,
    taken_at timestamptz
);
CREATE INDEX ON bench_raw_indexed (id) WHERE status = 'pending';
CREATE INDEX ON bench_raw_indexed (taken_at) WHERE status = 'running';
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
cat >"$work/raw.sql" <<'EOF2'
UPDATE bench_raw_jobs SET status = 'running', attempts = attempts + 1, taken_at = now()
 WHERE id = (SELECT id FROM bench_raw_jobs WHERE status = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id, payload \gset
DELETE FROM bench_raw_jobs WHERE id = :id;
EOF2
# one transaction per task: finish the task in hand (none on the first
# round: -D task_id=0) and claim the next
cat >"$work/ours_loop.sql" <<'EOF2'
BEGIN;
SELECT concurrency.complete('bench_q', :task_id, :lease_token) WHERE :task_id > 0;
SELECT task_id, lease_token FROM concurrency.dequeue('bench_q') \gset
COMMIT;
EOF2
cat >"$work/raw_loop.sql" <<'EOF2'
BEGIN;
DELETE FROM bench_raw_jobs WHERE id = :id;
UPDATE bench_raw_jobs SET status = 'running', attempts = attempts + 1, taken_at = now()
 WHERE id = (SELECT id FROM bench_raw_jobs WHERE status = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id, payload \gset
COMMIT;
EOF2
sed 's/bench_raw_jobs/bench_raw_indexed/g' "$work/raw.sql" >"$work/raw_indexed.sql"
echo '\sleep 600 s' >"$work/idle.sql"
for q in bench_keys bench_one bench_fair bench_unfair; do
	printf 'BEGIN;\nSELECT task_id FROM concurrency.dequeue(%s);\nROLLBACK;\n' "'$q'" >"$work/peek_$q.sql"
	printf 'SELECT task_id, lease_token FROM concurrency.dequeue(%s) \\gset\nSELECT concurrency.complete(%s, :task_id, :lease_token);\n' \
		"'$q'" "'$q'" >"$work/work_$q.sql"
done

# ---- data ---------------------------------------------------------------------
# Fresh rows before every run, so that each side starts from the same state.
load() { # queue|raw|raw_indexed rows
	if [ "$1" = queue ]; then
		sql -c 'TRUNCATE concurrency."q_bench_q"' \
			-c "INSERT INTO concurrency.\"q_bench_q\" (payload) SELECT jsonb_build_object('n', i) FROM generate_series(1, $2) AS i" \
			-c 'VACUUM ANALYZE concurrency."q_bench_q"'
	else
		local table=bench_raw_jobs
		[ "$1" = raw_indexed ] && table=bench_raw_indexed
		sql -c "TRUNCATE $table" \
			-c "INSERT INTO $table (payload) SELECT jsonb_build_object('n', i) FROM generate_series(1, $2) AS i" \
			-c "VACUUM ANALYZE $table"
	fi
}
rows_for() { echo $((${2:-$T} * 3000 * ($1 > 4 ? 4 : $1) + 20000)); } # comfortably more than a run can take
check_left() { # table [condition]: a run that drained its table would flatter itself
	if [ "$(psql -X -At -c "SELECT count(*) FROM $1 WHERE ${2:-state = 'ready'}")" -lt 100 ]; then
		echo "warning: $1 ran out of tasks during the run; raise the row counts in bench/queue.sh" >&2
	fi
}

# ---- running pgbench ----------------------------------------------------------
# run <script> <clients> [seconds] [pgbench options…] -> "tps latency_ms first_statement_ms"
run() {
	local script=$1 c=$2 s=${3:-$T} out
	shift 3 || shift $#
	out=$(pgbench -n -r -f "$work/$script" -c "$c" -j "$(jobs_for "$c")" -T "$s" "$@" 2>&1) || {
		echo "pgbench failed:" >&2
		echo "$out" >&2
		exit 1
	}
	local tps lat first
	tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$out")
	lat=$(sed -n 's/^latency average = \([0-9.]*\) ms/\1/p' <<<"$out")
	first=$(sed -n '/statement latencies/{n;p;q}' <<<"$out" | awk '{print $1}')
	echo "$tps $lat $first"
}
# one side of a comparison, on fresh rows: side clients [seconds] -> tps
side() {
	local tps
	case $1 in
	ours) load queue "$(rows_for "$2")"; read -r tps _ <<<"$(run ours.sql "$2" "${3:-$T}")"; check_left 'concurrency."q_bench_q"' ;;
	raw) load raw "$(rows_for "$2")"; read -r tps _ <<<"$(run raw.sql "$2" "${3:-$T}")"; check_left bench_raw_jobs "status = 'pending'" ;;
	ours_loop) load queue "$(rows_for "$2")"; read -r tps _ <<<"$(run ours_loop.sql "$2" "$T" -D task_id=0 -D lease_token=0)"; check_left 'concurrency."q_bench_q"' ;;
	raw_indexed) load raw_indexed "$(rows_for "$2")"; read -r tps _ <<<"$(run raw_indexed.sql "$2" "${3:-$T}")"; check_left bench_raw_indexed "status = 'pending'" ;;
	raw_loop) load raw "$(rows_for "$2")"; read -r tps _ <<<"$(run raw_loop.sql "$2" "$T" -D id=0)"; check_left bench_raw_jobs "status = 'pending'" ;;
	esac
	echo "$tps"
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) printf "%s", v[(NR + 1) / 2]; else printf "%.3f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# pairs <a-command> <b-command>: PAIRS alternating pairs (A first, then B
# first, …); prints "median_a median_b median_of_ratios range_of_ratios"
pairs() {
	local a b r
	: >"$work/a" >"$work/b" >"$work/r"
	for ((p = 0; p < PAIRS; p++)); do
		if ((p % 2 == 0)); then a=$(eval "$1"); b=$(eval "$2"); else b=$(eval "$2"); a=$(eval "$1"); fi
		echo "$a" >>"$work/a"; echo "$b" >>"$work/b"; ratio "$a" "$b" >>"$work/r"; echo >>"$work/r"
	done
	echo "$(median <"$work/a") $(median <"$work/b") $(median <"$work/r") $(sort -g "$work/r" | sed -n '1p;$p' | paste -sd- -)"
}
declare -a summary
emit() { summary+=("$1"); printf '%s\n' "$1"; }
line() { emit "$(printf '%-52s %10s %10s %7s %11s   %s' "$@")"; }
header() { emit ""; emit "== $1"; line "" "$2" "$3" "ratio" "range" "goal"; }

# ---- 1. dequeue + complete vs raw SQL ------------------------------------------
if wanted 1; then
	header "1. dequeue + complete vs raw SQL (tps, median of $PAIRS pairs of ${T} s)" "extension" "raw SQL"
	for c in $CLIENTS; do
		read -r a b r range <<<"$(pairs "side ours $c" "side raw $c")"
		line "$c client(s), two autocommit calls per task" "$a" "$b" "$r" "$range" ">= 1.0"
	done
fi

# ---- 2. 250 idle connections ---------------------------------------------------
if wanted 2; then
	header "2. 250 idle connections open vs none (tps, 8 clients)" "none" "250 idle"
	idle_side() { # side idle|none -> tps
		local tps pid
		if [ "$2" = idle ]; then
			pgbench -n -f "$work/idle.sql" -c 250 -j 2 -T 600 >/dev/null 2>&1 &
			pid=$!; bg_pids+=("$pid")
			for _ in $(seq 100); do
				[ "$(psql -X -At -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgbench' AND state = 'idle'")" -ge 250 ] && break
				sleep 0.2
			done
		fi
		tps=$(side "$1" 8)
		if [ "$2" = idle ]; then kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; fi
		echo "$tps"
	}
	# (each pair's ratio is with / without)
	read -r a b r range <<<"$(pairs "idle_side ours idle" "idle_side ours none")"
	line "extension: dequeue + complete" "$b" "$a" "$r" "$range" ">= 0.9"
	read -r a b r range <<<"$(pairs "idle_side raw idle" "idle_side raw none")"
	line "raw SQL (contrast)" "$b" "$a" "$r" "$range" "-"
fi

# ---- 3. one transaction per task ------------------------------------------------
if wanted 3; then
	header "3. complete + next claim in one transaction (tps, 8 clients)" "extension" "raw SQL"
	read -r a b r range <<<"$(pairs "side ours_loop 8" "side raw_loop 8")"
	line "one commit per task" "$a" "$b" "$r" "$range" ">= 1.0"
	read -r a b r range <<<"$(pairs "side ours_loop 8" "side ours 8")"
	line "extension: one transaction vs two per task" "$a" "$b" "$r" "$range" "-"
fi

# ---- 4. backend CPU per task ----------------------------------------------------
if wanted 4; then
	header "4. backend CPU time per task (µs, synchronous_commit = off)" "extension" "raw SQL"
	N=4000
	cpu_side() { # ours|raw -> µs of backend CPU per task
		local f=$work/cpu_$1.sql
		{
			echo "SET synchronous_commit = off;"
			echo "SELECT pg_backend_pid() AS pid \\gset"
			echo "\\setenv BENCH_PID :pid"
			echo "\\! awk '{print \$14 + \$15}' /proc/\$BENCH_PID/stat >$work/cpu_start"
			awk -v n=$N '{ s = s $0 "\n" } END { for (i = 0; i < n; i++) printf "%s", s }' "$work/$1.sql"
			echo "\\! awk '{print \$14 + \$15}' /proc/\$BENCH_PID/stat >$work/cpu_end"
		} >"$f"
		if [ "$1" = ours ]; then load queue $((N + 1000)); else load raw $((N + 1000)); fi
		psql -X -q -o /dev/null -v ON_ERROR_STOP=1 -f "$f"
		awk -v n=$N -v hz="$(getconf CLK_TCK)" -v s="$(cat "$work/cpu_start")" -v e="$(cat "$work/cpu_end")" \
			'BEGIN { printf "%.1f", (e - s) * 1e6 / hz / n }'
	}
	read -r a b r range <<<"$(pairs "cpu_side ours" "cpu_side raw")"
	line "dequeue + complete, one client" "$a" "$b" "$r" "$range" "<= 1.0"
fi

# ---- 5. 100,000 leased and scheduled tasks ahead --------------------------------
if wanted 5; then
	header "5. claim latency, 100k tasks ahead vs empty backlog (ms, 1 client)" "empty" "100k ahead"
	ready=$((T * 3000 + 20000))
	# 50,000 leased (the lowest ids, long leases) and 50,000 scheduled at a
	# higher priority: all ahead of the first claimable task, by id and priority
	ahead_side() { # empty|ahead -> latency of the dequeue statement
		local deq
		if [ "$1" = empty ]; then
			load queue "$ready"; read -r _ _ deq <<<"$(run ours.sql 1)"
		else
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
			read -r _ _ deq <<<"$(run ours_ahead.sql 1)"
		fi
		echo "$deq"
	}
	read -r a b r range <<<"$(pairs "ahead_side ahead" "ahead_side empty")"
	line "dequeue statement" "$b" "$a" "$r" "$range" "<= 1.2"
	# the raw SQL's table has no index on pending jobs: its claim walks the
	# running ones ahead of the first pending job
	raw_ahead_side() { # empty|ahead -> latency of the claiming UPDATE
		local deq
		if [ "$1" = ahead ]; then
			load raw 100000
			sql -c "UPDATE bench_raw_jobs SET status = 'running', taken_at = now()" \
				-c "INSERT INTO bench_raw_jobs (payload) SELECT jsonb_build_object('n', i) FROM generate_series(1, $ready) AS i" \
				-c "VACUUM ANALYZE bench_raw_jobs"
		else
			load raw "$ready"
		fi
		read -r _ _ deq <<<"$(run raw.sql 1)"
		echo "$deq"
	}
	read -r a b r range <<<"$(pairs "raw_ahead_side ahead" "raw_ahead_side empty")"
	line "raw SQL's claiming UPDATE (contrast)" "$b" "$a" "$r" "$range" "-"
fi

# ---- 6. pinned xmin ----------------------------------------------------------------
if wanted 6; then
	header "6. throughput with a pinned xmin vs none (tps, 4 clients)" "no pin" "pinned"
	pinned_side() { # side free|pinned -> tps
		local tps pid
		if [ "$2" = pinned ]; then
			psql -X -q -o /dev/null -c "BEGIN ISOLATION LEVEL REPEATABLE READ" -c "SELECT count(*) FROM pg_class" \
				-c "SELECT pg_sleep($T + 30)" 2>/dev/null &
			pid=$!; bg_pids+=("$pid")
			sleep 0.5
		fi
		tps=$(side "$1" 4)
		if [ "$2" = pinned ]; then
			psql -X -q -o /dev/null -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(%' AND datname = current_database() AND pid <> pg_backend_pid()"
			wait "$pid" 2>/dev/null || true
		fi
		echo "$tps"
	}
	read -r a b r range <<<"$(pairs "pinned_side ours pinned" "pinned_side ours free")"
	line "dequeue + complete" "$b" "$a" "$r" "$range" ">= 0.8"
	read -r a b r range <<<"$(pairs "pinned_side raw pinned" "pinned_side raw free")"
	line "raw SQL (contrast)" "$b" "$a" "$r" "$range" "-"
fi

# ---- 7. a claim behind a busy serial key ------------------------------------------
if wanted 7; then
	header "7. claim latency: 1 claimable task behind 100k of a busy serial key vs alone (ms)" "alone" "behind"
	sql <<'SQL'
TRUNCATE concurrency."q_bench_one", concurrency."q_bench_keys";
SELECT concurrency.enqueue('bench_one', '{}');
-- the busy key: its head is leased, 100,000 tasks wait behind it
SELECT concurrency.enqueue('bench_keys', '{}', concurrency_key => 'busy');
SELECT count(*) FROM concurrency.dequeue('bench_keys', lease => '1 day');
-- (inserted as enqueue would: behind the leased head, blocked)
INSERT INTO concurrency."q_bench_keys" (state, concurrency_key, payload)
  SELECT 'blocked', 'busy', '{}' FROM generate_series(1, 100000);
SELECT concurrency.enqueue('bench_keys', '{}', concurrency_key => 'other');
VACUUM ANALYZE concurrency."q_bench_one";
VACUUM ANALYZE concurrency."q_bench_keys";
SQL
	# the latency of the dequeue statement (the second of the script)
	peek_side() {
		local out
		out=$(pgbench -n -r -f "$work/peek_$1.sql" -c 1 -T "$T" 2>&1)
		sed -n '/statement latencies/,$p' <<<"$out" | grep -m1 'dequeue' | awk '{print $1}'
	}
	read -r a b r range <<<"$(pairs "peek_side bench_keys" "peek_side bench_one")"
	line "dequeue statement" "$b" "$a" "$r" "$range" "<= 2.0"
fi

# ---- 8. 1,000 serial keys ---------------------------------------------------------
if wanted 8; then
	header "8. dequeue + complete, 1,000 serial keys vs no keys (tps, 8 clients)" "keys" "no keys"
	keys_side() { # bench_keys|bench_one -> tps
		local tps key="NULL"
		[ "$1" = bench_keys ] && key="'k' || (i % 1000)"
		# the tasks as enqueue leaves them: with keys, the first task of each
		# key ready and the others blocked behind it
		sql -c "TRUNCATE concurrency.\"q_$1\"" \
			-c "INSERT INTO concurrency.\"q_$1\" (state, concurrency_key, payload)
			    SELECT CASE WHEN $key IS NULL OR i <= 1000 THEN 'ready' ELSE 'blocked' END, $key, jsonb_build_object('n', i)
			      FROM generate_series(1, $(rows_for 8)) AS i" \
			-c "INSERT INTO concurrency.\"k_$1\" SELECT DISTINCT concurrency_key FROM concurrency.\"q_$1\"
			    WHERE concurrency_key IS NOT NULL ON CONFLICT DO NOTHING" \
			-c "VACUUM ANALYZE concurrency.\"q_$1\""
		read -r tps _ <<<"$(run "work_$1.sql" 8)"
		echo "$tps"
	}
	read -r a b r range <<<"$(pairs "keys_side bench_keys" "keys_side bench_one")"
	line "two autocommit calls per task" "$a" "$b" "$r" "$range" ">= 0.7"
fi

# ---- 9. what the guarantees cost -------------------------------------------------
if wanted 9; then
	top=$(tr ' ' '\n' <<<"$CLIENTS" | sort -n | tail -1)
	header "9. the raw SQL with the extension's two partial indexes (tps, $top clients)" "extension" "raw+indexes"
	read -r a b r range <<<"$(pairs "side ours $top" "side raw_indexed $top")"
	line "two autocommit calls per task" "$a" "$b" "$r" "$range" "-"
	# WAL per task: each side's run from a checkpoint, the WAL written over the
	# tasks it finished (full-page images included, as in any run)
	wal_side() { # ours|raw|raw_indexed clients -> WAL bytes per task
		local script=$1.sql start end out n
		case $1 in ours) load queue "$(rows_for "$2")" ;; *) load "$1" "$(rows_for "$2")" ;; esac
		sql -c CHECKPOINT
		start=$(psql -X -At -c "SELECT pg_current_wal_insert_lsn()")
		out=$(pgbench -n -f "$work/$script" -c "$2" -j "$(jobs_for "$2")" -T "$T" 2>&1)
		end=$(psql -X -At -c "SELECT pg_current_wal_insert_lsn()")
		n=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$out")
		psql -X -At -c "SELECT round(pg_wal_lsn_diff('$end', '$start') / greatest($n, 1))"
	}
	read -r a b r range <<<"$(pairs "wal_side ours $top" "wal_side raw $top")"
	line "WAL bytes per task: extension vs raw SQL" "$a" "$b" "$r" "$range" "-"
	read -r a b r range <<<"$(pairs "wal_side ours $top" "wal_side raw_indexed $top")"
	line "WAL bytes per task: extension vs raw+indexes" "$a" "$b" "$r" "$range" "-"
fi

# ---- 10. fair claims, 1,000 keys ----------------------------------------------------
if wanted 10; then
	header "10. dequeue + complete, 1,000 keys, fair vs not fair (tps, 8 clients)" "fair" "not fair"
	fair_side() { # bench_fair|bench_unfair -> tps
		local tps
		# 100 tasks of each of the 1,000 keys, enqueued key after key
		sql -c "TRUNCATE concurrency.\"q_$1\"" \
			-c "INSERT INTO concurrency.\"q_$1\" (concurrency_key, payload)
			    SELECT 'k' || (i / 100), jsonb_build_object('n', i) FROM generate_series(0, 99999) AS i" \
			-c "VACUUM ANALYZE concurrency.\"q_$1\""
		read -r tps _ <<<"$(run "work_$1.sql" 8)"
		check_left "concurrency.\"q_$1\""
		echo "$tps"
	}
	read -r a b r range <<<"$(pairs "fair_side bench_fair" "fair_side bench_unfair")"
	line "two autocommit calls per task" "$a" "$b" "$r" "$range" ">= 0.8"
fi

# ---- 11. a lone task behind another key's 100,000 ---------------------------------
if wanted 11; then
	emit ""
	emit "== 11. claims until a lone task behind another key's 100,000 ready tasks is claimed"
	lone_claims() { # bench_fair|bench_unfair -> claims
		sql -c "TRUNCATE concurrency.\"q_$1\"" \
			-c "INSERT INTO concurrency.\"q_$1\" (concurrency_key, payload)
			    SELECT 'busy', jsonb_build_object('n', i) FROM generate_series(1, 100000) AS i" \
			-c "VACUUM ANALYZE concurrency.\"q_$1\"" \
			-c "SELECT count(*) FROM concurrency.dequeue('$1', 10)" \
			-c "SELECT concurrency.enqueue('$1', '{\"lone\": true}', concurrency_key => 'lone')"
		# claim one task at a time (leases of an hour: none expires meanwhile),
		# each in a transaction of its own as workers do, until the lone one
		# is leased or 1,000 claims have passed
		PGOPTIONS="$PGOPTIONS -c synchronous_commit=off" psql -X -At -v ON_ERROR_STOP=1 -c "DO \$\$
			BEGIN
			    FOR n IN 1..1000 LOOP
			        PERFORM concurrency.dequeue('$1', lease => '1 hour');
			        COMMIT;
			        PERFORM set_config('bench.claims', n::text, false);
			        IF EXISTS (SELECT FROM concurrency.\"q_$1\" WHERE concurrency_key = 'lone' AND state = 'leased') THEN
			            RETURN;
			        END IF;
			        PERFORM set_config('bench.claims', '> 1000', false);
			    END LOOP;
			END \$\$" -c "SELECT current_setting('bench.claims')"
	}
	fair_n=$(lone_claims bench_fair | tail -1)
	unfair_n=$(lone_claims bench_unfair | tail -1)
	emit "$(printf '%-52s %10s   goal %s' "fair: claims until the lone task" "$fair_n" "<= 2")"
	emit "$(printf '%-52s %10s   goal %s' "not fair: claims until the lone task" "$unfair_n" "-")"
fi

printf '\n==== summary (%s, load average at the end: %s)\n' "$(psql -X -At -c 'SELECT version()' | cut -d' ' -f1-2)" \
	"$(cut -d' ' -f1-3 /proc/loadavg)"
printf '%s\n' "${summary[@]}"
