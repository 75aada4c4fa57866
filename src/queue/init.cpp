// Backend start-up for the task-queue capability.
#include "pg/postgres.hpp"

namespace concurrency {

void queue_init() {}

} // namespace concurrency
