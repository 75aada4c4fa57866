// Backend start-up of the named-locks capability, called once from _PG_init.
#pragma once

namespace concurrency::locks {

// Registers the relcache callback that keeps the name cache true and the
// transaction callbacks that keep the hold counts of concurrency.my_locks true.
void init();

} // namespace concurrency::locks
