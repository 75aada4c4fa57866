// A program written against index.d.ts, type-checked by `tsc --noEmit -p
// test/types` (test/types.test.js): every export used as the README shows.
import {
  Worker,
  enqueue,
  enqueueBatch,
  enqueueGraph,
  schedule,
  unschedule,
  parentResults,
  awaitTask,
  emitEvent,
  serverFeatures,
  QueueError,
  LeaseLostError,
  AwaitTimeoutError,
  TaskSuspended,
  LEASE_LOST,
  type Pool,
  type Task,
  type Json,
  type TaskEnd,
} from '../..';

declare const pool: Pool;

type Email = { to: string; attempts?: number };

async function producer(): Promise<void> {
  const id: string = await enqueue(pool, 'emails', { to: 'bo@example.org' }, { priority: 5, dedupeKey: 'bo', onConflict: 'replace' });
  const ids: string[] = await enqueueBatch(pool, 'emails', [{ to: 'a' }, ['an', 'array'], 'a string', 42, null]);
  const graph = await enqueueGraph(pool, 'imports', [{ ref: 'a', payload: { n: 1 } }, { ref: 'b', after: ['a', BigInt(ids[0])] }]);
  const ref: string | null = graph[0].ref;
  await schedule(pool, 'nightly', 'reports', { cron: '0 3 * * *', timeZone: 'Europe/Paris', payload: { kind: 'daily' } });
  const removed: boolean = await unschedule(pool, 'nightly');
  const parents = await parentResults(pool, 'imports', id);
  const woken: number = await emitEvent(pool, 'approved:42', { by: 'ann' });
  try {
    const end: TaskEnd<{ sent: boolean }> | null = await awaitTask<{ sent: boolean }>(pool, 'emails', id, { timeout: 1000 });
    if (end && end.state === 'done' && end.result) console.log(end.result.sent);
  } catch (err) {
    if (err instanceof AwaitTimeoutError) console.log(err.state);
  }
  const features = await serverFeatures(pool);
  console.log(ref, removed, parents[0]?.parentQueue, woken, features.wait && features.releaseBatch);
}

const one = new Worker<Email>({
  pool,
  queue: 'emails',
  concurrency: 4,
  lease: '30 seconds',
  async handler(task: Task<Email>, client) {
    await client.query('INSERT INTO sent (address) VALUES ($1)', [task.payload.to]);
    const looked: { found: boolean } = await task.step('lookup', async () => ({ found: true }));
    await task.step('write', async (c) => c.query('SELECT 1'), { transaction: true });
    await task.sleep(1000);
    const approval = await task.waitForEvent<{ by: string }>(`approved:${task.id}`, '1 day');
    task.signal.addEventListener('abort', () => undefined);
    await task.heartbeat({ done: 1 });
    const key: string = task.stepKey('charge');
    const at: Date = task.enqueuedAt;
    return { sent: looked.found, by: approval?.by ?? null, key, at: at.toISOString(), attempt: task.attempt };
  },
});
one.on('completed', (task, result) => console.log(task.id, result));
one.on('leaseLost', (task, err: LeaseLostError) => console.log(task.id, err.code === LEASE_LOST, err.reason));
one.on('suspended', (task, reason) => console.log(reason.until ?? reason.event));
one.on('error', (err) => {
  if (err instanceof QueueError) console.log(err.code, err.detail);
  if (err instanceof TaskSuspended) console.log(err.reason);
});

const batch = new Worker({
  pool,
  queue: 'thumbnails',
  batch: 10,
  handler: async (tasks: Task<Json>[]) => tasks.length,
});

async function main(): Promise<void> {
  await producer();
  await one.start();
  await batch.start();
  const running: number = await one.stop({ timeout: 5000 });
  console.log(running, await batch.stop());
}
void main();
