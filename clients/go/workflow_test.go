package concurrency

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// claimBound claims one task of queue by hand, ready for workflow calls as a
// worker would hand it to a handler.
func claimBound(t *testing.T, pool *pgxpool.Pool, queue string, lease time.Duration) *Task {
	t.Helper()
	tasks, err := Dequeue(context.Background(), pool, queue, DequeueOptions{Lease: lease, Worker: "by-hand"})
	if err != nil || len(tasks) != 1 {
		t.Fatalf("claim of %s: %v %v", queue, tasks, err)
	}
	tasks[0].wf = &workflowDB{db: pool, q: pool}
	return tasks[0]
}

func stepNames(t *testing.T, pool *pgxpool.Pool, queue string, id int64) []string {
	t.Helper()
	steps, err := TaskSteps(context.Background(), pool, queue, id)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range steps {
		names = append(names, s.Name)
	}
	return names
}

type charge struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

func TestStepIsNotRunAgainAfterAReclaim(t *testing.T) {
	pool := testPool(t, 8)
	createQueue(t, pool, "go_wf_step", "retain => '1 hour'")
	ctx := context.Background()
	id, err := Enqueue(ctx, pool, "go_wf_step", map[string]int{"amount": 42})
	if err != nil {
		t.Fatal(err)
	}

	// a worker whose first attempt fails after the step: the second runs
	// the handler again, and the step returns what the first recorded
	var calls atomic.Int64
	var mu sync.Mutex
	var seen []charge
	errs := &errorLog{}
	w := NewWorker(pool, WorkerConfig{Name: "wf", Wait: time.Second, OnError: errs.add})
	w.Handle("go_wf_step", func(ctx context.Context, task *Task) error {
		c, err := Step(ctx, task, "charge", func(ctx context.Context) (charge, error) {
			n := calls.Add(1)
			return charge{ID: "ch_" + task.StepKey("charge"), Amount: 42 + int(n) - 1}, nil
		})
		if err != nil {
			return err
		}
		mu.Lock()
		seen = append(seen, c)
		mu.Unlock()
		if task.Attempt == 1 {
			return RetryIn(errors.New("the card network hung up"), RetryNow)
		}
		return task.SetResult(c)
	})
	stop := runWorker(t, w)
	out, err := AwaitTask(ctx, pool, "go_wf_step", id)
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	want := charge{ID: "ch_go_wf_step:" + itoa(id) + ":charge", Amount: 42}
	var got charge
	if out.State != "done" || out.Decode(&got) != nil || got != want {
		t.Fatalf("outcome %+v", out)
	}
	if calls.Load() != 1 || len(seen) != 2 || seen[0] != want || seen[1] != want {
		t.Fatalf("the step ran %d times; the runs saw %+v", calls.Load(), seen)
	}
	if names := stepNames(t, pool, "go_wf_step", id); len(names) != 1 || names[0] != "charge" {
		t.Fatalf("steps %v", names)
	}

	// a claim taken over after its lease expired: the new holder gets the
	// recorded step, the old one's calls are ErrLeaseLost
	id2, err := Enqueue(ctx, pool, "go_wf_step", 1)
	if err != nil {
		t.Fatal(err)
	}
	first := claimBound(t, pool, "go_wf_step", 300*time.Millisecond)
	if _, err := Step(ctx, first, "a", func(context.Context) (int, error) { return 7, nil }); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	second := claimBound(t, pool, "go_wf_step", time.Minute)
	if second.ID != id2 || second.Attempt != 2 {
		t.Fatalf("reclaimed %+v", second)
	}
	v, err := Step(ctx, second, "a", func(context.Context) (int, error) {
		t.Error("a recorded step ran again")
		return 0, nil
	})
	if err != nil || v != 7 {
		t.Fatalf("recorded step: %v %v", v, err)
	}
	ran := false
	_, err = Step(ctx, first, "b", func(context.Context) (int, error) { ran = true; return 1, nil })
	if !errors.Is(err, ErrLeaseLost) || ran {
		t.Fatalf("a step under a lost lease: ran %v, %v", ran, err)
	}
	if _, err := Step(ctx, first, "a", func(context.Context) (int, error) { return 0, nil }); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("reading under a lost lease: %v", err)
	}
	if names := stepNames(t, pool, "go_wf_step", id2); len(names) != 1 || names[0] != "a" {
		t.Fatalf("steps %v", names)
	}
	// names the runtime keeps for itself, and a task no worker handed over
	if _, err := Step(ctx, second, "sleep:1", func(context.Context) (int, error) { return 0, nil }); err == nil {
		t.Fatal("a step named sleep:1 was accepted")
	}
	if _, err := Step(ctx, &Task{}, "x", func(context.Context) (int, error) { return 0, nil }); !errors.Is(err, errNotBound) {
		t.Fatalf("an unbound task: %v", err)
	}
	if len(errs.list()) != 1 {
		t.Fatalf("worker errors: %v", errs.list())
	}
}

