// Types of concurrency-ext (index.js).
import type { EventEmitter } from 'node:events';

// node-postgres's Pool and Client as far as they are used here (pg ships no
// types of its own; @types/pg's Pool and PoolClient fit these).
export interface PoolClient {
  query(text: string, values?: unknown[]): Promise<{ rows: any[]; rowCount: number | null }>;
  release(err?: Error | boolean): void;
}
export interface Pool {
  query(text: string, values?: unknown[]): Promise<{ rows: any[]; rowCount: number | null }>;
  connect(): Promise<PoolClient>;
  options?: { max?: number };
}

/** A JSON value: what a task's payload and result may be. */
export type Json = string | number | boolean | null | Json[] | { [key: string]: Json };

/** A claimed task, as the handler gets it. Ids and tokens are bigint, given as strings. */
export interface Task<P = Json> {
  id: string;
  queue: string;
  leaseToken: string;
  /** 1 on the first claim, counting every claim of this task */
  attempt: number;
  /** the payload as enqueued, without the key "_trace" (the producer's trace context: see the README's "Tracing") */
  payload: P;
  /** parsed when first read, as node-postgres parses a timestamptz */
  readonly enqueuedAt: Date;
  /** as the claim set it (a heartbeat does not change it); parsed when first read */
  readonly leaseExpiresAt: Date;
  /** aborted when the lease is lost (its reason the LeaseLostError) or the worker stopped past its deadline */
  signal: AbortSignal;
  /** extends the lease now, with progress where the server keeps it */
  heartbeat(progress?: Json): Promise<void>;
  /** the results of the task's parents (enqueue's after, enqueueGraph), read in the handler's transaction */
  parentResults(): Promise<ParentResult[]>;

  // Durable workflows (handlers of one task: batch 1). The handler runs again from its start after a
  // sleep, a wait, a crash or a retry; what its steps returned is kept with the task.

  /** `${queue}:${id}:${name}`: the same in every run, for an outside service's idempotency key */
  stepKey(name: string): string;
  /** the result the step returned in an earlier run of the task, or fn's, recorded now (as JSON: undefined
   * becomes null, a Date its ISO string). fn runs at least once: a crash before the record runs it again */
  step<R>(name: string, fn: () => Promise<R> | R, options?: { transaction?: false }): Promise<StepResult<R>>;
  /** fn runs in a transaction of its own on a pool connection, which records the step before it commits:
   * its writes through the client happen exactly once */
  step<R>(name: string, fn: (client: PoolClient) => Promise<R> | R, options: { transaction: true }): Promise<StepResult<R>>;
  /** a durable sleep of ms milliseconds (or a PostgreSQL interval): the task leaves the worker (the handler is
   * unwound with TaskSuspended) and runs again once it has passed; in that run this sleep returns at once */
  sleep(ms: number | string): Promise<void>;
  /** the event's payload (emitted before the call, or later), or null once timeout (ms or an interval; none:
   * no limit) has passed without it. While it waits, the task leaves the worker as a sleep does */
  waitForEvent<E = Json>(event: string, timeout?: number | string | null): Promise<E | null>;
}

/** what a step returns: the JSON form of fn's value */
export type StepResult<R> = R extends undefined | void ? null : R;

/** Anything with node-postgres's query(): a Pool, or a Client inside the producer's transaction. */
export type Queryable = Pick<Pool, 'query'>;

export interface WorkerOptionsBase {
  pool: Pool;
  queue: string;
  /** handlers running at once (each holds a pool connection; the pool needs one more for heartbeats); default 1 */
  concurrency?: number;
  /** the lease per claim: milliseconds or a PostgreSQL interval; default the queue's */
  lease?: number | string;
  /** the longest a claim waits on the server for work, ms (with the waiting dequeue; stop() cancels the wait); 0 polls instead; default 10000. Less than the connections' statement_timeout, where they have one (read at start()) */
  wait?: number;
  /** polling (a server without the waiting dequeue): the longest sleep after empty claims, ms; default 1000 */
  pollInterval?: number;
  /** heartbeat every third of the lease; default true */
  heartbeat?: boolean;
  /** the worker name recorded with the claims */
  name?: string;
  /** SIGTERM and SIGINT stop the worker, then the process exits 0; default false */
  handleSignals?: boolean;
  /** how long stop() (and the signal handlers) wait for running handlers, ms; default 30000 */
  shutdownTimeout?: number;
}

