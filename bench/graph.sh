#!/usr/bin/env bash
# Dependencies between tasks (docs/queue.md, "Dependencies"), measured side by
# side in one run on a throw-away server (scripts/cluster.sh), reported as
# ratios (docs/benchmarks.md, "Task graphs"):
#
#   sudo PG_CONFIG=/usr/lib/postgresql/15/bin/pg_config bash bench/graph.sh
#
# Needs root (the server runs as postgres), psql and pgbench, and
# concurrency_ext installed into PG_CONFIG's server (make install). The
# server preloads the library (a waiting dequeue is woken by the commit that
# releases a child), fsync = off, synchronous_commit = off: the figures are
# the statements' cost, not the disk's. About 3 minutes on 2 cores with the
# defaults. Environment:
#   BENCH_ROUNDS     rounds of each part, the order of the sides alternating
#                    (default 5); figures are medians, ratios the median of
#                    the rounds' ratios, with their range
#   BENCH_TASKS      tasks of part 1's graph and batch (default 10000)
#   BENCH_CALLS      tasks per call in part 1, one line each (default
#                    "10000 1000": the whole graph in one enqueue_graph call,
#                    all or nothing, which is what the function is for; and
#                    calls of 1,000 tasks, each its own transaction, whose
#                    tasks name the parents of earlier calls by id)
#   BENCH_WIDTH      tasks per layer of part 1's DAG (default 100)
#   BENCH_CHAIN      tasks of part 2's chain and batch (default 1000)
#   BENCH_WORKERS    workers draining part 2 (default 4)
#   BENCH_FANOUT     children counts of part 3 (default "1 10 100 1000")
#   BENCH_SERVER_CPUS  pin the server to these CPUs (taskset -c list, e.g.
#                    "1"; default: not pinned, as on a machine of 2 cores the
#                    clients and the machine's other work share them anyway)
#   BENCH_CALLGRIND  1: also count parts 1 and 3 in instructions, with
#                    valgrind's callgrind in a second throw-away server
#                    (default: 1 when valgrind is installed)
#   BENCH_ONLY       run only these parts, e.g. "1 3" (default "1 2 3")
#
# 1. Enqueueing a DAG of BENCH_TASKS tasks in layers of BENCH_WIDTH, each task
#    after the first layer naming 1 to 3 distinct parents drawn from the layer
#    before it (random, seeded: the same graph every run; 2 parents a task on
#    average), with enqueue_graph, against the same number of plain tasks
#    (the same payloads) with enqueue_batch, in calls of the same size. The
#    inputs are built beforehand into a table, so that each call is timed
#    alone: the server's wall time of the calls (clock_timestamp() around
#    each, summed over the calls of a side), and the server's CPU time over
#    the side's whole session (commits included) from a cpuacct cgroup
#    holding the server (when the cgroup v1 cpuacct controller is writable).
#    A third line shows what storing the edges as rows would cost:
#    enqueue_batch plus an INSERT … SELECT of the same edges into a copy of
#    concurrency.task_dependency (its primary key and child index), as one
#    transaction, against enqueue_batch alone (enqueue_graph keeps the edges
#    between the tasks of one call in their rows; those to tasks of earlier
#    calls are rows of task_dependency).
# 2. Draining BENCH_CHAIN tasks with BENCH_WORKERS workers (pgbench clients,
#    each calling dequeue(…, wait => '1 second') and complete in one
#    statement, connected and waiting before the tasks arrive): a chain (each
#    task after the one before it, one enqueue_graph call) against as many
#    independent tasks (one enqueue_batch call), and, for the chain's scale,
#    the independent tasks drained by one worker. Tasks/s = tasks /
#    (last finished_at - the enqueue's time); the chain's cost per step is its
#    drain time over its tasks.
# 3. complete of a parent with k children (one enqueue_graph call: the parent
#    and k tasks after it), k in BENCH_FANOUT: the call's wall time (in a
#    PL/pgSQL function, clock_timestamp() around it; the commit is not in
#    it), per call and per child, and the marginal cost of a child,
#    (t(k) - t(1)) / (k - 1); with callgrind, the instructions of the call
#    (--toggle-collect on the C function: what runs inside concurrency_complete,
#    commit not included).
set -euo pipefail
shopt -s inherit_errexit # a failed psql inside $(…) stops the run too
cd "$(dirname "$0")/.."
pg_config=${PG_CONFIG:-pg_config}
ROUNDS=${BENCH_ROUNDS:-5}
TASKS=${BENCH_TASKS:-10000}
CALLS=${BENCH_CALLS:-"10000 1000"}
WIDTH=${BENCH_WIDTH:-100}
CHAIN=${BENCH_CHAIN:-1000}
WORKERS=${BENCH_WORKERS:-4}
FANOUT=${BENCH_FANOUT:-"1 10 100 1000"}
SERVER_CPUS=${BENCH_SERVER_CPUS:-}
CALLGRIND=${BENCH_CALLGRIND:-$(command -v valgrind >/dev/null && echo 1 || echo 0)}
ONLY=${BENCH_ONLY:-"1 2 3"}
[ "$(id -u)" = 0 ] || { echo "bench/graph.sh runs its servers as postgres: run it as root" >&2; exit 1; }
. scripts/cluster.sh

