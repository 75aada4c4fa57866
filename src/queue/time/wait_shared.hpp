// What the two sides of dequeue(…, wait) share, internal to src/queue/time:
// the table of waited-on queues in shared memory (wait.cpp, which counts
// the wake-ups per transaction and sends them at commit or rollback,
// defines it) and the waiters that sleep on its entries (waiters.cpp).
#pragma once

#include "queue/shared_queues.hpp"

extern "C" {
#include "postgres.h"

#include "port/atomics.h"
#include "storage/condition_variable.h"
}

namespace concurrency::queue::wait_shared {

// Queues (of all databases) whose waiters commits can wake; a waiter on a
// queue beyond these polls. An entry is never removed (about 100 bytes).
struct WaitEntry {
	SharedQueueKey key; // hash key: must come first
	ConditionVariable cv;
	pg_atomic_uint32 marked; // committed work LISTEN users have not been told of
	// await_task: callers waiting for a task of the queue to end, and their
	// condition variable (broadcast when a transaction that ended tasks of
	// the queue commits)
	ConditionVariable ended_cv;
	pg_atomic_uint32 awaiters;
};

// Initialises an entry that find_or_enter has just made.
void init_entry(void *made);

// How many await_task calls wait on this server (every database): while
// none does, a commit that ended tasks looks nothing up.
struct AwaitCount {
	pg_atomic_uint32 awaiters;
};
extern AwaitCount *await_count; // null: not preloaded

// No table (not preloaded): waiters poll. Its lock guards the table, not the
// entries' condition variables.
extern SharedQueues wait_queues;

// This backend's number in the condition variables' wait lists.
int my_procno();

} // namespace concurrency::queue::wait_shared
