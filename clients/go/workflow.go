package concurrency

// Durable workflows on a task (docs/workflows.md): steps whose results are
// kept in the task's row under its lease, durable sleeps and event waits that
// hand the task back to the server until it is due again, and, on the
// producer side, waiting for a task's end and emitting events. The handler
// runs again from the start after each suspension (and after a failed
// attempt); recorded steps return at once then.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrSuspended is returned by Task.Sleep and Task.WaitForEvent when the task
// has been handed back to the server (sleeping, or parked until an event):
// the handler must return it, as it is or wrapped (the worker tests it with
// errors.Is). The worker then neither completes nor fails the task and stops
// heartbeating it; the task runs again, from the start of the handler, when
// it is due, without an attempt spent. Any workflow call on the task after it
// returns ErrSuspended again.
var ErrSuspended = errors.New("concurrency: task suspended (sleeping or waiting for an event)")

// ErrEventTimeout is returned by Task.WaitForEvent when the timeout passed
// before the event was emitted. The wait is over: handle it (give up,
// remind, escalate) and carry on.
var ErrEventTimeout = errors.New("concurrency: timed out waiting for the event")

// ErrNoTask is returned by AwaitTask for a task that does not exist (never
// enqueued, or removed: a queue that retains nothing deletes a task that
// ended before the first look).
var ErrNoTask = errors.New("concurrency: no such task")

// errNotBound: a workflow call on a task that no Worker handed to a handler.
var errNotBound = errors.New("concurrency: workflow calls need a task given to a handler by a Worker")

// workflowDB is where a task's workflow calls run: the worker's pool.
type workflowDB struct {
	db TxBeginner
	q  Querier
	// mode is the execution mode of the runtime's own statements
	mode pgx.QueryExecMode
}

// workflow checks that the task can make a workflow call.
func (t *Task) workflow() (*workflowDB, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.suspended {
		return nil, ErrSuspended
	}
	if t.wf == nil {
		return nil, errNotBound
	}
	return t.wf, nil
}

// isSuspended reports whether a Sleep or WaitForEvent handed the task back.
func (t *Task) isSuspended() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.suspended
}

// StepKey returns "<queue>:<task id>:<name>", the key of step name of this
// task: the same in every run of the task. Pass it to an outside service as
// the idempotency key of the step's call, so that a step that runs again
// (after a crash between the call and its recording) does not act twice.
func (t *Task) StepKey(name string) string {
	return t.Queue + ":" + strconv.FormatInt(t.ID, 10) + ":" + name
}

const stepResultSQL = stmtStepResult

const recordStepSQL = stmtRecordStep

// recorded reads a step's recorded result: nil when the step was not
// recorded. ErrLeaseLost when the task is not held under the task's lease.
func (t *Task) recorded(ctx context.Context, q Querier, step string) (*string, error) {
	var result *string
	if err := q.QueryRow(ctx, stepResultSQL, t.Queue, t.ID, t.LeaseToken, step).Scan(&result); err != nil {
		return nil, wrap("step_result", err)
	}
	return result, nil
}

// stepDB checks that the task can run step name and returns where.
func (t *Task) stepDB(name string) (*workflowDB, error) {
	if strings.HasPrefix(name, "sleep:") || strings.HasPrefix(name, "event:") {
		return nil, fmt.Errorf("concurrency: step %q: names beginning with \"sleep:\" or \"event:\" are the runtime's", name)
	}
	return t.workflow()
}

// memo is one step on q: the recorded result (decoded into a T) when there
// is one, else fn's, recorded on q.
func memo[T any](ctx context.Context, q Querier, task *Task, name string, fn func() (T, error)) (T, error) {
	var zero T
	prev, err := task.recorded(ctx, q, name)
	if err != nil {
		return zero, err
	}
	if prev != nil {
		var v T
		if err := json.Unmarshal([]byte(*prev), &v); err != nil {
			return zero, fmt.Errorf("concurrency: step %q: decoding its recorded result: %w", name, err)
		}
		return v, nil
	}
	v, err := fn()
	if err != nil {
		return zero, err
	}
	text, err := jsonText(v)
	if err != nil {
		return zero, fmt.Errorf("concurrency: step %q: its result cannot be recorded: %w", name, err)
	}
	if _, err := q.Exec(ctx, recordStepSQL, task.Queue, task.ID, task.LeaseToken, name, text); err != nil {
		return zero, wrap("record_step", err)
	}
	return v, nil
}

