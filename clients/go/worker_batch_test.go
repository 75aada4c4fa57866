package concurrency

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// batchQueue (re)creates queue (with the create_queue arguments args) and
// an empty table <queue>_effects (task_id, attempt) and enqueues n tasks.
func batchQueue(t *testing.T, queue, args string, n int) (*pgxpool.Pool, []int64) {
	t.Helper()
	pool := testPool(t, 10)
	createQueue(t, pool, queue, args)
	table := pgx.Identifier{queue + "_effects"}.Sanitize()
	mustExec(t, pool, "DROP TABLE IF EXISTS "+table)
	mustExec(t, pool, "CREATE TABLE "+table+" (task_id bigint, attempt int)")
	payloads := make([]any, n)
	for i := range payloads {
		payloads[i] = i
	}
	ids, err := EnqueueBatch(context.Background(), pool, queue, payloads)
	if err != nil {
		t.Fatal(err)
	}
	return pool, ids
}

// recordEffects inserts the tasks' ids and attempts into the effects table
// of batchQueue, in tx.
func recordEffects(ctx context.Context, tx pgx.Tx, queue string, tasks []*Task) error {
	for _, task := range tasks {
		_, err := tx.Exec(ctx, "INSERT INTO "+pgx.Identifier{queue + "_effects"}.Sanitize()+" VALUES ($1, $2)",
			task.ID, task.Attempt)
		if err != nil {
			return err
		}
	}
	return nil
}

