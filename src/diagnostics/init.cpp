// Backend start-up for the lock-diagnostics capability.
#include "pg/postgres.hpp"

namespace concurrency {

void diagnostics_init() {}

} // namespace concurrency
