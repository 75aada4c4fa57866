// Backend start-up for the Citus awareness: the invalidation callback behind
// the cached node role.
#include "citus/node.hpp"

namespace concurrency {

void citus_init() { citus::node_init(); }

} // namespace concurrency