work=$(mktemp -d /tmp/concurrency_ext-graph.XXXXXX)
chmod 755 "$work"
cg= bg_pids=() vg_pid= vg_dir=
cleanup() {
	for p in "${bg_pids[@]}"; do kill "$p" 2>/dev/null || true; done
	cluster_stop || true
	cpuacct_release "$cg"
	if [ -n "$vg_pid" ]; then
		runuser -u postgres -- "$("$pg_config" --bindir)/pg_ctl" -D "$vg_dir/data" -m fast -w stop >/dev/null 2>&1 ||
			kill "$vg_pid" 2>/dev/null || true
		wait "$vg_pid" 2>/dev/null || true # valgrind writes its last counts as it exits
	fi
	[ -n "$vg_dir" ] && rm -rf "$vg_dir" || true
	rm -rf "$work"
}
trap cleanup EXIT
wanted() { [[ " $ONLY " == *" $1 "* ]]; }
sql() { psql -X -q -v ON_ERROR_STOP=1 -o /dev/null "$@"; }
val() { psql -X -q -At -v ON_ERROR_STOP=1 "$@"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) printf "%s", v[(NR + 1) / 2]; else printf "%.3f", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
range() { sort -g | sed -n '1p;$p' | paste -sd- -; }

export PGOPTIONS="${PGOPTIONS:-} -c client_min_messages=warning"
cluster_start "$pg_config" "shared_preload_libraries = 'concurrency_ext'" "synchronous_commit = off" \
	"shared_buffers = 256MB" "max_connections = 50"
pm=$(head -1 "$CLUSTER_DIR/data/postmaster.pid")
# the server's processes, and every one they fork later, in a cpuacct cgroup
# of their own (as bench/citus.sh does), and on the CPUs asked for
cg=$(cpuacct_group "concurrency_ext_graph_$$" "$pm")
if [ -n "$SERVER_CPUS" ]; then
	for p in "$pm" $(ps -o pid= --ppid "$pm"); do taskset -a -p -c "$SERVER_CPUS" "$p" >/dev/null 2>&1 || true; done
fi
server_cpu() { if [ -n "$cg" ]; then cat "$cg/cpuacct.usage"; else echo 0; fi; } # nanoseconds

echo "# PostgreSQL $("$pg_config" --version | cut -d' ' -f2), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the start, $(date -u +%Y-%m-%dT%H:%MZ)"
echo "# server CPUs: ${SERVER_CPUS:-not pinned}; server CPU time: $([ -n "$cg" ] && echo "cpuacct cgroup" || echo "not measured (cgroup v1 cpuacct not writable)")"

