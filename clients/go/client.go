package concurrency

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Querier is what the producer and queue calls run on: *pgxpool.Pool,
// *pgxpool.Conn, *pgx.Conn and pgx.Tx all implement it. Run a call on the
// caller's pgx.Tx to make it part of that transaction.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Client is the producer side over a pool: Enqueue and EnqueueBatch on the
// pool (each a transaction of its own) or, with the Tx variants, inside the
// caller's transaction.
type Client struct {
	pool *pgxpool.Pool
}

// NewClient returns a Client over pool.
func NewClient(pool *pgxpool.Pool) *Client { return &Client{pool: pool} }

// Pool returns the client's pool.
func (c *Client) Pool() *pgxpool.Pool { return c.pool }

// Enqueue adds a task to queue in a transaction of its own and returns its
// id (with DedupeKey, the id of the task holding the key, if any). payload is
// any value encoding/json can marshal (a json.RawMessage is sent as it is).
func (c *Client) Enqueue(ctx context.Context, queue string, payload any, opts ...EnqueueOption) (int64, error) {
	return Enqueue(ctx, c.pool, queue, payload, opts...)
}

// EnqueueTx is Enqueue inside the caller's transaction: the task exists
// exactly when tx commits.
func (c *Client) EnqueueTx(ctx context.Context, tx pgx.Tx, queue string, payload any, opts ...EnqueueOption) (int64, error) {
	return Enqueue(ctx, tx, queue, payload, opts...)
}

// EnqueueBatch adds one task per payload in one statement and returns their
// ids in payload order.
func (c *Client) EnqueueBatch(ctx context.Context, queue string, payloads []any, opts ...EnqueueOption) ([]int64, error) {
	return EnqueueBatch(ctx, c.pool, queue, payloads, opts...)
}

// EnqueueBatchTx is EnqueueBatch inside the caller's transaction.
func (c *Client) EnqueueBatchTx(ctx context.Context, tx pgx.Tx, queue string, payloads []any, opts ...EnqueueOption) ([]int64, error) {
	return EnqueueBatch(ctx, tx, queue, payloads, opts...)
}

// EnqueueOption sets an argument of concurrency.enqueue / enqueue_batch.
type EnqueueOption func(*enqueueOptions)

type enqueueOptions struct {
	runAt           *time.Time
	priority        int32
	dedupeKey       *string
	concurrencyKey  *string
	onConflict      *string
	after           []int64
	dedupeKeys      []string
	concurrencyKeys []string
}

// RunAt makes the task claimable at t (default: now).
func RunAt(t time.Time) EnqueueOption { return func(o *enqueueOptions) { o.runAt = &t } }

// Priority sets the task's priority (higher is claimed first; default 0).
func Priority(p int32) EnqueueOption { return func(o *enqueueOptions) { o.priority = p } }

// DedupeKey makes Enqueue return the id of the live (or retained done) task
// of the queue holding key instead of adding one. Enqueue only.
func DedupeKey(key string) EnqueueOption { return func(o *enqueueOptions) { o.dedupeKey = &key } }

// ConcurrencyKey puts the task under the queue's key_limit. Enqueue only.
func ConcurrencyKey(key string) EnqueueOption {
	return func(o *enqueueOptions) { o.concurrencyKey = &key }
}

// OnConflict is "ignore" (the server's default) or "replace": with a
// DedupeKey whose task has not started, that task takes this call's payload,
// run_at and priority (a debounce). Enqueue only.
func OnConflict(mode string) EnqueueOption { return func(o *enqueueOptions) { o.onConflict = &mode } }

// After makes the new task(s) wait until the tasks ids of the queue are done.
func After(ids ...int64) EnqueueOption { return func(o *enqueueOptions) { o.after = ids } }

// DedupeKeys gives EnqueueBatch one dedupe key per payload ("" for none).
func DedupeKeys(keys []string) EnqueueOption { return func(o *enqueueOptions) { o.dedupeKeys = keys } }

// ConcurrencyKeys gives EnqueueBatch one concurrency key per payload ("" for none).
func ConcurrencyKeys(keys []string) EnqueueOption {
	return func(o *enqueueOptions) { o.concurrencyKeys = keys }
}

