// The purge that the queue calls do on the side (dequeue, complete,
// complete_batch), defined in inspect.cpp beside purge(). Internal to
// src/queue.
#pragma once

#include "queue/queue.hpp"

namespace concurrency::queue {

// A chunk of the finished tasks of `q` whose retention has passed
// (Queue::purge), when this backend's last chunk of it was long enough ago or
// came back full (more to do), and of its key_rate_limit slots unused for
// long. `distributed`: `q` is a whole distributed queue, as the calling
// function found out (its one question to the distributed room): a chunk of
// one of its shards (Distribution::distributed_purge_chunk). A local queue or
// a shard is purged here, without asking the distributed room. Runs as the
// queue's owner, like every statement of the queue functions.
void maybe_purge(Queue &q, TimestampTz now, bool distributed);

} // namespace concurrency::queue