func TestStepTxHappensExactlyOnce(t *testing.T) {
	pool := testPool(t, 8)
	createQueue(t, pool, "go_wf_tx", "retain => '1 hour', max_attempts => 5")
	ctx := context.Background()
	mustExec(t, pool, "DROP TABLE IF EXISTS wf_receipts, wf_parent")
	mustExec(t, pool, "CREATE TABLE wf_parent (id int PRIMARY KEY)")
	// a row that points nowhere makes the commit fail (the check is deferred
	// to it), after the step's write and record_step succeeded
	mustExec(t, pool, `CREATE TABLE wf_receipts (task_id bigint NOT NULL, parent int
	    REFERENCES wf_parent DEFERRABLE INITIALLY DEFERRED)`)
	id, err := Enqueue(ctx, pool, "go_wf_tx", nil)
	if err != nil {
		t.Fatal(err)
	}
	var fnRuns atomic.Int64
	var attempts []int32
	w := NewWorker(pool, WorkerConfig{Name: "wf", Wait: time.Second, OnError: func(*Task, error) {}})
	w.Handle("go_wf_tx", func(ctx context.Context, task *Task) error {
		attempts = append(attempts, task.Attempt)
		receipt, err := StepTx(ctx, task, "receipt", func(ctx context.Context, tx pgx.Tx) (int64, error) {
			var parent any
			if fnRuns.Add(1) == 1 {
				parent = 99 // no such parent: the commit fails
			}
			_, err := tx.Exec(ctx, "INSERT INTO wf_receipts VALUES ($1, $2)", task.ID, parent)
			return 1000 + task.ID, err
		})
		if err != nil {
			return RetryIn(err, RetryNow)
		}
		if task.Attempt == 2 {
			return RetryIn(errors.New("failed after the step"), RetryNow)
		}
		return task.SetResult(receipt)
	})
	stop := runWorker(t, w)
	awaitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := AwaitTask(awaitCtx, pool, "go_wf_tx", id)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if out.State != "done" || string(out.Result) != itoa(1000+id) {
		t.Fatalf("outcome %+v", out)
	}
	if n := count(t, pool, "SELECT count(*) FROM wf_receipts WHERE task_id = $1", id); n != 1 {
		t.Fatalf("%d receipts", n)
	}
	// 1: the commit failed (nothing kept); 2: kept, then the run failed;
	// 3: the step is recorded and not run
	if fnRuns.Load() != 2 || len(attempts) != 3 || attempts[2] != 3 {
		t.Fatalf("fn ran %d times, attempts %v", fnRuns.Load(), attempts)
	}

	// a holder whose lease was taken over: its write rolls back with the
	// refused record
	id2, err := Enqueue(ctx, pool, "go_wf_tx", nil)
	if err != nil {
		t.Fatal(err)
	}
	write := func(ctx context.Context, tx pgx.Tx) (string, error) {
		_, err := tx.Exec(ctx, "INSERT INTO wf_receipts VALUES ($1, NULL)", id2)
		return "written", err
	}
	stale := claimBound(t, pool, "go_wf_tx", 200*time.Millisecond)
	var holder *Task
	_, err = StepTx(ctx, stale, "receipt", func(ctx context.Context, tx pgx.Tx) (string, error) {
		v, err := write(ctx, tx)
		// the lease runs out during the step, and another worker claims the task
		time.Sleep(300 * time.Millisecond)
		holder = claimBound(t, pool, "go_wf_tx", time.Minute)
		return v, err
	})
	if !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("stale holder: %v", err)
	}
	if n := count(t, pool, "SELECT count(*) FROM wf_receipts WHERE task_id = $1", id2); n != 0 {
		t.Fatalf("the stale holder's write stayed: %d", n)
	}
	for range 2 {
		if v, err := StepTx(ctx, holder, "receipt", write); err != nil || v != "written" {
			t.Fatalf("holder: %q %v", v, err)
		}
	}
	if n := count(t, pool, "SELECT count(*) FROM wf_receipts WHERE task_id = $1", id2); n != 1 {
		t.Fatalf("%d receipts for the holder", n)
	}
}

