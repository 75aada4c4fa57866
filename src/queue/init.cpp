// Backend start-up for the task-queue capability.
#include "queue/permissions.hpp"

namespace concurrency {

void queue_init() { queue::permissions_init(); }

} // namespace concurrency
