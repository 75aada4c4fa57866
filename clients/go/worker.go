package concurrency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
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
// handlers with Handle or HandleTx, then call Run.
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
	handle      HandlerFunc
	handleTx    TxHandlerFunc
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
		tasks, err := w.claim(claimCtx, q, n)
		for range n - len(tasks) {
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
		for i, t := range tasks {
			if claimCtx.Err() != nil {
				w.release(context.WithoutCancel(claimCtx), tasks[i:])
				return
			}
			handlers.Add(1)
			go func() {
				defer handlers.Done()
				defer func() { slots <- struct{}{} }()
				// a slot goes on with the task claimed in its last completing transaction
				for t != nil {
					t = w.work(claimCtx, workCtx, q, t)
					if t != nil && claimCtx.Err() != nil {
						w.release(context.WithoutCancel(claimCtx), []*Task{t})
						return
					}
				}
			}()
		}
	}
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

// release hands unstarted tasks back; a lease lost meanwhile is no error.
func (w *Worker) release(ctx context.Context, tasks []*Task) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for _, t := range tasks {
		if err := Release(ctx, w.q, t.Queue, t.ID, t.LeaseToken); err != nil && !errors.Is(err, ErrLeaseLost) {
			w.log.Warn("concurrency: release failed; the task comes back after its lease", "worker", w.cfg.Name,
				"queue", t.Queue, "task", t.ID, "error", err)
		}
	}
}

// work runs one task's handler with its heartbeats and finishes the task;
// it returns the next task when the completing transaction claimed one. It
// all runs in the task's handle span (see startHandleSpan), on which the
// handler's error or panic, or the completion's, is recorded.
func (w *Worker) work(claimCtx, workCtx context.Context, q *queueRunner, t *Task) *Task {
	ctx, cancel := context.WithCancelCause(workCtx)
	defer cancel(nil)
	ctx, span := startHandleSpan(ctx, q.spans, t)
	t.wf = &workflowDB{db: w.pool, q: w.q, mode: w.cfg.ExecMode}
	stopBeats := w.heartbeat(t, cancel)
	defer stopBeats()
	var next *Task
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
func (w *Worker) workPlain(claimCtx, ctx context.Context, q *queueRunner, t *Task) (*Task, error) {
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
	next, err := w.finish(claimCtx, cctx, w.pool, t)
	endSpan(span, err)
	if err != nil {
		w.finishError(ctx, q, t, err)
		return nil, err
	}
	w.completed(t)
	return w.claimedIn(span, next), nil
}

func (w *Worker) workTx(claimCtx, ctx context.Context, q *queueRunner, t *Task) (*Task, error) {
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		err = fmt.Errorf("concurrency: begin: %w", err)
		w.failed(ctx, q, t, err)
		return nil, err
	}
	rollback := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = tx.Rollback(rctx)
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
	next, err := w.finish(claimCtx, cctx, tx, t)
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

// claimedIn marks next (when not nil) as claimed in span's transaction.
func (w *Worker) claimedIn(span trace.Span, next *Task) *Task {
	if next != nil {
		next.claimedBy = span.SpanContext()
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

// finish completes t on q and, unless the worker is stopping, claims the
// slot's next task in the same transaction, in the same round trip (a
// pipelined batch): one commit a task instead of two. The claim is made only
// under READ COMMITTED (a handler that raised its transaction's isolation
// level claims nothing there, where its older snapshot would fail on tasks
// claimed since). With WorkerConfig.ExecMode set, it only completes.
func (w *Worker) finish(claimCtx, ctx context.Context, q batcher, t *Task) (*Task, error) {
	result := resultValue(t.resultArg())
	if w.cfg.ExecMode != 0 || claimCtx.Err() != nil {
		return nil, Complete(ctx, WithExecMode(q, w.cfg.ExecMode), t.Queue, t.ID, t.LeaseToken, result)
	}
	var res any
	if result != nil {
		res = string(result.(jsonRaw))
	}
	var worker any
	if w.cfg.Name != "" {
		worker = w.cfg.Name
	}
	b := &pgx.Batch{}
	b.Queue(stmtComplete, t.Queue, t.ID, t.LeaseToken, res)
	b.Queue(claimNextSQL, t.Queue, int32(1), interval(w.cfg.Lease), worker)
	br := q.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, wrap("complete", err)
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, wrap("dequeue", err)
	}
	next, err := scanTasks(rows, t.Queue)
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	if err := br.Close(); err != nil {
		return nil, wrap("dequeue", err)
	}
	if len(next) == 0 {
		return nil, nil
	}
	return next[0], nil
}

// resultValue turns a stored JSON text into complete's argument.
func resultValue(v any) any {
	if s, ok := v.(string); ok {
		return jsonRaw(s)
	}
	return nil
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
	var delay time.Duration
	var re *retryError
	if errors.As(err, &re) {
		delay = re.delay
		if delay == 0 {
			delay = RetryNow
		}
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	fctx, span := tracer().Start(fctx, q.spans.fail)
	_, ferr := Fail(fctx, w.q, t.Queue, t.ID, t.LeaseToken, err.Error(), delay)
	endSpan(span, ferr)
	if ferr != nil {
		if errors.Is(ferr, ErrLeaseLost) {
			w.onError(t, ferr)
			return
		}
		w.log.Warn("concurrency: fail failed; the task comes back after its lease", "worker", w.cfg.Name,
			"queue", t.Queue, "task", t.ID, "error", ferr)
	}
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

// heartbeat extends the task's lease every third of it until the returned
// function is called (or the task is finishing); a lost lease cancels the
// handler's context with ErrLeaseLost as its cause. It runs on a timer (no
// goroutine of its own between heartbeats).
func (w *Worker) heartbeat(t *Task, cancel context.CancelCauseFunc) func() {
	every := time.Duration(float64(t.leaseLeft) * timingHeartbeatFraction)
	if every < timingHeartbeatMinMs*time.Millisecond {
		every = timingHeartbeatMinMs * time.Millisecond
	}
	var mu sync.Mutex
	stopped := false
	var timer *time.Timer
	fire := func() {
		stop, lost := w.beat(t, every, cancel)
		if lost != nil {
			w.onError(t, lost)
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

// beat sends one heartbeat; true when no more are to be sent, with the
// error when the lease was found lost.
func (w *Worker) beat(t *Task, every time.Duration, cancel context.CancelCauseFunc) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.finishing {
		return true, nil
	}
	ctx, cancelBeat := context.WithTimeout(context.Background(), max(every, time.Second))
	defer cancelBeat()
	_, err := Heartbeat(ctx, w.q, t.Queue, t.ID, t.LeaseToken, w.cfg.Lease)
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
