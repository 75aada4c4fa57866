// Command peers-go compares the Go runtime of concurrency_ext
// (clients/go) with River (github.com/riverqueue/river on
// riverdriver/riverpgxv5) on one server, in the rows of bench/peers
// (bench/peers/peers.js gives the Node.js runtime's peers the same rows):
//
//	(a) one worker, one job at a time, draining JOBS jobs
//	(b) 8 concurrent workers draining JOBS jobs
//	(c) batched: 10 jobs per claim, one worker
//	(d) enqueue one by one: JOBS enqueues, each its own transaction
//	(e) enqueue in bulk: 1,000 jobs per call, each call its own transaction
//	(f) keyed: one at a time per key, 100 keys (job i has key i % 100), 8 workers
//	(g) enqueue-to-start latency with an idle worker: SAMPLES jobs, one at a
//	    time, each enqueued in a transaction of its own 5 ms after the last
//	    one started; the time from the enqueueing call to its handler's start.
//	    The runtime enqueues on a pool of its own, river with a client of its
//	    own (an application's producer), river-one-client with the worker's
//	    client, whose fetcher River tells in the process
//
// Every side of a row runs ROUNDS times, the order alternating from round to
// round, each run a process of its own (this binary with -run) that first
// handles WARMUP jobs untimed. A drain passes when each job was recorded
// exactly once by its handler and nothing is left in its system; an enqueue
// row when the system holds JOBS jobs, each payload once. Run by
// peers-go.sh, which starts the server; PG* variables say where.
//
// The sides (files: ours.go for runtime and raw, river.go, enqueue.go):
//
//   - runtime: concurrency.Worker with HandleTx: the handler's insert and
//     the task's completion commit in one transaction (exactly-once
//     effects); in (c) HandleBatch with batches of 10: one claim of 10
//     tasks, their insert and their complete_batch in one transaction, and
//     the next claim with the completion; in (f) the queue has
//     key_limit 1 and the tasks their concurrency key; Enqueue for row (d),
//     EnqueueBatch for row (e);
//   - raw: the loop the runtime's HandleTx wraps, written by hand on pgx
//     (a claim on its own when a slot has nothing; then BEGIN, the insert,
//     complete (complete_batch in (c)) and the next claim in one pipelined
//     batch, COMMIT), to show what the runtime's machinery costs; rows (a),
//     (b) and (c);
//   - river: a river.Client; the handler inserts with the pool (its own
//     transaction) and River completes the job afterwards with its batched
//     completer; FetchCooldown 1 ms and FetchPollInterval 20 ms (the
//     defaults, 100 ms and 1 s, cap a worker at ten fetches a second). In
//     (c) the client has 10 workers: River has no batch handler in its
//     open-source version, and its fetch claims as many jobs as it has free
//     workers in one statement, so 10 workers are its batch of 10 (the same
//     10 jobs in flight). Client.Insert for row (d), Client.InsertMany for
//     row (e) (like EnqueueBatch, one INSERT statement that returns the
//     jobs);
//   - river-tx: the same, but the handler inserts and completes the job with
//     river.JobCompleteTx in one transaction (River's way to exactly-once
//     effects, the runtime's guarantee); rows (a), (b) and (c);
//   - river-copy: Client.InsertManyFast (COPY FROM, returning a count, not
//     the jobs), River's fastest bulk insert; row (e).
//
// Row (f) has no River side: open-source River has no per-key concurrency
// limit (River Pro's concurrency limits are not open source). Its unique
// jobs (UniqueOpts.ByArgs) must include the available, pending, running and
// scheduled states, so a second job of a key is not inserted at all while
// one waits or runs (a deduplication, not a limit), and a queue per key
// (MaxWorkers 1) is one poller per key and holds within one client only.
// The runtime runs that row alone, and the result file says so. As in
// bench/peers/peers.js, the keys repeat every 100 jobs and the tasks are
// claimed in order, so 8 workers never hold two tasks of a key: the row
// measures what the key limit's bookkeeping costs, not tasks waiting for
// their key.
//
// Besides wall time, each run reports its process's CPU time and the rest of
// the machine's (/proc/stat less the process: the server's, and that of
// anything else running on the machine then), per job. The load averages at
// the start and the end go into the JSON.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime/pprof"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
)

// chunk is the jobs of one bulk insert: the drains' jobs are enqueued so, and
// row (e) enqueues so.
const chunk = 1000

// keys is the number of concurrency keys of row (f): job i has key i % keys.
const keys = 100

var drainSides = []string{"runtime", "raw", "river", "river-tx"}

// rowSpec is one row of the table.
type rowSpec struct {
	label string
	// drain: the row drains JOBS jobs enqueued beforehand; otherwise it enqueues them
	drain bool
	// concurrency: the handlers at once (drains)
	concurrency int
	// batch: the jobs per claim (1: one at a time)
	batch int
	// keyed: the jobs carry a concurrency key, at most one of a key at a time
	keyed bool
	// bulk: the enqueue row inserts chunk jobs per call
	bulk bool
	// latency: the row times enqueue-to-start with an idle worker
	latency bool
	sides   []string
	// noPeer says why River has no side in the row
	noPeer string
}

