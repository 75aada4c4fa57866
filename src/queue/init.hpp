// Backend start-up of the task-queue capability, called once from _PG_init.
#pragma once

namespace concurrency::queue {

// Registers the relcache callback that keeps the permission caches true.
void init();

} // namespace concurrency::queue
