// Backend start-up for the task-queue capability: the invalidation callbacks
// of the per-backend queue cache.
#include "queue/queue.hpp"

namespace concurrency {

void queue_init() { queue::cache_init(); }

} // namespace concurrency