// Step runs fn once for the task, however many times the handler runs: when
// step name was recorded in an earlier run, it returns the recorded result
// (JSON, decoded into a T) without calling fn; otherwise it calls fn,
// records its result (encoded as JSON) under the task's lease and returns
// it. An error of fn is returned as it is and nothing is recorded: the next
// run calls fn again.
//
// A step whose effect is outside the database (an HTTP call, an e-mail)
// happens at least once: the worker can die after fn and before the result
// is recorded. Pass task.StepKey(name) to the outside service as the call's
// idempotency key. For database work use StepTx, which happens exactly once.
//
// T must survive a JSON round trip (exported fields, or json.RawMessage):
// later runs get the decoded JSON. A lost lease is ErrLeaseLost (errors.Is):
// return it, the task is someone else's now.
func Step[T any](ctx context.Context, task *Task, name string, fn func(ctx context.Context) (T, error)) (T, error) {
	wf, err := task.stepDB(name)
	if err != nil {
		var zero T
		return zero, err
	}
	return memo(ctx, wf.q, task, name, func() (T, error) { return fn(ctx) })
}

// StepTx is Step for database work, which it makes happen exactly once: fn
// runs in a transaction (RunInTx's: a serialization failure or deadlock runs
// it again, so do only database work through tx in it), the step's result
// is recorded in that same transaction, and both commit together. A run
// that fails anywhere before the commit — fn's error, a failing commit, a
// crash, a lease lost to another worker (ErrLeaseLost) — leaves neither
// fn's writes nor the record; a later run finds the step recorded and
// returns its result without calling fn.
func StepTx[T any](ctx context.Context, task *Task, name string, fn func(ctx context.Context, tx pgx.Tx) (T, error)) (T, error) {
	var out T
	wf, err := task.stepDB(name)
	if err != nil {
		return out, err
	}
	err = RunInTx(ctx, wf.db, TxOptions{}, func(tx pgx.Tx) error {
		var err error
		out, err = memo(ctx, WithExecMode(tx, wf.mode), task, name, func() (T, error) { return fn(ctx, tx) })
		return err
	})
	if err != nil {
		var zero T
		if SQLState(err) != "" { // fn's statements or the commit
			return zero, wrap("step "+strconv.Quote(name), err)
		}
		return zero, err
	}
	return out, nil
}

// suspend runs a statement that may hand the task back to the server, with
// the task's heartbeats held off (one in flight finishes first); when it
// did, the task is marked suspended and no heartbeat follows.
func (t *Task) suspend(stmt func() (bool, error)) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.suspended {
		return ErrSuspended
	}
	suspended, err := stmt()
	if err != nil {
		return err
	}
	if suspended {
		t.suspended = true
		t.finishing = true // no more heartbeats
		return ErrSuspended
	}
	return nil
}

// the step's record and the sleep in one statement (one transaction): see
// clients/protocol/statements.json
const sleepStateSQL, sleepSQL, sleepAgainSQL = stmtSleepState, stmtSleep, stmtSleepAgain

// Sleep is a durable sleep of d: the task leaves the worker (no connection,
// no lease, no attempt spent, its steps kept) and runs again from the start
// of the handler once d has passed, by the server's clock. It returns
// ErrSuspended, which the handler must return. In that later run the same
// Sleep call returns nil at once: sleeps are numbered in the order a run
// calls them ("sleep:1", "sleep:2", … in task_steps), so call them in the
// same order in every run (do not make whether to sleep depend on anything
// but recorded steps and the payload).
func (t *Task) Sleep(ctx context.Context, d time.Duration) error {
	wf, err := t.workflow()
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.sleeps++
	name := "sleep:" + strconv.Itoa(t.sleeps)
	t.mu.Unlock()
	var until *string
	var passed *bool
	if err := wf.q.QueryRow(ctx, sleepStateSQL, t.Queue, t.ID, t.LeaseToken, name).Scan(&until, &passed); err != nil {
		return wrap("step_result", err)
	}
	if until != nil && passed != nil && *passed {
		return nil // slept already
	}
	return t.suspend(func() (bool, error) {
		var err error
		if until == nil {
			_, err = wf.q.Exec(ctx, sleepSQL, t.Queue, t.ID, t.LeaseToken, name, micros(d))
		} else { // claimed again before the time: back to sleep until then
			_, err = wf.q.Exec(ctx, sleepAgainSQL, t.Queue, t.ID, t.LeaseToken, *until)
		}
		if err != nil {
			return false, wrap("sleep_task", err)
		}
		return true, nil
	})
}