prepare() { # the extension and the benchmark's helpers, in the server of PGHOST
	sql <<SQL
CREATE EXTENSION concurrency_ext;
-- the wall time of one statement, in microseconds, the commit left out
CREATE FUNCTION bench_time(statement text) RETURNS bigint LANGUAGE plpgsql AS \$\$
DECLARE
    t0 timestamptz := clock_timestamp();
BEGIN
    EXECUTE statement;
    RETURN round(extract(epoch FROM clock_timestamp() - t0) * 1e6);
END \$\$;
-- part 1's DAG: task n of layer (n - 1) / $WIDTH names 1 to 3 distinct
-- parents of the layer before
SELECT setseed(0.4242);
CREATE TABLE bench_dag AS
SELECT n, CASE WHEN n > $WIDTH THEN
           (SELECT array_agg(DISTINCT p)
              FROM (SELECT ((n - 1) / $WIDTH - 1) * $WIDTH + 1 + floor(random() * $WIDTH)::int AS p
                      FROM generate_series(1, 1 + floor(random() * 3)::int + 0 * n)) AS draws)
       END AS parents
  FROM generate_series(1, $TASKS) AS n;
-- a copy of the edge table with its indexes (part 1's bound)
CREATE TABLE bench_edges (LIKE concurrency.task_dependency INCLUDING INDEXES);
SQL
}
prepare
edges=$(val -c "SELECT coalesce(sum(cardinality(parents)), 0) FROM bench_dag")

# ---- 1. enqueue_graph vs enqueue_batch ------------------------------------------
# inputs for calls of $1 tasks: call c holds tasks c * $1 + 1 …; a parent
# of an earlier call is named by its id, which is n in a fresh queue (checked)
inputs() {
	sql <<SQL
DROP TABLE IF EXISTS bench_input;
CREATE TABLE bench_input AS
SELECT call,
       jsonb_agg(jsonb_build_object('ref', 't' || n, 'payload', jsonb_build_object('n', n),
                                    'after', (SELECT coalesce(jsonb_agg(CASE WHEN (p - 1) / $1 = call
                                                                            THEN to_jsonb('t' || p) ELSE to_jsonb(p) END), '[]')
                                                FROM unnest(parents) AS p)) ORDER BY n) AS tasks,
       array_agg(jsonb_build_object('n', n) ORDER BY n) AS payloads,
       NULL::bigint[] AS edge_parents, NULL::bigint[] AS edge_children
  FROM (SELECT (n - 1) / $1 AS call, n, parents FROM bench_dag) AS d
 GROUP BY call;
-- the same edges as rows, for the bound
UPDATE bench_input AS i SET (edge_parents, edge_children) =
       (SELECT array_agg(p ORDER BY d.n, p), array_agg(d.n ORDER BY d.n, p)
          FROM bench_dag AS d, unnest(d.parents) AS p WHERE (d.n - 1) / $1 = i.call);
ANALYZE bench_input;
SQL
}
fresh_queue() { # name: an empty queue whose ids start at 1, the edge table vacuumed
	sql -c "SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name = '$1'" \
		-c "SELECT concurrency.create_queue('$1', lease => '1 hour', retain => '1 day')" \
		-c "TRUNCATE bench_edges" -c "VACUUM concurrency.task_dependency" -c "VACUUM bench_edges"
}
# one side: graph|batch|bound -> "wall_ms server_cpu_ms"
enqueue_side() {
	local calls f=$work/enqueue.sql c0 c1 us
	calls=$(val -c "SELECT count(*) FROM bench_input")
	fresh_queue bench_graph
	{
		for ((c = 0; c < calls; c++)); do
			case $1 in
			graph) echo "SELECT bench_time(\$\$SELECT count(*) FROM concurrency.enqueue_graph('bench_graph', (SELECT tasks FROM bench_input WHERE call = $c))\$\$);" ;;
			batch) echo "SELECT bench_time(\$\$SELECT count(*) FROM concurrency.enqueue_batch('bench_graph', (SELECT payloads FROM bench_input WHERE call = $c))\$\$);" ;;
			bound) echo "SELECT bench_time(\$\$SELECT count(*) FROM concurrency.enqueue_batch('bench_graph', (SELECT payloads FROM bench_input WHERE call = $c));
			             INSERT INTO bench_edges SELECT 'bench_graph', p, 'bench_graph', ch
			               FROM bench_input, unnest(edge_parents, edge_children) AS e(p, ch) WHERE call = $c\$\$);" ;;
			esac
		done
	} >"$f"
	c0=$(server_cpu)
	us=$(val -f "$f" | awk '{ s += $1 } END { print s }')
	c1=$(server_cpu)
	local n bad
	n=$(val -c "SELECT count(*) FROM concurrency.q_bench_graph")
	bad=$(val -c "SELECT count(*) FROM concurrency.q_bench_graph WHERE id <> (payload ->> 'n')::bigint")
	[ "$n" = "$TASKS" ] && [ "$bad" = 0 ] || { echo "part 1, $1: $n tasks, $bad out of order" >&2; exit 1; }
	if [ "$1" = graph ]; then
		# edges between tasks of one call are in the tasks' rows (parents),
		# edges to tasks of earlier calls rows of task_dependency
		n=$(val -c "SELECT (SELECT count(*) FROM concurrency.task_dependency WHERE child_queue = 'bench_graph')
		                   + (SELECT coalesce(sum(cardinality(parents)), 0) FROM concurrency.q_bench_graph)")
		[ "$n" = "$edges" ] || { echo "part 1: $n edges, not $edges" >&2; exit 1; }
	fi
	awk -v us="$us" -v ns="$((c1 - c0))" 'BEGIN { printf "%.1f %.1f\n", us / 1000, ns / 1e6 }'
}
# rounds of two sides: a b -> "wall_a wall_b wall_ratio range cpu_a cpu_b cpu_ratio range"
enqueue_rounds() {
	local a b wa ca wb cb
	: >"$work/wa" >"$work/wb" >"$work/wr" >"$work/ca" >"$work/cb" >"$work/cr"
	for ((r = 0; r < ROUNDS; r++)); do
		if ((r % 2 == 0)); then a=$(enqueue_side "$1"); b=$(enqueue_side "$2"); else b=$(enqueue_side "$2"); a=$(enqueue_side "$1"); fi
		read -r wa ca <<<"$a"; read -r wb cb <<<"$b"
		echo "$wa" >>"$work/wa"; echo "$wb" >>"$work/wb"; ratio "$wa" "$wb" >>"$work/wr"; echo >>"$work/wr"
		echo "$ca" >>"$work/ca"; echo "$cb" >>"$work/cb"; ratio "$ca" "$cb" >>"$work/cr"; echo >>"$work/cr"
	done
	echo "$(median <"$work/wa") $(median <"$work/wb") $(median <"$work/wr") $(range <"$work/wr")" \
		"$(median <"$work/ca") $(median <"$work/cb") $(median <"$work/cr") $(range <"$work/cr")"
}
if wanted 1; then
	echo
	echo "== 1. enqueueing $TASKS tasks: a DAG ($edges edges, layers of $WIDTH) with enqueue_graph vs plain tasks with enqueue_batch"
	echo "   (medians of $ROUNDS rounds; ms of the calls' wall time in the server; server CPU ms over the side's session)"
	printf '%-44s %9s %9s %7s %13s   %9s %9s %7s %13s   %s\n' "" "wall A" "wall B" "ratio" "range" "CPU A" "CPU B" "ratio" "range" "goal"
	for call in $CALLS; do
		inputs "$call"
		read -r wa wb wr wrr ca cb cr crr <<<"$(enqueue_rounds graph batch)"
		printf '%-44s %9s %9s %7s %13s   %9s %9s %7s %13s   %s\n' "A graph / B batch, calls of $call tasks" "$wa" "$wb" "$wr" "$wrr" "$ca" "$cb" "$cr" "$crr" "<= 2.0"
		read -r wa wb wr wrr ca cb cr crr <<<"$(enqueue_rounds bound batch)"
		printf '%-44s %9s %9s %7s %13s   %9s %9s %7s %13s   %s\n' "A batch + edge INSERT / B batch (edges as rows)" "$wa" "$wb" "$wr" "$wrr" "$ca" "$cb" "$cr" "$crr" "-"
	done
	sql -c "SELECT concurrency.drop_queue('bench_graph')" -c "DROP TABLE bench_input"
