// Backend start-up for the task-queue capability.
#include "queue/init.hpp"
#include "queue/permissions.hpp"

namespace concurrency::queue {

void init() { permissions_init(); }

} // namespace concurrency::queue
