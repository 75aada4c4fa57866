// Durable workflows: the settings (from _PG_init). Internal to src/queue.
#pragma once

namespace concurrency::queue {

// concurrency.event_retention (seconds): how long an emitted event is kept
// for later awaits.
extern int event_retention_s;
void workflows_init();

} // namespace concurrency::queue