func buildOptions(opts []EnqueueOption) *enqueueOptions {
	o := &enqueueOptions{}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

// args prepends the execution mode, when one is set, to a statement's arguments.
func modeArgs(mode pgx.QueryExecMode, args ...any) []any {
	if mode == 0 {
		return args
	}
	return append([]any{mode}, args...)
}

// jsonText is a payload as JSON text, sent as a string and cast to jsonb in
// the statement, which works in every pgx execution mode (a []byte would be
// sent as bytea by the simple protocol).
func jsonText(v any) (string, error) {
	switch p := v.(type) {
	case jsonRaw:
		return string(p), nil
	case json.RawMessage:
		if p == nil {
			return "null", nil
		}
		return string(p), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// interval is a duration as an interval literal (nil for zero: NULL, the
// server's default).
func interval(d time.Duration) any {
	if d <= 0 {
		return nil
	}
	return strconv.FormatInt(d.Microseconds(), 10) + " microseconds"
}

func nullable(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

// int64Array is an int8[] literal, for every execution mode.
func int64Array(ids []int64) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, id := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(id, 10))
	}
	b.WriteByte('}')
	return b.String()
}

// textArray is a text[] literal ("" elements NULL; nil for a nil slice).
func textArray(items []string, emptyIsNull bool) any {
	if items == nil {
		return nil
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, s := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		if emptyIsNull && s == "" {
			b.WriteString("NULL")
			continue
		}
		b.WriteByte('"')
		for _, r := range s {
			if r == '"' || r == '\\' {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// Enqueue adds a task to queue on q (a pool: a transaction of its own; a
// pgx.Tx: part of that transaction) and returns its id. See Client.Enqueue.
// It runs in a span "concurrency.enqueue <queue>" whose trace context it
// stores in a JSON object payload under TracePayloadKey (see the README's
// "Tracing").
func Enqueue(ctx context.Context, q Querier, queue string, payload any, opts ...EnqueueOption) (id int64, err error) {
	ctx, span, carrier := startEnqueueSpan(ctx, queue)
	defer func() { endSpan(span, err) }()
	o := buildOptions(opts)
	if o.dedupeKeys != nil || o.concurrencyKeys != nil {
		return 0, errors.New("concurrency: enqueue: DedupeKeys and ConcurrencyKeys are for EnqueueBatch")
	}
	body, err := jsonText(payload)
	if err != nil {
		return 0, fmt.Errorf("concurrency: enqueue: payload: %w", err)
	}
	body = withTrace(body, carrier)
	var runAt any
	if o.runAt != nil {
		runAt = *o.runAt
	}
	var onConflict, after any
	if o.onConflict != nil {
		onConflict = *o.onConflict
	}
	if o.after != nil {
		after = int64Array(o.after)
	}
	sql, args := withNamed("enqueue", stmtEnqueue,
		[]any{queue, body, runAt, o.priority, nullable(o.dedupeKey), nullable(o.concurrencyKey)},
		"on_conflict", onConflict, "after", after)
	if err := q.QueryRow(ctx, sql, args...).Scan(&id); err != nil {
		return 0, wrap("enqueue", err)
	}
	return id, nil
}

// EnqueueBatch adds one task per payload in one statement on q and returns
// their ids in payload order. DedupeKeys and ConcurrencyKeys, when given,
// have one element per payload. Its span and trace context are Enqueue's,
// one span for the batch, its context stored in each payload.
func EnqueueBatch(ctx context.Context, q Querier, queue string, payloads []any, opts ...EnqueueOption) (ids []int64, err error) {
	ctx, span, carrier := startEnqueueSpan(ctx, queue)
	defer func() { endSpan(span, err) }()
	o := buildOptions(opts)
	if o.dedupeKey != nil || o.concurrencyKey != nil || o.onConflict != nil {
		return nil, errors.New("concurrency: enqueue_batch: use DedupeKeys / ConcurrencyKeys (OnConflict is Enqueue's)")
	}
	bodies := make([]string, len(payloads))
	for i, p := range payloads {
		b, err := jsonText(p)
		if err != nil {
			return nil, fmt.Errorf("concurrency: enqueue_batch: payload %d: %w", i, err)
		}
		bodies[i] = withTrace(b, carrier)
	}
	var runAt any
	if o.runAt != nil {
		runAt = *o.runAt
	}
	var after any
	if o.after != nil {
		after = int64Array(o.after)
	}
	sql, args := withNamed("enqueue_batch", stmtEnqueueBatch, []any{queue, textArray(bodies, false), runAt,
		o.priority, textArray(o.dedupeKeys, true), textArray(o.concurrencyKeys, true)}, "after", after)
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, wrap("enqueue_batch", err)
	}
	ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, wrap("enqueue_batch", err)
	}
	return ids, nil
}

// WithExecMode returns a Querier that sends every statement on q with the
// given pgx query execution mode (e.g. pgx.QueryExecModeExec or
// pgx.QueryExecModeSimpleProtocol behind PgBouncer in transaction mode,
// where the default cached prepared statements of pgx cannot be kept per
// client). Mode 0 returns q itself.
func WithExecMode(q Querier, mode pgx.QueryExecMode) Querier {
	if mode == 0 {
		return q
	}
	return modeQuerier{q: q, mode: mode}
}

type modeQuerier struct {
	q    Querier
	mode pgx.QueryExecMode
}

func (m modeQuerier) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return m.q.Exec(ctx, sql, modeArgs(m.mode, args...)...)
}

func (m modeQuerier) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return m.q.Query(ctx, sql, modeArgs(m.mode, args...)...)
}

func (m modeQuerier) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return m.q.QueryRow(ctx, sql, modeArgs(m.mode, args...)...)
}

// withNamed writes into statement's {named} (see clients/protocol) the named
// arguments whose value is not nil, given as name, value pairs, each
// numbered after args, and returns the text and all the arguments. Unset
// ones are left out, so that the server's defaults apply.
func withNamed(statement, sql string, args []any, named ...any) (string, []any) {
	var extra strings.Builder
	for i := 0; i+1 < len(named); i += 2 {
		name, value := named[i].(string), named[i+1]
		if value == nil {
			continue
		}
		args = append(args, value)
		fmt.Fprintf(&extra, ", %s => $%d::%s", name, len(args), namedArgs[statement][name])
	}
	return strings.Replace(sql, "{named}", extra.String(), 1), args
}
