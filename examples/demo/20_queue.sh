#!/usr/bin/env bash
# Task queue: workers share a queue, one crashes, a stale one is fenced off
# Run by scripts/demo.sh inside a throw-away cluster (psql connects by default).
set -euo pipefail
python=/usr/bin/python3
[ -x "$python" ] || python=python3
logs=$(mktemp -d)
pids=()
trap 'kill -CONT "${pids[@]}" 2>/dev/null || true; kill "${pids[@]}" 2>/dev/null || true; rm -rf "$logs"' EXIT

sql() { psql -X -q -v ON_ERROR_STOP=1 "$@"; }
say() { printf '\n-- %s\n' "$*"; }
worker() { # name, extra args…: starts examples/worker.py in the background, output in $logs/<name>
	local name=$1; shift
	"$python" examples/worker.py --queue emails --name "$name" --poll 0.2 "$@" >"$logs/$name" 2>&1 &
	pids+=($!)
	eval "pid_$name=$!"
}
wait_for() { # file, pattern: waits (up to 30 s) until the worker's output shows it
	for _ in $(seq 300); do grep -qE "$2" "$1" && return 0; sleep 0.1; done
	echo "timed out waiting for '$2' in $1" >&2; cat "$1" >&2; return 1
}
show() { sed 's/^/   | /' "$logs/$1"; }
# true once no lease is held: by its deadline as the heartbeats last extended it
lease_ended() {
	[ "$(sql -At -c "SELECT count(*) FROM concurrency.\"q_emails\"
	                  WHERE state = 'leased' AND greatest(lease_expires_at, lease_extended_to) > clock_timestamp()")" = 0 ]
}

say "A queue with a 2-second lease, and a table for the work's results"
sql <<'SQL'
SELECT concurrency.create_queue('emails', lease => '2 seconds', max_attempts => 5);
\i examples/worker_setup.sql
SELECT concurrency.enqueue('emails', '{"to": "crash@example.org", "sleep": 5}') AS task_for_the_crash;
SELECT count(*) AS more_tasks
  FROM concurrency.enqueue_batch('emails',
         (SELECT array_agg(jsonb_build_object('to', 'user' || i || '@example.org', 'sleep', 0.2))
            FROM generate_series(1, 6) AS i));
SELECT queue, ready, scheduled, leased, expired, dead FROM concurrency.queue_stats;
SQL

say "Worker 'crashy' claims task 1 (5 s of work) and is killed with SIGKILL mid-task"
worker crashy
wait_for "$logs/crashy" "claimed task 1 "
{ kill -KILL "$pid_crashy"; wait "$pid_crashy"; } 2>/dev/null || true
show crashy
echo "   (killed: its connection is gone, the task stays leased until the lease runs out)"
sql -c "SELECT id, state, attempt, worker FROM concurrency.\"q_emails\" WHERE id = 1"

say "Workers 'alice' and 'bob' share the queue; task 1 comes back once its lease has expired"
# --drain ends at the first claim that finds nothing: start them once task 1 is claimable again
until lease_ended; do sleep 0.2; done
worker alice --drain
worker bob --drain
wait "$pid_alice" "$pid_bob"
show alice
show bob
sql <<'SQL'
SELECT task_id, attempt, worker FROM worker_results ORDER BY task_id;
SELECT queue, ready, scheduled, leased, expired, dead FROM concurrency.queue_stats;
SQL

say "A worker frozen past its lease (SIGSTOP: no heartbeats either) is fenced off"
sql -c "SELECT concurrency.enqueue('emails', '{\"to\": \"slow@example.org\", \"sleep\": 3}') AS slow_task" -At >"$logs/task"
task=$(cat "$logs/task")
worker frozen
wait_for "$logs/frozen" "claimed task $task "
kill -STOP "$pid_frozen"
echo "   (frozen holds task $task; waiting for its lease to expire)"
until lease_ended; do sleep 0.2; done
worker rescuer --drain
wait "$pid_rescuer"
show rescuer
kill -CONT "$pid_frozen"
wait_for "$logs/frozen" "fenced off"
kill -TERM "$pid_frozen"
wait "$pid_frozen" || true
show frozen
sql <<'SQL'
SELECT task_id, attempt, worker FROM worker_results WHERE payload ->> 'to' = 'slow@example.org';
SQL

say "The same fence in SQL: a stale complete() raises SQLSTATE CE001 and the worker's writes roll back"
psql -X -q 2>&1 <<'SQL'
SELECT concurrency.enqueue('emails', '{"to": "fence@example.org"}') AS t \gset
SELECT lease_token AS old_token FROM concurrency.dequeue('emails', lease => '1 millisecond') \gset
SELECT pg_sleep(0.01) \gset
SELECT attempt AS new_attempt FROM concurrency.dequeue('emails') \gset
\echo task :t was claimed again, attempt :new_attempt; the old holder now tries to finish it:
BEGIN;
INSERT INTO worker_results (task_id, attempt, worker) VALUES (:t, 1, 'stale');
SELECT concurrency.complete('emails', :t, :old_token);
\echo SQLSTATE :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT count(*) AS rows_written_by_the_stale_worker FROM worker_results WHERE worker = 'stale';
SQL

sql -c "SELECT concurrency.drop_queue('emails')" -c "DROP TABLE worker_results" >/dev/null
