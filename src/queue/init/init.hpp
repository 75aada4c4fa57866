// Backend start-up of the task-queue wing, called once from _PG_init. A room
// of its own, above every other room of the wing: it includes them all, and
// none includes it.
#pragma once

namespace concurrency::queue {

// Registers the invalidation callbacks of the per-backend queue cache
// (see QueueInfo in queue/queue.hpp, given the claim without the executor's
// forget_direct, lifecycle/claim_direct.hpp) and of the permission caches
// (queue/permissions.hpp), defines the queue's settings
// (concurrency.direct_claim, lifecycle/claim.hpp), sets up what
// dequeue(…, wait) needs (its setting, shared memory when preloading, its
// commit callback: time/wait.hpp), the notifier, the fair claims' shared
// memory, the schedules and their runner, the graphs and the workflows, and
// last the distributed room, which registers its Distribution
// (queue/distribution.hpp) and permission hooks.
void init();

} // namespace concurrency::queue
