#!/usr/bin/env bash
# Lock diagnostics benchmark, side by side with the raw SQL it replaces.
#
#  A. The cost of one look: N sessions (300 by default) queued behind a
#     waiting DDL lock, which waits behind an idle transaction (the sessions
#     take ACCESS EXCLUSIVE as ALTER TABLE does, ACCESS SHARE as SELECT does,
#     with LOCK TABLE). pgbench runs
#     each query alone for DURATION seconds, ROUNDS times, interleaved:
#       raw edges    SELECT pid, pg_blocking_pids(pid) FROM pg_stat_activity
#       recursive    a typical recursive-CTE lock tree over pg_blocking_pids
#                    (root, depth, path, blocked count, state, query)
#       lock_waits   SELECT * FROM concurrency.lock_waits
#       lock_tree    SELECT * FROM concurrency.lock_tree
#  B. The cost to others: pgbench's simple-update workload (-N: TPC-B-like
#     without the branch and teller updates; 8 clients, synchronous_commit
#     off) with no poller, with lock_tree polled every 100 ms, and with the
#     raw edges polled every 100 ms, alternating with unpolled runs, while the
#     incident of A is still in place (so every poll walks N waiters). The
#     waiting sessions hold back the xmin horizon, as in a real incident: with
#     the full TPC-B-like script the hot branch rows would bloat and the
#     throughput fall run after run; -N updates random accounts only.
#
# Connection: the usual PG* environment variables (the database must have
# concurrency_ext; it needs max_connections >= N + 20). Prints median
# latencies, throughputs and ratios. Everything it creates is dropped at the end.
# Usage: PGDATABASE=... bench/diag.sh   (N=300 DURATION=2 ROUNDS=5 TPCB_DURATION=4 TPCB_ROUNDS=4)
set -euo pipefail
N=${N:-300}
DURATION=${DURATION:-2}
ROUNDS=${ROUNDS:-5}
TPCB_DURATION=${TPCB_DURATION:-4}
TPCB_ROUNDS=${TPCB_ROUNDS:-4}
work=$(mktemp -d)
psqlq() { psql -X -q -A -t "$@"; }

max=$(psqlq -c "SHOW max_connections")
[ "$max" -ge $((N + 20)) ] || { echo "max_connections is $max: need at least $((N + 20)) for N=$N" >&2; exit 2; }
psqlq -c "SELECT 1 FROM pg_extension WHERE extname = 'concurrency_ext'" | grep -q 1 \
  || { echo "concurrency_ext is not installed in this database" >&2; exit 2; }

