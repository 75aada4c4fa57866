// Backend start-up for the task-queue capability.
#include "queue/queue.hpp"

namespace concurrency {

void queue_init() { queue::register_invalidation(); }

} // namespace concurrency
