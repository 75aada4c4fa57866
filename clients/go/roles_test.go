package concurrency

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Least privilege: a producer role with only permission enqueue and a
// worker role with only permission work on the queue are all the runtime
// needs; a role without work gets 42501 from Run.
func TestRolesWithOnlyTheirPermissions(t *testing.T) {
	owner := testPool(t, 4)
	createQueue(t, owner, "go_roles", "")
	for _, role := range []string{"go_producer", "go_worker", "go_nobody"} {
		mustExec(t, owner, "DROP ROLE IF EXISTS "+role)
		mustExec(t, owner, "CREATE ROLE "+role+" LOGIN")
	}
	mustExec(t, owner, "SELECT concurrency.grant_queue('go_roles', 'go_producer', '{enqueue}')")
	mustExec(t, owner, "SELECT concurrency.grant_queue('go_roles', 'go_worker', '{work}')")
	t.Cleanup(func() {
		for _, role := range []string{"go_producer", "go_worker", "go_nobody"} {
			_, _ = owner.Exec(context.Background(), "SELECT concurrency.revoke_queue('go_roles', $1, '{enqueue,work}')", role)
			_, _ = owner.Exec(context.Background(), "DROP ROLE IF EXISTS "+role)
		}
	})
	as := func(role string) *pgxpool.Pool {
		cfg := poolConfig(t, 4)
		cfg.ConnConfig.User = role
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		return pool
	}
	ctx := context.Background()
	producer, worker, nobody := as("go_producer"), as("go_worker"), as("go_nobody")
	if _, err := EnqueueBatch(ctx, producer, "go_roles", []any{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := Dequeue(ctx, producer, "go_roles", DequeueOptions{}); SQLState(err) != "42501" {
		t.Fatalf("a producer's claim: %v", err)
	}
	var completed atomic.Int64
	errs := &errorLog{}
	w := NewWorker(worker, WorkerConfig{Wait: time.Second, OnError: errs.add, OnComplete: func(*Task) { completed.Add(1) }})
	w.Handle("go_roles", func(ctx context.Context, task *Task) error {
		if task.Attempt == 1 && string(task.Payload) == "2" {
			return errors.New("once more") // fail, as the worker role
		}
		return nil
	})
	stop := runWorker(t, w)
	waitFor(t, 20*time.Second, "3 completions", func() bool { return completed.Load() == 3 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if len(errs.list()) != 1 {
		t.Fatalf("errors: %v", errs.list())
	}
	w = NewWorker(nobody, WorkerConfig{Wait: time.Second})
	w.Handle("go_roles", func(ctx context.Context, task *Task) error { return nil })
	if err := w.Run(ctx); SQLState(err) != "42501" {
		t.Fatalf("Run as a role without work: %v", err)
	}
}