func TestSleepSuspendsWithoutSpendingAnAttempt(t *testing.T) {
	pool := testPool(t, 8)
	createQueue(t, pool, "go_wf_sleep", "retain => '1 hour', max_attempts => 1")
	ctx := context.Background()
	id, err := Enqueue(ctx, pool, "go_wf_sleep", nil)
	if err != nil {
		t.Fatal(err)
	}
	type run struct {
		attempt int32
		at      time.Time
	}
	var mu sync.Mutex
	var runs []run
	var before, after atomic.Int64
	errs := &errorLog{}
	// a short lease: heartbeats every 100 ms would find the token fenced
	// (OnError) if they went on after the suspension
	w := NewWorker(pool, WorkerConfig{Name: "wf", Lease: 300 * time.Millisecond, Wait: time.Second, OnError: errs.add})
	w.Handle("go_wf_sleep", func(ctx context.Context, task *Task) error {
		mu.Lock()
		runs = append(runs, run{task.Attempt, time.Now()})
		mu.Unlock()
		if _, err := Step(ctx, task, "before", func(context.Context) (bool, error) { before.Add(1); return true, nil }); err != nil {
			return err
		}
		time.Sleep(250 * time.Millisecond) // a heartbeat or two
		if err := task.Sleep(ctx, 1500*time.Millisecond); err != nil {
			return err
		}
		if _, err := Step(ctx, task, "after", func(context.Context) (bool, error) { after.Add(1); return true, nil }); err != nil {
			return err
		}
		if err := task.Sleep(ctx, 0); err != nil { // the second sleep is a sleep of its own
			return fmt.Errorf("second sleep: %w", err) // wrapped, still a suspension
		}
		return task.SetResult("woke up")
	})
	stop := runWorker(t, w)
	waitFor(t, 5*time.Second, "the sleep", func() bool {
		s, _ := taskStatus(t, pool, "go_wf_sleep", id)
		return s.State == "scheduled"
	})
	s, _ := taskStatus(t, pool, "go_wf_sleep", id)
	if s.Attempt != 0 || s.LastError != nil {
		t.Fatalf("sleeping: %+v", s)
	}
	awaitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := AwaitTask(awaitCtx, pool, "go_wf_sleep", id)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if out.State != "done" || string(out.Result) != `"woke up"` || out.LastError != "" {
		t.Fatalf("outcome %+v", out)
	}
	// three runs, none of them spending an attempt (max_attempts is 1)
	if len(runs) != 3 || runs[0].attempt != 1 || runs[1].attempt != 1 || runs[2].attempt != 1 {
		t.Fatalf("runs %+v", runs)
	}
	if slept := runs[1].at.Sub(runs[0].at); slept < 1500*time.Millisecond {
		t.Fatalf("woke after %s", slept)
	}
	if before.Load() != 1 || after.Load() != 1 {
		t.Fatalf("steps ran %d and %d times", before.Load(), after.Load())
	}
	names := stepNames(t, pool, "go_wf_sleep", id)
	if strings.Join(names, ",") != "before,sleep:1,after,sleep:2" {
		t.Fatalf("steps %v", names)
	}
	if len(errs.list()) != 0 {
		t.Fatalf("the worker reported %v", errs.list())
	}

	// claimed again before its time (here: by hand), a sleep goes back to
	// sleep until the recorded time, not for its duration again
	id2, err := Enqueue(ctx, pool, "go_wf_sleep", nil)
	if err != nil {
		t.Fatal(err)
	}
	task := claimBound(t, pool, "go_wf_sleep", time.Minute)
	mustExec(t, pool, "SELECT concurrency.record_step('go_wf_sleep', $1, $2, 'sleep:1', to_jsonb(now() + interval '1 hour'))",
		task.ID, task.LeaseToken)
	if err := task.Sleep(ctx, 24*time.Hour); !errors.Is(err, ErrSuspended) {
		t.Fatalf("sleep: %v", err)
	}
	if n := count(t, pool, `SELECT count(*) FROM concurrency.task_status('go_wf_sleep', $1)
	    WHERE state = 'scheduled' AND run_at BETWEEN now() + interval '59 minutes' AND now() + interval '61 minutes'`, id2); n != 1 {
		t.Fatal("not asleep until the recorded time")
	}
	// once suspended, the task takes no more calls
	if _, err := Step(ctx, task, "x", func(context.Context) (int, error) { return 0, nil }); !errors.Is(err, ErrSuspended) {
		t.Fatalf("a step after the suspension: %v", err)
	}
}

