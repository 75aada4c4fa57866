// Backend start-up of the Citus awareness, called once from _PG_init.
#pragma once

namespace concurrency::citus {

// Registers the relcache callback that drops the cached node role when
// Citus changes pg_dist_local_group (citus/node.hpp).
void init();

} // namespace concurrency::citus