fi

# ---- 2. draining a chain vs independent tasks -------------------------------------
# one side: chain|batch workers -> "tasks_per_s ms_per_task"
drain_side() {
	local kind=$1 w=$2 pid n=0
	fresh_queue bench_drain
	printf "SELECT concurrency.complete('bench_drain', t.task_id, t.lease_token)\n  FROM concurrency.dequeue('bench_drain', 1, wait => '1 second') AS t;\n" >"$work/drain.sql"
	pgbench -n -f "$work/drain.sql" -c "$w" -j "$((w >= 2 ? 2 : 1))" -T 3600 >"$work/drain.log" 2>&1 &
	pid=$!; bg_pids+=("$pid")
	for _ in $(seq 1 100); do
		[ "$(val -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgbench' AND wait_event_type = 'Extension'")" -ge "$w" ] && break
		sleep 0.1
	done
	if [ "$kind" = chain ]; then
		sql -c "SELECT count(*) FROM concurrency.enqueue_graph('bench_drain',
		          (SELECT jsonb_agg(jsonb_build_object('ref', 't' || i, 'payload', jsonb_build_object('n', i))
		                            || CASE WHEN i > 1 THEN jsonb_build_object('after', jsonb_build_array('t' || (i - 1))) ELSE '{}' END ORDER BY i)
		             FROM generate_series(1, $CHAIN) AS i))"
	else
		sql -c "SELECT count(*) FROM concurrency.enqueue_batch('bench_drain',
		          (SELECT array_agg(jsonb_build_object('n', i) ORDER BY i) FROM generate_series(1, $CHAIN) AS i))"
	fi
	for _ in $(seq 1 6000); do
		n=$(val -c "SELECT count(*) FROM concurrency.q_bench_drain WHERE state = 'done'")
		[ "$n" -ge "$CHAIN" ] && break
		sleep 0.1
	done
	kill "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	[ "$n" -ge "$CHAIN" ] || { echo "part 2, $kind: $n of $CHAIN tasks done after 10 minutes" >&2; tail -5 "$work/drain.log" >&2; exit 1; }
	val -F ' ' -c "SELECT round(($CHAIN / extract(epoch FROM max(finished_at) - max(enqueued_at)))::numeric, 1),
	                      round((extract(epoch FROM max(finished_at) - max(enqueued_at)) * 1000 / $CHAIN)::numeric, 3)
	                 FROM concurrency.q_bench_drain"
}
if wanted 2; then
	echo
	echo "== 2. draining $CHAIN tasks: a chain vs independent tasks (medians of $ROUNDS rounds; tasks/s, ms per task)"
	: >"$work/chain" >"$work/indep" >"$work/one" >"$work/r" >"$work/r1" >"$work/chain_ms" >"$work/one_ms"
	for ((r = 0; r < ROUNDS; r++)); do
		sides=(chain indep one)
		((r % 2)) && sides=(one indep chain)
		for s in "${sides[@]}"; do
			case $s in
			chain) read -r tps ms <<<"$(drain_side chain "$WORKERS")"; echo "$ms" >>"$work/chain_ms" ;;
			indep) read -r tps ms <<<"$(drain_side batch "$WORKERS")" ;;
			one) read -r tps ms <<<"$(drain_side batch 1)"; echo "$ms" >>"$work/one_ms" ;;
			esac
			echo "$tps" >"$work/$s.last"; echo "$tps" >>"$work/$s"
		done
		ratio "$(cat "$work/chain.last")" "$(cat "$work/indep.last")" >>"$work/r"; echo >>"$work/r"
		ratio "$(cat "$work/one.last")" "$(cat "$work/chain.last")" >>"$work/r1"; echo >>"$work/r1"
	done
	echo "chain, $WORKERS workers:             $(median <"$work/chain") tasks/s, $(median <"$work/chain_ms") ms per step"
	echo "independent, $WORKERS workers:       $(median <"$work/indep") tasks/s"
	echo "independent, 1 worker:          $(median <"$work/one") tasks/s, $(median <"$work/one_ms") ms per task"
	echo "chain / independent ($WORKERS workers): $(median <"$work/r") (rounds $(range <"$work/r"))"
	echo "a chain's step / one worker's task: $(median <"$work/r1") (rounds $(range <"$work/r1"))"
	sql -c "SELECT concurrency.drop_queue('bench_drain')"
