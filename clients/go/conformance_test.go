package concurrency

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// The conformance scenarios of clients/conformance/scenarios.json, run
// through the package's public API (see clients/conformance/README.md): a
// Worker with HandleTx for batch 1, with HandleBatch for larger batches.

type conformanceSpec struct {
	SQL struct {
		Setup       []string `json:"setup"`
		CreateQueue string   `json:"create_queue"`
		Task        string   `json:"task"`
		Mark        string   `json:"mark"`
		Cancel      string   `json:"cancel"`
		State       string   `json:"state"`
	} `json:"sql"`
	Scenarios []conformanceScenario `json:"scenarios"`
	Tracing   conformanceTracing    `json:"tracing"`
}

type conformanceQueue struct {
	Lease       string `json:"lease"`
	MaxAttempts int32  `json:"max_attempts"`
}

type conformanceScenario struct {
	Name   string           `json:"name"`
	About  string           `json:"about"`
	Queue  conformanceQueue `json:"queue"`
	Worker struct {
		Concurrency int `json:"concurrency"`
		Batch       int `json:"batch"`
	} `json:"worker"`
	EmitBefore []conformanceEvent `json:"emit_before"`
	Tasks      []json.RawMessage  `json:"tasks"`
	Then       []struct {
		Await string            `json:"await"`
		Emit  *conformanceEvent `json:"emit"`
	} `json:"then"`
	Until  string      `json:"until"`
	Expect [][2]string `json:"expect"`
}

type conformanceEvent struct {
	Event   string          `json:"event"`
	Payload json.RawMessage `json:"payload"`
}

type conformanceTask struct {
	N   int32 `json:"n"`
	Ops []struct {
		Op      string `json:"op"`
		What    string `json:"what"`
		Attempt int32  `json:"attempt"`
		Name    string `json:"name"`
		MS      int    `json:"ms"`
		Event   string `json:"event"`
	} `json:"ops"`
}

// conformanceRun is one scenario's run: stop cancels the worker's context
// (an op asks for it); stopAsked is closed then.
type conformanceRun struct {
	spec      *conformanceSpec
	pool      *pgxpool.Pool
	stop      context.CancelFunc
	stopAsked chan struct{}
	stopOnce  sync.Once

	mu   sync.Mutex
	errs []error // what OnError was told
}

func (r *conformanceRun) mark(ctx context.Context, task *Task, n int32, what string, detail any) error {
	var d any
	if detail != nil {
		b, err := json.Marshal(detail)
		if err != nil {
			return err
		}
		d = string(b)
	}
	_, err := r.pool.Exec(ctx, r.spec.SQL.Mark, task.Queue, n, task.Attempt, what, d)
	return err
}

// ops does what the task's payload says, in tx (the handler's transaction).
func (r *conformanceRun) ops(ctx context.Context, tx pgx.Tx, task *Task) error {
	var p conformanceTask
	if err := task.Decode(&p); err != nil {
		return err
	}
	for _, op := range p.Ops {
		var err error
		switch op.Op {
		case "mark":
			err = r.mark(ctx, task, p.N, op.What, nil)
		case "effect":
			_, err = tx.Exec(ctx, r.spec.SQL.Mark, task.Queue, p.N, task.Attempt, "effect", nil)
		case "cancel_self":
			_, err = r.pool.Exec(ctx, r.spec.SQL.Cancel, task.Queue, task.ID)
		case "fail_before":
			if task.Attempt < op.Attempt {
				err = fmt.Errorf("boom at attempt %d", task.Attempt)
			}
		case "step":
			var v map[string]string
			v, err = Step(ctx, task, op.Name, func(ctx context.Context) (map[string]string, error) {
				return map[string]string{"step": op.Name}, r.mark(ctx, task, p.N, "step:"+op.Name, nil)
			})
			if err == nil {
				err = r.mark(ctx, task, p.N, "got:"+op.Name, v)
			}
		case "sleep":
			err = task.Sleep(ctx, time.Duration(op.MS)*time.Millisecond)
		case "wait_event":
			var payload json.RawMessage
			payload, err = task.WaitForEvent(ctx, op.Event, 0)
			if err == nil {
				err = r.mark(ctx, task, p.N, "event", payload)
			}
		case "stop_worker":
			r.stopOnce.Do(func() { r.stop(); close(r.stopAsked) })
		default:
			err = fmt.Errorf("unknown op %q", op.Op)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (r *conformanceRun) check(t *testing.T, sql, queue string) bool {
	t.Helper()
	var ok *bool
	err := r.pool.QueryRow(context.Background(), sql, queue).Scan(&ok)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("%s: %v", sql, err)
	}
	return ok != nil && *ok
}

// batch runs a batch's tasks' ops one after the other in the batch's transaction.
func (r *conformanceRun) batch(ctx context.Context, tx pgx.Tx, tasks []*Task) error {
	for _, task := range tasks {
		if err := r.ops(ctx, tx, task); err != nil {
			return err
		}
	}
	return nil
}

// conformanceTracing is the tracing scenario (see its "about").
type conformanceTracing struct {
	Queue            conformanceQueue  `json:"queue"`
	Context          map[string]string `json:"context"`
	Payload          json.RawMessage   `json:"payload"`
	Stored           json.RawMessage   `json:"stored"`
	OtherEnqueueSpan string            `json:"other_enqueue_span"`
	Read             string            `json:"read"`
	Enqueue          string            `json:"enqueue"`
}

func readConformanceSpec(t *testing.T) *conformanceSpec {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "conformance", "scenarios.json"))
	if err != nil {
		t.Fatal(err)
	}
	var spec conformanceSpec
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	return &spec
}

