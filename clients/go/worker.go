package concurrency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// HandlerFunc handles one task. A nil error completes the task (in a
// transaction of its own, after the handler returned); an error fails it with
// the error's message (retried after the queue's backoff, or the delay of
// RetryIn, or dead when its attempts are used up). ctx is cancelled when the
// lease is lost (context.Cause is then ErrLeaseLost) and at the end of the
// shutdown timeout.
type HandlerFunc func(ctx context.Context, task *Task) error

// TxHandlerFunc handles one task inside a transaction that the worker began
// and that completes the task: the worker calls complete in tx after the
// handler returned nil and then commits, so that the handler's writes
// through tx and the completion commit together or not at all (exactly-once
// effects). An error (or a lost lease) rolls tx back.
type TxHandlerFunc func(ctx context.Context, tx pgx.Tx, task *Task) error

// WorkerConfig holds the settings of a Worker; zero values take the
// defaults given.
type WorkerConfig struct {
	// Name identifies the worker in the tasks it claims (task_status.worker);
	// default "<hostname>-<pid>".
	Name string
	// Lease is the lease asked for at claim and heartbeat; 0: the queue's.
	Lease time.Duration
	// Wait is how long one waiting dequeue sleeps for work; default 10 s.
	// Where the connections have a statement_timeout (read at Run), the
	// claims wait less: the longer of half of it and all of it but a second.
	Wait time.Duration
	// ShutdownTimeout is how long Run waits for running handlers once its
	// context is cancelled; default 30 s.
	ShutdownTimeout time.Duration
	// ExecMode, when set, is the pgx query execution mode of the worker's
	// own statements (see WithExecMode; for PgBouncer in transaction mode).
	// 0: the pool's default.
	ExecMode pgx.QueryExecMode
	// OnError is called for a handler's error or panic and for a lost lease
	// (errors.Is(err, ErrLeaseLost)); default: logged with Logger.
	OnError func(task *Task, err error)
	// OnComplete is called after a task's completion committed.
	OnComplete func(task *Task)
	// Logger receives the worker's log records; default slog.Default().
	Logger *slog.Logger
}

// HandleOption sets an option of one queue's handler.
type HandleOption func(*queueRunner)

// WithConcurrency runs up to n handlers of the queue at once (default 1).
func WithConcurrency(n int) HandleOption {
	return func(q *queueRunner) {
		if n > 0 {
			q.concurrency = n
		}
	}
}

// Worker runs handlers for the tasks of one or more queues. Register
// handlers with Handle, HandleTx or HandleBatch, then call Run.
type Worker struct {
	pool   *pgxpool.Pool
	q      Querier
	cfg    WorkerConfig
	log    *slog.Logger
	queues []*queueRunner

	mu      sync.Mutex
	running bool
	fatal   error
	stop    context.CancelFunc
}

type queueRunner struct {
	name        string
	concurrency int
	batch       int // the tasks a slot claims and runs together (HandleBatch); 0: one
	handle      HandlerFunc
	handleTx    TxHandlerFunc
	handleBatch BatchHandlerFunc
	spans       taskSpans
}

