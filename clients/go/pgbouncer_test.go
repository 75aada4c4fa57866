package concurrency

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// bouncerPool is a pool through PgBouncer whose statements go in mode,
// closed at the test's end.
func bouncerPool(t *testing.T, dsn string, mode pgx.QueryExecMode, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.DefaultQueryExecMode = mode
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Through PgBouncer in transaction mode (CE_PGBOUNCER, set by run-tests.sh):
// every statement of the runtime is one transaction's or the handler's, the
// claim waits in one statement (no LISTEN), and with the pool's exec mode
// set to QueryExecModeExec (or the simple protocol) no named prepared
// statement is left on a server connection that another client gets next.
func TestThroughPgBouncer(t *testing.T) {
	dsn := os.Getenv("CE_PGBOUNCER")
	if dsn == "" {
		t.Skip("CE_PGBOUNCER is not set (run-tests.sh sets it when pgbouncer is installed)")
	}
	direct := testPool(t, 4)
	createQueue(t, direct, "go_bouncer", "")
	mustExec(t, direct, "CREATE TABLE IF NOT EXISTS bouncer_effects (task_id bigint)")
	mustExec(t, direct, "TRUNCATE bouncer_effects")
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			pool := bouncerPool(t, dsn, mode, 8)
			ctx := context.Background()
			mustExec(t, direct, "TRUNCATE bouncer_effects")
			payloads := make([]any, 60)
			for i := range payloads {
				payloads[i] = i
			}
			if _, err := EnqueueBatch(ctx, pool, "go_bouncer", payloads); err != nil {
				t.Fatal(err)
			}
			var completed atomic.Int64
			errs := &errorLog{}
			w := NewWorker(pool, WorkerConfig{Wait: 5 * time.Second, OnError: errs.add,
				OnComplete: func(*Task) { completed.Add(1) }})
			w.HandleTx("go_bouncer", func(ctx context.Context, tx pgx.Tx, task *Task) error {
				_, err := tx.Exec(ctx, "INSERT INTO bouncer_effects VALUES ($1)", task.ID)
				return err
			}, WithConcurrency(4))
			stop := runWorker(t, w)
			waitFor(t, 20*time.Second, "60 completions", func() bool { return completed.Load() == 60 })
			time.Sleep(200 * time.Millisecond) // the claim waits again
			began := time.Now()
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(began); d > 3*time.Second {
				t.Fatalf("stopping a waiting worker took %s", d)
			}
			if e := errs.list(); len(e) != 0 {
				t.Fatal(e)
			}
			if n := count(t, direct, "SELECT count(DISTINCT task_id) FROM bouncer_effects"); n != 60 {
				t.Fatalf("%d tasks' effects", n)
			}
		})
	}
}

// The workflow calls through PgBouncer in transaction mode, in both modes:
// steps, a sleep, an event wait, the emit and the await.
func TestWorkflowThroughPgBouncer(t *testing.T) {
	dsn := os.Getenv("CE_PGBOUNCER")
	if dsn == "" {
		t.Skip("CE_PGBOUNCER is not set (run-tests.sh sets it when pgbouncer is installed)")
	}
	direct := testPool(t, 4)
	createQueue(t, direct, "go_bouncer_wf", "")
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			pool := bouncerPool(t, dsn, mode, 6)
			ctx := context.Background()
			event := "go-bouncer-" + mode.String()
			id, err := Enqueue(ctx, pool, "go_bouncer_wf", event)
			if err != nil {
				t.Fatal(err)
			}
			errs := &errorLog{}
			w := NewWorker(pool, WorkerConfig{Wait: 2 * time.Second, OnError: errs.add})
			w.Handle("go_bouncer_wf", func(ctx context.Context, task *Task) error {
				var event string
				if err := task.Decode(&event); err != nil {
					return err
				}
				a, err := Step(ctx, task, "a", func(context.Context) (string, error) { return "it's \"a\"", nil })
				if err != nil {
					return err
				}
				b, err := StepTx(ctx, task, "b", func(ctx context.Context, tx pgx.Tx) (int, error) {
					var n int
					return n, tx.QueryRow(ctx, "SELECT 2").Scan(&n)
				})
				if err != nil {
					return err
				}
				if err := task.Sleep(ctx, 100*time.Millisecond); err != nil {
					return err
				}
				reply, err := task.WaitForEvent(ctx, event, time.Minute)
				if err != nil {
					return err
				}
				return task.SetResult(map[string]any{"a": a, "b": b, "reply": reply})
			})
			stop := runWorker(t, w)
			waitFor(t, 10*time.Second, "the wait for the event", func() bool {
				return count(t, direct, "SELECT count(*) FROM concurrency.event_wait WHERE event = $1", event) == 1
			})
			if n, err := EmitEvent(ctx, pool, event, []int{1, 2}); err != nil || n != 1 {
				t.Fatalf("emit: %d %v", n, err)
			}
			actx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			out, err := AwaitTask(actx, pool, "go_bouncer_wf", id)
			if err != nil {
				t.Fatal(err)
			}
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			if want := `{"a": "it's \"a\"", "b": 2, "reply": [1, 2]}`; out.State != "done" || string(out.Result) != want {
				t.Fatalf("outcome %+v, want result %s", out, want)
			}
			if e := errs.list(); len(e) != 0 {
				t.Fatal(e)
			}
		})
	}
}