var rows = map[string]rowSpec{
	"a": {label: "(a) one worker, one job at a time", drain: true, concurrency: 1, batch: 1, sides: drainSides},
	"b": {label: "(b) 8 concurrent", drain: true, concurrency: 8, batch: 1, sides: drainSides},
	"c": {label: "(c) batched, 10 jobs per claim, one worker", drain: true, concurrency: 1, batch: 10, sides: drainSides},
	"d": {label: "(d) enqueue one by one", sides: []string{"runtime", "river"}},
	"e": {label: fmt.Sprintf("(e) enqueue in bulk, %d per call", chunk), bulk: true,
		sides: []string{"runtime", "river", "river-copy"}},
	"f": {label: fmt.Sprintf("(f) keyed: one at a time per key, %d keys, 8 workers", keys), drain: true,
		concurrency: 8, batch: 1, keyed: true, sides: []string{"runtime"},
		noPeer: "River has no equivalent in its open-source version: no per-key concurrency limit (River Pro's " +
			"concurrency limits are not open source); its unique jobs keep a second job of a key out while one " +
			"waits or runs (a deduplication, not a limit), and a queue per key is a poller per key that limits " +
			"one client only"},
	"g": {label: "(g) enqueue-to-start, idle worker", latency: true,
		sides: []string{"runtime", "river", "river-one-client"}},
}

// result is one timed run.
type result struct {
	Row     string  `json:"row"`
	Side    string  `json:"side"`
	Jobs    int     `json:"jobs"`
	Seconds float64 `json:"seconds"`
	// ClientCPUms is the CPU time (user + system) of the run's process,
	// warm-up excluded.
	ClientCPUms float64 `json:"client_cpu_ms"`
	// RestCPUms is the CPU time of the rest of the machine over the run.
	RestCPUms float64 `json:"rest_of_machine_cpu_ms"`
	// WriteTransactions is the transactions that took an id over the run
	// (whoever ran them: the side's, and any other client's then).
	WriteTransactions int64 `json:"write_transactions"`
	OK                bool  `json:"exactly_once"`
	// P50ms and P99ms: row (g)'s enqueue-to-start latencies
	P50ms float64 `json:"p50_ms,omitempty"`
	P99ms float64 `json:"p99_ms,omitempty"`
}