holder=
readers=
alter=
cleanup() {
  [ -n "$holder" ] && { exec {holder}>&-; holder=; }
  for p in $alter $readers; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  PGOPTIONS= psql -X -q -c "DROP SCHEMA IF EXISTS bench_diag CASCADE" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

waiting() { psqlq -c "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"; }
# wait_until "what" command...: polls the command for up to a minute
wait_until() {
  local what=$1; shift
  for _ in $(seq 1 600); do "$@" && return 0; sleep 0.1; done
  echo "gave up waiting for: $what" >&2; exit 1
}
holder_idle() { [ "$(psqlq -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'bench_holder' AND state = 'idle in transaction'")" = 1 ]; }
waiting_at_least() { [ "$(waiting)" -ge "$1" ]; }

echo "== setting up: an idle transaction, a DDL lock waiting for it, $N readers queued behind the DDL"
# everything the benchmark creates lives in the schema bench_diag, dropped at the end
psqlq -c "DROP SCHEMA IF EXISTS bench_diag CASCADE" -c "CREATE SCHEMA bench_diag" \
      -c "CREATE TABLE bench_diag.incident (id int PRIMARY KEY)" -c "INSERT INTO bench_diag.incident VALUES (1)"
exec {holder}> >(PGAPPNAME=bench_holder psql -X -q >/dev/null 2>&1)
echo "BEGIN; LOCK TABLE bench_diag.incident IN ACCESS SHARE MODE;" >&"$holder"
wait_until "the idle transaction" holder_idle
PGAPPNAME=bench_ddl psql -X -q -c "BEGIN; LOCK TABLE bench_diag.incident IN ACCESS EXCLUSIVE MODE; COMMIT" >/dev/null 2>&1 &
alter=$!
wait_until "the DDL to wait" waiting_at_least 1
printf '%s\n' 'BEGIN;' 'LOCK TABLE bench_diag.incident IN ACCESS SHARE MODE;' 'COMMIT;' >"$work/reader.sql"
PGAPPNAME=bench_reader pgbench -n -c "$N" -j 2 -t 1 -f "$work/reader.sql" >/dev/null 2>&1 &
readers=$!
wait_until "$N readers to wait" waiting_at_least $((N + 1))
echo "   $(waiting) sessions wait for a lock; $(psqlq -c "SELECT count(*) FROM pg_stat_activity") backends in all"

cat >"$work/raw.sql" <<'SQL'
SELECT pid, pg_blocking_pids(pid) FROM pg_stat_activity;
SQL
cat >"$work/recursive.sql" <<'SQL'
WITH RECURSIVE activity AS (
  SELECT pid, pg_blocking_pids(pid) AS blocked_by, state, query, xact_start
    FROM pg_stat_activity
), roots AS (
  SELECT a.pid FROM activity a
   WHERE cardinality(a.blocked_by) = 0
     AND EXISTS (SELECT 1 FROM activity w WHERE a.pid = ANY (w.blocked_by))
), tree AS (
  SELECT a.pid, a.pid AS root_pid, 0 AS depth, ARRAY[a.pid] AS path
    FROM activity a JOIN roots r USING (pid)
  UNION ALL
  SELECT a.pid, t.root_pid, t.depth + 1, t.path || a.pid
    FROM tree t JOIN activity a ON t.pid = ANY (a.blocked_by)
   WHERE a.pid <> ALL (t.path)
)
SELECT t.pid, t.root_pid, t.depth, t.path, a.state, a.query, now() - a.xact_start AS xact_age,
       (SELECT count(*) FROM tree d WHERE d.path @> ARRAY[t.pid] AND d.pid <> t.pid) AS blocks_total
  FROM tree t JOIN activity a USING (pid)
 ORDER BY t.path;
SQL
echo 'SELECT * FROM concurrency.lock_waits;' >"$work/lock_waits.sql"
echo 'SELECT * FROM concurrency.lock_tree;' >"$work/lock_tree.sql"

# the answers agree before anything is timed
edges_raw=$(psqlq -c "SELECT count(*) FROM (SELECT pid, unnest(pg_blocking_pids(pid)) FROM pg_stat_activity) e")
edges_ours=$(psqlq -c "SELECT count(*) FROM concurrency.lock_waits")
tree_cte=$(psqlq -f "$work/recursive.sql" | wc -l)
tree_ours=$(psqlq -c "SELECT count(*) FROM concurrency.lock_tree")
echo "   edges: pg_blocking_pids $edges_raw, lock_waits $edges_ours; tree rows: recursive CTE $tree_cte, lock_tree $tree_ours"

tps() { sed -n 's/^tps = \([0-9.]*\).*/\1/p' | head -1; }
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

echo
echo "== A. one look at $N waiters: latency per query (median of $ROUNDS runs of ${DURATION}s, one client)"
queries="raw recursive lock_waits lock_tree"
for r in $(seq 1 "$ROUNDS"); do
  for q in $queries; do
    t=$(pgbench -n -c 1 -T "$DURATION" -f "$work/$q.sql" 2>&1 | tps)
    echo "$t" >>"$work/A_$q"
  done
done
for q in $queries; do
  m=$(median <"$work/A_$q")
  awk -v q="$q" -v t="$m" 'BEGIN {printf "   %-11s %9.3f ms  (%s runs/s)\n", q, 1000 / t, t}'
  echo "$m" >"$work/A_${q}_median"
done
ms() { awk -v t="$(cat "$work/A_$1_median")" 'BEGIN {print 1000 / t}'; }
awk -v raw="$(ms raw)" -v rec="$(ms recursive)" -v waits="$(ms lock_waits)" -v tree="$(ms lock_tree)" 'BEGIN {
  printf "   ratios: lock_tree / raw edges = %.2fx, lock_waits / raw edges = %.2fx, recursive CTE / lock_tree = %.1fx\n",
         tree / raw, waits / raw, rec / tree }'

echo
echo "== B. the cost to others: pgbench -N (simple update), 8 clients, ${TPCB_DURATION}s runs, $TPCB_ROUNDS rounds (incident still in place)"
# pgbench's tables go to the schema bench_diag too, not over any the database has
export PGOPTIONS="-c search_path=bench_diag"
pgbench -i -q -s 10 >/dev/null 2>&1
psqlq -c "CHECKPOINT"
# Runs alternate: none, lock_tree, none, raw, none, lock_tree, ... , none. Each
# polled run is compared with the mean of the unpolled runs just before and
# after it, which cancels slow drift (and other load on a shared machine);
# the ratio reported is the median of those per-run ratios.
sequence="none"
for r in $(seq 1 "$TPCB_ROUNDS"); do sequence="$sequence lock_tree none raw none"; done
: >"$work/B_runs"
for mode in $sequence; do
  poller=
  if [ "$mode" != none ]; then
    # a poller throttled to 10 queries a second: one every 100 ms
    pgbench -n -c 1 -R 10 -T $((TPCB_DURATION + 1)) -f "$work/$mode.sql" >"$work/poll_$mode" 2>&1 &
    poller=$!
    sleep 0.5
  fi
  t=$(PGOPTIONS="$PGOPTIONS -c synchronous_commit=off" pgbench -n -N -c 8 -j 2 -T "$TPCB_DURATION" 2>&1 | tps)
  echo "$mode $t" >>"$work/B_runs"
  [ -n "$poller" ] && wait "$poller"
  # every run starts from the same state: no history, vacuumed, checkpointed
  psqlq -c "TRUNCATE pgbench_history" -c "VACUUM pgbench_branches, pgbench_tellers, pgbench_accounts" -c "CHECKPOINT"
done
awk '{mode[NR] = $1; tps[NR] = $2}
     END {
       for (i = 2; i < NR; i++) if (mode[i] != "none") print mode[i], tps[i] / ((tps[i - 1] + tps[i + 1]) / 2)
     }' "$work/B_runs" >"$work/B_ratios"
for mode in none lock_tree raw; do
  printf "   %-18s tps: %s\n" "$mode" "$(awk -v m="$mode" '$1 == m {printf "%.0f ", $2}' "$work/B_runs")"
done
for mode in lock_tree raw; do
  awk -v m="$mode" '$1 == m {print $2}' "$work/B_ratios" | median >"$work/B_${mode}_ratio"
done
printf "   ratios to the unpolled runs around them (median): lock_tree polled %.3fx, raw edges polled %.3fx\n" \
  "$(cat "$work/B_lock_tree_ratio")" "$(cat "$work/B_raw_ratio")"