export interface SingleWorkerOptions<P = Json> extends WorkerOptionsBase {
  batch?: 1;
  /** runs in a transaction that ends with complete; what it returns is the task's result */
  handler: (task: Task<P>, client: PoolClient) => Promise<Json | void> | Json | void;
}

export interface BatchWorkerOptions<P = Json> extends WorkerOptionsBase {
  /** tasks per claim (> 1): the handler gets them together, and complete_batch finishes them */
  batch: number;
  handler: (tasks: Task<P>[], client: PoolClient) => Promise<unknown> | unknown;
}

export type WorkerOptions<P = Json> = SingleWorkerOptions<P> | BatchWorkerOptions<P>;

export interface ServerFeatures {
  wait: boolean;
  release: boolean;
  releaseBatch: boolean;
  progress: boolean;
  completeBatch: boolean;
}

export declare class Worker<P = Json> extends EventEmitter {
  constructor(options: WorkerOptions<P>);
  readonly queue: string;
  features: ServerFeatures | null;
  /** reads what the server offers and starts claiming */
  start(): Promise<this>;
  /** stops claiming, cancels claims waiting for work, waits for running handlers up to timeout ms; resolves with how many were still running */
  stop(options?: { timeout?: number }): Promise<number>;
  on(event: 'completed', listener: (task: Task<P>, result: unknown) => void): this;
  on(event: 'failed', listener: (task: Task<P>, error: unknown) => void): this;
  on(event: 'leaseLost', listener: (task: Task<P>, error: LeaseLostError) => void): this;
  on(event: 'released', listener: (task: Task<P>) => void): this;
  /** the task left the worker by task.sleep (until: when it runs again) or task.waitForEvent (event) */
  on(event: 'suspended', listener: (task: Task<P>, reason: SuspendReason) => void): this;
  on(event: 'error', listener: (error: Error) => void): this;
}

export interface EnqueueOptions {
  runAt?: Date | string;
  priority?: number;
  dedupeKey?: string;
  concurrencyKey?: string;
  /** with a dedupeKey whose task exists: 'ignore' (default) returns it as it is; 'replace' gives it this payload,
   * runAt and priority if it has not started (debounce) */
  onConflict?: 'ignore' | 'replace';
  /** ids of tasks of the same queue that must be done first: the task waits (state 'waiting') until then
   * (concurrency_ext 0.3.0; not sent when left out) */
  after?: (string | number | bigint)[];
}

export interface EnqueueBatchOptions {
  runAt?: Date | string;
  priority?: number;
  dedupeKeys?: (string | null)[];
  concurrencyKeys?: (string | null)[];
}

/** a parent in a graph task's after: a ref of the graph (a string), or an existing task (an id of the task's
 * own queue as a number or bigint, or { id } / { queue, id }) */
export type GraphParent = string | number | bigint | { queue?: string; id: string | number | bigint };

/** one task of enqueueGraph */
export interface GraphTask {
  /** the name that other tasks of the graph give in after; returned with the task's id */
  ref?: string;
  payload?: Json;
  /** the tasks that must be done before this one runs */
  after?: GraphParent[];
  /** default: enqueueGraph's queue */
  queue?: string;
  runAt?: Date | string;
  priority?: number;
  concurrencyKey?: string;
}

/** the result of a parent that is done */
export interface ParentResult {
  taskId: string;
  parentQueue: string;
  result: Json;
}

