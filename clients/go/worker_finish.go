package concurrency

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"
)

// work runs the handler of a slot's tasks (one, or a batch: see workBatch)
// with their heartbeats and finishes them; it returns the next tasks when
// the completing transaction claimed some. A single task's run all happens
// in its handle span (see startHandleSpan), on which the handler's error or
// panic, or the completion's, is recorded.
func (w *Worker) work(claimCtx, workCtx context.Context, q *queueRunner, tasks []*Task) []*Task {
	if q.handleBatch != nil {
		return w.workBatch(claimCtx, workCtx, q, tasks)
	}
	t := tasks[0]
	ctx, cancel := context.WithCancelCause(workCtx)
	defer cancel(nil)
	ctx, span := startHandleSpan(ctx, q.spans, t)
	t.wf = &workflowDB{db: w.pool, q: w.q, mode: w.cfg.ExecMode}
	stopBeats := w.heartbeat(tasks, cancel)
	defer stopBeats()
	var next []*Task
	var err error
	if q.handleTx != nil {
		next, err = w.workTx(claimCtx, ctx, q, t)
	} else {
		next, err = w.workPlain(claimCtx, ctx, q, t)
	}
	endSpan(span, err)
	return next
}

// workPlain runs a Handle handler and completes its task in a statement of
// its own; it returns the next task (see work) and the error that ended
// the attempt, if any.
func (w *Worker) workPlain(claimCtx, ctx context.Context, q *queueRunner, t *Task) ([]*Task, error) {
	err := callHandler(func() error { return q.handle(ctx, t) })
	if w.suspended(t, err) {
		return nil, nil
	}
	if err != nil {
		w.failed(ctx, q, t, err)
		return nil, err
	}
	if w.finishing(t) {
		return nil, t.lostErr()
	}
	cctx, span := tracer().Start(ctx, q.spans.complete)
	next, err := w.finish(claimCtx, cctx, w.pool, q, []*Task{t})
	endSpan(span, err)
	if err != nil {
		w.finishError(ctx, q, t, err)
		return nil, err
	}
	w.completed(t)
	return w.claimedIn(span, next), nil
}

func (w *Worker) workTx(claimCtx, ctx context.Context, q *queueRunner, t *Task) ([]*Task, error) {
	tx, rollback, err := w.begin(ctx)
	if err != nil {
		w.failed(ctx, q, t, err)
		return nil, err
	}
	err = callHandler(func() error { return q.handleTx(ctx, tx, t) })
	if w.suspended(t, err) {
		rollback()
		return nil, nil
	}
	if err != nil {
		rollback()
		w.failed(ctx, q, t, err)
		return nil, err
	}
	if w.finishing(t) {
		rollback()
		return nil, t.lostErr()
	}
	// the complete span covers the commit, which makes the completion count
	cctx, span := tracer().Start(ctx, q.spans.complete)
	next, err := w.finish(claimCtx, cctx, tx, q, []*Task{t})
	if err != nil {
		endSpan(span, err)
		rollback()
		w.finishError(ctx, q, t, err)
		return nil, err
	}
	if err := tx.Commit(cctx); err != nil {
		// e.g. a deferred constraint or a serialization failure: nothing
		// committed, the next claim neither
		err = wrap("commit", err)
		endSpan(span, err)
		w.finishError(ctx, q, t, err)
		return nil, err
	}
	endSpan(span, nil)
	w.completed(t)
	return w.claimedIn(span, next), nil
}

// begin begins a handler's transaction; rollback rolls it back, also once
// ctx is cancelled.
func (w *Worker) begin(ctx context.Context) (tx pgx.Tx, rollback func(), err error) {
	tx, err = w.pool.Begin(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("concurrency: begin: %w", err)
	}
	return tx, func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
	}, nil
}

// claimedIn marks next as claimed in span's transaction.
func (w *Worker) claimedIn(span trace.Span, next []*Task) []*Task {
	for _, t := range next {
		t.claimedBy = span.SpanContext()
	}
	return next
}