func TestConformance(t *testing.T) {
	spec := readConformanceSpec(t)
	pool := testPool(t, 12)
	for _, sql := range spec.SQL.Setup {
		mustExec(t, pool, sql)
	}
	for _, sc := range spec.Scenarios {
		t.Run(sc.Name, func(t *testing.T) { runConformance(t, spec, pool, sc) })
	}
}

func runConformance(t *testing.T, spec *conformanceSpec, pool *pgxpool.Pool, sc conformanceScenario) {
	ctx := context.Background()
	queue := "conformance_" + sc.Name
	mustExec(t, pool, spec.SQL.CreateQueue, queue, sc.Queue.Lease, sc.Queue.MaxAttempts)
	for _, e := range sc.EmitBefore {
		if _, err := EmitEvent(ctx, pool, e.Event, e.Payload); err != nil {
			t.Fatal(err)
		}
	}
	for _, task := range sc.Tasks {
		var n struct {
			N int32 `json:"n"`
		}
		if err := json.Unmarshal(task, &n); err != nil {
			t.Fatal(err)
		}
		id, err := Enqueue(ctx, pool, queue, task)
		if err != nil {
			t.Fatal(err)
		}
		mustExec(t, pool, spec.SQL.Task, queue, n.N, id)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	r := &conformanceRun{spec: spec, pool: pool, stop: cancel, stopAsked: make(chan struct{})}
	done := make(chan error, 1)
	w := NewWorker(pool, WorkerConfig{Wait: time.Second, ShutdownTimeout: 30 * time.Second,
		OnError: func(task *Task, err error) { r.mu.Lock(); r.errs = append(r.errs, err); r.mu.Unlock() }})
	if sc.Worker.Batch > 1 {
		w.HandleBatch(queue, sc.Worker.Batch, r.batch, WithConcurrency(sc.Worker.Concurrency))
	} else {
		w.HandleTx(queue, r.ops, WithConcurrency(sc.Worker.Concurrency))
	}
	go func() { done <- w.Run(runCtx) }()
	for _, step := range sc.Then {
		if step.Await != "" {
			waitFor(t, 60*time.Second, step.Await, func() bool { return r.check(t, step.Await, queue) })
		}
		if step.Emit != nil {
			if _, err := EmitEvent(ctx, pool, step.Emit.Event, step.Emit.Payload); err != nil {
				t.Fatal(err)
			}
		}
	}
	if sc.Until == "worker_stopped" {
		<-r.stopAsked
	} else {
		waitFor(t, 60*time.Second, sc.Until, func() bool { return r.check(t, sc.Until, queue) })
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("the worker: %v", err)
	}
	var states []string
	rows, err := pool.Query(ctx, spec.SQL.State, queue)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		values, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		states = append(states, fmt.Sprint(values...))
	}
	for _, e := range sc.Expect {
		if !r.check(t, e[1], queue) {
			t.Errorf("%s (tasks: %s)", e[0], strings.Join(states, "; "))
		}
	}
	// OnError is told the handlers' errors and the lost leases; nothing else went wrong
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, err := range r.errs {
		if !errors.Is(err, ErrLeaseLost) && !strings.Contains(err.Error(), "boom at attempt") {
			t.Errorf("unexpected error: %v", err)
		}
	}
}

// spanText is a span context for a test's message.
func spanText(sc trace.SpanContext) string {
	return fmt.Sprintf("{trace %s span %s remote %v state %q}", sc.TraceID(), sc.SpanID(), sc.IsRemote(), sc.TraceState().String())
}

