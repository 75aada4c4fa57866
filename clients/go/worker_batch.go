package concurrency

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"
)

// BatchHandlerFunc handles the tasks of one claim together, inside a
// transaction that the worker began and that completes them all with one
// complete_batch: the handler's writes through tx and the completions commit
// together or not at all. An error (or a panic) rolls tx back and fails
// every task of the batch with its message (fail_batch; RetryIn: each with
// fail and the delay). Where one task's lease was lost, nothing of the batch
// completes: tx rolls back, that task is reported to OnError, and the
// others are handed back unspent (release_batch), to be claimed again at
// once. ctx carries the first task's handle span and is cancelled when a
// heartbeat finds a lease lost (context.Cause is then ErrLeaseLost) and at
// the end of the shutdown timeout.
type BatchHandlerFunc func(ctx context.Context, tx pgx.Tx, tasks []*Task) error

// HandleBatch registers handler for queue: each slot (see WithConcurrency)
// claims up to size tasks in one dequeue and runs them in one call of
// handler, in a transaction that the worker begins, passes to handler,
// completes the tasks in (complete_batch) and commits. Task.SetResult is not
// stored for a batch (complete_batch takes no results), and the workflow
// calls (Step, Sleep, WaitForEvent, AwaitTask) are for single tasks only.
// Call before Run; size must be at least 1.
func (w *Worker) HandleBatch(queue string, size int, handler BatchHandlerFunc, opts ...HandleOption) {
	if size < 1 {
		panic(fmt.Sprintf("concurrency: HandleBatch(%q): size %d is less than 1", queue, size))
	}
	w.add(&queueRunner{name: queue, concurrency: 1, batch: size, handleBatch: handler}, opts)
}

// workBatch runs a HandleBatch handler on tasks with their heartbeats and
// finishes them; it returns the next tasks when the completing transaction
// claimed some. Each task has its handle span (see startHandleSpan), all
// ended with the batch's outcome; the handler's context carries the first.
func (w *Worker) workBatch(claimCtx, workCtx context.Context, q *queueRunner, tasks []*Task) []*Task {
	ctx, cancel := context.WithCancelCause(workCtx)
	defer cancel(nil)
	ctxs := make([]context.Context, len(tasks))
	spans := make([]trace.Span, len(tasks))
	for i, t := range tasks {
		ctxs[i], spans[i] = startHandleSpan(ctx, q.spans, t)
	}
	stopBeats := w.heartbeat(tasks, cancel)
	defer stopBeats()
	next, err := w.workBatchTx(claimCtx, ctxs, q, tasks)
	for _, span := range spans {
		endSpan(span, err)
	}
	return next
}

func (w *Worker) workBatchTx(claimCtx context.Context, ctxs []context.Context, q *queueRunner, tasks []*Task) ([]*Task, error) {
	ctx, lead := ctxs[0], tasks[0]
	tx, rollback, err := w.begin(ctx)
	if err != nil {
		return nil, w.failedBatch(ctxs, q, tasks, err)
	}
	err = callHandler(func() error { return q.handleBatch(ctx, tx, tasks) })
	if err != nil {
		rollback()
		return nil, w.failedBatch(ctxs, q, tasks, err)
	}
	if w.finishing(lead) {
		rollback()
		lost := lead.lostErr()
		w.lostBatch(ctx, tasks, lost, false)
		return nil, lost
	}
	// the complete spans cover the commit, which makes the completions count
	cctxs := make([]context.Context, len(tasks))
	cspans := make([]trace.Span, len(tasks))
	for i := range tasks {
		cctxs[i], cspans[i] = tracer().Start(ctxs[i], q.spans.complete)
	}
	end := func(err error) {
		for _, span := range cspans {
			endSpan(span, err)
		}
	}
	next, err := w.finish(claimCtx, cctxs[0], tx, q, tasks)
	if err == nil {
		if err = tx.Commit(cctxs[0]); err != nil {
			err = wrap("commit", err) // nothing committed, the next claim neither
		}
	} else {
		rollback()
	}
	end(err)
	if err != nil {
		if errors.Is(err, ErrLeaseLost) {
			w.lostBatch(ctx, tasks, err, true)
			return nil, err
		}
		lead.mu.Lock()
		lead.finishing = false // fail is allowed now
		lead.mu.Unlock()
		return nil, w.failedBatch(ctxs, q, tasks, err)
	}
	for _, t := range tasks {
		w.completed(t)
	}
	return w.claimedIn(cspans[0], next), nil
}

// failedBatch records a batch handler's error for all its tasks (fail_batch)
// and returns the error the handle spans end with: where a heartbeat found
// a lease lost, or the error is a lost lease, the batch is handled as lost
// instead (see lostBatch).
func (w *Worker) failedBatch(ctxs []context.Context, q *queueRunner, tasks []*Task, err error) error {
	if w.finishing(tasks[0]) {
		lost := tasks[0].lostErr()
		w.lostBatch(ctxs[0], tasks, lost, false)
		return lost
	}
	if errors.Is(err, ErrLeaseLost) {
		w.lostBatch(ctxs[0], tasks, err, true)
		return err
	}
	for _, t := range tasks {
		w.onError(t, err)
	}
	w.recordFail(ctxs, q, tasks, err)
	return err
}

// lostBatch hands back the tasks of a batch but the one whose lost lease
// err names: they run again at once, no attempt spent. When err names none
// of them, the leases are left to lapse. report: err is told to OnError (a
// heartbeat that found it told it already).
func (w *Worker) lostBatch(ctx context.Context, tasks []*Task, err error, report bool) {
	if report {
		w.reportLost(tasks, err)
	}
	lost := lostTask(tasks, err)
	if lost == nil || len(tasks) == 1 {
		return
	}
	w.release(context.WithoutCancel(ctx), slices.DeleteFunc(slices.Clone(tasks), func(t *Task) bool { return t == lost }))
}

// reportLost tells OnError of a lost lease: of the task of tasks that err
// names, or of each when it names none of them.
func (w *Worker) reportLost(tasks []*Task, err error) {
	if lost := lostTask(tasks, err); lost != nil {
		w.onError(lost, err)
		return
	}
	for _, t := range tasks {
		w.onError(t, err)
	}
}

var leaseLostTaskRe = regexp.MustCompile(leaseLostTask)

// lostTask is the task of tasks that a batch call's lease-lost error names
// (nil: none of them).
func lostTask(tasks []*Task, err error) *Task {
	if err == nil {
		return nil
	}
	m := leaseLostTaskRe.FindStringSubmatch(err.Error())
	if m == nil {
		return nil
	}
	for _, t := range tasks {
		if strconv.FormatInt(t.ID, 10) == m[1] {
			return t
		}
	}
	return nil
}

// heldCall runs call on tasks and, while it fails with a lost lease that
// names one of them (a batch call then changes nothing), on the others
// again, telling lost (when not nil) of each task dropped. It returns
// call's last error.
func heldCall(tasks []*Task, call func(held []*Task) error, lost func(*Task, error)) error {
	for len(tasks) > 0 {
		err := call(tasks)
		if !errors.Is(err, ErrLeaseLost) {
			return err
		}
		t := lostTask(tasks, err)
		if t == nil {
			return err
		}
		if lost != nil {
			lost(t, err)
		}
		tasks = slices.DeleteFunc(slices.Clone(tasks), func(x *Task) bool { return x == t })
	}
	return nil
}
