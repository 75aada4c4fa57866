// Backend start-up for the named-locks capability.
#include "pg/postgres.hpp"

namespace concurrency {

void locks_init() {}

} // namespace concurrency
