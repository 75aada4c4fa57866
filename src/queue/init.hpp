// Backend start-up of the task-queue capability, called once from _PG_init.
#pragma once

namespace concurrency::queue {

// Registers the relcache callback that makes a backend reload a queue's
// settings after alter_queue (see QueueInfo in queue/queue.hpp).
void init();

} // namespace concurrency::queue