func TestWaitForEvent(t *testing.T) {
	pool := testPool(t, 10)
	createQueue(t, pool, "go_wf_event", "retain => '1 hour'")
	ctx := context.Background()
	client := NewClient(pool)
	errs := &errorLog{}
	var mu sync.Mutex
	runs := map[int64]int{}
	w := NewWorker(pool, WorkerConfig{Name: "wf", Lease: 300 * time.Millisecond, Wait: time.Second, OnError: errs.add})
	w.Handle("go_wf_event", func(ctx context.Context, task *Task) error {
		mu.Lock()
		runs[task.ID]++
		mu.Unlock()
		var p struct {
			Event   string
			Timeout time.Duration
		}
		if err := task.Decode(&p); err != nil {
			return err
		}
		payload, err := task.WaitForEvent(ctx, p.Event, p.Timeout)
		if errors.Is(err, ErrEventTimeout) {
			return task.SetResult("no reply")
		}
		if err != nil {
			return err
		}
		return task.SetResult(payload)
	}, WithConcurrency(3))
	enqueue := func(event string, timeout time.Duration) int64 {
		id, err := client.Enqueue(ctx, "go_wf_event", map[string]any{"Event": event, "Timeout": timeout})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	state := func(id int64) string {
		s, _ := taskStatus(t, pool, "go_wf_event", id)
		return s.State
	}

	// emitted before the wait: taken at once
	if n, err := client.EmitEvent(ctx, "go-reply-early", map[string]bool{"ok": true}); err != nil || n != 0 {
		t.Fatalf("emit: %d %v", n, err)
	}
	early := enqueue("go-reply-early", 0)
	// waited for first: parked, then woken by the emit
	late := enqueue("go-reply-late", time.Hour)
	// never emitted: the timeout ends the wait
	never := enqueue("go-reply-never", time.Second)
	began := time.Now()
	stop := runWorker(t, w)
	waitFor(t, 5*time.Second, "the waits", func() bool { return state(late) == "scheduled" && state(never) == "scheduled" })
	s, _ := taskStatus(t, pool, "go_wf_event", late)
	if s.Attempt != 0 || s.LastError != nil {
		t.Fatalf("parked: %+v", s)
	}
	time.Sleep(500 * time.Millisecond) // leases would have lapsed twice: no heartbeat may follow
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		n, err := EmitEvent(ctx, tx, "go-reply-late", nil)
		if err == nil && n != 1 {
			t.Errorf("the emit woke %d tasks", n)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	awaitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for id, want := range map[int64]string{early: `{"ok": true}`, late: "null", never: `"no reply"`} {
		out, err := client.AwaitTask(awaitCtx, "go_wf_event", id)
		if err != nil {
			t.Fatal(err)
		}
		if out.State != "done" || string(out.Result) != want {
			t.Fatalf("task %d: %+v, want result %s", id, out, want)
		}
	}
	if took := time.Since(began); took < time.Second {
		t.Fatalf("the timeout passed after %s", took)
	}
	stop()
	if runs[early] != 1 || runs[late] != 2 || runs[never] != 2 {
		t.Fatalf("runs %v", runs)
	}
	if len(errs.list()) != 0 {
		t.Fatalf("the worker reported %v", errs.list())
	}
	if names := stepNames(t, pool, "go_wf_event", late); len(names) != 1 || names[0] != "event:go-reply-late" {
		t.Fatalf("steps %v", names)
	}
}

// A wait's timeout is kept with the task: an attempt that fails after it
// does not wait again.
func TestEventTimeoutKept(t *testing.T) {
	pool := testPool(t, 8)
	createQueue(t, pool, "go_wf_timeout", "retain => '1 hour'")
	ctx := context.Background()
	id, err := Enqueue(ctx, pool, "go_wf_timeout", nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var runs []time.Time
	w := NewWorker(pool, WorkerConfig{Name: "wf", Wait: time.Second, OnError: func(*Task, error) {}})
	w.Handle("go_wf_timeout", func(ctx context.Context, task *Task) error {
		mu.Lock()
		runs = append(runs, time.Now())
		mu.Unlock()
		reply, err := task.WaitForEvent(ctx, "go-timeout-kept", time.Second)
		if errors.Is(err, ErrEventTimeout) {
			reply, err = nil, nil
		}
		if err != nil {
			return err
		}
		if task.Attempt == 1 {
			return RetryIn(errors.New("failed after the wait"), RetryNow)
		}
		return task.SetResult(map[string]any{"reply": reply})
	})
	stop := runWorker(t, w)
	actx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := AwaitTask(actx, pool, "go_wf_timeout", id)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if out.State != "done" || string(out.Result) != `{"reply": null}` {
		t.Fatalf("outcome %+v", out)
	}
	// parked; claimed after the timeout (kept, then failed); retried, and
	// timed out at once instead of parking again (which would make 4 runs)
	if len(runs) != 3 || runs[1].Sub(runs[0]) < time.Second {
		t.Fatalf("runs at %v", runs)
	}
}

func TestAwaitTask(t *testing.T) {
	pool := testPool(t, 8)
	createQueue(t, pool, "go_wf_await", "max_attempts => 1")
	ctx := context.Background()
	client := NewClient(pool)
	done, err := client.Enqueue(ctx, "go_wf_await", "done")
	if err != nil {
		t.Fatal(err)
	}
	dead, err := client.Enqueue(ctx, "go_wf_await", "dead")
	if err != nil {
		t.Fatal(err)
	}
	quiet, err := client.Enqueue(ctx, "go_wf_await", "quiet", RunAt(time.Now().Add(time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		out  TaskOutcome
		err  error
		took time.Duration
	}
	await := func(id int64, timeout time.Duration) chan result {
		ch := make(chan result, 1)
		go func() {
			actx, cancel := context.WithTimeout(ctx, timeout)
			defer cancel()
			began := time.Now()
			out, err := client.AwaitTask(actx, "go_wf_await", id)
			ch <- result{out, err, time.Since(began)}
		}()
		return ch
	}
	// the waits begin before the work
	doneCh, deadCh := await(done, 20*time.Second), await(dead, 20*time.Second)
	time.Sleep(200 * time.Millisecond)
	w := NewWorker(pool, WorkerConfig{Name: "wf", Wait: time.Second, OnError: func(*Task, error) {}})
	w.Handle("go_wf_await", func(ctx context.Context, task *Task) error {
		var what string
		if err := task.Decode(&what); err != nil {
			return err
		}
		if what == "dead" {
			return errors.New("the warehouse is on fire")
		}
		return task.SetResult(map[string]int{"parcels": 2})
	})
	stop := runWorker(t, w)
	r := <-doneCh
	if r.err != nil || r.out.State != "done" || string(r.out.Result) != `{"parcels": 2}` || !r.out.Ended() {
		t.Fatalf("done: %+v", r)
	}
	r = <-deadCh
	if r.err != nil || r.out.State != "dead" || r.out.LastError != "the warehouse is on fire" || r.out.Result != nil {
		t.Fatalf("dead: %+v", r)
	}
	stop()
	// a task that does not end in time: its state and the deadline
	r = <-await(quiet, 700*time.Millisecond)
	if !errors.Is(r.err, context.DeadlineExceeded) || r.out.State != "scheduled" || r.out.Ended() {
		t.Fatalf("timeout: %+v", r)
	}
	if r.took < 500*time.Millisecond {
		t.Fatalf("the timeout of 700 ms came after %s", r.took)
	}
	// a wait longer than one statement goes on in the next
	defer func(d time.Duration) { awaitSlice = d }(awaitSlice)
	awaitSlice = 200 * time.Millisecond
	r = <-await(quiet, time.Second)
	if !errors.Is(r.err, context.DeadlineExceeded) || r.out.State != "scheduled" || r.took < 800*time.Millisecond {
		t.Fatalf("timeout in slices: %+v", r)
	}
	if _, err := client.AwaitTask(ctx, "go_wf_await", 1<<40); !errors.Is(err, ErrNoTask) {
		t.Fatalf("no such task: %v", err)
	}
	// a task completed without a result on a queue that retains nothing is
	// gone at once: no such task any more
	gone, err := client.Enqueue(ctx, "go_wf_await", "gone")
	if err != nil {
		t.Fatal(err)
	}
	ch := await(gone, 10*time.Second)
	time.Sleep(300 * time.Millisecond)
	task := claimBound(t, pool, "go_wf_await", time.Minute)
	if err := Complete(ctx, pool, "go_wf_await", task.ID, task.LeaseToken, nil); err != nil {
		t.Fatal(err)
	}
	if r := <-ch; !errors.Is(r.err, ErrNoTask) {
		t.Fatalf("gone: %+v", r)
	}
}

func TestSuspendedTaskIsNotFailed(t *testing.T) {
	pool := testPool(t, 8)
	createQueue(t, pool, "go_wf_parked", "max_attempts => 1")
	ctx := context.Background()
	mustExec(t, pool, "DROP TABLE IF EXISTS wf_parked_writes")
	mustExec(t, pool, "CREATE TABLE wf_parked_writes (task_id bigint)")
	id, err := Enqueue(ctx, pool, "go_wf_parked", nil)
	if err != nil {
		t.Fatal(err)
	}
	bogus, err := Enqueue(ctx, pool, "go_wf_parked", nil)
	if err != nil {
		t.Fatal(err)
	}
	errs := &errorLog{}
	var completed atomic.Int64
	w := NewWorker(pool, WorkerConfig{Name: "wf", Lease: 300 * time.Millisecond, Wait: time.Second, OnError: errs.add,
		OnComplete: func(*Task) { completed.Add(1) }})
	w.HandleTx("go_wf_parked", func(ctx context.Context, tx pgx.Tx, task *Task) error {
		if task.ID == bogus {
			return ErrSuspended // not suspended at all: a failure
		}
		if _, err := tx.Exec(ctx, "INSERT INTO wf_parked_writes VALUES ($1)", task.ID); err != nil {
			return err
		}
		_, err := task.WaitForEvent(ctx, "go-parked-forever", 0)
		return err
	})
	stop := runWorker(t, w)
	waitFor(t, 5*time.Second, "the park", func() bool {
		s, _ := taskStatus(t, pool, "go_wf_parked", id)
		return s.State == "scheduled"
	})
	waitFor(t, 5*time.Second, "the bogus suspension", func() bool {
		s, _ := taskStatus(t, pool, "go_wf_parked", bogus)
		return s.State == "dead"
	})
	time.Sleep(time.Second) // three leases: no heartbeat, no reclaim
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	s, _ := taskStatus(t, pool, "go_wf_parked", id)
	if s.State != "scheduled" || s.Attempt != 0 || s.LastError != nil {
		t.Fatalf("parked task: %+v", s)
	}
	if l := errs.list(); len(l) != 1 || !errors.Is(l[0], ErrSuspended) {
		t.Fatalf("the worker reported %v", l)
	}
	// the handler's transaction rolled back; nothing was completed
	if n := count(t, pool, "SELECT count(*) FROM wf_parked_writes"); n != 0 || completed.Load() != 0 {
		t.Fatalf("%d writes kept, %d completions", n, completed.Load())
	}
	if n := count(t, pool, "SELECT count(*) FROM concurrency.event_wait WHERE event = 'go-parked-forever' AND task_id = $1", id); n != 1 {
		t.Fatalf("%d waits recorded", n)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// The example of the README's "Durable workflows" runs as a user would run
// it, against the test database.
func TestWorkflowExample(t *testing.T) {
	pool := testPool(t, 2)
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("the go command is not on PATH")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, "run", "./examples/workflow")
	cmd.Env = append(os.Environ(), "DATABASE_URL=dbname="+testDatabase)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	text := string(out)
	for _, want := range []string{"placed", "charged ana@example.org 49.90",
		"the customer confirmed the address", "shipped to Rua Augusta 12, Lisboa: payment pay_1, receipt"} {
		if !strings.Contains(text, want) {
			t.Fatalf("the example did not say %q:\n%s", want, text)
		}
	}
	if strings.Count(text, "charged") != 1 {
		t.Fatalf("charged more than once:\n%s", text)
	}
	if n := count(t, pool, "SELECT count(*) FROM shop_receipts r JOIN shop_shipments s USING (order_id)"); n < 1 {
		t.Fatal("no receipt with its shipment")
	}
}