// batcher is what finish sends its statements on: *pgxpool.Pool (one
// implicit transaction per batch) or pgx.Tx.
type batcher interface {
	Querier
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

const claimNextSQL = stmtClaimNext + fragmentReadCommittedOnly

// finish completes tasks on q (complete for a single task, with its
// result; complete_batch for a HandleBatch handler's tasks) and, unless the
// worker is stopping, claims the slot's next tasks in the same transaction,
// in the same round trip (a pipelined batch): one commit a claim instead of
// two. The claim is made only under READ COMMITTED (a handler that raised
// its transaction's isolation level claims nothing there, where its older
// snapshot would fail on tasks claimed since). With WorkerConfig.ExecMode
// set, it only completes.
func (w *Worker) finish(claimCtx, ctx context.Context, db batcher, q *queueRunner, tasks []*Task) ([]*Task, error) {
	op, sql, args := "complete", stmtComplete, []any{q.name, tasks[0].ID, tasks[0].LeaseToken, tasks[0].resultArg()}
	if q.handleBatch != nil {
		ids, tokens := taskKeys(tasks)
		op, sql, args = "complete_batch", stmtCompleteBatch, []any{q.name, int64Array(ids), int64Array(tokens)}
	}
	if w.cfg.ExecMode != 0 || claimCtx.Err() != nil {
		_, err := WithExecMode(db, w.cfg.ExecMode).Exec(ctx, sql, args...)
		return nil, wrap(op, err)
	}
	var worker any
	if w.cfg.Name != "" {
		worker = w.cfg.Name
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	b.Queue(claimNextSQL, q.name, int32(max(q.batch, 1)), interval(w.cfg.Lease), worker)
	br := db.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, wrap(op, err)
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, wrap("dequeue", err)
	}
	next, err := scanTasks(rows, q.name)
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	if err := br.Close(); err != nil {
		return nil, wrap("dequeue", err)
	}
	return next, nil
}

// taskKeys returns the ids and lease tokens of tasks, for the batch calls.
func taskKeys(tasks []*Task) (ids, tokens []int64) {
	ids, tokens = make([]int64, len(tasks)), make([]int64, len(tasks))
	for i, t := range tasks {
		ids[i], tokens[i] = t.ID, t.LeaseToken
	}
	return ids, tokens
}

// callHandler runs fn, turning a panic into an error.
func callHandler(fn func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &PanicError{Value: r}
		}
	}()
	return fn()
}

// PanicError is the error a handler's recovered panic becomes (its message
// is recorded by fail as "panic: <value>").
type PanicError struct {
	// Value is what the handler panicked with.
	Value any
}

// Error returns "panic: <value>".
func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }

// RetryIn wraps err so that the failed task is retried after delay instead
// of the queue's backoff (RetryNow: at once).
func RetryIn(err error, delay time.Duration) error { return &retryError{err: err, delay: delay} }

type retryError struct {
	err   error
	delay time.Duration
}

func (e *retryError) Error() string { return e.err.Error() }
func (e *retryError) Unwrap() error { return e.err }

// suspended reports whether the handler's run ended with the task handed
// back to the server (Task.Sleep, Task.WaitForEvent): the task is neither
// completed nor failed, and its heartbeats have stopped. A handler that
// returned something else than ErrSuspended after the suspension is logged.
func (w *Worker) suspended(t *Task, err error) bool {
	if !t.isSuspended() {
		return false
	}
	if !errors.Is(err, ErrSuspended) {
		w.log.Warn("concurrency: the handler did not return ErrSuspended after suspending the task; the task stays suspended",
			"worker", w.cfg.Name, "queue", t.Queue, "task", t.ID, "returned", err)
	}
	return true
}

// finishing stops the task's heartbeats (waiting for one in flight) before
// its completion; true when a heartbeat found the lease lost already (and
// reported it).
func (w *Worker) finishing(t *Task) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.finishing = true
	return t.lost != nil
}

// failed records a handler's error with fail (unless the lease is lost).
func (w *Worker) failed(ctx context.Context, q *queueRunner, t *Task, err error) {
	if w.finishing(t) {
		return // the heartbeat reported the lost lease; the task is not ours
	}
	if errors.Is(err, ErrLeaseLost) {
		w.onError(t, err)
		return
	}
	w.onError(t, err)
	w.recordFail([]context.Context{ctx}, q, []*Task{t}, err)
}

