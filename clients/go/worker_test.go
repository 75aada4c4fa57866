package concurrency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// errorLog collects the errors a worker reports.
type errorLog struct {
	mu     sync.Mutex
	errors []error
}

func (l *errorLog) add(_ *Task, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errors = append(l.errors, err)
}

func (l *errorLog) list() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errors...)
}

func TestWorkerEnqueueWorkComplete(t *testing.T) {
	pool := testPool(t, 10)
	createQueue(t, pool, "go_work", "")
	ctx := context.Background()
	var payloads []any
	for i := range 40 {
		payloads = append(payloads, map[string]int{"n": i})
	}
	if _, err := EnqueueBatch(ctx, pool, "go_work", payloads); err != nil {
		t.Fatal(err)
	}
	var sum, completed, running, most atomic.Int64
	errs := &errorLog{}
	w := NewWorker(pool, WorkerConfig{Name: "t1", Wait: 2 * time.Second, OnError: errs.add,
		OnComplete: func(*Task) { completed.Add(1) }})
	w.Handle("go_work", func(ctx context.Context, task *Task) error {
		r := running.Add(1)
		defer running.Add(-1)
		for {
			m := most.Load()
			if r <= m || most.CompareAndSwap(m, r) {
				break
			}
		}
		var p struct{ N int64 }
		if err := task.Decode(&p); err != nil {
			return err
		}
		sum.Add(p.N)
		time.Sleep(5 * time.Millisecond)
		return nil
	}, WithConcurrency(4))
	stop := runWorker(t, w)
	waitFor(t, 20*time.Second, "40 completions", func() bool { return completed.Load() == 40 })
	// a task enqueued while the worker waits is claimed at once
	if _, err := Enqueue(ctx, pool, "go_work", map[string]int{"n": 1000}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the 41st completion", func() bool { return completed.Load() == 41 })
	began := time.Now()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > 2*time.Second {
		t.Fatalf("stopping a waiting worker took %s", d)
	}
	if sum.Load() != 39*40/2+1000 || most.Load() > 4 || most.Load() < 2 {
		t.Fatalf("sum %d, at most %d at once", sum.Load(), most.Load())
	}
	if n := count(t, pool, `SELECT count(*) FROM concurrency."q_go_work"`); n != 0 {
		t.Fatalf("%d tasks left", n)
	}
	if e := errs.list(); len(e) != 0 {
		t.Fatal(e)
	}
}

func TestWorkerHandleTxExactlyOnce(t *testing.T) {
	pool := testPool(t, 10)
	createQueue(t, pool, "go_once", "")
	mustExec(t, pool, "CREATE TABLE IF NOT EXISTS once_effects (task_id bigint, attempt int)")
	mustExec(t, pool, "TRUNCATE once_effects")
	ctx := context.Background()
	var payloads []any
	for i := range 30 {
		payloads = append(payloads, i)
	}
	if _, err := EnqueueBatch(ctx, pool, "go_once", payloads); err != nil {
		t.Fatal(err)
	}
	var completed atomic.Int64
	errs := &errorLog{}
	w := NewWorker(pool, WorkerConfig{Wait: time.Second, OnError: errs.add,
		OnComplete: func(*Task) { completed.Add(1) }})
	w.HandleTx("go_once", func(ctx context.Context, tx pgx.Tx, task *Task) error {
		if _, err := tx.Exec(ctx, "INSERT INTO once_effects VALUES ($1, $2)", task.ID, task.Attempt); err != nil {
			return err
		}
		if task.Attempt == 1 && task.ID%3 == 0 {
			return RetryIn(errors.New("first attempts of every third task fail after writing"), RetryNow)
		}
		return nil
	}, WithConcurrency(4))
	stop := runWorker(t, w)
	waitFor(t, 20*time.Second, "30 completions", func() bool { return completed.Load() == 30 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, "SELECT count(*) FROM once_effects"); n != 30 {
		t.Fatalf("%d effects for 30 tasks", n)
	}
	if n := count(t, pool, "SELECT count(DISTINCT task_id) FROM once_effects"); n != 30 {
		t.Fatalf("%d distinct tasks in the effects", n)
	}
	if n := count(t, pool, "SELECT count(*) FROM once_effects WHERE task_id % 3 = 0 AND attempt <> 2"); n != 0 {
		t.Fatalf("%d effects of a failed first attempt committed", n)
	}
	if got := len(errs.list()); got != int(count(t, pool, "SELECT count(*) FROM once_effects WHERE attempt = 2")) || got == 0 {
		t.Fatalf("%d errors reported", got)
	}
}

func TestWorkerFailRetryDead(t *testing.T) {
	pool := testPool(t, 6)
	createQueue(t, pool, "go_dead", "max_attempts => 3")
	ctx := context.Background()
	id, err := Enqueue(ctx, pool, "go_dead", "x")
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	errs := &errorLog{}
	w := NewWorker(pool, WorkerConfig{Wait: time.Second, OnError: errs.add})
	w.Handle("go_dead", func(ctx context.Context, task *Task) error {
		calls.Add(1)
		return RetryIn(fmt.Errorf("no luck on attempt %d", task.Attempt), 50*time.Millisecond)
	})
	stop := runWorker(t, w)
	waitFor(t, 10*time.Second, "a dead task", func() bool {
		s, _ := taskStatus(t, pool, "go_dead", id)
		return s.State == "dead"
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	s, _ := taskStatus(t, pool, "go_dead", id)
	if s.Attempt != 3 || s.LastError == nil || *s.LastError != "no luck on attempt 3" || calls.Load() != 3 {
		t.Fatalf("dead task %+v after %d calls", s, calls.Load())
	}
	if len(errs.list()) != 3 {
		t.Fatalf("errors reported: %v", errs.list())
	}
}

func TestWorkerPanicIsAFailedAttempt(t *testing.T) {
	pool := testPool(t, 6)
	createQueue(t, pool, "go_panic", "retain => '1 hour'")
	ctx := context.Background()
	first, err := Enqueue(ctx, pool, "go_panic", "boom")
	if err != nil {
		t.Fatal(err)
	}
	second, err := Enqueue(ctx, pool, "go_panic", "fine")
	if err != nil {
		t.Fatal(err)
	}
	errs := &errorLog{}
	var completed atomic.Int64
	w := NewWorker(pool, WorkerConfig{Wait: time.Second, OnError: errs.add, OnComplete: func(*Task) { completed.Add(1) }})
	w.HandleTx("go_panic", func(ctx context.Context, tx pgx.Tx, task *Task) error {
		if string(task.Payload) == `"boom"` && task.Attempt == 1 {
			panic("handler exploded")
		}
		return task.SetResult(map[string]int32{"attempt": task.Attempt})
	})
	stop := runWorker(t, w)
	waitFor(t, 30*time.Second, "both tasks done", func() bool { return completed.Load() == 2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{first, second} {
		s, _ := taskStatus(t, pool, "go_panic", id)
		if s.State != "done" {
			t.Fatalf("task %d: %+v", id, s)
		}
	}
	s, _ := taskStatus(t, pool, "go_panic", first)
	if s.Attempt != 2 || s.LastError == nil || *s.LastError != "panic: handler exploded" {
		t.Fatalf("the panicking task: %+v", s)
	}
	var result string
	if err := pool.QueryRow(ctx, "SELECT result::text FROM concurrency.task_status('go_panic', $1)", first).Scan(&result); err != nil || result != `{"attempt": 2}` {
		t.Fatalf("result %q %v", result, err)
	}
	e := errs.list()
	var pe *PanicError
	if len(e) != 1 || !errors.As(e[0], &pe) {
		t.Fatalf("errors reported: %v", e)
	}
}

func TestWorkerLeaseLost(t *testing.T) {
	pool := testPool(t, 8)
	createQueue(t, pool, "go_lost", "")
	mustExec(t, pool, "CREATE TABLE IF NOT EXISTS lost_effects (task_id bigint)")
	mustExec(t, pool, "TRUNCATE lost_effects")
	ctx := context.Background()
	// fenced at complete: the handler's task is cancelled under it
	atComplete, err := Enqueue(ctx, pool, "go_lost", "complete")
	if err != nil {
		t.Fatal(err)
	}
	// found by a heartbeat: the handler's context ends with ErrLeaseLost
	atHeartbeat, err := Enqueue(ctx, pool, "go_lost", "heartbeat")
	if err != nil {
		t.Fatal(err)
	}
	errs := &errorLog{}
	causes := make(chan error, 2)
	w := NewWorker(pool, WorkerConfig{Wait: time.Second, Lease: 600 * time.Millisecond, OnError: errs.add})
	w.HandleTx("go_lost", func(ctx context.Context, tx pgx.Tx, task *Task) error {
		if _, err := tx.Exec(ctx, "INSERT INTO lost_effects VALUES ($1)", task.ID); err != nil {
			return err
		}
		// another session takes the task away
		if _, err := pool.Exec(context.Background(), "SELECT concurrency.cancel('go_lost', ARRAY[$1::bigint])", task.ID); err != nil {
			return err
		}
		if string(task.Payload) == `"complete"` {
			return nil
		}
		return awaitLeaseLost(ctx, causes)
	}, WithConcurrency(2))
	stop := runWorker(t, w)
	expectLeaseLost(t, causes)
	waitFor(t, 5*time.Second, "two lost leases reported", func() bool { return len(errs.list()) == 2 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, err := range errs.list() {
		var e *Error
		if !errors.Is(err, ErrLeaseLost) || !errors.As(err, &e) || e.LeaseLostReason() != "cancelled" {
			t.Fatalf("reported %v", err)
		}
	}
	if n := count(t, pool, "SELECT count(*) FROM lost_effects"); n != 0 {
		t.Fatalf("%d effects committed under lost leases", n)
	}
	for _, id := range []int64{atComplete, atHeartbeat} {
		if s, _ := taskStatus(t, pool, "go_lost", id); s.State != "cancelled" {
			t.Fatalf("task %d %+v", id, s)
		}
	}
}

// awaitLeaseLost waits (in a handler) up to 5 s for ctx to end and sends
// its cause to causes (nil when it did not end).
func awaitLeaseLost(ctx context.Context, causes chan<- error) error {
	select {
	case <-ctx.Done():
		causes <- context.Cause(ctx)
		return ctx.Err()
	case <-time.After(5 * time.Second):
		causes <- nil
		return nil
	}
}

// expectLeaseLost fails the test unless awaitLeaseLost tells of a lost lease
// within 10 s.
func expectLeaseLost(t *testing.T, causes <-chan error) {
	t.Helper()
	select {
	case cause := <-causes:
		if !errors.Is(cause, ErrLeaseLost) {
			t.Fatalf("the handler's context ended with %v", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the heartbeat did not find the lease lost")
	}
}

func TestWorkerHeartbeatsKeepTheLease(t *testing.T) {
	pool := testPool(t, 6)
	createQueue(t, pool, "go_beat", "lease => '30 seconds'")
	ctx := context.Background()
	if _, err := Enqueue(ctx, pool, "go_beat", "x"); err != nil {
		t.Fatal(err)
	}
	errs := &errorLog{}
	var completed atomic.Int64
	w := NewWorker(pool, WorkerConfig{Wait: time.Second, Lease: 600 * time.Millisecond, OnError: errs.add,
		OnComplete: func(*Task) { completed.Add(1) }})
	w.HandleTx("go_beat", func(ctx context.Context, tx pgx.Tx, task *Task) error {
		select { // four leases long
		case <-time.After(2400 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	})
	stop := runWorker(t, w)
	waitFor(t, 10*time.Second, "the completion", func() bool { return completed.Load() == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if e := errs.list(); len(e) != 0 {
		t.Fatal(e)
	}
}

func TestWorkerShutdownReleasesUnstartedTasks(t *testing.T) {
	checkShutdownReleases(t, "go_release", 3, func(w *Worker, started *atomic.Int64) {
		w.Handle("go_release", func(ctx context.Context, task *Task) error {
			started.Add(1)
			return nil
		}, WithConcurrency(3))
	})
}

// checkShutdownReleases enqueues n tasks to queue, runs a worker with the
// handler that register sets (counting its starts in started) and shuts it
// down between the claim and the handlers' start: every task must be ready
// again, no attempt spent.
func checkShutdownReleases(t *testing.T, queue string, n int, register func(w *Worker, started *atomic.Int64)) {
	pool := testPool(t, 8)
	createQueue(t, pool, queue, "")
	ctx := context.Background()
	payloads := make([]any, n)
	for i := range payloads {
		payloads[i] = i
	}
	ids, err := EnqueueBatch(ctx, pool, queue, payloads)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	claimed := make(chan int, 1)
	testHookClaimed = func(queue string, tasks []*Task) {
		claimed <- len(tasks)
		cancel() // the shutdown begins between the claim and the handlers' start
	}
	defer func() { testHookClaimed = nil }()
	var started atomic.Int64
	w := NewWorker(pool, WorkerConfig{Wait: time.Second})
	register(w, &started)
	if err := w.Run(runCtx); err != nil {
		t.Fatal(err)
	}
	if got := <-claimed; got != n || started.Load() != 0 {
		t.Fatalf("claimed %d, started %d", got, started.Load())
	}
	for _, id := range ids {
		s, ok := taskStatus(t, pool, queue, id)
		if !ok || s.State != "ready" || s.Attempt != 0 {
			t.Fatalf("task %d after the shutdown: %+v", id, s)
		}
	}
}

func TestWorkerShutdownWaitsForRunningHandlers(t *testing.T) {
	pool := testPool(t, 8)
	createQueue(t, pool, "go_drain", "")
	ctx := context.Background()
	quick, err := Enqueue(ctx, pool, "go_drain", "quick")
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{}, 1)
	var completed atomic.Int64
	w := NewWorker(pool, WorkerConfig{Wait: time.Second, ShutdownTimeout: 5 * time.Second,
		OnComplete: func(*Task) { completed.Add(1) }})
	w.Handle("go_drain", func(ctx context.Context, task *Task) error {
		started <- struct{}{}
		time.Sleep(400 * time.Millisecond) // still running when the shutdown begins
		return nil
	})
	stop := runWorker(t, w)
	<-started
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if completed.Load() != 1 {
		t.Fatal("the running handler was not waited for")
	}
	if _, ok := taskStatus(t, pool, "go_drain", quick); ok {
		t.Fatal("the task is still there")
	}

	// a handler that outlives the shutdown timeout: its context is cancelled
	// and Run says so
	slow, err := Enqueue(ctx, pool, "go_drain", "slow")
	if err != nil {
		t.Fatal(err)
	}
	causes := make(chan error, 1)
	errs := &errorLog{}
	w = NewWorker(pool, WorkerConfig{Wait: time.Second, ShutdownTimeout: 300 * time.Millisecond, OnError: errs.add})
	w.Handle("go_drain", func(ctx context.Context, task *Task) error {
		started <- struct{}{}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return context.Cause(ctx)
	})
	stop = runWorker(t, w)
	<-started
	if err := stop(); !errors.Is(err, ErrShutdownTimeout) {
		t.Fatalf("Run returned %v", err)
	}
	if cause := <-causes; !errors.Is(cause, ErrShutdownTimeout) {
		t.Fatalf("the handler's context ended with %v", cause)
	}
	if s, _ := taskStatus(t, pool, "go_drain", slow); s.Attempt != 1 || s.State == "leased" {
		t.Fatalf("the abandoned task: %+v", s)
	}
}

func TestWorkerStopsOnAFatalClaimError(t *testing.T) {
	pool := testPool(t, 4)
	w := NewWorker(pool, WorkerConfig{Wait: time.Second})
	w.Handle("go_no_such_queue", func(ctx context.Context, task *Task) error { return nil })
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	select {
	case err := <-done:
		if SQLState(err) != "42704" {
			t.Fatalf("Run returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run went on with an unknown queue")
	}
}

// A worker process killed (SIGKILL) in the middle of its tasks and started
// again does every task exactly once: the killed transactions roll back, and
// their tasks come back when their leases end.
func TestKillRestartExactlyOnce(t *testing.T) { killRestart(t, "go_kill", "") }

// The same with a HandleBatch worker, batches of 5.
func TestKillRestartExactlyOnceBatch(t *testing.T) { killRestart(t, "go_kill_batch", "5") }

// killRestart runs the worker process of helperWorker on queue (batch: its
// HandleBatch size, "" for HandleTx), kills it, starts it again and checks
// that every task was done once.
func killRestart(t *testing.T, queue, batch string) {
	pool := testPool(t, 4)
	createQueue(t, pool, queue, "")
	mustExec(t, pool, "CREATE TABLE IF NOT EXISTS kill_effects (task_id bigint)")
	mustExec(t, pool, "TRUNCATE kill_effects")
	ctx := context.Background()
	const tasks = 300
	payloads := make([]any, tasks)
	for i := range payloads {
		payloads[i] = i
	}
	if _, err := EnqueueBatch(ctx, pool, queue, payloads); err != nil {
		t.Fatal(err)
	}
	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "CE_GO_HELPER=worker", "CE_GO_QUEUE="+queue, "CE_GO_BATCH="+batch)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if cmd.ProcessState == nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		})
		return cmd
	}
	first := start()
	waitFor(t, 20*time.Second, "some tasks done", func() bool {
		return count(t, pool, "SELECT count(*) FROM kill_effects") >= 40
	})
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = first.Wait()
	leased := count(t, pool, `SELECT count(*) FROM concurrency."q_`+queue+`" WHERE state = 'leased'`)
	if leased == 0 {
		t.Log("no task was leased at the kill")
	}
	second := start()
	waitFor(t, 30*time.Second, "every task done", func() bool {
		return count(t, pool, `SELECT count(*) FROM concurrency."q_`+queue+`"`) == 0
	})
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := second.Wait(); err != nil {
		t.Fatalf("the worker's exit after SIGTERM: %v", err)
	}
	if n := count(t, pool, "SELECT count(*) FROM kill_effects"); n != tasks {
		t.Fatalf("%d effects for %d tasks (%d leased at the kill)", n, tasks, leased)
	}
	if n := count(t, pool, "SELECT count(DISTINCT task_id) FROM kill_effects"); n != tasks {
		t.Fatalf("%d distinct tasks in the effects", n)
	}
	t.Logf("%d tasks were leased at the kill", leased)
}

// A slot claims its next task in the completing transaction only under READ
// COMMITTED: a handler that raised the isolation level gets its next task
// from a claim of its own, and nothing fails.
func TestWorkerHandlerRaisingTheIsolationLevel(t *testing.T) {
	pool := testPool(t, 6)
	createQueue(t, pool, "go_iso", "")
	ctx := context.Background()
	if _, err := EnqueueBatch(ctx, pool, "go_iso", []any{1, 2, 3, 4, 5, 6}); err != nil {
		t.Fatal(err)
	}
	var completed atomic.Int64
	errs := &errorLog{}
	w := NewWorker(pool, WorkerConfig{Wait: time.Second, OnError: errs.add, OnComplete: func(*Task) { completed.Add(1) }})
	w.HandleTx("go_iso", func(ctx context.Context, tx pgx.Tx, task *Task) error {
		if task.Payload[0]%2 == 0 {
			return nil
		}
		_, err := tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
		return err
	})
	stop := runWorker(t, w)
	waitFor(t, 10*time.Second, "6 completions", func() bool { return completed.Load() == 6 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if e := errs.list(); len(e) != 0 {
		t.Fatal(e)
	}
}

// A claim waits less than the connections' statement_timeout, which would
// otherwise cancel each idle wait with an error.
func TestWorkerWaitUnderStatementTimeout(t *testing.T) {
	if skipReason != "" {
		t.Skip(skipReason)
	}
	cfg := poolConfig(t, 4)
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = "1200ms"
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	createQueue(t, pool, "go_timeout", "")
	var logged strings.Builder
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		return logged.Write(p)
	}), &slog.HandlerOptions{Level: slog.LevelWarn}))
	var completed atomic.Int64
	w := NewWorker(pool, WorkerConfig{Wait: 10 * time.Second, Logger: logger,
		OnComplete: func(*Task) { completed.Add(1) }})
	w.Handle("go_timeout", func(ctx context.Context, task *Task) error { return nil })
	stop := runWorker(t, w)
	time.Sleep(2500 * time.Millisecond) // idle, longer than the timeout
	if _, err := Enqueue(context.Background(), pool, "go_timeout", 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the completion", func() bool { return completed.Load() == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if logged.Len() != 0 {
		t.Fatalf("logged: %s", logged.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
