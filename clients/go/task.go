package concurrency

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/trace"
)

// Task is a claimed task, as concurrency.dequeue returned it.
type Task struct {
	// Queue is the queue the task was claimed from.
	Queue string
	// ID is the task's id.
	ID int64
	// LeaseToken fences the claim: heartbeat, complete, fail and release
	// with it fail with ErrLeaseLost once the lease was taken over.
	LeaseToken int64
	// Attempt counts the claims of the task, this one included.
	Attempt int32
	// Payload is the task's payload as JSON.
	Payload json.RawMessage
	// EnqueuedAt is when the task was enqueued.
	EnqueuedAt time.Time
	// LeaseExpiresAt is the lease's deadline at the claim (heartbeats move it).
	LeaseExpiresAt time.Time

	leaseLeft time.Duration // the lease by the server's clock at the claim

	mu        sync.Mutex // serializes heartbeats with the completion and suspensions
	finishing bool
	lost      error
	suspended bool        // a Sleep or WaitForEvent handed the task back
	wf        *workflowDB // where workflow calls run (set by the worker)
	sleeps    int         // Sleep calls of this run

	resultMu sync.Mutex
	result   *string

	claimedBy trace.SpanContext // the span of the claim that got the task
}

// Decode unmarshals the task's payload into v.
func (t *Task) Decode(v any) error { return json.Unmarshal(t.Payload, v) }

// SetResult records v (any JSON-marshalable value) as the task's result:
// the worker passes it to complete (kept on queues that retain tasks, and
// for the task's children's parent_results).
func (t *Task) SetResult(v any) error {
	s, err := jsonText(v)
	if err != nil {
		return fmt.Errorf("concurrency: result: %w", err)
	}
	t.resultMu.Lock()
	t.result = &s
	t.resultMu.Unlock()
	return nil
}

func (t *Task) resultArg() any {
	t.resultMu.Lock()
	defer t.resultMu.Unlock()
	if t.result == nil {
		return nil
	}
	return *t.result
}

// DequeueOptions are the optional arguments of Dequeue.
type DequeueOptions struct {
	// Batch is how many tasks to claim at most (0: 1).
	Batch int
	// Lease is the lease to take (0: the queue's).
	Lease time.Duration
	// Worker names the claimer (shown by task_status).
	Worker string
	// Wait makes the call sleep up to Wait for a task when none is
	// claimable (0: return at once).
	Wait time.Duration
}

// Dequeue claims up to opts.Batch tasks of queue (concurrency.dequeue) on q;
// run it outside a transaction (or commit right after) so that the lease is
// on record. An empty result means nothing was claimable (within opts.Wait).
func Dequeue(ctx context.Context, q Querier, queue string, opts DequeueOptions) ([]*Task, error) {
	batch := opts.Batch
	if batch < 1 {
		batch = 1
	}
	var worker any
	if opts.Worker != "" {
		worker = opts.Worker
	}
	rows, err := q.Query(ctx, stmtClaimWait, queue, int32(batch), interval(opts.Lease), worker, interval(opts.Wait))
	if err != nil {
		return nil, wrap("dequeue", err)
	}
	return scanTasks(rows, queue)
}

// scanTasks reads dequeue's rows (with the lease's time left as a last column).
func scanTasks(rows pgx.Rows, queue string) ([]*Task, error) {
	defer rows.Close()
	var tasks []*Task
	for rows.Next() {
		t := &Task{Queue: queue}
		var payload []byte
		var left float64
		if err := rows.Scan(&t.ID, &t.LeaseToken, &t.Attempt, &payload, &t.EnqueuedAt, &t.LeaseExpiresAt, &left); err != nil {
			return nil, wrap("dequeue", err)
		}
		t.Payload = json.RawMessage(payload)
		t.leaseLeft = time.Duration(left * float64(time.Second))
		tasks = append(tasks, t)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("dequeue", err)
	}
	return tasks, nil
}

// Heartbeat extends the lease of task id by extend (0: the queue's lease)
// and returns the new deadline; ErrLeaseLost when the lease was lost.
func Heartbeat(ctx context.Context, q Querier, queue string, id, leaseToken int64, extend time.Duration) (time.Time, error) {
	var until time.Time
	var left float64
	sql, args := withNamed("heartbeat", stmtHeartbeat, []any{queue, id, leaseToken, interval(extend)})
	err := q.QueryRow(ctx, sql, args...).Scan(&until, &left)
	return until, wrap("heartbeat", err)
}

