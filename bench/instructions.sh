#!/usr/bin/env bash
# Instructions per operation, counted by valgrind's callgrind in a throw-away
# server, side by side with the raw SQL each operation replaces. A count of
# instructions does not move with the machine's other load, where CPU time and
# throughput on a shared machine vary by ±30 % from run to run; it leaves out
# what both sides spend alike in the kernel (the socket, the commit's wake-up
# of the WAL writer). Each figure is the difference between a session of
# $HIGH and one of $LOW operations, divided by $HIGH - $LOW, so that the
# connection's start-up and the first call's planning drop out.
#
#   PG_CONFIG=… bash bench/instructions.sh        (as root: the server runs as postgres)
#
# Needs valgrind, psql, and concurrency_ext installed into PG_CONFIG's server
# (make install). The server runs with fsync = off: an instruction count is
# the CPU cost of an operation, labelled so, never a production figure (the
# durable figures are bench/durable.sh's). About 5 minutes: everything runs about 50 times slower
# under callgrind. Environment: LOW (default 200), HIGH (default 1200).
#
# 1. dequeue + complete, two autocommit statements per task, against the
#    seed's raw SQL (bench/queue.sh, benchmark 1: UPDATE … FOR UPDATE SKIP
#    LOCKED RETURNING, then DELETE).
# 2. the same on a queue of 1,000 serial keys (key_limit 1, every key's first
#    task ready, the others blocked behind it), against the queue without keys.
# 3. one transaction taking a named lock, concurrency.xact_lock(name), against
#    pg_advisory_xact_lock(key) of the same key, as simple-protocol statements
#    (each parsed and planned per call);
# 4. the same as prepared statements;
# 5. of 1., what the queue functions' permission check costs (the function
#    queue::authorize and what it calls: the grant lookup, the role test, the
#    switch to the queue's owner), as a share of the task.
# 6. 1. on a queue with 100 schedules, none of them due (a yearly cron each:
#    every dequeue looks whether one is), against the queue without any.
# 7. 1. on a queue with a rate limit that does not hold it back (100 claims
#    per millisecond: every claim finds a free rate slot, locks it, checks
#    it again and writes its time), against the queue without a limit.
# 8. a look at an empty queue (what a polling worker pays while there is no
#    work: dequeue finding nothing), against the raw SQL's claim statement
#    of 1. on an empty table.
# 9. enqueue of one task in its own transaction, against a plain INSERT of
#    the same payload into a table with the same columns and indexes
#    (CREATE TABLE … (LIKE concurrency.q_plain INCLUDING ALL)).
set -euo pipefail
cd "$(dirname "$0")/.."
pg_config=${PG_CONFIG:-pg_config}
LOW=${LOW:-200} HIGH=${HIGH:-1200}
bin=$("$pg_config" --bindir)
command -v valgrind >/dev/null || { echo "valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
. scripts/cluster.sh

dir=$(mktemp -d /tmp/concurrency_ext-instructions.XXXXXX)
chmod 755 "$dir"; chown postgres "$dir"
port=$(free_port)
server_pid=
cleanup() {
	[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && sleep 3
	rm -rf "$dir"
}
trap cleanup EXIT
runuser -u postgres -- "$bin/initdb" -D "$dir/data" -A trust -U postgres --no-sync >"$dir/initdb.log" 2>&1
# Backends are forked, so each one is counted on its own, into cg.<pid>.out
# when it exits.
runuser -u postgres -- valgrind --quiet --tool=callgrind --callgrind-out-file="$dir/cg.%p.out" \
	"$bin/postgres" -D "$dir/data" -c port="$port" -c unix_socket_directories="$dir" -c listen_addresses= \
	-c fsync=off -c synchronous_commit=off -c autovacuum=off >"$dir/server.log" 2>&1 &
server_pid=$!
export PGHOST=$dir PGPORT=$port PGUSER=postgres PGDATABASE=postgres
for _ in $(seq 1 180); do "$bin/pg_isready" -q && break; sleep 1; done
sql() { psql -X -q -v ON_ERROR_STOP=1 -o /dev/null "$@"; }

sql <<'SQL'
CREATE EXTENSION concurrency_ext;
SELECT concurrency.create_queue('plain');
SELECT concurrency.create_queue('empty');
SELECT concurrency.create_queue('keyed', key_limit => 1);
SELECT concurrency.create_queue('sched');
SELECT concurrency.create_queue('rated', rate_limit => 100, rate_period => '1 millisecond');
SELECT count(concurrency.schedule('bench_yearly_' || n, 'sched', cron => '0 0 1 1 *')) FROM generate_series(1, 100) n;
SELECT concurrency.register_subsystem('bench_lock', 7428001, 'bench/instructions.sh');
CREATE TABLE plain_insert (LIKE concurrency.q_plain INCLUDING ALL);
CREATE TABLE raw_jobs (
    id       bigserial PRIMARY KEY,
    status   text        NOT NULL DEFAULT 'pending',
    payload  jsonb       NOT NULL,
    attempts integer     NOT NULL DEFAULT 0,
    taken_at timestamptz
);
SQL

# ---- one operation of each side ---------------------------------------------
w=$dir/ops; mkdir "$w"
for q in plain keyed sched rated; do
	printf "SELECT task_id, lease_token FROM concurrency.dequeue('%s') \\\\gset\nSELECT concurrency.complete('%s', :task_id, :lease_token);\n" \
		"$q" "$q" >"$w/$q.sql"
done
cat >"$w/raw.sql" <<'EOF'
UPDATE raw_jobs SET status = 'running', attempts = attempts + 1, taken_at = now()
 WHERE id = (SELECT id FROM raw_jobs WHERE status = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id, payload \gset
DELETE FROM raw_jobs WHERE id = :id;
EOF
echo "SELECT task_id FROM concurrency.dequeue('empty');" >"$w/empty.sql"
head -3 "$w/raw.sql" | sed 's/ \\gset$/;/' >"$w/raw_empty.sql"
echo "SELECT concurrency.enqueue('plain', '{\"n\": 1}');" >"$w/enqueue.sql"
echo "INSERT INTO plain_insert (payload) VALUES ('{\"n\": 1}');" >"$w/insert.sql"
printf "BEGIN;\nSELECT concurrency.xact_lock('bench_lock');\nCOMMIT;\n" >"$w/named_lock.sql"
printf "BEGIN;\nSELECT pg_advisory_xact_lock(7428001);\nCOMMIT;\n" >"$w/advisory_lock.sql"
# the same as prepared statements (what drivers using the extended protocol
# and pgbench -M prepared do): parsed and planned once per session, so the
# function's default arguments are not expanded per call
echo "PREPARE lock AS SELECT concurrency.xact_lock('bench_lock');" >"$w/named_prepared.pre.sql"
echo "PREPARE lock AS SELECT pg_advisory_xact_lock(7428001);" >"$w/advisory_prepared.pre.sql"
printf "BEGIN;\nEXECUTE lock;\nCOMMIT;\n" | tee "$w/named_prepared.sql" >"$w/advisory_prepared.sql"

fill() { # side rows: fresh tasks (or rows) for a session of that side (locks need none)
	local n=$2
	case $1 in
	plain | sched | rated) sql -c "TRUNCATE concurrency.\"q_$1\"" \
		-c "INSERT INTO concurrency.\"q_$1\" (payload) SELECT jsonb_build_object('n', i) FROM generate_series(1, $n) AS i" \
		-c "VACUUM ANALYZE concurrency.\"q_$1\"" ;;
	keyed) sql -c 'TRUNCATE concurrency."q_keyed", concurrency."k_keyed"' \
		-c "INSERT INTO concurrency.\"q_keyed\" (state, concurrency_key, payload)
		    SELECT CASE WHEN i <= 1000 THEN 'ready' ELSE 'blocked' END, 'k' || (i % 1000), jsonb_build_object('n', i)
		      FROM generate_series(1, $n) AS i" \
		-c "INSERT INTO concurrency.\"k_keyed\" SELECT DISTINCT concurrency_key FROM concurrency.\"q_keyed\"" \
		-c 'VACUUM ANALYZE concurrency."q_keyed"' ;;
	empty) sql -c 'TRUNCATE concurrency."q_empty"' -c 'VACUUM ANALYZE concurrency."q_empty"' ;;
	raw_empty) sql -c 'TRUNCATE raw_jobs' -c 'VACUUM ANALYZE raw_jobs' ;;
	enqueue) sql -c 'TRUNCATE concurrency."q_plain"' ;;
	insert) sql -c 'TRUNCATE plain_insert' ;;
	raw) sql -c 'TRUNCATE raw_jobs' \
		-c "INSERT INTO raw_jobs (payload) SELECT jsonb_build_object('n', i) FROM generate_series(1, $n) AS i" \
		-c 'VACUUM ANALYZE raw_jobs' ;;
	esac
}