fi

# ---- 3. completing a parent with k children ---------------------------------------
# the graph: a warm-up parent w1 with one child, another (w2) with one
# child, the parent p with k children; w1, w2 and p claimed. Prints the ids
# and lease tokens of w1, w2, p. (A session's first complete prepares the
# statements of complete and of the release of children: the measured one is
# its second.)
fan_setup() { # k
	fresh_queue bench_fan
	sql -c "SELECT count(*) FROM concurrency.enqueue_graph('bench_fan',
	          '[{\"ref\": \"w1\"}, {\"after\": [\"w1\"]}, {\"ref\": \"w2\"}, {\"after\": [\"w2\"]}, {\"ref\": \"p\"}]'::jsonb
	          || (SELECT jsonb_agg('{\"after\": [\"p\"]}'::jsonb) FROM generate_series(1, $1)))" \
		-c "ANALYZE concurrency.q_bench_fan"
	val -F ' ' -c "SELECT task_id, lease_token FROM concurrency.dequeue('bench_fan', 3) ORDER BY task_id" | paste -sd' ' -
}
fan_check() { # k expected_ready: every child of the completed parents released
	local ready
	ready=$(val -c "SELECT count(*) FROM concurrency.q_bench_fan WHERE state = 'ready'")
	[ "$ready" = "$2" ] || { echo "part 3: $ready tasks ready after the parents' complete, not $2 (k = $1)" >&2; exit 1; }
}
per_child() { # k value value_at_k1 -> "per_call per_child marginal"
	awk -v t="$2" -v k="$1" -v a="$3" 'BEGIN { printf "%s %.1f %s\n", t, t / k, (a != "" && k > 1) ? sprintf("%.1f", (t - a) / (k - 1)) : "-" }'
}
if wanted 3; then
	echo
	echo "== 3. complete of a parent with k children (wall time of the call in the server, µs, median of $ROUNDS)"
	printf '%8s %12s %14s %18s %16s\n' "k" "µs a call" "µs a child" "marginal µs/child" "rounds (µs)"
	t1=
	for k in $FANOUT; do
		: >"$work/fan"
		for ((r = 0; r < ROUNDS; r++)); do
			read -r w1 l1 _ _ p lp <<<"$(fan_setup "$k")"
			val -c "SELECT bench_time('SELECT concurrency.complete(''bench_fan'', $w1, $l1)')" \
				-c "SELECT bench_time('SELECT concurrency.complete(''bench_fan'', $p, $lp)')" | tail -1 >>"$work/fan"
			fan_check "$k" $((k + 1))
		done
		t=$(median <"$work/fan")
		[ "$k" = 1 ] && t1=$t
		read -r a b c <<<"$(per_child "$k" "$t" "$t1")"
		printf '%8s %12s %14s %18s %16s\n' "$k" "$a" "$b" "$c" "$(sort -g "$work/fan" | paste -sd' ' -)"
	done
	sql -c "SELECT concurrency.drop_queue('bench_fan')"