func TestWorkerBatchCompletesAll(t *testing.T) {
	pool, ids := batchQueue(t, "go_batch", "", 45)
	var completed, batches, largest atomic.Int64
	errs := &errorLog{}
	w := NewWorker(pool, WorkerConfig{Wait: time.Second, OnError: errs.add,
		OnComplete: func(*Task) { completed.Add(1) }})
	w.HandleBatch("go_batch", 10, func(ctx context.Context, tx pgx.Tx, tasks []*Task) error {
		batches.Add(1)
		for {
			m := largest.Load()
			if int64(len(tasks)) <= m || largest.CompareAndSwap(m, int64(len(tasks))) {
				break
			}
		}
		return recordEffects(ctx, tx, "go_batch", tasks)
	}, WithConcurrency(2))
	stop := runWorker(t, w)
	waitFor(t, 20*time.Second, "45 completions", func() bool { return completed.Load() == 45 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if largest.Load() > 10 || largest.Load() < 2 || batches.Load() > 45/2 {
		t.Fatalf("%d batches, the largest of %d tasks", batches.Load(), largest.Load())
	}
	if n := count(t, pool, "SELECT count(DISTINCT task_id) FROM go_batch_effects"); n != 45 {
		t.Fatalf("%d distinct effects", n)
	}
	if n := count(t, pool, "SELECT count(*) FROM go_batch_effects"); n != 45 {
		t.Fatalf("%d effects", n)
	}
	if n := count(t, pool, `SELECT count(*) FROM concurrency."q_go_batch"`); n != 0 {
		t.Fatalf("%d tasks left (first %d)", n, ids[0])
	}
	if e := errs.list(); len(e) != 0 {
		t.Fatal(e)
	}
}

// A batch handler's error (or panic) rolls the batch back and fails all its
// tasks with fail_batch: each spends its attempt, then runs again.
func TestWorkerBatchErrorFailsAll(t *testing.T) {
	pool, ids := batchQueue(t, "go_batch_fail", "max_attempts => 3, retain => '1 hour'", 3)
	ctx := context.Background()
	errs := &errorLog{}
	var completed, runs atomic.Int64
	w := NewWorker(pool, WorkerConfig{Wait: time.Second, OnError: errs.add,
		OnComplete: func(*Task) { completed.Add(1) }})
	w.HandleBatch("go_batch_fail", 5, func(ctx context.Context, tx pgx.Tx, tasks []*Task) error {
		runs.Add(1)
		if err := recordEffects(ctx, tx, "go_batch_fail", tasks); err != nil {
			return err
		}
		switch tasks[0].Attempt {
		case 1:
			return errors.New("the batch broke")
		case 2:
			panic("the batch exploded")
		}
		return nil
	})
	stop := runWorker(t, w)
	waitFor(t, 20*time.Second, "3 completions", func() bool { return completed.Load() == 3 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if runs.Load() < 3 {
		t.Fatalf("%d runs of the batch", runs.Load())
	}
	for _, id := range ids {
		var attempt int32
		var lastError *string
		if err := pool.QueryRow(ctx, "SELECT attempt, last_error FROM concurrency.task_status('go_batch_fail', $1)", id).
			Scan(&attempt, &lastError); err != nil {
			t.Fatal(err)
		}
		if attempt != 3 {
			t.Fatalf("task %d done at attempt %d (last error %v)", id, attempt, lastError)
		}
	}
	// only the last run's writes committed
	if n := count(t, pool, "SELECT count(*) FROM go_batch_fail_effects WHERE attempt = 3"); n != 3 {
		t.Fatalf("%d effects of the third attempt", n)
	}
	if n := count(t, pool, "SELECT count(*) FROM go_batch_fail_effects"); n != 3 {
		t.Fatalf("%d effects", n)
	}
	// each task's error reported once an attempt
	broke, panicked := 0, 0
	for _, err := range errs.list() {
		var pe *PanicError
		switch {
		case err.Error() == "the batch broke":
			broke++
		case errors.As(err, &pe):
			panicked++
		default:
			t.Fatalf("reported %v", err)
		}
	}
	if broke != 3 || panicked != 3 {
		t.Fatalf("%d errors and %d panics reported", broke, panicked)
	}
}

// A batch fails with the task's last error recorded by fail_batch.
func TestWorkerBatchFailRecordsTheError(t *testing.T) {
	pool, ids := batchQueue(t, "go_batch_dead", "max_attempts => 1", 2)
	w := NewWorker(pool, WorkerConfig{Wait: time.Second, OnError: func(*Task, error) {}})
	w.HandleBatch("go_batch_dead", 2, func(ctx context.Context, tx pgx.Tx, tasks []*Task) error {
		return errors.New("no good")
	})
	stop := runWorker(t, w)
	waitFor(t, 10*time.Second, "both tasks dead", func() bool {
		return count(t, pool, `SELECT count(*) FROM concurrency."q_go_batch_dead" WHERE state = 'dead'`) == 2
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		s, _ := taskStatus(t, pool, "go_batch_dead", id)
		if s.Attempt != 1 || s.LastError == nil || *s.LastError != "no good" {
			t.Fatalf("task %d: %+v", id, s)
		}
	}
}

// A heartbeat that finds one lease of a batch lost cancels the handler's
// context; nothing of the batch completes, and the other tasks are handed
// back at once, no attempt spent, and run again.
func TestWorkerBatchLeaseLostAtHeartbeat(t *testing.T) {
	pool, ids := batchQueue(t, "go_batch_lost", "retain => '1 hour'", 3)
	errs := &errorLog{}
	causes := make(chan error, 1)
	var mu sync.Mutex
	sizes := []int{}
	var completed atomic.Int64
	w := NewWorker(pool, WorkerConfig{Wait: time.Second, Lease: 600 * time.Millisecond, OnError: errs.add,
		OnComplete: func(*Task) { completed.Add(1) }})
	w.HandleBatch("go_batch_lost", 3, func(ctx context.Context, tx pgx.Tx, tasks []*Task) error {
		mu.Lock()
		sizes = append(sizes, len(tasks))
		first := len(sizes) == 1
		mu.Unlock()
		if err := recordEffects(ctx, tx, "go_batch_lost", tasks); err != nil {
			return err
		}
		if !first {
			return nil
		}
		if _, err := pool.Exec(context.Background(), "SELECT concurrency.cancel('go_batch_lost', ARRAY[$1::bigint])", ids[1]); err != nil {
			return err
		}
		return awaitLeaseLost(ctx, causes)
	})
	began := time.Now()
	stop := runWorker(t, w)
	expectLeaseLost(t, causes)
	waitFor(t, 10*time.Second, "the two others completed", func() bool { return completed.Load() == 2 })
	if d := time.Since(began); d > 4*time.Second {
		t.Fatalf("the others ran again after %s", d)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	for i, id := range ids {
		s, _ := taskStatus(t, pool, "go_batch_lost", id)
		want := "done"
		if i == 1 {
			want = "cancelled"
		}
		if s.State != want || (i != 1 && s.Attempt != 1) {
			t.Fatalf("task %d: %+v", id, s)
		}
	}
	if n := count(t, pool, "SELECT count(*) FROM go_batch_lost_effects"); n != 2 {
		t.Fatalf("%d effects", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != 2 || sizes[0] != 3 || sizes[1] != 2 {
		t.Fatalf("batches of %v", sizes)
	}
	e := errs.list()
	if len(e) != 1 || !errors.Is(e[0], ErrLeaseLost) {
		t.Fatalf("errors reported: %v", e)
	}
}

func TestWorkerBatchShutdownReleasesUnstartedTasks(t *testing.T) {
	// five tasks claimed for three slots of two: release_batch for all
	checkShutdownReleases(t, "go_batch_release", 5, func(w *Worker, started *atomic.Int64) {
		w.HandleBatch("go_batch_release", 2, func(ctx context.Context, tx pgx.Tx, tasks []*Task) error {
			started.Add(1)
			return nil
		}, WithConcurrency(3))
	})
}

// A batch running when the shutdown begins completes, and its completion
// claims nothing more: the tasks not claimed stay ready, no attempt spent.
func TestWorkerBatchShutdownMidBatch(t *testing.T) {
	pool, ids := batchQueue(t, "go_batch_mid", "", 6)
	runCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var runs atomic.Int64
	w := NewWorker(pool, WorkerConfig{Wait: time.Second})
	w.HandleBatch("go_batch_mid", 3, func(ctx context.Context, tx pgx.Tx, tasks []*Task) error {
		if runs.Add(1) == 1 {
			cancel()
			time.Sleep(200 * time.Millisecond) // still running while Run shuts down
		}
		return nil
	})
	if err := w.Run(runCtx); err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 1 {
		t.Fatalf("%d batches ran", runs.Load())
	}
	for i, id := range ids {
		s, ok := taskStatus(t, pool, "go_batch_mid", id)
		if i < 3 && ok {
			t.Fatalf("task %d of the running batch: %+v", id, s)
		}
		if i >= 3 && (!ok || s.State != "ready" || s.Attempt != 0) {
			t.Fatalf("task %d after the shutdown: %+v", id, s)
		}
	}
}

func TestWorkerHandleBatchSize(t *testing.T) {
	w := NewWorker(nil, WorkerConfig{})
	defer func() {
		if recover() == nil {
			t.Fatal("HandleBatch took size 0")
		}
	}()
	w.HandleBatch("q", 0, func(context.Context, pgx.Tx, []*Task) error { return nil })
}

// A batch has a handle span per task, each continuing its task's trace
// with its complete span inside; the handler's ctx carries the first's.
func TestTracingBatch(t *testing.T) {
	pool := testPool(t, 10)
	createQueue(t, pool, "go_trace_batch", "")
	exporter, testTracer := installTracing(t)
	requests := map[int64]trace.SpanContext{}
	var first int64
	for i := range 3 {
		ctx, request := testTracer.Start(context.Background(), "request")
		id, err := Enqueue(ctx, pool, "go_trace_batch", map[string]int{"n": i})
		request.End()
		if err != nil {
			t.Fatal(err)
		}
		requests[id] = request.SpanContext()
		if i == 0 {
			first = id
		}
	}
	var handlerSpan trace.SpanContext
	var batches atomic.Int64
	w := NewWorker(pool, WorkerConfig{Wait: time.Second})
	w.HandleBatch("go_trace_batch", 3, func(ctx context.Context, tx pgx.Tx, tasks []*Task) error {
		if batches.Add(1) == 1 {
			handlerSpan = trace.SpanContextFromContext(ctx)
		}
		for _, task := range tasks {
			if strings.Contains(string(task.Payload), TracePayloadKey) {
				return errors.New("the payload kept its trace context")
			}
		}
		return nil
	})
	stop := runWorker(t, w)
	waitFor(t, 10*time.Second, "3 complete spans", func() bool {
		return len(spansNamed(exporter, "concurrency.complete go_trace_batch")) == 3
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if batches.Load() != 1 {
		t.Fatalf("%d batches", batches.Load())
	}
	handles := spansNamed(exporter, "concurrency.handle go_trace_batch")
	if len(handles) != 3 {
		t.Fatalf("%d handle spans", len(handles))
	}
	bySpan := map[trace.SpanID]tracetest.SpanStub{}
	for _, h := range handles {
		id := attrs(h)[traceAttrTaskId].AsInt64()
		if !requests[id].IsValid() || h.SpanContext.TraceID() != requests[id].TraceID() {
			t.Fatalf("task %d's handle span does not continue its enqueue's trace", id)
		}
		if id == first && h.SpanContext.SpanID() != handlerSpan.SpanID() {
			t.Fatal("the handler's ctx does not carry the first task's handle span")
		}
		bySpan[h.SpanContext.SpanID()] = h
	}
	for _, c := range spansNamed(exporter, "concurrency.complete go_trace_batch") {
		if _, ok := bySpan[c.Parent.SpanID()]; !ok {
			t.Fatal("a complete span outside the handle spans")
		}
		delete(bySpan, c.Parent.SpanID())
	}
}
