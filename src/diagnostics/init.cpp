// Backend start-up for the lock-diagnostics capability: the lock-wait
// history's settings, and when preloaded its shared memory and sampler.
#include "diagnostics/history_shared.hpp"

namespace concurrency {

void diagnostics_init() { diagnostics::history_init(); }

} // namespace concurrency
