package concurrency

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The tests run against a real server with concurrency_ext installed, found
// through the PG* environment (PGHOST, PGPORT, PGUSER, PGDATABASE): they
// create the database concurrency_ext_gotest there (dropped first if it
// exists) with the extension in it. Without PGHOST every test is skipped.
const testDatabase = "concurrency_ext_gotest"

var skipReason string

func TestMain(m *testing.M) {
	if os.Getenv("CE_GO_HELPER") == "worker" {
		os.Exit(helperWorker())
	}
	if os.Getenv("PGHOST") == "" {
		skipReason = "PGHOST is not set: these tests need a PostgreSQL server with concurrency_ext installed " +
			"(see clients/go/run-tests.sh)"
	} else if err := setupDatabase(); err != nil {
		fmt.Fprintln(os.Stderr, "setting up the test database:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

func setupDatabase() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, "")
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+testDatabase+" WITH (FORCE)"); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+testDatabase); err != nil {
		return err
	}
	db, err := pgx.Connect(ctx, "dbname="+testDatabase)
	if err != nil {
		return err
	}
	defer db.Close(ctx)
	_, err = db.Exec(ctx, "CREATE EXTENSION concurrency_ext")
	return err
}

func poolConfig(t testing.TB, maxConns int32) *pgxpool.Config {
	cfg, err := pgxpool.ParseConfig("dbname=" + testDatabase)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	return cfg
}

// testPool returns a pool on the test database, closed at the test's end.
func testPool(t *testing.T, maxConns int32) *pgxpool.Pool {
	t.Helper()
	if skipReason != "" {
		t.Skip(skipReason)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), poolConfig(t, maxConns))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// createQueue (re)creates queue with the given extra create_queue arguments.
func createQueue(t *testing.T, pool *pgxpool.Pool, queue, args string) {
	t.Helper()
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "SELECT concurrency.drop_queue($1) FROM concurrency.queue WHERE name = $1", queue); err != nil {
		t.Fatal(err)
	}
	if args != "" {
		args = ", " + args
	}
	if _, err := pool.Exec(ctx, "SELECT concurrency.create_queue($1"+args+")", queue); err != nil {
		t.Fatal(err)
	}
}

func mustExec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

type status struct {
	State     string
	Attempt   int32
	LastError *string
}

// taskStatus is task_status's row; ok false when the task is gone.
func taskStatus(t *testing.T, pool *pgxpool.Pool, queue string, id int64) (status, bool) {
	t.Helper()
	var s status
	err := pool.QueryRow(context.Background(),
		"SELECT state, attempt, last_error FROM concurrency.task_status($1, $2)", queue, id).
		Scan(&s.State, &s.Attempt, &s.LastError)
	if err == pgx.ErrNoRows {
		return s, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return s, true
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runWorker runs w until the returned stop function is called; stop
// returns Run's error.
func runWorker(t *testing.T, w *Worker) func() error {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	stopped := false
	var result error
	stop := func() error {
		if !stopped {
			stopped = true
			cancel()
			select {
			case result = <-done:
			case <-time.After(40 * time.Second):
				t.Fatal("Run did not return")
			}
		}
		return result
	}
	t.Cleanup(func() { stop() })
	return stop
}

// helperWorker is the worker process of the TestKillRestartExactlyOnce
// tests: a HandleTx worker (HandleBatch with batches of CE_GO_BATCH, when
// set) on queue CE_GO_QUEUE that records each task in kill_effects, until
// SIGTERM (or SIGKILL).
func helperWorker() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	cfg, err := pgxpool.ParseConfig("dbname=" + testDatabase)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer pool.Close()
	w := NewWorker(pool, WorkerConfig{Name: "helper", Lease: time.Second, Wait: 2 * time.Second})
	work := func(ctx context.Context, tx pgx.Tx, task *Task) error {
		if _, err := tx.Exec(ctx, "INSERT INTO kill_effects VALUES ($1)", task.ID); err != nil {
			return err
		}
		time.Sleep(10 * time.Millisecond) // the work, inside the transaction
		return nil
	}
	if size, _ := strconv.Atoi(os.Getenv("CE_GO_BATCH")); size > 0 {
		w.HandleBatch(os.Getenv("CE_GO_QUEUE"), size, func(ctx context.Context, tx pgx.Tx, tasks []*Task) error {
			for _, task := range tasks {
				if err := work(ctx, tx, task); err != nil {
					return err
				}
			}
			return nil
		}, WithConcurrency(2))
	} else {
		w.HandleTx(os.Getenv("CE_GO_QUEUE"), work, WithConcurrency(4))
	}
	if err := w.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}
