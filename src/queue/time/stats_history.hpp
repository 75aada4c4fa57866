// Queue counts over time (src/sql/22_queue_time.sql): where the
// module is preloaded, the schedule runner of each database
// (schedule_runner.hpp) also samples the counts of its queues, every
// concurrency.stats_history_interval, into concurrency.queue_stats_sample
// (concurrency.queue_stats_sample(retain), which also drops the samples
// older than concurrency.stats_history_retention; stats_history.cpp). A
// runner is started at server start in every database, and when a queue is
// created in a database where none is due (one whose first queue it is, say:
// schedule_runner.hpp, runner_wanted_in_transaction). Internal to src/queue.
#pragma once

#include "pg/postgres.hpp"

extern "C" {
#include "datatype/timestamp.h"
}

namespace concurrency::queue {

// Defines concurrency.stats_history_interval and
// concurrency.stats_history_retention (from _PG_init).
void stats_history_init();

// Whether this database's sampling is on (its interval is not 0).
bool stats_history_enabled();

// In a runner, inside a transaction: takes a sample where this database has
// concurrency.queue_stats_sample (0.4.0 and later) and sampling is on.
// Returns when to sample next (PG_INT64_MAX: never). Throws on errors.
TimestampTz sample_queue_stats(TimestampTz now);

// The next sample after a failed one (PG_INT64_MAX where sampling is off).
TimestampTz next_sample_after_failure(TimestampTz now);

} // namespace concurrency::queue
