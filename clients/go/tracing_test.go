package concurrency

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// installTracing installs an SDK tracer provider exporting to memory (and
// the W3C propagator) as the global ones for the test; afterwards the
// globals are a no-op provider and propagator again.
func installTracing(t *testing.T) (*tracetest.InMemoryExporter, trace.Tracer) {
	t.Helper()
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() {
		otel.SetTracerProvider(noop.NewTracerProvider())
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator())
		_ = tp.Shutdown(context.Background())
	})
	return exporter, tp.Tracer("test")
}

// storedPayload is the payload of task id as stored (jsonb as text).
func storedPayload(t *testing.T, pool *pgxpool.Pool, queue string, id int64) map[string]any {
	t.Helper()
	var text string
	if err := pool.QueryRow(context.Background(),
		"SELECT payload::text FROM "+queueTable(queue)+" WHERE id = $1", id).Scan(&text); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(text), &m); err != nil {
		t.Fatalf("payload %s: %v", text, err)
	}
	return m
}

// queueTable is the quoted name of queue's table.
func queueTable(queue string) string { return pgx.Identifier{"concurrency", "q_" + queue}.Sanitize() }

// spansNamed returns the ended spans called name.
func spansNamed(exporter *tracetest.InMemoryExporter, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exporter.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// seen is what a handler saw of its tasks.
type seen struct {
	mu       sync.Mutex
	payloads map[int64]string
	spans    map[int64]trace.SpanContext
}

func (s *seen) record(ctx context.Context, task *Task) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.payloads == nil {
		s.payloads, s.spans = map[int64]string{}, map[int64]trace.SpanContext{}
	}
	s.payloads[task.ID] = string(task.Payload)
	s.spans[task.ID] = trace.SpanContextFromContext(ctx)
}

func (s *seen) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.payloads)
}

// tracedTask creates queue, installs tracing and enqueues a task with
// payload inside a span "request"; it returns the task's id.
func tracedTask(t *testing.T, queue string, payload any) (*pgxpool.Pool, *tracetest.InMemoryExporter, trace.Span, int64) {
	t.Helper()
	pool := testPool(t, 10)
	createQueue(t, pool, queue, "")
	exporter, testTracer := installTracing(t)
	ctx, request := testTracer.Start(context.Background(), "request")
	defer request.End()
	id, err := Enqueue(ctx, pool, queue, payload)
	if err != nil {
		t.Fatal(err)
	}
	return pool, exporter, request, id
}

