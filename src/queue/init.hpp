// Backend start-up of the task-queue capability, called once from _PG_init.
#pragma once

namespace concurrency::queue {

// Registers the invalidation callbacks of the per-backend queue cache
// (see QueueInfo in queue/queue.hpp) and of the permission caches
// (queue/permissions.hpp), defines the queue's settings
// (concurrency.direct_claim, queue/claim.hpp), and sets up what
// dequeue(…, wait) needs: its setting, shared memory when preloading, its
// commit callback (queue/wait.hpp).
void init();

} // namespace concurrency::queue
