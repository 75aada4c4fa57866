package concurrency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestEnqueueInRolledBackTxLeavesNothing(t *testing.T) {
	pool := testPool(t, 4)
	createQueue(t, pool, "go_tx", "")
	ctx := context.Background()
	client := NewClient(pool)
	mustExec(t, pool, "CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY)")
	mustExec(t, pool, "TRUNCATE orders")

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO orders VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	id, err := client.EnqueueTx(ctx, tx, "go_tx", map[string]any{"order": 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, ok := taskStatus(t, pool, "go_tx", id); ok {
		t.Fatalf("task %d exists after the rollback", id)
	}
	if n := count(t, pool, `SELECT count(*) FROM concurrency."q_go_tx"`); n != 0 {
		t.Fatalf("%d tasks after the rollback", n)
	}

	// the same, committed: the order and its task both exist
	tx, err = pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO orders VALUES (2)"); err != nil {
		t.Fatal(err)
	}
	ids, err := client.EnqueueBatchTx(ctx, tx, "go_tx", []any{map[string]any{"order": 2}, "a string", nil})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if len(ids) != 3 {
		t.Fatalf("ids %v", ids)
	}
	if n := count(t, pool, `SELECT count(*) FROM concurrency."q_go_tx"`); n != 3 {
		t.Fatalf("%d tasks after the commit, want 3", n)
	}
	if n := count(t, pool, "SELECT count(*) FROM orders"); n != 1 {
		t.Fatalf("%d orders, want 1", n)
	}
}

func TestEnqueueOptionsAndDedupe(t *testing.T) {
	pool := testPool(t, 4)
	createQueue(t, pool, "go_opts", "")
	ctx := context.Background()
	client := NewClient(pool)
	a, err := client.Enqueue(ctx, "go_opts", map[string]string{"v": "1"}, DedupeKey("k1"), Priority(5),
		ConcurrencyKey("c"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := client.Enqueue(ctx, "go_opts", map[string]string{"v": "2"}, DedupeKey("k1"))
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Fatalf("dedupe: %d and %d", a, b)
	}
	later, err := client.Enqueue(ctx, "go_opts", json.RawMessage(`[1,2]`), RunAt(time.Now().Add(time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := taskStatus(t, pool, "go_opts", later); s.State != "scheduled" {
		t.Fatalf("a task run_at in an hour is %q", s.State)
	}
	ids, err := client.EnqueueBatch(ctx, "go_opts", []any{1, 2, 3}, DedupeKeys([]string{"x", "", `q"uo\te`}))
	if err != nil {
		t.Fatal(err)
	}
	again, err := client.EnqueueBatch(ctx, "go_opts", []any{4, 5, 6}, DedupeKeys([]string{"x", "", `q"uo\te`}))
	if err != nil {
		t.Fatal(err)
	}
	if ids[0] != again[0] || ids[2] != again[2] || ids[1] == again[1] {
		t.Fatalf("batch dedupe: %v then %v", ids, again)
	}
	if _, err := client.Enqueue(ctx, "go_opts", 1, DedupeKeys([]string{"x"})); err == nil {
		t.Fatal("DedupeKeys accepted by Enqueue")
	}
	// the highest priority is claimed first, its payload as sent
	tasks, err := Dequeue(ctx, pool, "go_opts", DequeueOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var p map[string]string
	if len(tasks) != 1 || tasks[0].ID != a || tasks[0].Decode(&p) != nil || p["v"] != "1" || tasks[0].Attempt != 1 {
		t.Fatalf("claimed %+v", tasks)
	}
}

func TestServerErrorsCarrySQLState(t *testing.T) {
	pool := testPool(t, 4)
	ctx := context.Background()
	_, err := Enqueue(ctx, pool, "go_no_such_queue", 1)
	var e *Error
	if !errors.As(err, &e) || e.SQLState != "42704" || e.Op != "enqueue" {
		t.Fatalf("enqueue on an unknown queue: %#v", err)
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42704" || SQLState(err) != "42704" {
		t.Fatalf("no *pgconn.PgError in %v", err)
	}
	if errors.Is(err, ErrLeaseLost) {
		t.Fatal("42704 matches ErrLeaseLost")
	}
}

func TestLeaseLostWithStaleToken(t *testing.T) {
	pool := testPool(t, 4)
	createQueue(t, pool, "go_stale", "")
	ctx := context.Background()
	id, err := Enqueue(ctx, pool, "go_stale", "x")
	if err != nil {
		t.Fatal(err)
	}
	first, err := Dequeue(ctx, pool, "go_stale", DequeueOptions{Lease: 200 * time.Millisecond, Worker: "a"})
	if err != nil || len(first) != 1 {
		t.Fatal(first, err)
	}
	time.Sleep(300 * time.Millisecond)
	// another session takes the task over once the lease expired
	second, err := Dequeue(ctx, pool, "go_stale", DequeueOptions{Worker: "b"})
	if err != nil || len(second) != 1 || second[0].ID != id || second[0].Attempt != 2 {
		t.Fatal(second, err)
	}
	for name, call := range map[string]func() error{
		"complete": func() error { return Complete(ctx, pool, "go_stale", id, first[0].LeaseToken, nil) },
		"heartbeat": func() error {
			_, err := Heartbeat(ctx, pool, "go_stale", id, first[0].LeaseToken, 0)
			return err
		},
		"fail": func() error {
			_, err := Fail(ctx, pool, "go_stale", id, first[0].LeaseToken, "x", 0)
			return err
		},
		"release": func() error { return Release(ctx, pool, "go_stale", id, first[0].LeaseToken) },
	} {
		err := call()
		if !errors.Is(err, ErrLeaseLost) {
			t.Fatalf("%s with the stale token: %v", name, err)
		}
		var e *Error
		if !errors.As(err, &e) || e.SQLState != "CE001" || e.LeaseLostReason() != "reclaimed" {
			t.Fatalf("%s: %#v (reason %q)", name, err, e.LeaseLostReason())
		}
	}
	// the work of a fenced-off holder rolls back with its transaction
	mustExec(t, pool, "CREATE TABLE IF NOT EXISTS stale_effects (task_id bigint)")
	mustExec(t, pool, "TRUNCATE stale_effects")
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO stale_effects VALUES ($1)", id); err != nil {
			return err
		}
		return Complete(ctx, tx, "go_stale", id, first[0].LeaseToken, nil)
	})
	if !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("complete in a transaction: %v", err)
	}
	if n := count(t, pool, "SELECT count(*) FROM stale_effects"); n != 0 {
		t.Fatalf("%d effects of the fenced-off holder", n)
	}
	if err := Complete(ctx, pool, "go_stale", id, second[0].LeaseToken, map[string]int{"ok": 1}); err != nil {
		t.Fatal(err)
	}
	n, err := CompleteBatch(ctx, pool, "go_stale", nil, nil)
	if err != nil || n != 0 {
		t.Fatal(n, err)
	}
}

func TestExecModes(t *testing.T) {
	pool := testPool(t, 4)
	createQueue(t, pool, "go_modes", "")
	ctx := context.Background()
	// a key of its own per mode: the task completed with a result in the
	// mode before keeps its key (result_retention) on this queue too
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeCacheDescribe} {
		q := WithExecMode(pool, mode)
		id, err := Enqueue(ctx, q, "go_modes", map[string]any{"s": "it's \"quoted\""}, Priority(1), DedupeKey(fmt.Sprintf("d'k%d", mode)),
			RunAt(time.Now().Add(-time.Second)), After())
		if err != nil {
			t.Fatalf("%v: enqueue: %v", mode, err)
		}
		ids, err := EnqueueBatch(ctx, q, "go_modes", []any{[]int{1}, "x"}, ConcurrencyKeys([]string{"a", ""}))
		if err != nil || len(ids) != 2 {
			t.Fatalf("%v: enqueue_batch: %v %v", mode, ids, err)
		}
		tasks, err := Dequeue(ctx, q, "go_modes", DequeueOptions{Batch: 3, Lease: time.Minute, Wait: time.Millisecond})
		if err != nil || len(tasks) != 3 {
			t.Fatalf("%v: dequeue: %v %v", mode, tasks, err)
		}
		var p map[string]string
		if tasks[0].ID != id || tasks[0].Decode(&p) != nil || p["s"] != `it's "quoted"` {
			t.Fatalf("%v: payload %s", mode, tasks[0].Payload)
		}
		if _, err := Heartbeat(ctx, q, "go_modes", id, tasks[0].LeaseToken, time.Minute); err != nil {
			t.Fatalf("%v: heartbeat: %v", mode, err)
		}
		if err := Release(ctx, q, "go_modes", tasks[2].ID, tasks[2].LeaseToken); err != nil {
			t.Fatalf("%v: release: %v", mode, err)
		}
		if state, err := Fail(ctx, q, "go_modes", tasks[1].ID, tasks[1].LeaseToken, "boom", RetryNow); err != nil || state != "ready" {
			t.Fatalf("%v: fail: %v %v", mode, state, err)
		}
		if err := Complete(ctx, q, "go_modes", id, tasks[0].LeaseToken, "done"); err != nil {
			t.Fatalf("%v: complete: %v", mode, err)
		}
		rest, err := Dequeue(ctx, q, "go_modes", DequeueOptions{Batch: 5})
		if err != nil || len(rest) != 2 {
			t.Fatalf("%v: dequeue: %v %v", mode, rest, err)
		}
		n, err := CompleteBatch(ctx, q, "go_modes", []int64{rest[0].ID, rest[1].ID},
			[]int64{rest[0].LeaseToken, rest[1].LeaseToken})
		if err != nil || n != 2 {
			t.Fatalf("%v: complete_batch: %v %v", mode, n, err)
		}
	}
}

func TestEnqueueGraph(t *testing.T) {
	pool := testPool(t, 4)
	createQueue(t, pool, "go_graph", "")
	createQueue(t, pool, "go_graph_other", "")
	ctx := context.Background()
	client := NewClient(pool)
	existing, err := Enqueue(ctx, pool, "go_graph_other", map[string]int{"n": 0})
	if err != nil {
		t.Fatal(err)
	}
	runAt := time.Now().Add(time.Hour)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	graph, err := client.EnqueueGraphTx(ctx, tx, "go_graph", []GraphTask{
		{Ref: "a", Payload: map[string]int{"n": 1}, Priority: 5},
		{Ref: "b", After: []any{"a", GraphParent{Queue: "go_graph_other", ID: existing}}, Queue: "go_graph_other"},
		{Payload: json.RawMessage(`[1, 2]`), AfterEnds: []any{"a", "b"}, RunAt: &runAt, ConcurrencyKey: "k"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if len(graph) != 3 || graph[0].Ref != "a" || graph[1].Ref != "b" || graph[2].Ref != "" {
		t.Fatalf("graph %v", graph)
	}
	var payload string
	var priority int32
	if err := pool.QueryRow(ctx, `SELECT payload::text, priority FROM concurrency."q_go_graph" WHERE id = $1`,
		graph[0].TaskID).Scan(&payload, &priority); err != nil || payload != `{"n": 1}` || priority != 5 {
		t.Fatalf("task a: %s %d %v", payload, priority, err)
	}
	if n := count(t, pool, "SELECT parents_open FROM concurrency.task_status('go_graph_other', $1)", graph[1].TaskID); n != 2 {
		t.Fatalf("task b waits for %d parents", n)
	}
	var key string
	if err := pool.QueryRow(ctx, `SELECT payload::text, concurrency_key FROM concurrency."q_go_graph" WHERE id = $1 AND after_ends`,
		graph[2].TaskID).Scan(&payload, &key); err != nil || payload != `[1, 2]` || key != "k" {
		t.Fatalf("the finally-child: %s %s %v", payload, key, err)
	}
	// a cycle: 22023, nothing enqueued
	_, err = client.EnqueueGraph(ctx, "go_graph", []GraphTask{{Ref: "x", After: []any{"y"}}, {Ref: "y", After: []any{"x"}}})
	if SQLState(err) != "22023" {
		t.Fatalf("a cycle: %v", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM concurrency."q_go_graph"`); n != 2 {
		t.Fatalf("%d tasks in go_graph", n)
	}
}
