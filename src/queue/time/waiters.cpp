// dequeue(…, wait) and await_task, the waiting side: on the queue's wait
// list before the first look, asleep between looks until a commit (or a
// rolled-back claim) signals it or its time is up; polling where the module
// is not preloaded (wait.cpp sends the wake-ups).
#include <algorithm>

#include "pg/guard.hpp"
#include "queue/time/wait.hpp"
#include "queue/time/wait_shared.hpp"

extern "C" {
#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/proclist.h"
#include "storage/spin.h"
#include "utils/wait_event.h"
}

namespace concurrency::queue {

using namespace wait_shared;

QueueWait::QueueWait(std::string_view queue) {
	if (!wait_queues.exists())
		return;
	SharedQueueKey key = shared_queue_key(queue);
	cv_ = pg::guard([&] {
		auto *entry = static_cast<WaitEntry *>(wait_queues.find_or_enter(key, init_entry));
		if (!entry)
			return static_cast<ConditionVariable *>(nullptr); // every slot taken: poll
		// on the list before the first look: a commit from now on wakes us
		ConditionVariablePrepareToSleep(&entry->cv);
		return &entry->cv;
	});
}

QueueWait::~QueueWait() {
	if (!cv_)
		return;
	// Off the list since the last wake-up means a commit signalled this
	// waiter after it looked: pass the signal on, in case that task is still
	// there for another waiter (at worst a waiter looks once for nothing).
	SpinLockAcquire(&cv_->mutex);
	bool signalled = !proclist_contains(&cv_->wakeup, my_procno(), cvWaitLink);
	SpinLockRelease(&cv_->mutex);
	ConditionVariableCancelSleep();
	if (signalled)
		ConditionVariableSignal(cv_);
}

namespace {

// A waiter that commits cannot wake sleeps `ms` (or until an interrupt).
void poll_sleep(long ms) {
	pg::guard([&] {
		CHECK_FOR_INTERRUPTS();
		(void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	});
}

} // namespace

TaskEndWait::TaskEndWait(std::string_view queue) {
	if (!wait_queues.exists() || !await_count)
		return;
	SharedQueueKey key = shared_queue_key(queue);
	pg::guard([&] {
		entry_ = wait_queues.find_or_enter(key, init_entry);
		if (!entry_)
			return; // every slot taken: poll
		auto *entry = static_cast<WaitEntry *>(entry_);
		// counted and on the list before the first look: a commit from now
		// on wakes us
		pg_atomic_fetch_add_u32(&entry->awaiters, 1);
		pg_atomic_fetch_add_u32(&await_count->awaiters, 1);
		ConditionVariablePrepareToSleep(&entry->ended_cv);
	});
}

TaskEndWait::~TaskEndWait() {
	if (!entry_)
		return;
	auto *entry = static_cast<WaitEntry *>(entry_);
	ConditionVariableCancelSleep();
	pg_atomic_fetch_sub_u32(&entry->awaiters, 1);
	pg_atomic_fetch_sub_u32(&await_count->awaiters, 1);
}

void TaskEndWait::sleep(TimestampTz now, TimestampTz until) {
	int64 left_ms = (until - now + 999) / 1000;
	long ms = static_cast<long>(std::clamp<int64>(left_ms, 1, 3600 * 1000));
	if (entry_) {
		auto *entry = static_cast<WaitEntry *>(entry_);
		(void)pg::guard([&] { return ConditionVariableTimedSleep(&entry->ended_cv, ms, PG_WAIT_EXTENSION); });
		return;
	}
	poll_sleep(std::min<long>(ms, wait_poll_interval_ms));
}

bool QueueWait::sleep(TimestampTz now, TimestampTz until) {
	// at least 1 ms, at most an hour per sleep (the caller loops)
	int64 left_ms = (until - now + 999) / 1000;
	long ms = static_cast<long>(std::clamp<int64>(left_ms, 1, 3600 * 1000));
	if (cv_) {
		bool timed_out = pg::guard([&] { return ConditionVariableTimedSleep(cv_, ms, PG_WAIT_EXTENSION); });
		return timed_out && left_ms <= 3600 * 1000;
	}
	poll_sleep(std::min<long>(ms, wait_poll_interval_ms));
	return false;
}

} // namespace concurrency::queue
