// LISTEN users' notifications without serialised commits (SPEC 9.1).
//
// A transaction that NOTIFYs takes, at commit, one lock of the whole server
// and holds it across its commit record's flush: every such commit waits for
// the one before it, and group commit is lost. So enqueue, a schedule's tick,
// a parent's completion and the other calls that add work send no NOTIFY of
// their own (concurrency.notify = 'background', the default): their commit
// marks the queue in shared memory (queue/time/wait.cpp, note_listeners), and the
// database's notifier, a background worker connected to that database,
// notifies the channel concurrency_<queue> of each marked queue in a short
// transaction of its own (synchronous_commit off), at most once per
// concurrency.notify_interval per queue. The host's notifier launcher (a
// tenant of bgworker/host.hpp) starts a database's notifier when work is
// marked there and none runs; a notifier with nothing to do for two
// seconds exits (so a quiet database has no session of the module's, and
// DROP DATABASE, which waits up to 5 s for sessions to leave, succeeds).
//
// 'commit' keeps 0.3.0's behaviour (a NOTIFY in the committing transaction,
// with its cost); 'off' sends none. Without the preload there is no shared
// memory and no notifier: 'background' notifies at commit, as 'commit' does.
// Waiting dequeue calls are woken through shared memory in every mode.
// Internal to src/queue.
#pragma once

#include "pg/postgres.hpp"

namespace concurrency::queue {

enum class NotifyMode : int { background, commit, off };

extern int notify_mode; // concurrency.notify, a NotifyMode

// From _PG_init: the settings; when preloading, the shared memory and the
// launcher's place among the background host's tenants.
void notifier_init();

// Whether notifiers can be asked (the module is preloaded).
bool notifier_available();

// From a commit callback: work was marked for LISTEN users in `database`
// (`all`: every queue there): its notifier is woken, or the launcher asked
// to start one. Raises no error, allocates nothing.
void notifier_wanted(Oid database, bool all) noexcept;

} // namespace concurrency::queue
