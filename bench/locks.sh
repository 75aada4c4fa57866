#!/usr/bin/env bash
# Named locks against the raw advisory-lock calls they replace, in one run.
#
# 1. pgbench, one transaction per call, the same key:
#      named  SELECT concurrency.try_xact_lock('bench_locks')
#      raw    SELECT pg_try_advisory_xact_lock(<its key>)
#    in alternating phases (ABBA order: drift and warm-up hit both alike).
#    Each round compares two adjacent phases; reported are the median of the
#    per-round ratios and the ratio of the best phases (on a shared machine
#    the absolute tps move from one phase to the next; the best phase of each
#    variant is the one least disturbed).
# 2. The same calls without the network, in the backend (DO loops,
#    alternating, best of the repetitions):
#      per transaction: try lock + COMMIT, and the waiting lock + COMMIT
#        (xact_lock: uncontended, it asks without waiting first, and only a
#        lock somebody holds costs it a subtransaction for the wait);
#      per call: session lock + unlock pairs (the name lookup and the hold
#      counting twice per pair, no commit to hide them).
#
# Connection from the PG* environment variables (PGHOST, PGPORT, PGDATABASE,
# PGUSER); the database needs the extension, and the role must be allowed to
# register (the script registers 'bench_locks' if it is missing).
# Knobs: CLIENTS (2), PHASE_SECONDS (4), ROUNDS (6), MODE (prepared),
# LOOP_COUNT (100000), LOOP_REPEATS (5). About ROUNDS*2*PHASE_SECONDS + 15 s.
set -euo pipefail
clients=${CLIENTS:-2} phase=${PHASE_SECONDS:-4} rounds=${ROUNDS:-6} mode=${MODE:-prepared}
loop_count=${LOOP_COUNT:-100000} loop_repeats=${LOOP_REPEATS:-5}
key=7428001
psql=(psql -X -q -v ON_ERROR_STOP=1 -At)

"${psql[@]}" -c "SELECT concurrency.register_subsystem('bench_locks', $key, 'bench/locks.sh')" >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "SELECT concurrency.try_xact_lock('bench_locks');" >"$work/named.sql"
echo "SELECT pg_try_advisory_xact_lock($key);" >"$work/raw.sql"

calc() { awk "BEGIN { printf \"%.6f\", $1 }"; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
minimum() { sort -g | head -1; }
maximum() { sort -g | tail -1; }

run_phase() { # variant -> tps
	pgbench -n -M "$mode" -c "$clients" -j "$clients" -T "$phase" -f "$work/$1.sql" 2>/dev/null |
		sed -n 's/^tps = \([0-9.]*\).*/\1/p' | head -1
}

echo "named locks: concurrency.try_xact_lock('bench_locks') vs pg_try_advisory_xact_lock($key)"
echo "pgbench: $clients clients, -M $mode, $rounds rounds of ${phase}s per variant, alternating"
ratios=() raw_tps=() named_tps=()
for ((r = 1; r <= rounds; r++)); do
	if ((r % 2)); then order="raw named"; else order="named raw"; fi
	declare -A tps=()
	for v in $order; do tps[$v]=$(run_phase "$v"); done
	ratio=$(calc "${tps[named]} / ${tps[raw]}")
	ratios+=("$ratio") raw_tps+=("${tps[raw]}") named_tps+=("${tps[named]}")
	printf '  round %d: raw %8.0f tps   named %8.0f tps   named/raw %.3f\n' "$r" "${tps[raw]}" "${tps[named]}" "$ratio"
	unset tps
done
if ((rounds > 0)); then
	best_raw=$(printf '%s\n' "${raw_tps[@]}" | maximum) best_named=$(printf '%s\n' "${named_tps[@]}" | maximum)
	printf '  throughput ratio named/raw: median of rounds %.3f, best phases %.3f (%.0f / %.0f tps)\n' \
		"$(printf '%s\n' "${ratios[@]}" | median)" "$(calc "$best_named / $best_raw")" "$best_named" "$best_raw"
fi

loop() { # body -> µs per iteration
	"${psql[@]}" -c "DO \$\$
DECLARE t0 timestamptz := clock_timestamp();
BEGIN
  FOR i IN 1..$loop_count LOOP
    $1
  END LOOP;
  RAISE NOTICE '%', extract(epoch FROM clock_timestamp() - t0) * 1e6 / $loop_count;
END \$\$" 2>&1 | sed -n 's/.*NOTICE: *//p'
}
server_side() { # title raw-body named-body
	local raw=() named=() a b
	for ((i = 0; i < loop_repeats; i++)); do
		raw+=("$(loop "$2")") named+=("$(loop "$3")")
	done
	a=$(printf '%s\n' "${raw[@]}" | minimum) b=$(printf '%s\n' "${named[@]}" | minimum)
	printf '  %-44s raw %.3f µs   named %.3f µs   (%+.3f µs, throughput named/raw %.3f)\n' \
		"$1" "$a" "$b" "$(calc "$b - $a")" "$(calc "$a / $b")"
}
echo "in the backend: $loop_count iterations per loop, $loop_repeats alternating loops per variant, best of them"
server_side "per transaction (try lock + COMMIT):" \
	"PERFORM pg_try_advisory_xact_lock($key); COMMIT;" \
	"PERFORM concurrency.try_xact_lock('bench_locks'); COMMIT;"
server_side "per transaction (waiting lock + COMMIT):" \
	"PERFORM pg_advisory_xact_lock($key); COMMIT;" \
	"PERFORM concurrency.xact_lock('bench_locks'); COMMIT;"
server_side "per lock/unlock pair (session level):" \
	"PERFORM pg_advisory_lock($key); PERFORM pg_advisory_unlock($key);" \
	"PERFORM concurrency.session_lock('bench_locks'); PERFORM concurrency.session_unlock('bench_locks');"
