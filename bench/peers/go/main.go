// Command peers-go compares the Go runtime of concurrency_ext
// (clients/go) with River (github.com/riverqueue/river on
// riverdriver/riverpgxv5) on one server, in the rows of bench/peers:
//
//	(a) one worker, one job at a time, draining JOBS jobs
//	(b) 8 concurrent workers draining JOBS jobs
//	(d) enqueue one by one: JOBS enqueues, each its own transaction
//
// Every side of a row runs ROUNDS times, the order alternating from round to
// round, each run a process of its own (this binary with -run) that first
// handles WARMUP jobs untimed. A drain passes when each job was recorded
// exactly once by its handler and nothing is left in its system. Run by
// peers-go.sh, which starts the server; PG* variables say where.
//
// The sides:
//
//   - runtime: concurrency.Worker with HandleTx: the handler's insert and
//     the task's completion commit in one transaction (exactly-once
//     effects); Enqueue for row (d);
//   - raw: the loop the runtime's HandleTx wraps, written by hand on pgx
//     (a claim on its own when a slot has nothing; then BEGIN, the insert,
//     complete and the next claim in one pipelined batch, COMMIT), to show
//     what the runtime's machinery costs; drains only;
//   - river: a river.Client with one worker; the handler inserts with the
//     pool (its own transaction) and River completes the job afterwards with
//     its batched completer; FetchCooldown 1 ms and FetchPollInterval 20 ms
//     (the defaults, 100 ms and 1 s, cap a worker at ten fetches a second);
//     Client.Insert for row (d);
//   - river-tx: the same, but the handler inserts and completes the job with
//     river.JobCompleteTx in one transaction (River's way to exactly-once
//     effects, the runtime's guarantee); drains only.
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
	"os/exec"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	concurrency "github.com/concurrency-ext/concurrency-ext/clients/go"
)

const chunk = 1000

var rows = map[string]struct {
	label       string
	concurrency int
	drain       bool
}{
	"a": {"(a) one worker, one job at a time", 1, true},
	"b": {"(b) 8 concurrent", 8, true},
	"d": {"(d) enqueue one by one", 1, false},
}

var allSides = []string{"runtime", "raw", "river", "river-tx"}

func sidesOf(row string) []string {
	if rows[row].drain {
		return allSides
	}
	return []string{"runtime", "river"}
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
	OK        bool    `json:"exactly_once"`
}

