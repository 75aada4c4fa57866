#!/usr/bin/env bash
# A sustained mixed run: queue workers (enqueue, dequeue + complete), named
# locks (transaction and resource locks, try-locks) and the diagnostics views
# polled every 100 ms, all at once for SOAK_SECONDS, on persistent
# connections. It measures each backend's private memory (RssAnon from
# /proc/PID/status, so run it on the server's machine as a user that may read
# it) after a warm-up and at the end, and reports the growth per call: a
# backend that leaks per call shows it here.
#
# Connection from the PG* environment variables; the role must be allowed to
# create queues and register subsystems. Run it e.g. as
#   sudo pg_virtualenv -v 15 bash -c 'psql -c "CREATE EXTENSION concurrency_ext" && bench/soak.sh'
# Knobs: SOAK_SECONDS (240), WARMUP_SECONDS (30), CLIENTS (4).
set -euo pipefail
seconds=${SOAK_SECONDS:-240} warmup=${WARMUP_SECONDS:-30} clients=${CLIENTS:-4}
psql=(psql -X -q -v ON_ERROR_STOP=1 -At)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

"${psql[@]}" <<'SQL'
SELECT concurrency.register_subsystem('soak_lock', 7429001, 'bench/soak.sh');
SELECT concurrency.create_queue('soak', '30 seconds', 5);
SELECT count(concurrency.enqueue('soak', jsonb_build_object('n', g))) FROM generate_series(1, 1000) g;
SQL
cat >"$work/queue.sql" <<'SQL'
SELECT concurrency.enqueue('soak', '{"k": 1}');
SELECT count(concurrency.complete('soak', task_id, lease_token)) FROM concurrency.dequeue('soak', 1);
SQL
cat >"$work/locks.sql" <<'SQL'
\set r random(1, 1000)
BEGIN;
SELECT concurrency.xact_lock('soak_lock', :r);
SELECT concurrency.try_xact_lock('soak_lock');
SELECT count(*) FROM concurrency.my_locks;
COMMIT;
SQL
cat >"$work/diag.sql" <<'SQL'
SELECT count(*) FROM concurrency.lock_tree;
SELECT count(*) FROM concurrency.lock_waits;
SELECT count(*) FROM concurrency.held_locks;
\sleep 100 ms
SQL

rss_of_pgbench_backends() { # -> "pid:application rss_kB" lines, sorted for join
  "${psql[@]}" -F ' ' -c "SELECT pid, application_name FROM pg_stat_activity WHERE application_name LIKE 'soak_%'" |
    while read -r pid app; do
      [ -r "/proc/$pid/status" ] && echo "$pid:$app $(awk '/^RssAnon:/ {print $2}' "/proc/$pid/status")"
    done | sort
}

echo "soak: $clients workers (queue and named locks, half each) and one diagnostics poller (every 100 ms) for ${seconds}s, warm-up ${warmup}s"
PGAPPNAME=soak_worker pgbench -n -c "$clients" -j 2 -T "$seconds" -f "$work/queue.sql@1" -f "$work/locks.sql@1" \
  >"$work/pgbench.log" 2>&1 &
bench=$!
PGAPPNAME=soak_poller pgbench -n -c 1 -T "$seconds" -f "$work/diag.sql" >"$work/poller.log" 2>&1 &
poller=$!
sleep "$warmup"
rss_of_pgbench_backends >"$work/warm"
calls_warm=$("${psql[@]}" -c "SELECT sum(xact_commit) FROM pg_stat_database WHERE datname = current_database()")
half=$(((seconds - warmup - 5) / 2))
sleep "$half"
rss_of_pgbench_backends >"$work/mid"
sleep $((seconds - warmup - 5 - half))
rss_of_pgbench_backends >"$work/end"
calls_end=$("${psql[@]}" -c "SELECT sum(xact_commit) FROM pg_stat_database WHERE datname = current_database()")
wait "$bench" "$poller"
echo "workers:"; grep -E '^(number of transactions actually processed|tps|number of failed)' "$work/pgbench.log" || cat "$work/pgbench.log"
echo "poller:"; grep -E '^(number of transactions actually processed|number of failed)' "$work/poller.log" || cat "$work/poller.log"

echo "per backend (pid:application, RssAnon kB after warm-up, half-way, at the end):"
join "$work/warm" "$work/mid" | join - "$work/end" | sed 's/^/  /'
# A leak grows with the calls, in both halves alike; a cache or arena that
# settles grows once and then stays.
join "$work/warm" "$work/mid" | join - "$work/end" | awk '
  { first += $3 - $2; second += $4 - $3; n++ }
  END { if (n) printf "growth per backend: %.1f kB in the first half, %.1f kB in the second half\n", first / n, second / n }'
join "$work/warm" "$work/end" | awk -v calls=$((calls_end - calls_warm)) -v clients="$clients" '
  { n++; warm += $2; end += $3; d = $3 - $2; if (d > maxd) maxd = d }
  END {
    if (n == 0) { print "no pgbench backend sampled"; exit 1 }
    printf "backends sampled: %d; transactions between samples: %d\n", n, calls
    printf "private memory per backend (RssAnon): %.0f kB after warm-up, %.0f kB at the end\n", warm / n, end / n
    printf "growth: %.1f kB per backend on average, %d kB at most; %.4f bytes per transaction\n", (end - warm) / n, maxd, (end - warm) * 1024 / (calls > 0 ? calls : 1)
  }'
"${psql[@]}" -c "SELECT concurrency.drop_queue('soak')" -c "SELECT concurrency.unregister_subsystem('soak_lock')" >/dev/null
