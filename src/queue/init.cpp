// Backend start-up of the task-queue capability.
#include "queue/init.hpp"
#include "queue/queue.hpp"

namespace concurrency::queue {

void init() { register_invalidation(); }

} // namespace concurrency::queue