session() { # side n -> instructions of a backend that ran n operations
	local side=$1 n=$2 f=$dir/session.sql pid out
	fill "$side" $((n + 100))
	{
		echo "SELECT pg_backend_pid() AS pid \\gset"
		echo "\\setenv BENCH_PID :pid"
		echo "\\! echo \$BENCH_PID >$dir/pid"
		if [ -f "$w/$side.pre.sql" ]; then cat "$w/$side.pre.sql"; fi
		for _ in $(seq 1 "$n"); do cat "$w/$side.sql"; done
	} >"$f"
	psql -X -q -o /dev/null -v ON_ERROR_STOP=1 -f "$f"
	pid=$(cat "$dir/pid") out=$dir/cg.$pid.out
	for _ in $(seq 1 120); do grep -qs '^totals:' "$out" && break; sleep 1; done
	cp "$out" "$dir/$side.$n.out"
	awk '/^totals:/ { print $2 }' "$out"
}

per_op() { # side -> instructions per operation
	local a b
	a=$(session "$1" "$LOW")
	b=$(session "$1" "$HIGH")
	echo $(((b - a) / (HIGH - LOW)))
}

inclusive() { # callgrind file, function name -> instructions in it and its callees
	callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
		awk -v f="$2" 'index($0, f) { gsub(",", "", $1); print $1; exit }'
}