func main() {
	jobs := flag.Int("jobs", 5000, "jobs per run")
	warmup := flag.Int("warmup", 1000, "jobs each run handles first, untimed")
	rounds := flag.Int("rounds", 3, "rounds per row")
	rowList := flag.String("rows", "a b d", "rows to run")
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
		r, err := runOne(ctx, pool, *runRow, *runSide, *jobs, *warmup)
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
	fmt.Println("| row | side | median s | jobs/s (range) | exactly once | side s ÷ runtime s (range) | client CPU ms/job | rest of the machine ms/job |")
	fmt.Println("|---|---|---:|---:|---|---:|---:|---:|")
	report := map[string]any{"environment": env, "jobs": *jobs, "warmup": *warmup, "rounds": *rounds}
	var table []map[string]any
	flip := false
	for _, row := range strings.Fields(*rowList) {
		got := map[string][]result{}
		sides := sidesOf(row)
		for range *rounds {
			order := append([]string(nil), sides...)
			if flip {
				for i, j := 0, len(order)-1; i < j; i, j = i+1, j-1 {
					order[i], order[j] = order[j], order[i]
				}
			}
			flip = !flip
			for _, side := range order {
				r, err := child(row, side, *jobs, *warmup)
				if err != nil {
					log.Fatal(err)
				}
				fmt.Fprintf(os.Stderr, "row %s %s: %.3f s\n", row, side, r.Seconds)
				got[side] = append(got[side], r)
			}
		}
		for _, side := range sides {
			runs := got[side]
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
			var cpu, rest float64
			for _, r := range runs {
				if r.Seconds == med {
					cpu = r.ClientCPUms / float64(r.Jobs)
					rest = r.RestCPUms / float64(r.Jobs)
				}
			}
			ratio := ""
			if side != "runtime" {
				ratio = fmt.Sprintf("%.2f× (%.2f–%.2f)", median(ratios), minOf(ratios), maxOf(ratios))
			}
			fmt.Printf("| %s | %s | %.3f | %d (%d–%d) | %v | %s | %.3f | %.3f |\n", rows[row].label, side, med,
				int(float64(*jobs)/med), int(float64(*jobs)/maxOf(secs)), int(float64(*jobs)/minOf(secs)),
				map[bool]string{true: "yes", false: "NO"}[ok], ratio, cpu, rest)
			entry := map[string]any{"row": row, "label": rows[row].label, "side": side, "runs": runs,
				"median_seconds": med, "median_jobs_per_second": float64(*jobs) / med, "exactly_once": ok}
			if side != "runtime" {
				entry["side_seconds_over_runtime_seconds"] = map[string]float64{"median": median(ratios),
					"min": minOf(ratios), "max": maxOf(ratios)}
			}
			table = append(table, entry)
		}
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

func environment(ctx context.Context, pool *pgxpool.Pool) map[string]string {
	env := map[string]string{}
	var pgVersion, ext, fsync, sync string
	_ = pool.QueryRow(ctx, "SELECT current_setting('server_version'), (SELECT extversion FROM pg_extension WHERE extname = 'concurrency_ext'), current_setting('fsync'), current_setting('synchronous_commit')").
		Scan(&pgVersion, &ext, &fsync, &sync)
	env["postgresql"] = pgVersion
	env["concurrency_ext"] = ext
	env["fsync"] = fsync
	env["synchronous_commit"] = sync
	if bi, ok := debug.ReadBuildInfo(); ok {
		env["go"] = bi.GoVersion
		for _, d := range bi.Deps {
			if d.Path == "github.com/riverqueue/river" || d.Path == "github.com/jackc/pgx/v5" {
				env[d.Path] = d.Version
			}
		}
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		env["loadavg_at_start"] = strings.Join(strings.Fields(string(b))[:3], " ")
	}
	cores, _ := exec.Command("nproc").Output()
	env["cores"] = strings.TrimSpace(string(cores))
	env["summary"] = fmt.Sprintf("PostgreSQL %s, concurrency_ext %s, fsync %s, synchronous_commit %s; %s, river %s, pgx %s; %s cores",
		pgVersion, ext, fsync, sync, env["go"], env["github.com/riverqueue/river"], env["github.com/jackc/pgx/v5"], env["cores"])
	return env
}

// setup migrates River's tables and makes the results table.
func setup(ctx context.Context, pool *pgxpool.Pool) error {
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return err
	}
	_, err = pool.Exec(ctx, "CREATE UNLOGGED TABLE IF NOT EXISTS peers_results (job bigint NOT NULL)")
	return err
}

// child runs one row by one side in a process of its own.
func child(row, side string, jobs, warmup int) (result, error) {
	cmd := exec.Command(os.Args[0], "-run", row, "-side", side, "-jobs", fmt.Sprint(jobs), "-warmup", fmt.Sprint(warmup))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return result{}, fmt.Errorf("row %s by %s: %w", row, side, err)
	}
	var r result
	return r, json.Unmarshal(out, &r)
}

// machineMillis is the CPU time of the whole machine so far (user, nice,
// system, irq, softirq of every core; USER_HZ = 100).
func machineMillis() float64 {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])
	var sum float64
	for _, i := range []int{1, 2, 3, 6, 7} {
		var v float64
		fmt.Sscan(f[i], &v)
		sum += v
	}
	return sum * 10
}

// measure returns a function that fills in a run's times since measure was called.
func measure() func(*result) {
	cpu0, m0, t0 := cpuMillis(), machineMillis(), time.Now()
	return func(r *result) {
		r.Seconds = time.Since(t0).Seconds()
		r.ClientCPUms = cpuMillis() - cpu0
		r.RestCPUms = machineMillis() - m0 - r.ClientCPUms
	}
}

func cpuMillis() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e6
}