func main() {
	jobs := flag.Int("jobs", 5000, "jobs per run")
	warmup := flag.Int("warmup", 1000, "jobs each run handles first, untimed")
	rounds := flag.Int("rounds", 3, "rounds per row")
	rowList := flag.String("rows", "a b c d e f g", "rows to run")
	samples := flag.Int("samples", 200, "row (g): jobs timed per run")
	out := flag.String("out", "", "write the results as JSON to this file")
	runRow := flag.String("run", "", "internal: run one row ...")
	runSide := flag.String("side", "", "internal: ... by one side, print its result as JSON")
	cpuProfile := flag.String("cpuprofile", "", "with -run: write a CPU profile of the run to this file")
	flag.Parse()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if *runRow != "" {
		if *cpuProfile != "" {
			f, err := os.Create(*cpuProfile)
			if err != nil {
				log.Fatal(err)
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				log.Fatal(err)
			}
			defer pprof.StopCPUProfile()
		}
		var r result
		if rows[*runRow].latency {
			r, err = latencyRun(ctx, *runSide, *samples)
			r.Row, r.Side, r.Jobs = *runRow, *runSide, *samples
		} else {
			r, err = runOne(ctx, pool, *runRow, *runSide, *jobs, *warmup)
		}
		if err != nil {
			log.Fatal(err)
		}
		_ = json.NewEncoder(os.Stdout).Encode(r)
		return
	}
	if err := setup(ctx, pool); err != nil {
		log.Fatal(err)
	}
	env := environment(ctx, pool)
	fmt.Printf("%s\n%d jobs per run, each run a process of its own after %d jobs untimed; %d rounds per row, the order alternating\n\n",
		env["summary"], *jobs, *warmup, *rounds)
	fmt.Println("| row | side | median s | jobs/s (range) | exactly once | side s ÷ runtime s (range) | client CPU ms/job | rest of the machine ms/job | write transactions/job |")
	fmt.Println("|---|---|---:|---:|---|---:|---:|---:|---:|")
	report := map[string]any{"environment": env, "jobs": *jobs, "warmup": *warmup, "rounds": *rounds}
	var table []map[string]any
	var latencyLines []string
	flip := false
	for _, row := range strings.Fields(*rowList) {
		if _, ok := rows[row]; !ok {
			log.Fatalf("no row %q (rows: a b c d e f g)", row)
		}
	}
	for _, row := range strings.Fields(*rowList) {
		got := map[string][]result{}
		spec := rows[row]
		sides := spec.sides
		for range *rounds {
			order := append([]string(nil), sides...)
			if flip {
				for i, j := 0, len(order)-1; i < j; i, j = i+1, j-1 {
					order[i], order[j] = order[j], order[i]
				}
			}
			flip = !flip
			for _, side := range order {
				r, err := child(row, side, *jobs, *warmup, *samples)
				if err != nil {
					log.Fatal(err)
				}
				fmt.Fprintf(os.Stderr, "row %s %s: %.3f s\n", row, side, r.Seconds)
				got[side] = append(got[side], r)
			}
		}
		for _, side := range sides {
			runs := got[side]
			if spec.latency {
				p50s, p99s := make([]float64, len(runs)), make([]float64, len(runs))
				ok := true
				for i, r := range runs {
					p50s[i], p99s[i], ok = r.P50ms, r.P99ms, ok && r.OK
				}
				latencyLines = append(latencyLines, fmt.Sprintf("| %s | %d × %d | %.2f (%.2f–%.2f) | %.2f (%.2f–%.2f) |",
					side, len(runs), *samples, median(p50s), minOf(p50s), maxOf(p50s), median(p99s), minOf(p99s), maxOf(p99s)))
				table = append(table, map[string]any{"row": row, "label": spec.label, "side": side, "runs": runs,
					"median_p50_ms": median(p50s), "median_p99_ms": median(p99s), "samples": *samples, "ok": ok})
				continue
			}
			secs := make([]float64, len(runs))
			ok := true
			for i, r := range runs {
				secs[i] = r.Seconds
				ok = ok && r.OK
			}
			ratios := make([]float64, len(runs))
			for i := range runs {
				ratios[i] = runs[i].Seconds / got["runtime"][i].Seconds
			}
			med := median(secs)
			var cpu, rest, writes float64
			for _, r := range runs {
				if r.Seconds == med {
					cpu = r.ClientCPUms / float64(r.Jobs)
					rest = r.RestCPUms / float64(r.Jobs)
					writes = float64(r.WriteTransactions) / float64(r.Jobs)
				}
			}
			ratio := ""
			if side != "runtime" {
				ratio = fmt.Sprintf("%.2f× (%.2f–%.2f)", median(ratios), minOf(ratios), maxOf(ratios))
			}
			fmt.Printf("| %s | %s | %.3f | %d (%d–%d) | %v | %s | %.3f | %.3f | %.3f |\n", spec.label, side, med,
				int(float64(*jobs)/med), int(float64(*jobs)/maxOf(secs)), int(float64(*jobs)/minOf(secs)),
				map[bool]string{true: "yes", false: "NO"}[ok], ratio, cpu, rest, writes)
			entry := map[string]any{"row": row, "label": spec.label, "side": side, "runs": runs,
				"median_seconds": med, "median_jobs_per_second": float64(*jobs) / med, "exactly_once": ok}
			if side != "runtime" {
				entry["side_seconds_over_runtime_seconds"] = map[string]float64{"median": median(ratios),
					"min": minOf(ratios), "max": maxOf(ratios)}
			}
			table = append(table, entry)
		}
		if spec.noPeer != "" {
			fmt.Printf("| %s | river | — | — | — | %s | | | |\n", spec.label, spec.noPeer)
			table = append(table, map[string]any{"row": row, "label": spec.label, "side": "river", "no_equivalent": spec.noPeer})
		}
	}
	if len(latencyLines) > 0 {
		fmt.Println("\n| enqueue-to-start, idle worker | rounds × samples | p50 ms, median of rounds (range) | p99 ms (range) |")
		fmt.Println("|---|---:|---:|---:|")
		fmt.Println(strings.Join(latencyLines, "\n"))
	}
	report["rows"] = table
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		env["loadavg_at_end"] = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	if *out != "" {
		b, _ := json.MarshalIndent(report, "", "  ")
		if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("\nwritten to %s\n", *out)
	}
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[(len(s)-1)/2]
}

func minOf(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs {
		m = min(m, x)
	}
	return m
}

func maxOf(xs []float64) float64 {
	m := xs[0]
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

func runOne(ctx context.Context, pool *pgxpool.Pool, row, side string, jobs, warmup int) (result, error) {
	spec, ok := rows[row]
	if !ok {
		return result{}, fmt.Errorf("no row %q", row)
	}
	run := func(n int) (result, error) {
		if !spec.drain {
			return enqueueRun(ctx, pool, side, n, spec.bulk)
		}
		switch side {
		case "runtime", "raw":
			return runtimeDrain(ctx, spec, n, side == "raw")
		}
		// River claims as many jobs a fetch as it has free workers: a batch of
		// spec.batch is spec.batch workers
		return riverDrain(ctx, pool, spec.concurrency*spec.batch, n, side == "river-tx")
	}
	if warmup > 0 {
		if _, err := run(warmup); err != nil {
			return result{}, err
		}
	}
	r, err := run(jobs)
	r.Row, r.Side, r.Jobs = row, side, jobs
	return r, err
}