// NewWorker returns a Worker on pool. The pool needs a connection per
// running handler (a HandleTx handler holds one for its transaction), one per
// queue for the waiting claim, and one for heartbeats: MaxConns of at least
// the sum of the queues' concurrency + the number of queues + 1.
func NewWorker(pool *pgxpool.Pool, cfg WorkerConfig) *Worker {
	if cfg.Name == "" {
		host, _ := os.Hostname()
		cfg.Name = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if cfg.Wait <= 0 {
		cfg.Wait = 10 * time.Second
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 30 * time.Second
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	return &Worker{pool: pool, q: WithExecMode(pool, cfg.ExecMode), cfg: cfg, log: logger}
}

// Handle registers handler for queue; each task is completed in a statement
// of its own after handler returns nil. Call before Run.
func (w *Worker) Handle(queue string, handler HandlerFunc, opts ...HandleOption) {
	w.add(&queueRunner{name: queue, concurrency: 1, handle: handler}, opts)
}

// HandleTx registers handler for queue; each task runs in a transaction that
// the worker begins, passes to handler, completes the task in and commits.
// Call before Run.
func (w *Worker) HandleTx(queue string, handler TxHandlerFunc, opts ...HandleOption) {
	w.add(&queueRunner{name: queue, concurrency: 1, handleTx: handler}, opts)
}

func (w *Worker) add(q *queueRunner, opts []HandleOption) {
	q.spans = newTaskSpans(q.name)
	for _, opt := range opts {
		opt(q)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running {
		panic("concurrency: Handle after Run")
	}
	for _, other := range w.queues {
		if other.name == q.name {
			panic(fmt.Sprintf("concurrency: queue %q has a handler already", q.name))
		}
	}
	w.queues = append(w.queues, q)
}

// testHookClaimed, when set (by tests), runs after each claim that got tasks,
// before they start.
var testHookClaimed func(queue string, tasks []*Task)

// Run claims and handles tasks until ctx is cancelled, then shuts down
// gracefully: it stops claiming (a waiting claim is cancelled on the server),
// hands tasks claimed but not started back with release (ready again, no
// attempt spent), and waits up to ShutdownTimeout for the running handlers;
// those still running then have their contexts cancelled and Run returns
// ErrShutdownTimeout. Run returns nil after a graceful shutdown, or the
// error that stopped the worker (e.g. SQLSTATE 42501 when the role may not
// work a queue, 42704 for an unknown queue).
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return errors.New("concurrency: Run called twice")
	}
	if len(w.queues) == 0 {
		w.mu.Unlock()
		return errors.New("concurrency: no handler registered")
	}
	w.running = true
	claimCtx, stop := context.WithCancel(ctx)
	w.stop = stop
	w.mu.Unlock()
	defer stop()

	need := 1
	for _, q := range w.queues {
		need += q.concurrency + 1
	}
	if max := int(w.pool.Config().MaxConns); max < need {
		w.log.Warn("concurrency: the pool may be too small: heartbeats may wait for a connection and leases lapse",
			"worker", w.cfg.Name, "max_conns", max, "needed", need)
	}

	w.capWait(claimCtx)

	// the handlers' contexts outlive ctx (graceful shutdown) until the timeout
	workCtx, cancelWork := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelWork(nil)
	var handlers, fetchers sync.WaitGroup
	for _, q := range w.queues {
		fetchers.Add(1)
		go func() {
			defer fetchers.Done()
			w.fetch(claimCtx, workCtx, q, &handlers)
		}()
	}
	<-claimCtx.Done()
	fetchers.Wait()

	done := make(chan struct{})
	go func() { handlers.Wait(); close(done) }()
	var result error
	timer := time.NewTimer(w.cfg.ShutdownTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		w.log.Warn("concurrency: handlers still running at the shutdown timeout; cancelling them",
			"worker", w.cfg.Name, "timeout", w.cfg.ShutdownTimeout)
		cancelWork(ErrShutdownTimeout)
		select { // a moment for them to roll back and record their failure
		case <-done:
		case <-time.After(5 * time.Second):
		}
		result = ErrShutdownTimeout
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fatal != nil {
		return w.fatal
	}
	return result
}

// capWait shortens the claims' wait below the connections' statement_timeout,
// which would end a longer wait with an error (57014) each time: to the
// longer of half of it and all of it but a second.
func (w *Worker) capWait(ctx context.Context) {
	var exists bool
	var timeout float64 // ms
	err := w.q.QueryRow(ctx, stmtWorkerSettings, "").Scan(&exists, &timeout)
	if err != nil || timeout <= 0 {
		return
	}
	t := time.Duration(timeout * float64(time.Millisecond))
	if limit := max(t-timingWaitMarginMs*time.Millisecond, t/2); w.cfg.Wait > limit {
		w.log.Info("concurrency: the claims wait less than WorkerConfig.Wait, under statement_timeout",
			"worker", w.cfg.Name, "wait", limit, "statement_timeout", t)
		w.cfg.Wait = limit
	}
}

// stopOn stops the worker on an error that retrying cannot cure.
func (w *Worker) stopOn(err error) {
	w.mu.Lock()
	if w.fatal == nil {
		w.fatal = err
	}
	stop := w.stop
	w.mu.Unlock()
	w.log.Error("concurrency: worker stopping", "worker", w.cfg.Name, "error", err)
	stop()
}

// fatalClaimError: errors of a claim that retrying cannot cure (permissions,
// unknown queue, bad arguments).
func fatalClaimError(err error) bool {
	state := SQLState(err)
	return len(state) == 5 && (state[:2] == "42" || state[:2] == "22")
}

// fetch claims tasks of one queue for its free slots and starts their handlers.
func (w *Worker) fetch(claimCtx, workCtx context.Context, q *queueRunner, handlers *sync.WaitGroup) {
	slots := make(chan struct{}, q.concurrency)
	for range q.concurrency {
		slots <- struct{}{}
	}
	pause := timingFirstPollMs * time.Millisecond
	for {
		select {
		case <-slots:
		case <-claimCtx.Done():
			return
		}
		n := 1
	more:
		for n < q.concurrency {
			select {
			case <-slots:
				n++
			default:
				break more
			}
		}
		size := max(q.batch, 1)
		tasks, err := w.claim(claimCtx, q, n*size)
		units := chunks(tasks, size)
		for range n - len(units) {
			slots <- struct{}{}
		}
		if err != nil {
			if claimCtx.Err() != nil {
				return // the cancelled wait held no lease
			}
			if fatalClaimError(err) {
				w.stopOn(err)
				return
			}
			w.log.Warn("concurrency: claim failed; trying again", "worker", w.cfg.Name, "queue", q.name,
				"error", err, "pause", pause)
			select {
			case <-time.After(pause):
			case <-claimCtx.Done():
				return
			}
			pause = min(2*pause, 5*time.Second)
			continue
		}
		pause = timingFirstPollMs * time.Millisecond
		if len(tasks) > 0 && testHookClaimed != nil {
			testHookClaimed(q.name, tasks)
		}
		for i, unit := range units {
			if claimCtx.Err() != nil {
				w.release(context.WithoutCancel(claimCtx), slices.Concat(units[i:]...))
				return
			}
			handlers.Add(1)
			go func() {
				defer handlers.Done()
				defer func() { slots <- struct{}{} }()
				// a slot goes on with the tasks claimed in its last completing transaction
				for len(unit) > 0 {
					unit = w.work(claimCtx, workCtx, q, unit)
					if len(unit) > 0 && claimCtx.Err() != nil {
						w.release(context.WithoutCancel(claimCtx), unit)
						return
					}
				}
			}()
		}
	}
}

// chunks cuts tasks into runs of size (the last one may be shorter).
func chunks(tasks []*Task, size int) [][]*Task {
	var out [][]*Task
	for len(tasks) > size {
		out = append(out, tasks[:size:size])
		tasks = tasks[size:]
	}
	if len(tasks) > 0 {
		out = append(out, tasks)
	}
	return out
}

// claim runs one waiting dequeue on a connection of its own. Cancelling
// claimCtx sends the server a cancel request (repeated until the statement
// ends), so that a waiting claim ends at once and claims nothing; a
// connection that was sent a cancel is closed rather than given back to the
// pool, where a late cancel could hit another statement.
// The claim runs in a span of its own (see startClaimSpan), which each task
// claimed remembers.
func (w *Worker) claim(claimCtx context.Context, q *queueRunner, n int) (tasks []*Task, err error) {
	spanCtx, span := startClaimSpan(context.WithoutCancel(claimCtx), q.spans, q.name)
	defer func() {
		if claimCtx.Err() != nil {
			endSpan(span, nil) // a claim cancelled by the shutdown is no error
			return
		}
		endSpan(span, err)
	}()
	conn, err := w.pool.Acquire(claimCtx)
	if err != nil {
		return nil, err
	}
	finished := make(chan struct{})
	var cancelled sync.WaitGroup
	sent := false
	cancelled.Add(1)
	go func() {
		defer cancelled.Done()
		select {
		case <-finished:
			return
		case <-claimCtx.Done():
		}
		sent = true
		for {
			cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_ = conn.Conn().PgConn().CancelRequest(cctx)
			cancel()
			select {
			case <-finished:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	tasks, err = Dequeue(spanCtx, WithExecMode(conn, w.cfg.ExecMode), q.name,
		DequeueOptions{Batch: n, Lease: w.cfg.Lease, Worker: w.cfg.Name, Wait: w.cfg.Wait})
	claimedBy := span.SpanContext()
	for _, t := range tasks {
		t.claimedBy = claimedBy
	}
	close(finished)
	cancelled.Wait()
	if sent {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = conn.Conn().Close(cctx)
		cancel()
	}
	conn.Release()
	return tasks, err
}

// release hands unstarted tasks back (several in one release_batch); a lease
// lost meanwhile is no error.
func (w *Worker) release(ctx context.Context, tasks []*Task) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := heldCall(tasks, func(held []*Task) error {
		if len(held) == 1 {
			return Release(ctx, w.q, held[0].Queue, held[0].ID, held[0].LeaseToken)
		}
		ids, tokens := taskKeys(held)
		return ReleaseBatch(ctx, w.q, held[0].Queue, ids, tokens)
	}, nil)
	if err != nil && !errors.Is(err, ErrLeaseLost) {
		w.log.Warn("concurrency: release failed; the tasks come back after their lease", "worker", w.cfg.Name,
			"queue", tasks[0].Queue, "tasks", len(tasks), "error", err)
	}
}