// await_event, recording a time-out as step "event-timeout:<event>" in the
// same statement
const awaitEventSQL = stmtAwaitEvent

// WaitForEvent returns the payload of event, emitted by EmitEvent (or
// concurrency.emit_event) before or after this call. When the event has not
// been emitted yet, the task is parked without a lease until it is (or
// until timeout passes; 0: no timeout) and WaitForEvent returns
// ErrSuspended, which the handler must return; the run that follows gets the
// payload, or ErrEventTimeout when the timeout passed first. A payload
// emitted as NULL is JSON null. The payload is recorded as step
// "event:<event>": a task receives an event once, so name events after what
// they are about (e.g. "reply:order-42").
func (t *Task) WaitForEvent(ctx context.Context, event string, timeout time.Duration) (json.RawMessage, error) {
	wf, err := t.workflow()
	if err != nil {
		return nil, err
	}
	var status string
	var payload *string
	err = t.suspend(func() (bool, error) {
		var recorded bool
		err := wf.q.QueryRow(ctx, awaitEventSQL, t.Queue, t.ID, t.LeaseToken, event, interval(timeout),
			"event-timeout:"+event).Scan(&status, &payload, &recorded)
		if err != nil {
			return false, wrap("await_event", err)
		}
		return status == "waiting", nil
	})
	if err != nil {
		return nil, err
	}
	switch status {
	case "received":
		if payload == nil {
			return json.RawMessage("null"), nil
		}
		return json.RawMessage(*payload), nil
	case "timed_out":
		return nil, ErrEventTimeout
	}
	return nil, fmt.Errorf("concurrency: await_event: unexpected status %q", status)
}

// micros is a duration as an interval literal, zero and negative ones
// included.
func micros(d time.Duration) string {
	return strconv.FormatInt(d.Microseconds(), 10) + " microseconds"
}

// TaskOutcome is what AwaitTask saw of a task.
type TaskOutcome struct {
	// State is "done", "dead" or "cancelled" once the task ended; on a
	// timeout, the state it was in then ("ready", "leased", "scheduled", …).
	State string
	// Result is the result the task was completed with (Task.SetResult),
	// nil when none.
	Result json.RawMessage
	// LastError is the error of the task's last failed attempt, "" when none.
	LastError string
}

// Ended reports whether the task is done, dead or cancelled.
func (o TaskOutcome) Ended() bool {
	return o.State == "done" || o.State == "dead" || o.State == "cancelled"
}

// Decode unmarshals the task's result into v.
func (o TaskOutcome) Decode(v any) error {
	if o.Result == nil {
		return errors.New("concurrency: the task has no result")
	}
	return json.Unmarshal(o.Result, v)
}

const awaitTaskSQL = stmtAwaitTask

// awaitSlice is the longest one await_task statement waits: short enough for
// a pooler's and a server's statement timeouts, and to notice ctx.
var awaitSlice = timingAwaitTaskSliceMs * time.Millisecond