// runUntilSpan runs w until a span called name has ended.
func runUntilSpan(t *testing.T, w *Worker, exporter *tracetest.InMemoryExporter, name string) {
	t.Helper()
	stop := runWorker(t, w)
	waitFor(t, 10*time.Second, name, func() bool { return len(spansNamed(exporter, name)) == 1 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestTracingEnqueueToHandler(t *testing.T) {
	pool, exporter, request, id := tracedTask(t, "go_trace", map[string]any{"n": 1, "s": "<a&b>"})

	enqueues := spansNamed(exporter, "concurrency.enqueue go_trace")
	if len(enqueues) != 1 {
		t.Fatalf("enqueue spans: %d", len(enqueues))
	}
	enqueue := enqueues[0]
	if enqueue.SpanKind != trace.SpanKindProducer || enqueue.Parent.SpanID() != request.SpanContext().SpanID() {
		t.Fatalf("enqueue span: kind %v, parent %v, request %v", enqueue.SpanKind, enqueue.Parent, request.SpanContext())
	}
	stored := storedPayload(t, pool, "go_trace", id)
	carrier, _ := stored[TracePayloadKey].(map[string]any)
	traceparent, _ := carrier["traceparent"].(string)
	if !strings.Contains(traceparent, enqueue.SpanContext.SpanID().String()) ||
		!strings.Contains(traceparent, request.SpanContext().TraceID().String()) {
		t.Fatalf("stored %v, enqueue span %v", stored, enqueue.SpanContext)
	}

	var handled seen
	w := NewWorker(pool, WorkerConfig{Name: "trace", Wait: 2 * time.Second})
	w.Handle("go_trace", func(ctx context.Context, task *Task) error {
		handled.record(ctx, task)
		return nil
	})
	runUntilSpan(t, w, exporter, "concurrency.handle go_trace")

	var payload map[string]any
	if err := json.Unmarshal([]byte(handled.payloads[id]), &payload); err != nil {
		t.Fatal(err)
	}
	if _, ok := payload[TracePayloadKey]; ok || payload["n"] != float64(1) || payload["s"] != "<a&b>" || len(payload) != 2 {
		t.Fatalf("the handler saw %s", handled.payloads[id])
	}

	handle := spansNamed(exporter, "concurrency.handle go_trace")[0]
	if handle.SpanContext.TraceID() != request.SpanContext().TraceID() ||
		handle.Parent.SpanID() != enqueue.SpanContext.SpanID() || !handle.Parent.IsRemote() {
		t.Fatalf("handle span %v, parent %v; enqueue span %v", handle.SpanContext, handle.Parent, enqueue.SpanContext)
	}
	if handle.SpanKind != trace.SpanKindConsumer || handle.Status.Code == codes.Error {
		t.Fatalf("handle span kind %v, status %v", handle.SpanKind, handle.Status)
	}
	if got := handled.spans[id]; got.SpanID() != handle.SpanContext.SpanID() {
		t.Fatalf("the handler's ctx carries span %v, not the handle span %v", got, handle.SpanContext)
	}
	a := attrs(handle)
	if a["concurrency.task_id"].AsInt64() != id || a["concurrency.queue"].AsString() != "go_trace" ||
		a["concurrency.attempt"].AsInt64() != 1 || a["messaging.system"].AsString() != "concurrency_ext" {
		t.Fatalf("handle span attributes %v", handle.Attributes)
	}
	completes := spansNamed(exporter, "concurrency.complete go_trace")
	if len(completes) != 1 || completes[0].Parent.SpanID() != handle.SpanContext.SpanID() {
		t.Fatalf("complete spans %v", completes)
	}
	claims := spansNamed(exporter, "concurrency.claim go_trace")
	if len(claims) == 0 {
		t.Fatal("no claim span")
	}
	for _, c := range claims {
		if c.Parent.IsValid() || c.SpanContext.TraceID() == handle.SpanContext.TraceID() {
			t.Fatalf("a claim span is no root of its own: %v", c.Parent)
		}
	}
	if len(spansNamed(exporter, "concurrency.fail go_trace")) != 0 {
		t.Fatal("a fail span for a completed task")
	}
}

// A HandleTx handler runs in the handle span too; the complete span, its
// child, covers the commit.
func TestTracingHandleTx(t *testing.T) {
	pool, exporter, request, id := tracedTask(t, "go_trace_tx", map[string]int{"n": 1})
	var handled seen
	w := NewWorker(pool, WorkerConfig{Name: "trace", Wait: 2 * time.Second})
	w.HandleTx("go_trace_tx", func(ctx context.Context, tx pgx.Tx, task *Task) error {
		handled.record(ctx, task)
		return nil
	})
	runUntilSpan(t, w, exporter, "concurrency.complete go_trace_tx")
	handle := spansNamed(exporter, "concurrency.handle go_trace_tx")
	if len(handle) != 1 || handle[0].SpanContext.TraceID() != request.SpanContext().TraceID() {
		t.Fatalf("handle spans %v", handle)
	}
	if handled.payloads[id] != `{"n": 1}` || handled.spans[id].SpanID() != handle[0].SpanContext.SpanID() {
		t.Fatalf("the handler saw %s in span %v", handled.payloads[id], handled.spans[id])
	}
	if c := spansNamed(exporter, "concurrency.complete go_trace_tx")[0]; c.Parent.SpanID() != handle[0].SpanContext.SpanID() {
		t.Fatalf("complete span's parent %v", c.Parent)
	}
	if _, ok := taskStatus(t, pool, "go_trace_tx", id); ok {
		t.Fatal("the task is still there")
	}
}

func TestTracingProducers(t *testing.T) {
	pool := testPool(t, 4)
	createQueue(t, pool, "go_trace_p", "")
	exporter, testTracer := installTracing(t)
	ctx, request := testTracer.Start(context.Background(), "request")
	defer request.End()
	traceID := request.SpanContext().TraceID().String()

	ids, err := EnqueueBatch(ctx, pool, "go_trace_p", []any{
		map[string]int{"n": 1},
		json.RawMessage(`{"_trace": {"traceparent": "mine"}, "n": 2}`),
		[]int{1, 2},
		json.RawMessage(` {} `),
		json.RawMessage(`{"note": "\"_trace\" in a value"}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	batch := spansNamed(exporter, "concurrency.enqueue go_trace_p")
	if len(batch) != 1 {
		t.Fatalf("enqueue spans: %d", len(batch))
	}
	spanID := batch[0].SpanContext.SpanID().String()
	injected := func(m map[string]any) bool {
		c, _ := m[TracePayloadKey].(map[string]any)
		tp, _ := c["traceparent"].(string)
		return strings.Contains(tp, traceID) && strings.Contains(tp, spanID)
	}
	if p := storedPayload(t, pool, "go_trace_p", ids[0]); !injected(p) || p["n"] != float64(1) {
		t.Fatalf("payload 1: %v", p)
	}
	if p := storedPayload(t, pool, "go_trace_p", ids[1]); p[TracePayloadKey].(map[string]any)["traceparent"] != "mine" {
		t.Fatalf("the caller's _trace was overwritten: %v", p)
	}
	var array string
	if err := pool.QueryRow(ctx, "SELECT payload::text FROM "+queueTable("go_trace_p")+" WHERE id = $1",
		ids[2]).Scan(&array); err != nil || array != "[1, 2]" {
		t.Fatalf("array payload %q, %v", array, err)
	}
	if p := storedPayload(t, pool, "go_trace_p", ids[3]); !injected(p) || len(p) != 1 {
		t.Fatalf("payload {}: %v", p)
	}
	if p := storedPayload(t, pool, "go_trace_p", ids[4]); !injected(p) || len(p) != 2 {
		t.Fatalf("payload with the key in a value: %v", p)
	}

	exporter.Reset()
	graph, err := EnqueueGraph(ctx, pool, "go_trace_p", []GraphTask{
		{Ref: "a", Payload: map[string]int{"n": 1}},
		{Ref: "b", After: []any{"a", ids[0]}},
	})
	if err != nil {
		t.Fatal(err)
	}
	spans := spansNamed(exporter, "concurrency.enqueue go_trace_p")
	if len(spans) != 1 || len(graph) != 2 || graph[0].Ref != "a" || graph[1].Ref != "b" {
		t.Fatalf("graph %v, spans %d", graph, len(spans))
	}
	spanID = spans[0].SpanContext.SpanID().String()
	if p := storedPayload(t, pool, "go_trace_p", graph[0].TaskID); !injected(p) || p["n"] != float64(1) {
		t.Fatalf("graph payload a: %v", p)
	}
	if p := storedPayload(t, pool, "go_trace_p", graph[1].TaskID); !injected(p) || len(p) != 1 {
		t.Fatalf("graph payload b: %v", p)
	}
	if n := count(t, pool, "SELECT parents_open FROM concurrency.task_status('go_trace_p', $1)", graph[1].TaskID); n != 2 {
		t.Fatalf("graph task b has %d open parents", n)
	}

	// a call that fails is an enqueue span with status Error
	exporter.Reset()
	if _, err := Enqueue(ctx, pool, "go_trace_no_such_queue", map[string]int{}); err == nil {
		t.Fatal("enqueue into a missing queue succeeded")
	}
	if s := spansNamed(exporter, "concurrency.enqueue go_trace_no_such_queue"); len(s) != 1 || s[0].Status.Code != codes.Error {
		t.Fatalf("failed enqueue spans %v", s)
	}
}

func TestTracingNoContextNoTrace(t *testing.T) {
	pool := testPool(t, 4)
	createQueue(t, pool, "go_trace_none", "")
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator()) })
	ctx := context.Background()
	check := func(what string) {
		t.Helper()
		id, err := Enqueue(ctx, pool, "go_trace_none", map[string]int{"n": 1})
		if err != nil {
			t.Fatal(err)
		}
		ids, err := EnqueueBatch(ctx, pool, "go_trace_none", []any{map[string]int{"n": 2}})
		if err != nil {
			t.Fatal(err)
		}
		graph, err := EnqueueGraph(ctx, pool, "go_trace_none", []GraphTask{{}})
		if err != nil {
			t.Fatal(err)
		}
		if n := count(t, pool, "SELECT count(*) FROM "+queueTable("go_trace_none")+" WHERE id IN ($1, $2, $3) AND payload ? $4",
			id, ids[0], graph[0].TaskID, TracePayloadKey); n != 0 {
			t.Fatalf("%s: %d payloads with %s", what, n, TracePayloadKey)
		}
		if p := storedPayload(t, pool, "go_trace_none", graph[0].TaskID); len(p) != 0 {
			t.Fatalf("%s: graph payload %v", what, p)
		}
	}
	// no SDK: the global tracer is a no-op
	otel.SetTracerProvider(noop.NewTracerProvider())
	check("without an SDK")
	// with an SDK but no span in the caller's context
	exporter, _ := installTracing(t)
	check("with an SDK")
	if n := len(spansNamed(exporter, "concurrency.enqueue go_trace_none")); n != 3 {
		t.Fatalf("%d enqueue spans", n)
	}
}

func TestTracingRootAndErrors(t *testing.T) {
	pool := testPool(t, 10)
	createQueue(t, pool, "go_trace_root", "max_attempts => 1")
	exporter, _ := installTracing(t)
	var ids [3]int64
	for i, body := range []string{`{"case": "ok"}`, `{"case": "error"}`, `{"case": "panic"}`} {
		if err := pool.QueryRow(context.Background(), "SELECT concurrency.enqueue('go_trace_root', $1::jsonb)",
			body).Scan(&ids[i]); err != nil {
			t.Fatal(err)
		}
	}
	var handled seen
	w := NewWorker(pool, WorkerConfig{Name: "trace", Wait: 2 * time.Second, OnError: func(*Task, error) {}})
	w.Handle("go_trace_root", func(ctx context.Context, task *Task) error {
		handled.record(ctx, task)
		var p struct{ Case string }
		if err := task.Decode(&p); err != nil {
			return err
		}
		switch p.Case {
		case "error":
			return errors.New("it went wrong")
		case "panic":
			panic("it went very wrong")
		}
		return nil
	})
	stop := runWorker(t, w)
	waitFor(t, 10*time.Second, "three tasks handled", func() bool {
		return len(spansNamed(exporter, "concurrency.handle go_trace_root")) == 3
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if handled.payloads[ids[0]] != `{"case": "ok"}` {
		t.Fatalf("the handler saw %s", handled.payloads[ids[0]])
	}
	claims := map[trace.SpanID]bool{}
	for _, c := range spansNamed(exporter, "concurrency.claim go_trace_root") {
		claims[c.SpanContext.SpanID()] = true
	}
	completes := map[trace.SpanID]bool{}
	for _, c := range spansNamed(exporter, "concurrency.complete go_trace_root") {
		completes[c.SpanContext.SpanID()] = true
	}
	byTask := map[int64]tracetest.SpanStub{}
	for _, s := range spansNamed(exporter, "concurrency.handle go_trace_root") {
		byTask[attrs(s)["concurrency.task_id"].AsInt64()] = s
		if s.Parent.IsValid() {
			t.Fatalf("a task enqueued without a trace context has a parent span: %v", s.Parent)
		}
		// linked to the span whose statement claimed it: a claim, or the
		// complete of the task before it, which claims the next one
		if len(s.Links) != 1 || !(claims[s.Links[0].SpanContext.SpanID()] || completes[s.Links[0].SpanContext.SpanID()]) {
			t.Fatalf("handle span links %v", s.Links)
		}
	}
	if s := byTask[ids[0]]; s.Status.Code == codes.Error {
		t.Fatalf("the completed task's span: %v", s.Status)
	}
	for i, message := range map[int]string{1: "it went wrong", 2: "panic: it went very wrong"} {
		s := byTask[ids[i]]
		if s.Status.Code != codes.Error || s.Status.Description != message {
			t.Fatalf("task %d: status %v", i, s.Status)
		}
		recorded := false
		for _, e := range s.Events {
			if e.Name == "exception" {
				for _, kv := range e.Attributes {
					recorded = recorded || (kv.Key == "exception.message" && kv.Value.AsString() == message)
				}
			}
		}
		if !recorded {
			t.Fatalf("task %d: no exception event: %v", i, s.Events)
		}
		if st, _ := taskStatus(t, pool, "go_trace_root", ids[i]); st.State != "dead" {
			t.Fatalf("task %d: %s", i, st.State)
		}
	}
	fails := spansNamed(exporter, "concurrency.fail go_trace_root")
	if len(fails) != 2 {
		t.Fatalf("%d fail spans", len(fails))
	}
	for _, f := range fails {
		if f.Parent.SpanID() != byTask[ids[1]].SpanContext.SpanID() && f.Parent.SpanID() != byTask[ids[2]].SpanContext.SpanID() {
			t.Fatalf("a fail span outside its handle span: %v", f.Parent)
		}
	}
}

// Without an SDK and outside a trace, tracing costs an enqueue no JSON work
// (the span's name, its start options and its context are its allocations)
// and a task's payload nothing.
func TestTracingNoopCost(t *testing.T) {
	otel.SetTracerProvider(noop.NewTracerProvider())
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator()) })
	ctx := context.Background()
	payload := `{"n": 1, "s": "some text of a payload"}`
	if n := testing.AllocsPerRun(100, func() {
		_, span, carrier := startEnqueueSpan(ctx, "q")
		if withTrace(payload, carrier) != payload {
			t.Fatal("payload changed")
		}
		span.End()
	}); n > 4 {
		t.Fatalf("an untraced enqueue's tracing allocates %v times", n)
	}
	raw := json.RawMessage(payload)
	if n := testing.AllocsPerRun(100, func() {
		if p, c := splitTrace(raw); c != nil || len(p) != len(raw) {
			t.Fatal("payload changed")
		}
	}); n != 0 {
		t.Fatalf("splitting an untraced payload allocates %v times", n)
	}
}

func TestTracingPayloadText(t *testing.T) {
	carrier := []byte(`{"traceparent":"x"}`)
	for in, want := range map[string]string{
		`{}`:                   `{"_trace":{"traceparent":"x"}}`,
		` { "a" : 1 }`:         `{"_trace":{"traceparent":"x"},"a" : 1 }`,
		`{"_trace": 1}`:        `{"_trace": 1}`,
		`{"a": "\"_trace\""}`:  `{"_trace":{"traceparent":"x"},"a": "\"_trace\""}`,
		`[1]`:                  `[1]`,
		`"text"`:               `"text"`,
		`null`:                 `null`,
		`{"a": {"_trace": 1}}`: `{"_trace":{"traceparent":"x"},"a": {"_trace": 1}}`,
	} {
		if got := withTrace(in, carrier); got != want {
			t.Errorf("withTrace(%s) = %s, want %s", in, got, want)
		}
	}
	for in, want := range map[string]string{
		`{"_trace": {"traceparent": "x"}, "a": "<b>"}`:       `{"a": "<b>"}`,
		`{"a": 1, "_trace": {"traceparent": "x"}, "b": [2]}`: `{"a": 1, "b": [2]}`,
		`{"a": 1, "_trace": {"traceparent": "x"}}`:           `{"a": 1}`,
		` { "_trace" : 5 } `:                                 ` { } `,
		`{"_trace": 5}`:                                      `{}`,
		`{"a": "\"_trace\"", "b": {"_trace": 1}}`:            `{"a": "\"_trace\"", "b": {"_trace": 1}}`,
		`{"a": {"_trace": 1}}`:                               `{"a": {"_trace": 1}}`,
		`[{"_trace": 1}]`:                                    `[{"_trace": 1}]`,
	} {
		if got, _ := splitTrace(json.RawMessage(in)); string(got) != want {
			t.Errorf("splitTrace(%s) = %s, want %s", in, got, want)
		}
	}
}
