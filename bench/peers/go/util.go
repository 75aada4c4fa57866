package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

type pgxTx = pgx.Tx

// quietLogger keeps River's warnings and errors (on stderr), not its
// informational records.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
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
func child(row, side string, jobs, warmup, samples int) (result, error) {
	cmd := exec.Command(os.Args[0], "-run", row, "-side", side, "-jobs", fmt.Sprint(jobs), "-warmup", fmt.Sprint(warmup),
		"-samples", fmt.Sprint(samples))
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

// measure returns a function that fills in a run's times since measure was
// called, and the transactions that wrote (took a transaction id) meanwhile:
// with durable commits each is a WAL flush, shared by the commits that group
// with it.
func measure(ctx context.Context, pool *pgxpool.Pool) func(*result) {
	x0 := nextXid(ctx, pool)
	cpu0, m0, t0 := cpuMillis(), machineMillis(), time.Now()
	return func(r *result) {
		r.Seconds = time.Since(t0).Seconds()
		r.ClientCPUms = cpuMillis() - cpu0
		r.RestCPUms = machineMillis() - m0 - r.ClientCPUms
		r.WriteTransactions = nextXid(ctx, pool) - x0
	}
}

// nextXid is the transaction id the server assigns next (reading it assigns
// none).
func nextXid(ctx context.Context, pool *pgxpool.Pool) int64 {
	var x int64
	if err := pool.QueryRow(ctx, "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint").Scan(&x); err != nil {
		log.Fatal(err)
	}
	return x
}

func cpuMillis() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e6
}
