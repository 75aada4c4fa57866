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
			cfg, err := pgxpool.ParseConfig(dsn)
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxConns = 8
			cfg.ConnConfig.DefaultQueryExecMode = mode
			pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
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
