#!/usr/bin/env bash
# Measures the three series drawn in docs/benchmarks.md and writes them as CSV
# (then bench/plot.sh draws them with gnuplot):
#   queue_throughput.csv  dequeue + complete (two transactions, as a worker
#                         does) against the raw SKIP LOCKED SQL on a plain jobs
#                         table, tps per number of clients;
#   claim_latency.csv     latency of one claim statement with N leased and
#                         scheduled tasks ahead of the first claimable one, the
#                         extension's dequeue against the raw SQL with N
#                         running jobs ahead;
#   lock_tree_latency.csv one look at the wait graph with N sessions queued
#                         behind a waiting DDL (which waits for an idle
#                         transaction): lock_tree against the raw edges
#                         (pg_blocking_pids over pg_stat_activity) and a typical
#                         recursive-CTE lock tree.
# Each point is the median of ROUNDS runs of SECONDS, the sides alternating
# within each round; commits with synchronous_commit = off. Connection: the usual PG* variables; the database needs
# concurrency_ext installable and max_connections >= the largest N + 20.
# Usage: PGHOST=… bash bench/figures.sh [outdir]   (default docs/figures)
#   SECONDS_PER_RUN=3 ROUNDS=3 CLIENTS="1 2 4 8 16" BACKLOGS="0 1000 10000 100000"
#   WAITERS="1 50 100 200 300"
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-docs/figures}
S=${SECONDS_PER_RUN:-3}
ROUNDS=${ROUNDS:-3}
CLIENTS=${CLIENTS:-"1 2 4 8 16"}
BACKLOGS=${BACKLOGS:-"0 1000 10000 100000"}
WAITERS=${WAITERS:-"1 50 100 200 300"}
mkdir -p "$out"
# Commits do not wait for the disk: the figures compare the CPU cost of the
# statements, not the fsync latency of the machine's (shared) disk.
export PGOPTIONS="${PGOPTIONS:-} -c synchronous_commit=off"
work=$(mktemp -d)
pids=()
holder=
cleanup() {
	[ -n "$holder" ] && { exec {holder}>&-; holder=; }
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	psql -X -q -o /dev/null -c "SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name LIKE 'fig\_%'" \
		-c "DROP SCHEMA IF EXISTS bench_fig CASCADE" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
sql() { psql -X -q -v ON_ERROR_STOP=1 -o /dev/null "$@"; }
val() { psql -X -q -At -v ON_ERROR_STOP=1 "$@"; }
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
# pgbench run -> "tps first_statement_ms"
run() { # script clients
	local o
	o=$(pgbench -n -r -f "$work/$1" -c "$2" -j "$(($2 >= 2 ? 2 : 1))" -T "$S" 2>&1) || { echo "$o" >&2; exit 1; }
	echo "$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' <<<"$o") $(sed -n '/statement latencies/{n;p;q}' <<<"$o" | awk '{print $1}')"
}
version=$(val -c "SHOW server_version" | cut -d' ' -f1)

sql -c "CREATE EXTENSION IF NOT EXISTS concurrency_ext"
sql <<'SQL'
SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name LIKE 'fig\_%';
DROP SCHEMA IF EXISTS bench_fig CASCADE;
CREATE SCHEMA bench_fig;
-- the hand-written job table the queue replaces
CREATE TABLE bench_fig.jobs (
    id       bigserial PRIMARY KEY,
    status   text        NOT NULL DEFAULT 'pending',
    payload  jsonb       NOT NULL,
    attempts integer     NOT NULL DEFAULT 0,
    taken_at timestamptz
);
SELECT concurrency.create_queue('fig_q', lease => '1 hour');
SQL
cat >"$work/ext.sql" <<'EOF'
SELECT task_id, lease_token FROM concurrency.dequeue('fig_q') \gset
SELECT concurrency.complete('fig_q', :task_id, :lease_token);
EOF
cat >"$work/raw.sql" <<'EOF'
UPDATE bench_fig.jobs SET status = 'running', attempts = attempts + 1, taken_at = now()
 WHERE id = (SELECT id FROM bench_fig.jobs WHERE status = 'pending' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING id \gset
DELETE FROM bench_fig.jobs WHERE id = :id;
EOF
# fresh tasks before every run: "ahead" leased + scheduled (or running) ones
# first, then enough claimable ones for the run
load() { # ext|raw ahead ready
	if [ "$1" = ext ]; then
		sql <<SQL
SELECT concurrency.drop_queue('fig_q');
SELECT concurrency.create_queue('fig_q', lease => '1 hour');
SELECT count(*) FROM concurrency.enqueue_batch('fig_q', (SELECT array_agg('{}'::jsonb) FROM generate_series(1, $2 / 2 + 1)));
SELECT count(*) FROM concurrency.dequeue('fig_q', batch => $2 / 2 + 1, lease => '1 day');
SELECT count(*) FROM concurrency.enqueue_batch('fig_q', (SELECT array_agg('{}'::jsonb) FROM generate_series(1, $2 - $2 / 2 + 1)),
                                               run_at => now() + interval '1 day', priority => 10);
SELECT count(*) FROM concurrency.enqueue_batch('fig_q', (SELECT array_agg(jsonb_build_object('n', i)) FROM generate_series(1, $3) i));
VACUUM ANALYZE concurrency."q_fig_q";
SQL
	else
		sql <<SQL
TRUNCATE bench_fig.jobs;
INSERT INTO bench_fig.jobs (status, payload, taken_at) SELECT 'running', '{}', now() FROM generate_series(1, $2);
INSERT INTO bench_fig.jobs (payload) SELECT jsonb_build_object('n', i) FROM generate_series(1, $3) i;
VACUUM ANALYZE bench_fig.jobs;
SQL
	fi
}

echo "== queue throughput vs clients (PostgreSQL $version, ${S}s runs, median of $ROUNDS)"
echo "clients,extension_tps,raw_sql_tps" >"$out/queue_throughput.csv"
for c in $CLIENTS; do
	rows=$((S * 3000 * (c > 4 ? 4 : c) + 20000))
	: >"$work/e" >"$work/r"
	for ((r = 0; r < ROUNDS; r++)); do
		for side in $( ((r % 2)) && echo "raw ext" || echo "ext raw"); do
			load "$side" 0 "$rows"
			read -r tps _ <<<"$(run "$side.sql" "$c")"
			echo "$tps" >>"$work/${side:0:1}"
		done
	done
	e=$(median <"$work/e") r=$(median <"$work/r")
	echo "$c,$e,$r" | tee -a "$out/queue_throughput.csv"
done

echo "== claim latency vs backlog ahead (1 client, ms of the claim statement, median of $ROUNDS)"
echo "backlog,extension_ms,raw_sql_ms" >"$out/claim_latency.csv"
for n in $BACKLOGS; do
	: >"$work/e" >"$work/r"
	for ((r = 0; r < ROUNDS; r++)); do
		for side in $( ((r % 2)) && echo "raw ext" || echo "ext raw"); do
			load "$side" "$n" $((S * 3000 + 5000))
			read -r _ ms <<<"$(run "$side.sql" 1)"
			echo "$ms" >>"$work/${side:0:1}"
		done
	done
	e=$(median <"$work/e") r=$(median <"$work/r")
	echo "$n,$e,$r" | tee -a "$out/claim_latency.csv"
done

echo "== lock_tree latency vs waiters (1 client, ms per look, median of $ROUNDS)"
max=$(val -c "SHOW max_connections")
sql -c "CREATE TABLE bench_fig.incident (id int)"
exec {holder}> >(PGAPPNAME=fig_holder psql -X -q >/dev/null 2>&1)
echo "BEGIN; LOCK TABLE bench_fig.incident IN ACCESS SHARE MODE;" >&"$holder"
waiting() { val -c "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"; }
until_waiting() { for _ in $(seq 1 600); do [ "$(waiting)" -ge "$1" ] && return 0; sleep 0.1; done; echo "gave up waiting for $1 waiters" >&2; exit 1; }
sleep 0.5
PGAPPNAME=fig_ddl psql -X -q -c "BEGIN; LOCK TABLE bench_fig.incident IN ACCESS EXCLUSIVE MODE; COMMIT" >/dev/null 2>&1 &
pids+=($!)
until_waiting 1
printf '%s\n' 'BEGIN;' 'LOCK TABLE bench_fig.incident IN ACCESS SHARE MODE;' 'COMMIT;' >"$work/reader.sql"
echo 'SELECT pid, pg_blocking_pids(pid) FROM pg_stat_activity;' >"$work/edges.sql"
echo 'SELECT * FROM concurrency.lock_tree;' >"$work/tree.sql"
cat >"$work/cte.sql" <<'SQL'
WITH RECURSIVE activity AS (
  SELECT pid, pg_blocking_pids(pid) AS blocked_by, state, query, xact_start FROM pg_stat_activity
), roots AS (
  SELECT a.pid FROM activity a
   WHERE cardinality(a.blocked_by) = 0 AND EXISTS (SELECT 1 FROM activity w WHERE a.pid = ANY (w.blocked_by))
), tree AS (
  SELECT a.pid, a.pid AS root_pid, 0 AS depth, ARRAY[a.pid] AS path FROM activity a JOIN roots r USING (pid)
  UNION ALL
  SELECT a.pid, t.root_pid, t.depth + 1, t.path || a.pid
    FROM tree t JOIN activity a ON t.pid = ANY (a.blocked_by) WHERE a.pid <> ALL (t.path)
)
SELECT t.pid, t.root_pid, t.depth, t.path, a.state, a.query, now() - a.xact_start AS xact_age,
       (SELECT count(*) FROM tree d WHERE d.path @> ARRAY[t.pid] AND d.pid <> t.pid) AS blocks_total
  FROM tree t JOIN activity a USING (pid) ORDER BY t.path;
SQL
echo "waiters,lock_tree_ms,raw_edges_ms,recursive_cte_ms" >"$out/lock_tree_latency.csv"
have=1 # the DDL itself waits
for n in $WAITERS; do
	[ $((n + 20)) -le "$max" ] || { echo "max_connections $max: stopping before $n waiters" >&2; break; }
	if [ "$n" -gt "$have" ]; then
		PGAPPNAME=fig_reader pgbench -n -c $((n - have)) -j 2 -t 1 -f "$work/reader.sql" >/dev/null 2>&1 &
		pids+=($!)
		have=$n
		until_waiting "$n"
	fi
	rows=$(val -c "SELECT count(*) FROM concurrency.lock_tree")
	: >"$work/t" >"$work/e" >"$work/c"
	for ((r = 0; r < ROUNDS; r++)); do
		for q in tree edges cte; do
			read -r tps _ <<<"$(run "$q.sql" 1)"
			awk -v t="$tps" 'BEGIN {print 1000 / t}' >>"$work/${q:0:1}"
		done
	done
	echo "$n,$(median <"$work/t"),$(median <"$work/e"),$(median <"$work/c")" | tee -a "$out/lock_tree_latency.csv"
	echo "   ($rows rows in lock_tree)"
done
echo "# PostgreSQL $version, $(nproc) cores, $(date -u +%Y-%m-%d)" >"$out/README.txt"
echo "written: $out/queue_throughput.csv $out/claim_latency.csv $out/lock_tree_latency.csv"
