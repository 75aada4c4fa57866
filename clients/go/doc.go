// Package concurrency is the Go runtime of concurrency_ext, a PostgreSQL
// extension whose task queue lives in the database (schema concurrency).
//
// It has five parts:
//
//   - a producer API: [Enqueue], [EnqueueBatch] and [EnqueueGraph] run on any [Querier] (a
//     *pgxpool.Pool, a *pgx.Conn or a pgx.Tx), so that a task enqueued inside
//     the caller's transaction commits or rolls back with the caller's own
//     writes; [Client] wraps a pool for the common case;
//   - a [Worker] that runs handlers per queue: it claims tasks with the
//     waiting concurrency.dequeue (one statement, no LISTEN), heartbeats
//     every third of the lease, completes a task in its handler's
//     transaction ([Worker.HandleTx]: exactly-once effects) or many at once
//     ([Worker.HandleBatch]: up to N tasks a claim, one transaction ending
//     with complete_batch), fails them with the handler's error (or a
//     recovered panic), and on shutdown hands claimed but unstarted tasks
//     back with concurrency.release;
//   - durable workflows: [Step] and [StepTx] (steps whose results are kept
//     with the task, the database ones exactly once), [Task.Sleep] and
//     [Task.WaitForEvent] (the task is handed back to the server until it
//     is due: the handler returns [ErrSuspended]), and on the producing
//     side [EmitEvent] and [AwaitTask];
//   - [RunInTx], a transaction helper that retries serialization failures
//     (40001) and deadlocks (40P01) with jittered exponential backoff;
//   - OpenTelemetry tracing through the global tracer provider and
//     propagator: the producer calls store the trace context of their span in
//     the payload under [TracePayloadKey], and the worker runs each handler
//     in a span that continues it (spans of tracer [TracerName]; no-op until
//     a program installs an SDK). See the README's "Tracing".
//
// Every error a server call returns is an [*Error] carrying the SQLSTATE;
// SQLSTATE CE001 (the caller's lease on a task was lost) matches
// [ErrLeaseLost] with errors.Is. The statements are those of
// clients/python and clients/node; see docs/queue.md in the repository for
// what each SQL function does.
package concurrency
