package concurrency

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// GraphTask is one task of EnqueueGraph (the fields of concurrency.enqueue_graph's
// tasks; see docs/queue.md in the repository).
type GraphTask struct {
	// Ref names the task for the After and AfterEnds of the graph's other
	// tasks ("": none).
	Ref string `json:"ref,omitempty"`
	// Payload is any value encoding/json can marshal (a json.RawMessage is
	// sent as it is); nil: the server's default, {}.
	Payload any `json:"payload,omitempty"`
	// After lists the task's parents, which must be done before it is
	// released: a string is the Ref of a task of the graph, an int64 the id
	// of an existing task of the task's own queue, a GraphParent an existing
	// task of any queue.
	After []any `json:"after,omitempty"`
	// AfterEnds lists parents in the same forms as After, of a
	// finally-child: it is released once each of them has ended, however
	// (done, dead or cancelled). A task has After or AfterEnds, not both.
	AfterEnds []any `json:"after_ends,omitempty"`
	// Queue is the task's queue ("": the queue given to EnqueueGraph).
	Queue string `json:"queue,omitempty"`
	// RunAt makes the task claimable at that time once released (nil: at once).
	RunAt *time.Time `json:"run_at,omitempty"`
	// Priority is the task's priority (higher is claimed first).
	Priority int32 `json:"priority,omitempty"`
	// ConcurrencyKey puts the task under its queue's key_limit ("": none).
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
}

// GraphParent is an existing task named in a GraphTask's After or
// AfterEnds: its queue and id.
type GraphParent struct {
	// Queue is the parent's queue.
	Queue string `json:"queue"`
	// ID is the parent's id.
	ID int64 `json:"id"`
}

// GraphResult is what EnqueueGraph returns per task, in the order of its
// tasks.
type GraphResult struct {
	// Ref is the task's Ref ("" for a task without one).
	Ref string
	// TaskID is the id of the task added.
	TaskID int64
}

// EnqueueGraph adds a graph of tasks on q (a pool: a transaction of its own;
// a pgx.Tx: part of that transaction), all or nothing: a task waits until its
// After parents are done (its AfterEnds parents ended). Tasks whose Queue is
// "" go to queue. Its span and trace context are Enqueue's, one span for the
// graph, its context stored in each payload (a task without a payload gets
// {} with it).
func EnqueueGraph(ctx context.Context, q Querier, queue string, tasks []GraphTask) (out []GraphResult, err error) {
	ctx, span, carrier := startEnqueueSpan(ctx, queue)
	defer func() { endSpan(span, err) }()
	graph := make([]GraphTask, len(tasks))
	for i, t := range tasks {
		if t.Payload != nil || carrier != nil {
			payload := t.Payload
			if payload == nil {
				payload = json.RawMessage("{}")
			}
			body, err := jsonText(payload)
			if err != nil {
				return nil, fmt.Errorf("concurrency: enqueue_graph: tasks[%d].payload: %w", i, err)
			}
			t.Payload = json.RawMessage(withTrace(body, carrier))
		}
		graph[i] = t
	}
	body, err := json.Marshal(graph)
	if err != nil {
		return nil, fmt.Errorf("concurrency: enqueue_graph: %w", err)
	}
	rows, err := q.Query(ctx, stmtEnqueueGraph, queue, string(body))
	if err != nil {
		return nil, wrap("enqueue_graph", err)
	}
	out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (GraphResult, error) {
		var ref *string
		var r GraphResult
		if err := row.Scan(&ref, &r.TaskID); err != nil {
			return r, err
		}
		if ref != nil {
			r.Ref = *ref
		}
		return r, nil
	})
	if err != nil {
		return nil, wrap("enqueue_graph", err)
	}
	return out, nil
}

// EnqueueGraph adds a graph of tasks in a transaction of its own; see the
// function EnqueueGraph.
func (c *Client) EnqueueGraph(ctx context.Context, queue string, tasks []GraphTask) ([]GraphResult, error) {
	return EnqueueGraph(ctx, c.pool, queue, tasks)
}

// EnqueueGraphTx is EnqueueGraph inside the caller's transaction.
func (c *Client) EnqueueGraphTx(ctx context.Context, tx pgx.Tx, queue string, tasks []GraphTask) ([]GraphResult, error) {
	return EnqueueGraph(ctx, tx, queue, tasks)
}
