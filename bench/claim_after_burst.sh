#!/usr/bin/env bash
# An empty claim after a burst (docs/queue.md, "Honest limits"): BURST
# (40,000) tasks enqueued, claimed and completed (deleted), and then, with no
# VACUUM in between (autovacuum off on the queue's table), what a dequeue
# that finds nothing costs: milliseconds (pgbench, one client) and shared
# buffers of the ready index (pg_statio_user_indexes), for the first such
# claim (which finds the dead entries' rows gone and marks the entries
# killed) and then a claim on average over CLAIMS (200) more, each its own
# transaction. Against the same on a fresh queue, and on the burst's queue
# after VACUUM; with the claim without the executor (concurrency.direct_claim
# on) and with the claim statement (off, the path of a distributed queue's
# shards), each on a queue of its own; and the same after a burst under a
# pinned xmin horizon.
#
# Mostly a measure of CPU and buffers; run it as production runs, on a
# throw-away server of its own with durable commits (the result file records
# fsync and synchronous_commit; a run with fsync = off is the CPU cost only,
# and bench/report.py labels it so), as root:
#   source scripts/cluster.sh
#   CLUSTER_DURABLE=1 cluster_start "$PG_CONFIG" "shared_preload_libraries = 'concurrency_ext'"
#   psql -c "CREATE EXTENSION concurrency_ext"; bench/claim_after_burst.sh; cluster_stop
#
# Writes docs/results/claim_after_burst-<date>.json (bench/report.py reports
# it in docs/benchmarks.md) and prints a table. Its queues (bench_fresh,
# bench_burst_on, bench_burst_off, bench_pinned) are dropped at the end.
set -euo pipefail
burst=${BURST:-40000} claims=${CLAIMS:-200}
psql=(psql -X -q -v ON_ERROR_STOP=1 -At)
drop_queues() {
  "${psql[@]}" -c "SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name IN ('bench_burst_on', 'bench_burst_off', 'bench_pinned', 'bench_fresh')" \
    >/dev/null 2>&1 || true
}
drop_queues
work=$(mktemp -d)
unpin() {
  "${psql[@]}" -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'bench_pin'" >/dev/null 2>&1 || true
}
trap 'unpin; rm -rf "$work"; drop_queues' EXIT

