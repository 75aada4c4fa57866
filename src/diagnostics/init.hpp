// Backend start-up of the lock-diagnostics capability, called once from _PG_init.
#pragma once

namespace concurrency::diagnostics {

// Defines the lock-wait history's settings; when the module is preloaded
// (shared_preload_libraries), also requests its shared memory and registers
// its sampler (see history_shared.hpp).
void init();

} // namespace concurrency::diagnostics
