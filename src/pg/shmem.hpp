// Shared memory of a preloaded module, for each capability that keeps some:
// its request (RequestAddinShmemSpace, named LWLock tranches) and its start
// (ShmemInitStruct under AddinShmemInitLock), chained into the server's
// hooks once for all of them.
#pragma once

namespace concurrency::pg {

// Call from _PG_init while shared_preload_libraries is being processed:
// `request` runs in the shared memory request hook, `start` in the shared
// memory start-up hook (in the postmaster, and in each backend where the
// server re-attaches), in the order the capabilities were added.
void add_shared_memory(void (*request)(), void (*start)());

} // namespace concurrency::pg