func runOne(ctx context.Context, pool *pgxpool.Pool, row, side string, jobs, warmup int) (result, error) {
	spec, ok := rows[row]
	if !ok {
		return result{}, fmt.Errorf("no row %q", row)
	}
	run := func(n int) (result, error) {
		if !spec.drain {
			return enqueueRun(ctx, pool, side, n)
		}
		switch side {
		case "runtime":
			return runtimeDrain(ctx, spec.concurrency, n, false)
		case "raw":
			return runtimeDrain(ctx, spec.concurrency, n, true)
		}
		return riverDrain(ctx, pool, spec.concurrency, n, side == "river-tx")
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

func reset(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `TRUNCATE peers_results, river_job;
		SELECT concurrency.drop_queue(name) FROM concurrency.queue WHERE name = 'peers';
		SELECT concurrency.create_queue('peers')`)
	return err
}

func verify(ctx context.Context, pool *pgxpool.Pool, side string, jobs int) (bool, error) {
	var n, distinct, left int
	if err := pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT job) FROM peers_results").Scan(&n, &distinct); err != nil {
		return false, err
	}
	leftSQL := `SELECT count(*) FROM concurrency."q_peers"`
	if side == "river" {
		leftSQL = "SELECT count(*) FROM river_job WHERE state <> 'completed'"
	}
	if err := pool.QueryRow(ctx, leftSQL).Scan(&left); err != nil {
		return false, err
	}
	ok := n == jobs && distinct == jobs && left == 0
	if !ok {
		log.Printf("%s: %d handled, %d distinct, %d left: NOT exactly once", side, n, distinct, left)
	}
	return ok, nil
}

// --- concurrency_ext ----------------------------------------------------------

func newPool(ctx context.Context, conns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig("")
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = conns
	cfg.MinConns = conns
	return pgxpool.NewWithConfig(ctx, cfg)
}

func runtimeDrain(ctx context.Context, workers, jobs int, raw bool) (result, error) {
	setupPool, err := newPool(ctx, 2)
	if err != nil {
		return result{}, err
	}
	defer setupPool.Close()
	if err := reset(ctx, setupPool); err != nil {
		return result{}, err
	}
	for start := 0; start < jobs; start += chunk {
		payloads := make([]any, 0, chunk)
		for i := start; i < min(jobs, start+chunk); i++ {
			payloads = append(payloads, map[string]int{"i": i})
		}
		if _, err := concurrency.EnqueueBatch(ctx, setupPool, "peers", payloads); err != nil {
			return result{}, err
		}
	}
	pool, err := newPool(ctx, int32(workers+2))
	if err != nil {
		return result{}, err
	}
	defer pool.Close()
	if raw {
		return rawDrain(ctx, pool, setupPool, workers, jobs)
	}
	var completed atomic.Int64
	finished := make(chan struct{})
	w := concurrency.NewWorker(pool, concurrency.WorkerConfig{Name: "peers",
		OnError: func(t *concurrency.Task, err error) { log.Printf("runtime: task %d: %v", t.ID, err) },
		OnComplete: func(*concurrency.Task) {
			if completed.Add(1) == int64(jobs) {
				close(finished)
			}
		}})
	w.HandleTx("peers", func(ctx context.Context, tx pgxTx, task *concurrency.Task) error {
		_, err := tx.Exec(ctx, "INSERT INTO peers_results VALUES ($1)", task.ID)
		return err
	}, concurrency.WithConcurrency(workers))
	runCtx, cancel := context.WithCancel(ctx)
	done := measure()
	errc := make(chan error, 1)
	go func() { errc <- w.Run(runCtx) }()
	select {
	case <-finished:
	case err := <-errc:
		cancel()
		return result{}, fmt.Errorf("runtime: Run returned early: %v", err)
	}
	var r result
	done(&r)
	cancel()
	if err := <-errc; err != nil {
		return result{}, err
	}
	r.OK, err = verify(ctx, setupPool, "runtime", jobs)
	return r, err
}

const rawClaim = "SELECT task_id, lease_token FROM concurrency.dequeue('peers', 1)"

// rawDrain: each of workers goroutines holds a connection and loops.
func rawDrain(ctx context.Context, pool, setup *pgxpool.Pool, workers, jobs int) (result, error) {
	var handled atomic.Int64
	errc := make(chan error, workers)
	done := measure()
	for range workers {
		go func() {
			errc <- func() error {
				conn, err := pool.Acquire(ctx)
				if err != nil {
					return err
				}
				defer conn.Release()
				var id, token int64
				have := false
				for {
					if !have {
						if handled.Load() >= int64(jobs) {
							return nil
						}
						err := conn.QueryRow(ctx, rawClaim).Scan(&id, &token)
						if err == pgx.ErrNoRows {
							time.Sleep(time.Millisecond)
							continue
						}
						if err != nil {
							return err
						}
						have = true
					}
					tx, err := conn.Begin(ctx)
					if err != nil {
						return err
					}
					if _, err := tx.Exec(ctx, "INSERT INTO peers_results VALUES ($1)", id); err != nil {
						return err
					}
					b := &pgx.Batch{}
					b.Queue("SELECT concurrency.complete('peers', $1, $2)", id, token)
					b.Queue(rawClaim)
					br := tx.SendBatch(ctx, b)
					if _, err := br.Exec(); err != nil {
						return err
					}
					have = false
					rows, err := br.Query()
					if err != nil {
						return err
					}
					for rows.Next() {
						if err := rows.Scan(&id, &token); err != nil {
							return err
						}
						have = true
					}
					rows.Close()
					if err := br.Close(); err != nil {
						return err
					}
					if err := tx.Commit(ctx); err != nil {
						return err
					}
					handled.Add(1)
				}
			}()
		}()
	}
	for range workers {
		if err := <-errc; err != nil {
			return result{}, err
		}
	}
	var r result
	done(&r)
	var err error
	r.OK, err = verify(ctx, setup, "raw", jobs)
	return r, err
}