fi

# ---- instructions, counted by callgrind ---------------------------------------------
# A second throw-away server under valgrind's callgrind (as bench/instructions.sh
# runs one), collecting only inside the C functions of enqueue_graph,
# enqueue_batch and complete: each backend's count, written to cg.<pid>.out
# when it exits, is what ran inside those calls (their SQL included, the
# commit not).
if [ "$CALLGRIND" = 1 ] && { wanted 1 || wanted 3; }; then
	command -v valgrind >/dev/null || { echo "BENCH_CALLGRIND=1 needs valgrind (apt-get install valgrind)" >&2; exit 1; }
	bin=$("$pg_config" --bindir)
	vg_dir=$(mktemp -d /tmp/concurrency_ext-graph-cg.XXXXXX)
	chmod 755 "$vg_dir"; chown postgres "$vg_dir"
	vg_port=$(free_port)
	runuser -u postgres -- "$bin/initdb" -D "$vg_dir/data" -A trust -U postgres --no-sync >"$vg_dir/initdb.log" 2>&1
	runuser -u postgres -- valgrind --quiet --tool=callgrind --callgrind-out-file="$vg_dir/cg.%p.out" \
		--toggle-collect=concurrency_enqueue_graph --toggle-collect=concurrency_enqueue_batch --toggle-collect=concurrency_complete \
		"$bin/postgres" -D "$vg_dir/data" -c port="$vg_port" -c unix_socket_directories="$vg_dir" -c listen_addresses= \
		-c fsync=off -c synchronous_commit=off -c autovacuum=off -c shared_preload_libraries=concurrency_ext \
		>"$vg_dir/server.log" 2>&1 &
	vg_pid=$!
	export PGHOST=$vg_dir PGPORT=$vg_port
	for _ in $(seq 1 180); do "$bin/pg_isready" -q && break; sleep 1; done
	prepare
	count() { # statements… -> instructions inside the toggled functions in one session
		local pid out
		pid=$(val -c "SELECT pg_backend_pid()" "$@" | sed -n 1p)
		out=$vg_dir/cg.$pid.out
		for _ in $(seq 1 300); do grep -qs '^totals:' "$out" && break; sleep 1; done
		cp "$out" "$vg_dir/last.out"
		awk '/^totals:/ { print $2 }' "$out"
	}
	inclusive() { # function name -> its inclusive instructions in the last count
		callgrind_annotate --inclusive=yes --threshold=100 "$vg_dir/last.out" 2>/dev/null |
			awk -v f="$1" '!found && index($0, f) { gsub(",", "", $1); print $1; found = 1 }' # reads it all: no SIGPIPE
	}
	echo
	echo "== instructions (callgrind; PostgreSQL $("$pg_config" --version | cut -d' ' -f2))"
	if wanted 1; then
		inputs "$TASKS"
		fresh_queue bench_graph
		g=$(count -c "SELECT count(*) FROM concurrency.enqueue_graph('bench_graph', (SELECT tasks FROM bench_input))")
		g_read=$(inclusive 'read_graph(') g_edges=$(inclusive 'insert_edges(')
		fresh_queue bench_graph
		b=$(count -c "SELECT count(*) FROM concurrency.enqueue_batch('bench_graph', (SELECT payloads FROM bench_input))")
		awk -v g="$g" -v b="$b" -v n="$TASKS" -v r="${g_read:-0}" -v e="${g_edges:-0}" -v m="$edges" 'BEGIN {
			printf "1. enqueue_graph, %d tasks in one call: %.0f thousand instructions, %.1f thousand a task\n", n, g / 1000, g / n / 1000
			printf "   enqueue_batch, %d plain tasks in one call: %.0f thousand, %.1f thousand a task; ratio %.2f (goal <= 2.0)\n", n, b / 1000, b / n / 1000, g / b
			printf "   of enqueue_graph: reading the graph (read_graph) %.0f%%, rows of task_dependency (insert_edges) %.0f%%, the rest (the %d edges in the task rows) %.0f%%\n",
				100 * r / g, 100 * e / g, m, 100 * (g - r - e) / g }'
		sql -c "SELECT concurrency.drop_queue('bench_graph')"
	fi
	if wanted 3; then
		echo "3. complete of a parent with k children"
		printf '%8s %16s %16s %20s\n' "k" "thousand a call" "thousand a child" "marginal a child"
		i1=
		for k in $FANOUT; do
			read -r w1 l1 w2 l2 p lp <<<"$(fan_setup "$k")"
			one=$(count -c "SELECT concurrency.complete('bench_fan', $w1, $l1)")
			two=$(count -c "SELECT concurrency.complete('bench_fan', $w2, $l2)" -c "SELECT concurrency.complete('bench_fan', $p, $lp)")
			fan_check "$k" $((k + 2))
			i=$((two - one))
			[ "$k" = 1 ] && i1=$i
			read -r a b c <<<"$(per_child "$k" "$i" "$i1")"
			awk -v k="$k" -v a="$a" -v b="$b" -v c="$c" 'BEGIN { printf "%8s %16.1f %16.1f %20s\n", k, a / 1000, b / 1000, (c == "-") ? c : sprintf("%.1f", c / 1000) }'
		done
	fi
fi
echo
echo "# load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