// recordFail fails tasks with err's message, each in a fail span inside its
// handle span (ctxs, at the same positions): with fail for one task or a
// RetryIn delay, else with one fail_batch (without the task whose lost lease
// it names, which is reported, if one was lost).
func (w *Worker) recordFail(ctxs []context.Context, q *queueRunner, tasks []*Task, err error) {
	var delay time.Duration
	var re *retryError
	if errors.As(err, &re) {
		delay = re.delay
		if delay == 0 {
			delay = RetryNow
		}
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctxs[0]), 10*time.Second)
	defer cancel()
	spans := make([]trace.Span, len(tasks))
	for i := range tasks {
		_, spans[i] = tracer().Start(context.WithoutCancel(ctxs[i]), q.spans.fail)
	}
	var ferr error
	if len(tasks) == 1 || delay != 0 {
		for i, t := range tasks {
			_, e := Fail(fctx, w.q, t.Queue, t.ID, t.LeaseToken, err.Error(), delay)
			endSpan(spans[i], e)
			ferr = errors.Join(ferr, w.failOutcome(t, e))
		}
	} else {
		lost := map[*Task]error{}
		e := heldCall(tasks, func(held []*Task) error {
			ids, tokens := taskKeys(held)
			return FailBatch(fctx, w.q, q.name, ids, tokens, err.Error())
		}, func(t *Task, e error) { lost[t] = e; w.onError(t, e) })
		for i, t := range tasks {
			if l, ok := lost[t]; ok {
				endSpan(spans[i], l)
				continue
			}
			endSpan(spans[i], e)
		}
		ferr = w.failOutcome(tasks[0], e)
	}
	if ferr != nil {
		w.log.Warn("concurrency: fail failed; the tasks come back after their lease", "worker", w.cfg.Name,
			"queue", q.name, "tasks", len(tasks), "error", ferr)
	}
}

// failOutcome reports a lost lease that fail found; it returns any other
// error of fail.
func (w *Worker) failOutcome(t *Task, err error) error {
	if errors.Is(err, ErrLeaseLost) {
		w.onError(t, err)
		return nil
	}
	return err
}

// finishError handles an error of complete or commit: a lost lease is
// reported; anything else fails the task (its work was rolled back).
func (w *Worker) finishError(ctx context.Context, q *queueRunner, t *Task, err error) {
	if errors.Is(err, ErrLeaseLost) {
		w.onError(t, err)
		return
	}
	t.mu.Lock()
	t.finishing = false // fail is allowed now
	t.mu.Unlock()
	w.failed(ctx, q, t, err)
}

func (w *Worker) completed(t *Task) {
	if w.cfg.OnComplete != nil {
		w.cfg.OnComplete(t)
	}
}

func (w *Worker) onError(t *Task, err error) {
	if w.cfg.OnError != nil {
		w.cfg.OnError(t, err)
		return
	}
	if errors.Is(err, ErrLeaseLost) {
		w.log.Warn("concurrency: lease lost, the task's work rolled back", "worker", w.cfg.Name,
			"queue", t.Queue, "task", t.ID, "error", err)
		return
	}
	w.log.Error("concurrency: task failed", "worker", w.cfg.Name, "queue", t.Queue, "task", t.ID,
		"attempt", t.Attempt, "error", err)
}

// heartbeat extends the tasks' leases (one task, or a batch's) every third
// of the lease until the returned function is called (or the tasks are
// finishing); a lost lease cancels the handler's context with ErrLeaseLost
// as its cause. It runs on a timer (no goroutine of its own between
// heartbeats).
func (w *Worker) heartbeat(tasks []*Task, cancel context.CancelCauseFunc) func() {
	every := time.Duration(float64(tasks[0].leaseLeft) * timingHeartbeatFraction)
	if every < timingHeartbeatMinMs*time.Millisecond {
		every = timingHeartbeatMinMs * time.Millisecond
	}
	var mu sync.Mutex
	stopped := false
	var timer *time.Timer
	fire := func() {
		stop, lost := w.beat(tasks, every, cancel)
		if lost != nil {
			w.reportLost(tasks, lost)
		}
		mu.Lock()
		defer mu.Unlock()
		if !stop && !stopped {
			timer.Reset(every)
		}
	}
	mu.Lock()
	timer = time.AfterFunc(every, fire)
	mu.Unlock()
	return func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		timer.Stop()
	}
}

// beat sends one heartbeat (heartbeat_batch for a batch); true when no more
// are to be sent, with the error when a lease was found lost. A batch's
// state (finishing, lost) is kept by its first task.
func (w *Worker) beat(tasks []*Task, every time.Duration, cancel context.CancelCauseFunc) (bool, error) {
	t := tasks[0]
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.finishing {
		return true, nil
	}
	ctx, cancelBeat := context.WithTimeout(context.Background(), max(every, time.Second))
	defer cancelBeat()
	var err error
	if len(tasks) == 1 {
		_, err = Heartbeat(ctx, w.q, t.Queue, t.ID, t.LeaseToken, w.cfg.Lease)
	} else {
		ids, tokens := taskKeys(tasks)
		_, err = HeartbeatBatch(ctx, w.q, t.Queue, ids, tokens, w.cfg.Lease)
	}
	if err == nil {
		return false, nil
	}
	if errors.Is(err, ErrLeaseLost) {
		t.lost = err
		cancel(err)
		return true, err
	}
	w.log.Warn("concurrency: heartbeat failed", "worker", w.cfg.Name, "queue", t.Queue, "task", t.ID, "error", err)
	return false, nil
}
