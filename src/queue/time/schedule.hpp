// Schedules (src/sql/22_queue_time.sql): the due times of a queue's
// schedules become tasks when dequeue looks at the queue. Internal to
// src/queue.
#pragma once

#include <optional>

#include "queue/queue.hpp"

namespace concurrency::queue {

// Enqueues one task per due time, up to `now`, of `q`'s schedules (at most
// each schedule's catch_up latest ones) in the calling transaction, and
// advances the schedules past them. Called by dequeue at the start of each
// look, as the queue's owner; costs a hash lookup while nothing is due.
void materialize_due(Queue &q, TimestampTz now);

// The earliest next due time of `q`'s schedules, or nothing: a waiting
// dequeue sleeps no longer than that.
std::optional<TimestampTz> next_schedule_time(Queue &q);

// Registers the invalidation callback of the due-time cache (from _PG_init).
void schedule_init();

} // namespace concurrency::queue
