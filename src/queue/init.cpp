// Backend start-up for the task-queue capability.
#include "queue/init.hpp"
#include "queue/queue.hpp"

namespace concurrency::queue {

void init() { cache_init(); }

} // namespace concurrency::queue
