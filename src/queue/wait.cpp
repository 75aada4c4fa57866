// dequeue(…, wait): the waiters' condition variables in shared memory, the
// wake-ups counted per transaction and sent at commit (see queue/wait.hpp).
#include <algorithm>
#include <cstring>

#include "common/names.hpp"
#include "queue/notifier.hpp"
#include "queue/shared_queues.hpp"
#include "queue/wait.hpp"
#include "pg/guard.hpp"
#include "pg/shmem.hpp"

extern "C" {
#include "access/xact.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/proclist.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/resowner.h"
#include "utils/wait_event.h"
}

namespace concurrency::queue {

int wait_poll_interval_ms = 100;

namespace {

// Queues (of all databases) whose waiters commits can wake; a waiter on a
// queue beyond these polls. An entry is never removed (about 100 bytes).
struct WaitEntry {
	SharedQueueKey key; // hash key: must come first
	ConditionVariable cv;
	pg_atomic_uint32 marked; // committed work LISTEN users have not been told of
};

void init_entry(void *made) {
	auto *entry = static_cast<WaitEntry *>(made);
	ConditionVariableInit(&entry->cv);
	pg_atomic_init_u32(&entry->marked, 0);
}

// no table (not preloaded): waiters poll. Its lock guards the table, not
// the entries' condition variables.
SharedQueues wait_queues("concurrency_ext queue waits", 1024, sizeof(WaitEntry));

void request_shared_memory() {
	wait_queues.request();
}

void start_shared_memory() {
	wait_queues.start();
}

// This transaction's wake-ups, per queue; kept in static storage so that the
// commit callback allocates nothing. More queues than that in one
// transaction: every waiter of the database is woken at commit.
constexpr int max_notes = 16;
struct Note {
	SharedQueueKey key;
	uint64_t tasks;
	WaitEntry *listened; // the entry to mark at commit for LISTEN users, or nullptr
};
Note notes[max_notes];
int note_count = 0;
bool notes_overflowed = false;
bool listeners_overflowed = false; // every queue of the database is marked at commit

void forget_notes() {
	note_count = 0;
	notes_overflowed = false;
	listeners_overflowed = false;
}

// The note of `key`, added when missing; nullptr when there is no room.
Note *note_of(const SharedQueueKey &key) {
	for (int i = 0; i < note_count; ++i)
		if (std::memcmp(&notes[i].key, &key, sizeof key) == 0)
			return &notes[i];
	if (note_count == max_notes)
		return nullptr;
	notes[note_count] = Note{key, 0, nullptr};
	return &notes[note_count++];
}

int my_procno() {
#if PG_VERSION_NUM >= 170000
	return MyProcNumber;
#else
	return MyProc->pgprocno;
#endif
}

// Signals up to `n` waiters of `cv`, one each, stopping when none is left
// (a signal to an empty list would be lost anyway, and costs a spinlock).
// The condition variable's list is read directly: ConditionVariableSignal
// does not say whether it woke anyone.
void signal_waiters(ConditionVariable *cv, uint64_t n) {
	for (uint64_t i = 0; i < n; ++i) {
		SpinLockAcquire(&cv->mutex);
		bool empty = proclist_is_empty(&cv->wakeup);
		SpinLockRelease(&cv->mutex);
		if (empty)
			return;
		ConditionVariableSignal(cv);
	}
}

// Called when this transaction has committed (its tasks are visible to every
// new snapshot by then).
void wake_noted() {
	// LISTEN users: a queue's first mark since its notifier last looked asks
	// the notifier to look again (entries are never removed: the pointers
	// taken during the transaction stay valid)
	bool marked = listeners_overflowed;
	for (int i = 0; i < note_count; ++i)
		if (notes[i].listened && pg_atomic_exchange_u32(&notes[i].listened->marked, 1) == 0)
			marked = true;
	if (marked)
		notifier_wanted(MyDatabaseId, listeners_overflowed);
	if (note_count == 0 && !notes_overflowed)
		return;
	LWLockAcquire(wait_queues.lock(), LW_SHARED);
	if (notes_overflowed) {
		HASH_SEQ_STATUS scan;
		hash_seq_init(&scan, wait_queues.table());
		while (auto *entry = static_cast<WaitEntry *>(hash_seq_search(&scan)))
			if (entry->key.database == MyDatabaseId)
				ConditionVariableBroadcast(&entry->cv);
	} else {
		for (int i = 0; i < note_count; ++i) {
			if (notes[i].tasks == 0)
				continue;
			auto *entry =
			    static_cast<WaitEntry *>(hash_search(wait_queues.table(), &notes[i].key, HASH_FIND, nullptr));
			if (entry)
				signal_waiters(&entry->cv, notes[i].tasks);
		}
	}
	LWLockRelease(wait_queues.lock());
}

// The wake-ups of a committed transaction are sent once its invalidation
// messages are (the last phase of releasing its resources, after
// AtEOXact_Inval): a waiter woken by a resume_queue, or by a changed
// schedule, reads the catalog change in the look it wakes up for. (Woken at
// XACT_EVENT_COMMIT, before the invalidations went out, it could still see
// the queue paused, and sleep on.) A PREPARE has dropped its notes by then.
void on_resources_released(ResourceReleasePhase phase, bool is_commit, bool is_top_level, void *) noexcept {
	if (phase != RESOURCE_RELEASE_AFTER_LOCKS || !is_commit || !is_top_level)
		return;
	if (note_count == 0 && !notes_overflowed && !listeners_overflowed)
		return;
	wake_noted();
	forget_notes();
}

void on_transaction_end(XactEvent event, void *) noexcept {
	if (note_count == 0 && !notes_overflowed && !listeners_overflowed)
		return;
	switch (event) {
	case XACT_EVENT_COMMIT: // woken later, on_resources_released
		break;
	case XACT_EVENT_ABORT:
	case XACT_EVENT_PREPARE: // COMMIT PREPARED, from another session, wakes no one
	case XACT_EVENT_PARALLEL_COMMIT:
	case XACT_EVENT_PARALLEL_ABORT:
		forget_notes();
		break;
	default:
		break;
	}
}

bool check_poll_interval(int *value, void **, GucSource) {
	if (*value >= 1)
		return true;
	GUC_check_errdetail("The interval is at least 1 ms.");
	return false;
}

} // namespace

void wait_init() {
	DefineCustomIntVariable(
	    "concurrency.wait_poll_interval",
	    "How often dequeue(…, wait) looks for tasks where commits cannot wake it.",
	    "Commits wake waiters at once when concurrency_ext is in shared_preload_libraries; "
	    "without it, waiters poll at this interval.",
	    &wait_poll_interval_ms, 100, 1, 60 * 1000, PGC_USERSET, GUC_UNIT_MS, check_poll_interval, nullptr,
	    nullptr);
	RegisterXactCallback(on_transaction_end, nullptr);
	RegisterResourceReleaseCallback(on_resources_released, nullptr);
	if (!process_shared_preload_libraries_in_progress)
		return;
	pg::add_shared_memory(request_shared_memory, start_shared_memory);
}

void note_claimable(std::string_view queue, uint64_t tasks) {
	if (!wait_queues.exists() || tasks == 0 || notes_overflowed)
		return;
	Note *note = note_of(shared_queue_key(queue));
	if (note)
		note->tasks += tasks;
	else
		notes_overflowed = true;
}

bool note_listeners(std::string_view queue) {
	if (!wait_queues.exists() || !notifier_available())
		return false;
	if (listeners_overflowed)
		return true;
	SharedQueueKey key = shared_queue_key(queue);
	Note *note = note_of(key);
	if (!note) {
		listeners_overflowed = true;
		return true;
	}
	if (!note->listened) {
		note->listened =
		    pg::guard([&] { return static_cast<WaitEntry *>(wait_queues.find_or_enter(key, init_entry)); });
		if (!note->listened) // every entry taken: every queue of the database
			listeners_overflowed = true;
	}
	return true;
}

void take_marked_queues(Oid database, std::vector<std::string> &queues) {
	if (!wait_queues.exists())
		return;
	pg::guard([&] { LWLockAcquire(wait_queues.lock(), LW_SHARED); });
	HASH_SEQ_STATUS scan;
	hash_seq_init(&scan, wait_queues.table());
	while (auto *entry = static_cast<WaitEntry *>(hash_seq_search(&scan)))
		if (entry->key.database == database && pg_atomic_read_u32(&entry->marked) != 0 &&
		    pg_atomic_exchange_u32(&entry->marked, 0) != 0)
			queues.emplace_back(entry->key.queue);
	LWLockRelease(wait_queues.lock());
}

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

bool QueueWait::sleep(TimestampTz now, TimestampTz until) {
	// at least 1 ms, at most an hour per sleep (the caller loops)
	int64 left_ms = (until - now + 999) / 1000;
	long ms = static_cast<long>(std::clamp<int64>(left_ms, 1, 3600 * 1000));
	if (cv_) {
		bool timed_out = pg::guard([&] { return ConditionVariableTimedSleep(cv_, ms, PG_WAIT_EXTENSION); });
		return timed_out && left_ms <= 3600 * 1000;
	}
	ms = std::min<long>(ms, wait_poll_interval_ms);
	pg::guard([&] {
		CHECK_FOR_INTERRUPTS();
		(void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
	});
	return false;
}

} // namespace concurrency::queue
