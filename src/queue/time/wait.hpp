// dequeue(…, wait): sleeping until a task may be claimable, woken through
// shared memory when a producer's transaction commits, or when a transaction
// (or subtransaction) that claimed tasks rolls back. Internal to src/queue.
//
// Each queue (of a database) that has had a waiter owns a condition variable
// in shared memory. A transaction that makes tasks claimable (enqueue,
// release, retry, a key admitting its next task, a lease slot freed) notes
// how many per queue; when it commits, the transaction callback signals that
// many waiters of each queue (never more than are waiting: no thundering
// herd). A waiter joins the condition variable's wait list before its first
// look at the queue and stays on it between looks, so a commit between its
// last look and its sleep still wakes it (no lost wake-up). Without
// shared_preload_libraries there is no shared memory for this: waiters poll
// every concurrency.wait_poll_interval instead.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pg/postgres.hpp"

extern "C" {
#include "storage/condition_variable.h"
#include "utils/timestamp.h"
}

namespace concurrency::queue {

// How often a waiter looks again where commits cannot wake it (the module
// not preloaded, or every queue slot in shared memory taken).
extern int wait_poll_interval_ms;

// From _PG_init: the setting, the shared memory (when preloading) and the
// transaction callback that wakes waiters at commit.
void wait_init();

// This transaction made `tasks` tasks of `queue` claimable (or may have):
// as many waiters are woken when it commits. Nothing happens if it aborts.
void note_claimable(std::string_view queue, uint64_t tasks);

// This (sub)transaction claimed `tasks` tasks of `queue`: if it rolls back,
// they are ready again, and as many waiters are woken once its locks are
// released (a rollback to a savepoint included). Nothing happens at commit.
// Backend-local: no shared memory is touched until a rollback.
void note_claimed(std::string_view queue, uint64_t tasks);

// This transaction added work to `queue` that LISTEN users are told of: when
// it commits, the queue is marked in shared memory and its database's
// notifier (queue/notifier.hpp) is asked to notify the queue's channel. No
// NOTIFY is sent by this transaction. False (nothing noted) where there is
// no shared memory for it: the module is not preloaded.
bool note_listeners(std::string_view queue);

// Tells LISTEN users of concurrency_<queue> after commit, as
// concurrency.notify says (notifier.hpp: by default the database's notifier
// through note_listeners, with no NOTIFY in this transaction). Nothing in a
// call that another Citus node routed here (that node tells them).
void notify_listeners(std::string_view queue);

// New work in `queue`: wakes `tasks` waiters of dequeue(…, wait) at commit
// (note_claimable) and tells LISTEN users (notify_listeners).
void notify(std::string_view queue, uint64_t tasks = 1);

// This transaction ended tasks of `queue` (done, dead, cancelled): when it
// commits, the await_task callers waiting on the queue are woken.
void note_ended(std::string_view queue);

// For a notifier: the queues of `database` marked since the last call, with
// their marks cleared; `all` is set when a transaction marked more queues
// than it could note (every queue of the database is to be notified).
void take_marked_queues(Oid database, std::vector<std::string> &queues);

// One dequeue call's wait on a queue. Create it before the call's first look
// at the queue; between looks, sleep(). The destructor leaves the wait list,
// passing on a wake-up that this call took but no longer needs.
class QueueWait {
  public:
	explicit QueueWait(std::string_view queue);
	~QueueWait();
	QueueWait(const QueueWait &) = delete;
	QueueWait &operator=(const QueueWait &) = delete;

	// Sleeps until a commit wakes this waiter, `until` comes, or an
	// interrupt arrives (statement_timeout, pg_cancel_backend, shutdown:
	// raised as the PostgreSQL error it is). Returns true when `until` came
	// and no commit woke this waiter (where commits wake it; polling: false).
	bool sleep(TimestampTz now, TimestampTz until);
	// Whether commits wake this waiter (false: it polls).
	bool woken_by_commits() const { return cv_ != nullptr; }

  private:
	ConditionVariable *cv_ = nullptr;
};

// One await_task call's wait for a task of a queue to end. Create it before
// the call's first look at the task; between looks, sleep(). Without the
// preload (or with every queue slot taken) it polls every
// concurrency.wait_poll_interval.
class TaskEndWait {
  public:
	explicit TaskEndWait(std::string_view queue);
	~TaskEndWait();
	TaskEndWait(const TaskEndWait &) = delete;
	TaskEndWait &operator=(const TaskEndWait &) = delete;

	// Sleeps until a commit that ended tasks of the queue, `until`, or an
	// interrupt (raised as the PostgreSQL error it is).
	void sleep(TimestampTz now, TimestampTz until);
	bool woken_by_commits() const { return entry_ != nullptr; }

  private:
	void *entry_ = nullptr;
};

} // namespace concurrency::queue