part_per_op() { # side function -> instructions per operation spent in the function
	local a b
	a=$(inclusive "$dir/$1.$LOW.out" "$2")
	b=$(inclusive "$dir/$1.$HIGH.out" "$2")
	echo $(((${b:-0} - ${a:-0}) / (HIGH - LOW)))
}

line() { # label ours theirs goal
	awk -v l="$1" -v a="$2" -v b="$3" -v g="$4" \
		'BEGIN { printf "%-48s %10.1f %10.1f %7.3f   %s\n", l, a / 1000, b / 1000, a / b, g }'
}

echo "instructions per operation (thousands), counted by callgrind with fsync = off: the CPU cost, not a production figure; PostgreSQL $("$pg_config" --version | awk '{print $2}')"
printf "%-48s %10s %10s %7s   %s\n" "" "extension" "compared" "ratio" "goal"
plain=$(per_op plain)
line "1. dequeue + complete vs raw SQL" "$plain" "$(per_op raw)" "<= 1.0"
line "2. the same, 1,000 serial keys vs no keys" "$(per_op keyed)" "$plain" "-"
line "3. xact_lock(name) vs pg_advisory_xact_lock" "$(per_op named_lock)" "$(per_op advisory_lock)" "-"
line "4. the same, prepared statements" "$(per_op named_prepared)" "$(per_op advisory_prepared)" "<= 1.05"
line "5. permission checks of 1. (2 calls) vs the task" "$(part_per_op plain 'queue::authorize(')" "$plain" "-"
line "6. 1. with 100 schedules on the queue vs none" "$(per_op sched)" "$plain" "<= 1.1"
line "7. 1. under a rate limit vs none" "$(per_op rated)" "$plain" "<= 1.1"
line "8. dequeue on an empty queue vs raw SQL's claim" "$(per_op empty)" "$(per_op raw_empty)" "-"
line "9. enqueue vs a plain INSERT" "$(per_op enqueue)" "$(per_op insert)" "<= 1.1"