settings=$("${psql[@]}" -c "SELECT string_agg(name || '=' || setting, ' ' ORDER BY name) FROM pg_settings
                             WHERE name IN ('fsync', 'synchronous_commit', 'shared_buffers')")
version=$("${psql[@]}" -c "SELECT current_setting('server_version')")
echo "server $version: $settings"

# A queue that never held a task, and for each claim path a queue after the
# burst: its tasks enqueued at once, claimed and completed 500 at a time (each
# batch its own transaction).
"${psql[@]}" >/dev/null <<SQL
SELECT concurrency.create_queue(q) FROM unnest(ARRAY['bench_fresh', 'bench_burst_on', 'bench_burst_off']) q;
ALTER TABLE concurrency.q_bench_fresh SET (autovacuum_enabled = off);
ALTER TABLE concurrency.q_bench_burst_on SET (autovacuum_enabled = off);
ALTER TABLE concurrency.q_bench_burst_off SET (autovacuum_enabled = off);
SQL
burst() { # queue
  "${psql[@]}" -c "SELECT count(*) FROM concurrency.enqueue_batch('$1', array_fill('{}'::jsonb, ARRAY[$burst]))" >/dev/null
  while :; do
    n=$("${psql[@]}" -c "SELECT count(concurrency.complete('$1', task_id, lease_token))
                           FROM concurrency.dequeue('$1', 500)")
    [ "$n" = 0 ] && break
  done
}
burst bench_burst_on
burst bench_burst_off
echo "burst: $burst tasks enqueued, claimed and deleted, on each of two queues"

# One measurement: the first empty dequeue of a queue, then CLAIMS more, with
# direct_claim on or off; prints "first_ms first_buffers ms_per_claim
# index_buffers_per_claim". The first claim after the burst is the one that
# finds the dead entries' rows gone and marks the entries killed; the later
# ones skip them without a look at the table, but still read their pages.
index_buffers() { # index
  sleep 1 # a backend's statistics are flushed at its exit
  "${psql[@]}" -c "SELECT idx_blks_hit + idx_blks_read FROM pg_statio_user_indexes WHERE indexrelname = '$1'"
}
latency() { # calls
  pgbench -n -c 1 -t "$1" -f "$work/claim.sql" 2>&1 | sed -nE 's/^latency average = ([0-9.]+) ms$/\1/p'
}
measure() { # queue direct_claim
  local index="ready_q_$1" b0 b1 b2 first ms
  printf 'SET concurrency.direct_claim = %s;\nSELECT count(*) FROM concurrency.dequeue(%s);\n' "$2" "'$1'" >"$work/claim.sql"
  b0=$(index_buffers "$index")
  first=$(latency 1)
  b1=$(index_buffers "$index")
  ms=$(latency "$claims")
  b2=$(index_buffers "$index")
  echo "$first $((b1 - b0)) $ms $(( (b2 - b1) / claims ))"
}
pages=$("${psql[@]}" -c "SELECT pg_relation_size('concurrency.ready_q_bench_burst_on') / current_setting('block_size')::int")
rows=()
for direct in on off; do
  read -r _ _ f_ms f_buf <<<"$(measure bench_fresh $direct)"
  read -r bf_ms bf_buf b_ms b_buf <<<"$(measure bench_burst_$direct $direct)"
  rows+=("{\"direct_claim\": \"$direct\", \"fresh_ms\": $f_ms, \"fresh_buffers\": $f_buf, \"burst_first_ms\": $bf_ms, \"burst_first_buffers\": $bf_buf, \"burst_ms\": $b_ms, \"burst_buffers\": $b_buf")
done
"${psql[@]}" -c "VACUUM concurrency.q_bench_burst_on" -c "VACUUM concurrency.q_bench_burst_off"
i=0
for direct in on off; do
  read -r _ _ v_ms v_buf <<<"$(measure bench_burst_$direct $direct)"
  rows[$i]="${rows[$i]}, \"vacuumed_ms\": $v_ms, \"vacuumed_buffers\": $v_buf}"
  i=$((i + 1))
done

# The same under a pinned xmin horizon (a session in a transaction that has
# an xid, from before the burst until the end): no dead entry can be marked
# killed, and every empty claim looks at the rows the first one looks at.
# PINNED_CLAIMS (20) claims, the claim without the executor.
"${psql[@]}" -c "SELECT concurrency.create_queue('bench_pinned')" \
  -c "ALTER TABLE concurrency.q_bench_pinned SET (autovacuum_enabled = off)" >/dev/null
PGAPPNAME=bench_pin "${psql[@]}" -c "SELECT pg_current_xact_id(), pg_sleep(3600)" >/dev/null 2>&1 &
until [ "$("${psql[@]}" -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'bench_pin' AND backend_xid IS NOT NULL")" = 1 ]; do
  sleep 0.1
done
burst bench_pinned
claims_all=$claims claims=${PINNED_CLAIMS:-20}
read -r p_first p_first_buf p_ms p_buf <<<"$(measure bench_pinned on)"
claims=$claims_all
unpin
wait
pinned="{\"direct_claim\": \"on\", \"claims\": ${PINNED_CLAIMS:-20}, \"first_ms\": $p_first, \"first_buffers\": $p_first_buf, \"ms\": $p_ms, \"buffers\": $p_buf}"

stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=$(cd "$(dirname "$0")/.." && pwd)/docs/results/claim_after_burst-$stamp.json
cat >"$out" <<JSON
{
 "command": "bench/claim_after_burst.sh",
 "server": "$version",
 "settings": "$settings",
 "burst": $burst,
 "claims": $claims,
 "ready_index_pages_after_burst": $pages,
 "load_after": "$(uptime)",
 "rows": [$(IFS=,; echo "${rows[*]}")],
 "pinned_horizon": $pinned
}
JSON
python3 - "$out" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{'direct_claim':>12} {'fresh ms':>9} {'buf':>5} {'1st after burst ms':>18} {'buf':>6} {'then ms':>8} {'buf':>5} {'vacuumed ms':>12} {'buf':>5}")
for r in d["rows"]:
    print(f"{r['direct_claim']:>12} {r['fresh_ms']:>9} {r['fresh_buffers']:>5} {r['burst_first_ms']:>18} {r['burst_first_buffers']:>6} "
          f"{r['burst_ms']:>8} {r['burst_buffers']:>5} "
          f"{r['vacuumed_ms']:>12} {r['vacuumed_buffers']:>5}")
p = d["pinned_horizon"]
print(f"pinned horizon (direct_claim on): first {p['first_ms']} ms / {p['first_buffers']} buffers, "
      f"then {p['ms']} ms / {p['buffers']} buffers a claim")
PY
echo "wrote $out"