// AwaitTask waits until task id of queue ends (done, dead or cancelled) and
// returns its outcome. It waits with short await_task statements (30 s at
// most each), woken by the server as soon as the task ends. It waits until
// ctx is done: when ctx's deadline comes first it returns the state the task
// is in and an error matching context.DeadlineExceeded (errors.Is). A task
// that does not exist (any more) is ErrNoTask: on a queue that retains
// nothing, a task completed without a result, or cancelled, is removed at
// once, and nothing tells which it was.
func AwaitTask(ctx context.Context, q Querier, queue string, id int64) (TaskOutcome, error) {
	var out TaskOutcome
	for {
		wait := awaitSlice
		deadline, hasDeadline := ctx.Deadline()
		last := false
		if hasDeadline {
			left := time.Until(deadline)
			// ends a little before the deadline, so that the answer comes
			// back before ctx cancels the statement
			if left-min(left/10, 200*time.Millisecond) <= wait {
				wait = max(left-min(left/10, 200*time.Millisecond), 0)
				last = true
			}
		}
		var state string
		var result, lastError *string
		err := q.QueryRow(ctx, awaitTaskSQL, queue, id, micros(wait)).Scan(&state, &result, &lastError)
		if errors.Is(err, pgx.ErrNoRows) {
			return out, ErrNoTask
		}
		if err != nil {
			if ctx.Err() != nil {
				return out, fmt.Errorf("concurrency: await_task: task %d: %w", id, context.Cause(ctx))
			}
			return out, wrap("await_task", err)
		}
		out = TaskOutcome{State: state}
		if result != nil {
			out.Result = json.RawMessage(*result)
		}
		if lastError != nil {
			out.LastError = *lastError
		}
		if out.Ended() {
			return out, nil
		}
		if last || ctx.Err() != nil {
			cause := context.Cause(ctx)
			if cause == nil {
				cause = context.DeadlineExceeded
			}
			return out, fmt.Errorf("concurrency: await_task: task %d is still %s: %w", id, state, cause)
		}
	}
}

// AwaitTask waits until task id of queue ends; see the package function.
func (c *Client) AwaitTask(ctx context.Context, queue string, id int64) (TaskOutcome, error) {
	return AwaitTask(ctx, c.pool, queue, id)
}

// EmitEvent emits event with payload (any JSON-marshalable value; nil: JSON
// null) on q — in the caller's transaction when q is a pgx.Tx, so that the
// event goes out exactly when that transaction commits. The tasks waiting for
// it run again with the payload, and a task that waits for it later (within
// concurrency.event_retention, default 7 days) takes it at once; emitting it
// again replaces the payload for later waits. It returns how many waiting
// tasks it woke. The role needs EXECUTE on concurrency.emit_event (granted by
// the extension's owner).
func EmitEvent(ctx context.Context, q Querier, event string, payload any) (int64, error) {
	var body any
	if payload != nil {
		s, err := jsonText(payload)
		if err != nil {
			return 0, fmt.Errorf("concurrency: emit_event: payload: %w", err)
		}
		body = s
	}
	var woken int64
	err := q.QueryRow(ctx, stmtEmitEvent, event, body).Scan(&woken)
	return woken, wrap("emit_event", err)
}

// EmitEvent emits event with payload in a transaction of its own; see the
// package function (which also runs in the caller's transaction).
func (c *Client) EmitEvent(ctx context.Context, event string, payload any) (int64, error) {
	return EmitEvent(ctx, c.pool, event, payload)
}

// RecordedStep is a step a task recorded (TaskSteps).
type RecordedStep struct {
	// Name is the step's name ("sleep:N" and "event:<event>" are the
	// runtime's).
	Name string
	// Result is the recorded result as JSON.
	Result json.RawMessage
	// RecordedAt is when it was recorded.
	RecordedAt time.Time
}

// TaskSteps lists the steps task id of queue has recorded, in the order
// recorded (permission read).
func TaskSteps(ctx context.Context, q Querier, queue string, id int64) ([]RecordedStep, error) {
	rows, err := q.Query(ctx, stmtTaskSteps,
		queue, id)
	if err != nil {
		return nil, wrap("task_steps", err)
	}
	defer rows.Close()
	var steps []RecordedStep
	for rows.Next() {
		var s RecordedStep
		var result *string
		if err := rows.Scan(&s.Name, &result, &s.RecordedAt); err != nil {
			return nil, wrap("task_steps", err)
		}
		if result != nil {
			s.Result = json.RawMessage(*result)
		}
		steps = append(steps, s)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("task_steps", err)
	}
	return steps, nil
}