// Complete finishes task id held with leaseToken (concurrency.complete); run
// it in the transaction of the work's own writes. result is nil or any
// JSON-marshalable value. ErrLeaseLost when the lease was lost.
func Complete(ctx context.Context, q Querier, queue string, id, leaseToken int64, result any) error {
	var res any
	if result != nil {
		s, err := jsonText(result)
		if err != nil {
			return fmt.Errorf("concurrency: complete: result: %w", err)
		}
		res = s
	}
	_, err := q.Exec(ctx, stmtComplete, queue, id, leaseToken, res)
	return wrap("complete", err)
}

// CompleteBatch completes every task held with the token at the same
// position, all or nothing, and returns how many; one lost lease is
// ErrLeaseLost (naming that task) and changes nothing.
func CompleteBatch(ctx context.Context, q Querier, queue string, ids, leaseTokens []int64) (int64, error) {
	var n int64
	err := q.QueryRow(ctx, stmtCompleteBatch,
		queue, int64Array(ids), int64Array(leaseTokens)).Scan(&n)
	return n, wrap("complete_batch", err)
}

// HeartbeatBatch extends the leases of the tasks ids, each held with the
// token at the same position, by extend (0: the queue's lease), all or
// nothing, and returns the new deadline; one lost lease is ErrLeaseLost
// (naming that task) and extends none.
func HeartbeatBatch(ctx context.Context, q Querier, queue string, ids, leaseTokens []int64, extend time.Duration) (time.Time, error) {
	var until time.Time
	var left float64
	err := q.QueryRow(ctx, stmtHeartbeatBatch,
		queue, int64Array(ids), int64Array(leaseTokens), interval(extend)).Scan(&until, &left)
	return until, wrap("heartbeat_batch", err)
}

// FailBatch fails every task held with the token at the same position with
// message, as Fail with the queue's backoff does, all or nothing; one lost
// lease is ErrLeaseLost (naming that task) and fails none.
func FailBatch(ctx context.Context, q Querier, queue string, ids, leaseTokens []int64, message string) error {
	_, err := q.Exec(ctx, stmtFailBatch, queue, int64Array(ids), int64Array(leaseTokens), message)
	return wrap("fail_batch", err)
}

// ReleaseBatch hands claimed tasks back unstarted, as Release does, all or
// nothing; one lost lease is ErrLeaseLost (naming that task) and releases
// none.
func ReleaseBatch(ctx context.Context, q Querier, queue string, ids, leaseTokens []int64) error {
	_, err := q.Exec(ctx, stmtReleaseBatch, queue, int64Array(ids), int64Array(leaseTokens))
	return wrap("release_batch", err)
}

// Fail records message as the task's last error and ends the lease: the task
// is retried after retryIn (0: the queue's backoff) or becomes dead when its
// attempts are used up. It returns "ready" or "dead".
func Fail(ctx context.Context, q Querier, queue string, id, leaseToken int64, message string, retryIn time.Duration) (string, error) {
	var retry any
	if retryIn > 0 {
		retry = interval(retryIn)
	} else if retryIn == RetryNow {
		retry = "0"
	}
	var state string
	err := q.QueryRow(ctx, stmtFail,
		queue, id, leaseToken, message, retry).Scan(&state)
	return state, wrap("fail", err)
}

// RetryNow, as Fail's retryIn (or RetryIn's delay), retries the task at once
// instead of after the queue's backoff.
const RetryNow time.Duration = -1

// Release hands a claimed task back unstarted: ready again, its attempt not
// counted, its lease token fenced off.
func Release(ctx context.Context, q Querier, queue string, id, leaseToken int64) error {
	_, err := q.Exec(ctx, stmtRelease, queue, id, leaseToken)
	return wrap("release", err)
}

// jsonRaw marks JSON text that is already encoded.
type jsonRaw string

// lostErr is the lost lease a heartbeat found, if any.
func (t *Task) lostErr() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lost
}