// --- River ------------------------------------------------------------------------

type peerArgs struct {
	I int `json:"i"`
}

func (peerArgs) Kind() string { return "peer" }

type peerWorker struct {
	river.WorkerDefaults[peerArgs]
	pool *pgxpool.Pool
	tx   bool // insert and complete in one transaction
}

func (w *peerWorker) Work(ctx context.Context, job *river.Job[peerArgs]) error {
	if !w.tx {
		_, err := w.pool.Exec(ctx, "INSERT INTO peers_results VALUES ($1)", job.ID)
		return err
	}
	return pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO peers_results VALUES ($1)", job.ID); err != nil {
			return err
		}
		_, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job)
		return err
	})
}

func riverClient(pool *pgxpool.Pool, workers int, tx bool) (*river.Client[pgxTx], error) {
	ws := river.NewWorkers()
	river.AddWorker(ws, &peerWorker{pool: pool, tx: tx})
	return river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers:           ws,
		FetchCooldown:     time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            quietLogger(),
	})
}

func riverDrain(ctx context.Context, setup *pgxpool.Pool, workers, jobs int, tx bool) (result, error) {
	if err := reset(ctx, setup); err != nil {
		return result{}, err
	}
	inserter, err := riverClient(setup, 1, false)
	if err != nil {
		return result{}, err
	}
	for start := 0; start < jobs; start += chunk {
		params := make([]river.InsertManyParams, 0, chunk)
		for i := start; i < min(jobs, start+chunk); i++ {
			params = append(params, river.InsertManyParams{Args: peerArgs{I: i}})
		}
		if _, err := inserter.InsertMany(ctx, params); err != nil {
			return result{}, err
		}
	}
	pool, err := newPool(ctx, int32(workers+4))
	if err != nil {
		return result{}, err
	}
	defer pool.Close()
	client, err := riverClient(pool, workers, tx)
	if err != nil {
		return result{}, err
	}
	events, unsubscribe := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: jobs + 100,
		Kinds: []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed}})
	defer unsubscribe()
	done := measure()
	if err := client.Start(ctx); err != nil {
		return result{}, err
	}
	for done := 0; done < jobs; {
		e := <-events
		if e.Kind == river.EventKindJobCompleted {
			done++
		} else {
			log.Printf("river: job %d failed", e.Job.ID)
		}
	}
	var r result
	done(&r)
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		return result{}, err
	}
	r.OK, err = verify(ctx, setup, "river", jobs)
	return r, err
}

// --- enqueueing -------------------------------------------------------------------

func enqueueRun(ctx context.Context, setup *pgxpool.Pool, side string, jobs int) (result, error) {
	if err := reset(ctx, setup); err != nil {
		return result{}, err
	}
	pool, err := newPool(ctx, 2)
	if err != nil {
		return result{}, err
	}
	defer pool.Close()
	var client *river.Client[pgxTx]
	if side == "river" {
		if client, err = riverClient(pool, 1, false); err != nil {
			return result{}, err
		}
	}
	done := measure()
	for i := range jobs {
		if side == "river" {
			_, err = client.Insert(ctx, peerArgs{I: i}, nil)
		} else {
			_, err = concurrency.Enqueue(ctx, pool, "peers", map[string]int{"i": i})
		}
		if err != nil {
			return result{}, err
		}
	}
	var r result
	done(&r)
	n := 0
	countSQL := `SELECT count(*) FROM concurrency."q_peers"`
	if side == "river" {
		countSQL = "SELECT count(*) FROM river_job"
	}
	if err := setup.QueryRow(ctx, countSQL).Scan(&n); err != nil {
		return result{}, err
	}
	r.OK = n == jobs
	return r, nil
}
