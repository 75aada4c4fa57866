-- ---------------------------------------------------------------------------
-- Task queue 0.2.0 -> 0.3.0, before 24_queue_wait.sql defines dequeue,
-- heartbeat, heartbeat_batch and task_status anew (with wait and progress),
-- and 24_queue_enqueue.sql enqueue (with on_conflict, after) and enqueue_batch
-- (with after):
-- their 0.2.0 definitions step aside under other names, so that the new ones
-- can be created (task_status keeps its argument types but returns one more
-- column, which CREATE OR REPLACE cannot do). 25_queue_wait_grants.sql gives
-- their privileges to the new ones and drops them.
-- ---------------------------------------------------------------------------

ALTER FUNCTION concurrency.dequeue(text, integer, interval, text) RENAME TO dequeue_0_2_0;
ALTER FUNCTION concurrency.heartbeat(text, bigint, bigint, interval) RENAME TO heartbeat_0_2_0;
ALTER FUNCTION concurrency.heartbeat_batch(text, bigint[], bigint[], interval) RENAME TO heartbeat_batch_0_2_0;
ALTER FUNCTION concurrency.task_status(text, bigint) RENAME TO task_status_0_2_0;
ALTER FUNCTION concurrency.enqueue(text, jsonb, timestamptz, integer, text, text) RENAME TO enqueue_0_2_0;
ALTER FUNCTION concurrency.enqueue_batch(text, jsonb[], timestamptz, integer, text[], text[]) RENAME TO enqueue_batch_0_2_0;