/** adds a task; resolves with its id. Where a span is active (@opentelemetry/api), a plain-object payload
 * carries its trace context under "_trace" (see the README's "Tracing"); so do enqueueBatch's and enqueueGraph's */
export declare function enqueue(db: Queryable, queue: string, payload?: Json, options?: EnqueueOptions): Promise<string>;
/** adds one task per payload in one statement; resolves with their ids in payload order */
export declare function enqueueBatch(db: Queryable, queue: string, payloads: Json[], options?: EnqueueBatchOptions): Promise<string[]>;
/** adds the tasks all or nothing, each waiting for its after; resolves with each task's ref (null without one)
 * and id, in the order of tasks */
export declare function enqueueGraph(db: Queryable, queue: string, tasks: GraphTask[]): Promise<{ ref: string | null; taskId: string }[]>;
/** the results of the task's parents that are done, ordered by queue and id (permission work on queue) */
export interface ScheduleOptions<P = Json> {
  /** five fields (minute hour day-of-month month day-of-week) or @hourly, @daily, @weekly, @monthly, @yearly; exactly one of cron and every */
  cron?: string;
  /** milliseconds (a number) or a PostgreSQL interval (a string), at least one second */
  every?: number | string;
  /** merged with {"scheduled_for": due time}; default {} */
  payload?: P;
  /** the zone cron is read in; default 'UTC' */
  timeZone?: string;
  priority?: number;
  concurrencyKey?: string;
  /** at most this many missed due times are enqueued after downtime; default 1 */
  catchUp?: number;
}

/** Enqueues a task into the queue at each due time; the same settings again are a no-op, others replace the schedule. */
export declare function schedule<P = Json>(db: Queryable, name: string, queue: string, options: ScheduleOptions<P>): Promise<void>;

/** Removes the schedule (its tasks already enqueued stay); false if there was none. */
export declare function unschedule(db: Queryable, name: string): Promise<boolean>;

export declare function parentResults(db: Queryable, queue: string, taskId: string | number | bigint): Promise<ParentResult[]>;

/** why a task left its worker */
export type SuspendReason = { until: Date; event?: undefined } | { event: string; until?: undefined };

/** how a task ended */
export interface TaskEnd<R = Json> {
  state: 'done' | 'dead' | 'cancelled';
  /** what the handler returned (done), else null */
  result: R | null;
  /** the last failure's message (dead; cancelled after a failure), else null */
  lastError: string | null;
}

/** resolves as soon as the task is done, dead or cancelled; null when there is no such task (or it completed
 * without a result on a queue that keeps nothing, before the call saw it); rejects with AwaitTimeoutError
 * after timeout ms (none: no limit). Needs permission read on the queue */
export declare function awaitTask<R = Json>(db: Queryable, queue: string, id: string | number | bigint, options?: { timeout?: number }): Promise<TaskEnd<R> | null>;
/** emits the event: the tasks waiting for it run again, and later waits take it (for concurrency.event_retention);
 * resolves with how many waiting tasks it woke. Needs EXECUTE on concurrency.emit_event */
export declare function emitEvent(db: Queryable, event: string, payload?: Json): Promise<number>;

/** awaitTask's timeout passed; state is the task's state then */
export declare class AwaitTimeoutError extends Error {
  state: string;
}

/** unwinds a handler whose task left the worker (task.sleep, task.waitForEvent): rethrow it where you catch errors */
export declare class TaskSuspended extends Error {
  reason: SuspendReason;
}
export declare function serverFeatures(db: Queryable): Promise<ServerFeatures>;

/** an error of the server, with its SQLSTATE */
export declare class QueueError extends Error {
  code: string;
  detail?: string;
  hint?: string;
  cause?: unknown;
}

/** SQLSTATE CE001: the lease is no longer this worker's; reason is the server's DETAIL */
export declare class LeaseLostError extends QueueError {
  code: 'CE001';
  reason?: string;
}

export declare const LEASE_LOST: 'CE001';