// The tracing scenario: this runtime writes the one trace context of the
// scenario, and continues it.
func TestConformanceTracing(t *testing.T) {
	spec := readConformanceSpec(t)
	tr := &spec.Tracing
	pool := testPool(t, 4)
	exporter, _ := installTracing(t)
	ctx := context.Background()
	parts := strings.Split(tr.Context["traceparent"], "-")
	traceID, contextSpan := parts[1], parts[2]
	// the stored payload, its enqueue span's id span (decoded, to compare)
	storedWith := func(span string) any {
		var v any
		if err := json.Unmarshal(bytes.ReplaceAll(tr.Stored, []byte("{enqueue_span}"), []byte(span)), &v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	only := func(pattern, queue string) tracetest.SpanStub {
		t.Helper()
		spans := spansNamed(exporter, spanName(pattern, queue))
		if len(spans) != 1 {
			t.Fatalf("%d spans %s", len(spans), spanName(pattern, queue))
		}
		return spans[0]
	}

	t.Run("an enqueue inside a span stores the trace context every runtime reads", func(t *testing.T) {
		queue := "conformance_tracing_produce"
		mustExec(t, pool, spec.SQL.CreateQueue, queue, tr.Queue.Lease, tr.Queue.MaxAttempts)
		caller := otel.GetTextMapPropagator().Extract(ctx, propagation.MapCarrier(tr.Context))
		if _, err := Enqueue(caller, pool, queue, tr.Payload); err != nil {
			t.Fatal(err)
		}
		span := only(traceEnqueueSpan, queue)
		if span.SpanContext.TraceID().String() != traceID || span.Parent.SpanID().String() != contextSpan {
			t.Fatalf("the enqueue span %s, its parent %s: not the caller's span's child", spanText(span.SpanContext), spanText(span.Parent))
		}
		var stored []any
		rows, err := pool.Query(ctx, tr.Read, queue)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var v any
			if err := rows.Scan(&v); err != nil {
				t.Fatal(err)
			}
			stored = append(stored, v)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if want := []any{storedWith(span.SpanContext.SpanID().String())}; !reflect.DeepEqual(stored, want) {
			t.Fatalf("stored %v, not %v", stored, want)
		}
	})

	t.Run("a task another runtime enqueued inside a span is handled in a span continuing it", func(t *testing.T) {
		queue := "conformance_tracing_handle"
		mustExec(t, pool, spec.SQL.CreateQueue, queue, tr.Queue.Lease, tr.Queue.MaxAttempts)
		task, err := json.Marshal(storedWith(tr.OtherEnqueueSpan))
		if err != nil {
			t.Fatal(err)
		}
		mustExec(t, pool, tr.Enqueue, queue, string(task))
		var handled seen
		var errs []error
		var mu sync.Mutex
		w := NewWorker(pool, WorkerConfig{Wait: time.Second,
			OnError: func(task *Task, err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() }})
		w.Handle(queue, func(ctx context.Context, task *Task) error {
			handled.record(ctx, task)
			return nil
		})
		runUntilSpan(t, w, exporter, spanName(traceHandleSpan, queue))
		mu.Lock()
		defer mu.Unlock()
		if len(errs) != 0 {
			t.Fatalf("the worker reported %v", errs)
		}
		handle := only(traceHandleSpan, queue)
		if handle.SpanContext.TraceID().String() != traceID || handle.Parent.SpanID().String() != tr.OtherEnqueueSpan ||
			!handle.Parent.IsRemote() || handle.SpanContext.TraceState().String() != tr.Context["tracestate"] {
			t.Fatalf("the handle span %s, its parent %s: not continuing the trace context %v",
				spanText(handle.SpanContext), spanText(handle.Parent), tr.Context)
		}
		var want, got any
		if err := json.Unmarshal(tr.Payload, &want); err != nil {
			t.Fatal(err)
		}
		for id, payload := range handled.payloads {
			if err := json.Unmarshal([]byte(payload), &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) || len(handled.payloads) != 1 {
				t.Fatalf("the handler got %s (of %d tasks), not the payload %s", payload, len(handled.payloads), tr.Payload)
			}
			if handled.spans[id].SpanID() != handle.SpanContext.SpanID() {
				t.Fatalf("the handler ran in span %s, not the handle span %s", spanText(handled.spans[id]), spanText(handle.SpanContext))
			}
		}
		if got == nil {
			t.Fatal("the handler did not run")
		}
	})
}
