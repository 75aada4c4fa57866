// dequeue(…, wait): the waiters' condition variables in shared memory, the
// wake-ups counted per transaction and sent at commit, or at the rollback of
// a claim (see queue/time/wait.hpp; the waiters' side is waiters.cpp).
#include <algorithm>
#include <cstring>
#include <string>

#include "citus/node.hpp"
#include "common/names.hpp"
#include "queue/queue_sql.hpp"
#include "queue/time/notifier.hpp"
#include "queue/shared_queues.hpp"
#include "queue/time/wait.hpp"
#include "queue/time/wait_shared.hpp"
#include "pg/guard.hpp"
#include "pg/shmem.hpp"

extern "C" {
#include "access/twophase.h"
#include "access/xact.h"
#include "commands/async.h"
#include "nodes/parsenodes.h"
#include "tcop/utility.h"
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

namespace wait_shared {

void init_entry(void *made) {
	auto *entry = static_cast<WaitEntry *>(made);
	ConditionVariableInit(&entry->cv);
	pg_atomic_init_u32(&entry->marked, 0);
	ConditionVariableInit(&entry->ended_cv);
	pg_atomic_init_u32(&entry->awaiters, 0);
}

AwaitCount *await_count = nullptr;

SharedQueues wait_queues("concurrency_ext queue waits", 1024, sizeof(WaitEntry));

int my_procno() {
#if PG_VERSION_NUM >= 170000
	return MyProcNumber;
#else
	return MyProc->pgprocno;
#endif
}

} // namespace wait_shared

using namespace wait_shared;

namespace {

// This transaction's wake-ups, per queue; kept in static storage so that the
// commit callback allocates nothing. More queues than that in one
// transaction: every waiter of the database is woken at commit.
constexpr int max_notes = 16;
struct Note {
	SharedQueueKey key;
	uint64_t tasks;
	WaitEntry *listened; // the entry to mark at commit for LISTEN users, or nullptr
	bool ended;          // tasks of the queue ended: await_task callers are woken
};
// One transaction's notes: this backend's transaction's, or a prepared
// transaction's, kept in shared memory until COMMIT PREPARED (Stash).
struct Notes {
	Note notes[max_notes];
	int count;
	bool overflowed;           // more queues than notes: every waiter of the database is woken
	bool listeners_overflowed; // every queue of the database is marked for LISTEN users
	bool ended_overflowed;     // every await_task caller of the database is woken
};
Notes mine{};
Note (&notes)[max_notes] = mine.notes;
int &note_count = mine.count;
bool &notes_overflowed = mine.overflowed;
bool &listeners_overflowed = mine.listeners_overflowed;

void forget_notes() {
	note_count = 0;
	notes_overflowed = false;
	listeners_overflowed = false;
	mine.ended_overflowed = false;
}

bool have_notes(const Notes &n) {
	return n.count > 0 || n.overflowed || n.listeners_overflowed || n.ended_overflowed;
}

// The tasks this transaction claimed, per queue and per (sub)transaction
// nesting level, kept apart from the notes above so that a commit of a
// claim does what it did before (forgets them). A rollback of the
// (sub)transaction that claimed them makes the tasks ready again: as many
// waiters are woken then as a commit of that many enqueued tasks wakes.
// Level 0: rolled back, to be woken once the rollback released its locks.
struct ClaimNote {
	SharedQueueKey key;
	uint64_t tasks;
	int level;
};
ClaimNote claims[max_notes];
int claim_count = 0;
// The deepest level with a claim that found no room (0: none): its
// rollback (or an outer one) wakes every waiter of the database.
int claims_overflow_level = 0;
bool claims_overflow_woken = false; // a rollback reached an overflowed claim: wake all

void forget_claims() noexcept {
	claim_count = 0;
	claims_overflow_level = 0;
	claims_overflow_woken = false;
}

// The rollback of nesting level `level` (1: the whole transaction): the
// claims made there and in its subtransactions are to be woken.
void claims_rolled_back(int level) noexcept {
	for (int i = 0; i < claim_count; ++i)
		if (claims[i].level >= level)
			claims[i].level = 0;
	if (claims_overflow_level >= level) {
		claims_overflow_woken = true;
		// the overflowed claims of outer levels (if any) are not known
		// apart: an outer rollback wakes every waiter again
		claims_overflow_level = level - 1;
	}
}

// The commit of subtransaction level `level`: its claims are its parent's.
void claims_to_parent(int level) noexcept {
	for (int i = 0; i < claim_count; ++i)
		if (claims[i].level == level)
			claims[i].level = level - 1;
	if (claims_overflow_level == level)
		claims_overflow_level = level - 1;
}

// The notes of prepared transactions, by GID, until COMMIT PREPARED applies
// them or ROLLBACK PREPARED drops them. Shared memory: the server may restart
// in between (prepared transactions survive it, these do not: waiters and
// listeners then hear of the work at their next look or commit).
constexpr int max_stashed = 64;
struct Stashed {
	char gid[GIDSIZE]; // "": a free slot
	Oid database;
	Notes notes;
};
struct Stash {
	slock_t mutex;
	Stashed entries[max_stashed];
};
Stash *stash = nullptr;
char preparing_gid[GIDSIZE] = ""; // set by the utility hook around PREPARE TRANSACTION
ProcessUtility_hook_type previous_utility = nullptr;

// The note of `key`, added when missing; nullptr when there is no room.
Note *note_of(const SharedQueueKey &key) {
	for (int i = 0; i < note_count; ++i)
		if (std::memcmp(&notes[i].key, &key, sizeof key) == 0)
			return &notes[i];
	if (note_count == max_notes)
		return nullptr;
	notes[note_count] = Note{key, 0, nullptr, false};
	return &notes[note_count++];
}

void request_shared_memory() {
	wait_queues.request();
	RequestAddinShmemSpace(sizeof(Stash));
	RequestAddinShmemSpace(sizeof(AwaitCount));
}

void start_shared_memory() {
	wait_queues.start();
	bool found = false;
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	stash = static_cast<Stash *>(ShmemInitStruct("concurrency_ext prepared wake-ups", sizeof(Stash), &found));
	if (!found) {
		std::memset(static_cast<void *>(stash), 0, sizeof *stash);
		SpinLockInit(&stash->mutex);
	}
	await_count = static_cast<AwaitCount *>(
	    ShmemInitStruct("concurrency_ext task awaiters", sizeof(AwaitCount), &found));
	if (!found)
		pg_atomic_init_u32(&await_count->awaiters, 0);
	LWLockRelease(AddinShmemInitLock);
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

// await_task callers of the queues whose tasks the transaction of `n` ended
// (all of the database's when it ended tasks of more queues than it noted).
// Nothing is looked up while no caller waits anywhere.
void wake_awaiters(const Notes &n, Oid database) {
	if (!await_count || pg_atomic_read_u32(&await_count->awaiters) == 0)
		return;
	bool any = n.ended_overflowed;
	for (int i = 0; i < n.count && !any; ++i)
		any = n.notes[i].ended;
	if (!any)
		return;
	LWLockAcquire(wait_queues.lock(), LW_SHARED);
	if (n.ended_overflowed) {
		HASH_SEQ_STATUS scan;
		hash_seq_init(&scan, wait_queues.table());
		while (auto *entry = static_cast<WaitEntry *>(hash_seq_search(&scan)))
			if (entry->key.database == database && pg_atomic_read_u32(&entry->awaiters) > 0)
				ConditionVariableBroadcast(&entry->ended_cv);
	} else {
		for (int i = 0; i < n.count; ++i) {
			if (!n.notes[i].ended)
				continue;
			auto *entry = n.notes[i].listened
			                  ? n.notes[i].listened
			                  : static_cast<WaitEntry *>(
			                        hash_search(wait_queues.table(), &n.notes[i].key, HASH_FIND, nullptr));
			if (entry && pg_atomic_read_u32(&entry->awaiters) > 0)
				ConditionVariableBroadcast(&entry->ended_cv);
		}
	}
	LWLockRelease(wait_queues.lock());
}

// Every waiter of dequeue(…, wait) in `database` (the table's lock held).
void wake_database(Oid database) {
	HASH_SEQ_STATUS scan;
	hash_seq_init(&scan, wait_queues.table());
	while (auto *entry = static_cast<WaitEntry *>(hash_seq_search(&scan)))
		if (entry->key.database == database)
			ConditionVariableBroadcast(&entry->cv);
}

// Called when the transaction of `n` has committed (its tasks are visible to
// every new snapshot by then), in `database`.
void wake_noted(const Notes &n, Oid database) {
	wake_awaiters(n, database);
	// LISTEN users: a queue's first mark since its notifier last looked asks
	// the notifier to look again (entries are never removed: the pointers
	// taken during the transaction stay valid)
	bool marked = n.listeners_overflowed;
	for (int i = 0; i < n.count; ++i)
		if (n.notes[i].listened && pg_atomic_exchange_u32(&n.notes[i].listened->marked, 1) == 0)
			marked = true;
	if (marked)
		notifier_wanted(database, n.listeners_overflowed);
	if (n.count == 0 && !n.overflowed)
		return;
	// the entries the transaction already holds need no lookup (nor the
	// table's lock, which guards the table, not the condition variables)
	bool lookups = n.overflowed;
	for (int i = 0; i < n.count && !lookups; ++i)
		lookups = n.notes[i].tasks > 0 && !n.notes[i].listened;
	if (!lookups) {
		for (int i = 0; i < n.count; ++i)
			if (n.notes[i].tasks > 0)
				signal_waiters(&n.notes[i].listened->cv, n.notes[i].tasks);
		return;
	}
	LWLockAcquire(wait_queues.lock(), LW_SHARED);
	if (n.overflowed) {
		wake_database(database);
	} else {
		for (int i = 0; i < n.count; ++i) {
			if (n.notes[i].tasks == 0)
				continue;
			if (n.notes[i].listened) {
				signal_waiters(&n.notes[i].listened->cv, n.notes[i].tasks);
				continue;
			}
			auto *entry = static_cast<WaitEntry *>(
			    hash_search(wait_queues.table(), &n.notes[i].key, HASH_FIND, nullptr));
			if (entry)
				signal_waiters(&entry->cv, n.notes[i].tasks);
		}
	}
	LWLockRelease(wait_queues.lock());
}

// After a rollback released its locks: up to as many waiters of each queue
// as the rolled-back claims took tasks of it (every waiter of the database
// where a claim found no room). The rolled-back notes are removed.
void wake_rolled_back_claims() noexcept {
	bool any = claims_overflow_woken;
	for (int i = 0; i < claim_count && !any; ++i)
		any = claims[i].level == 0;
	if (!any)
		return;
	LWLockAcquire(wait_queues.lock(), LW_SHARED);
	if (claims_overflow_woken) {
		wake_database(MyDatabaseId);
	} else {
		for (int i = 0; i < claim_count; ++i) {
			if (claims[i].level != 0)
				continue;
			auto *entry = static_cast<WaitEntry *>(
			    hash_search(wait_queues.table(), &claims[i].key, HASH_FIND, nullptr));
			if (entry)
				signal_waiters(&entry->cv, claims[i].tasks);
		}
	}
	LWLockRelease(wait_queues.lock());
	claims_overflow_woken = false;
	int kept = 0;
	for (int i = 0; i < claim_count; ++i)
		if (claims[i].level != 0)
			claims[kept++] = claims[i];
	claim_count = kept;
}

// At PREPARE TRANSACTION: this transaction's notes kept under its GID (none
// kept when every stash slot is taken: its waiters and listeners hear of the
// work at their next look).
void stash_notes() noexcept {
	if (!stash || preparing_gid[0] == '\0' || !have_notes(mine))
		return;
	SpinLockAcquire(&stash->mutex);
	for (Stashed &e : stash->entries)
		if (e.gid[0] == '\0') {
			strlcpy(e.gid, preparing_gid, sizeof e.gid);
			e.database = MyDatabaseId;
			e.notes = mine;
			break;
		}
	SpinLockRelease(&stash->mutex);
}

// At COMMIT PREPARED (apply) or ROLLBACK PREPARED: the stashed notes of `gid`
// taken out of the stash.
bool unstash(const char *gid, Notes &out, Oid &database) {
	if (!stash)
		return false;
	bool found = false;
	SpinLockAcquire(&stash->mutex);
	for (Stashed &e : stash->entries)
		if (e.gid[0] != '\0' && std::strncmp(e.gid, gid, sizeof e.gid) == 0) {
			out = e.notes;
			database = e.database;
			e.gid[0] = '\0';
			found = true;
			break;
		}
	SpinLockRelease(&stash->mutex);
	return found;
}

// PREPARE TRANSACTION names the GID the transaction callback stashes its
// notes under; after COMMIT PREPARED, the prepared transaction's waiters and
// listeners are told, as its own commit would have told them.
void utility_hook(PlannedStmt *pstmt, const char *query, bool read_only_tree, ProcessUtilityContext context,
                  ParamListInfo params, QueryEnvironment *env, DestReceiver *dest, QueryCompletion *qc) {
	auto *stmt =
	    IsA(pstmt->utilityStmt, TransactionStmt) ? castNode(TransactionStmt, pstmt->utilityStmt) : nullptr;
	auto next = [&] {
		if (previous_utility)
			previous_utility(pstmt, query, read_only_tree, context, params, env, dest, qc);
		else
			standard_ProcessUtility(pstmt, query, read_only_tree, context, params, env, dest, qc);
	};
	if (!stmt || !stmt->gid) {
		next();
		return;
	}
	switch (stmt->kind) {
	case TRANS_STMT_PREPARE:
		// the transaction is prepared when the statement has returned: the
		// transaction callback reads the GID then, and forgets it at the
		// transaction's end whatever it is
		strlcpy(preparing_gid, stmt->gid, sizeof preparing_gid);
		next();
		return;
	case TRANS_STMT_COMMIT_PREPARED: {
		next(); // committed when it returns
		Notes n;
		Oid database = InvalidOid;
		if (unstash(stmt->gid, n, database))
			wake_noted(n, database);
		return;
	}
	case TRANS_STMT_ROLLBACK_PREPARED: {
		next();
		Notes n;
		Oid database = InvalidOid;
		(void)unstash(stmt->gid, n, database);
		return;
	}
	default:
		next();
		return;
	}
}

// The wake-ups of a committed transaction are sent once its invalidation
// messages are (the last phase of releasing its resources, after
// AtEOXact_Inval): a waiter woken by a resume_queue, or by a changed
// schedule, reads the catalog change in the look it wakes up for. (Woken at
// XACT_EVENT_COMMIT, before the invalidations went out, it could still see
// the queue paused, and sleep on.) A PREPARE has dropped its notes by then.
void on_resources_released(ResourceReleasePhase phase, bool is_commit, bool is_top_level, void *) noexcept {
	if (phase != RESOURCE_RELEASE_AFTER_LOCKS)
		return;
	if (!is_commit) {
		// a rollback (of the transaction or a subtransaction, whose
		// callbacks below marked its claims) has released its locks: the
		// tasks it claimed are ready again
		if (claim_count > 0 || claims_overflow_woken)
			wake_rolled_back_claims();
		return;
	}
	if (!is_top_level)
		return;
	if (!have_notes(mine))
		return;
	wake_noted(mine, MyDatabaseId);
	forget_notes();
}

void on_transaction_end(XactEvent event, void *) noexcept {
	if (preparing_gid[0] != '\0' && event != XACT_EVENT_PRE_PREPARE && event != XACT_EVENT_PRE_COMMIT &&
	    event != XACT_EVENT_PARALLEL_PRE_COMMIT) {
		if (event == XACT_EVENT_PREPARE)
			stash_notes();
		preparing_gid[0] = '\0';
	}
	if (claim_count > 0 || claims_overflow_level > 0) {
		if (event == XACT_EVENT_ABORT)
			claims_rolled_back(1); // woken once the rollback released its locks
		else if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PREPARE ||
		         event == XACT_EVENT_PARALLEL_COMMIT || event == XACT_EVENT_PARALLEL_ABORT)
			forget_claims();
	}
	if (!have_notes(mine))
		return;
	switch (event) {
	case XACT_EVENT_COMMIT: // woken later, on_resources_released
		break;
	case XACT_EVENT_PREPARE: // stashed above: COMMIT PREPARED, from any session, tells them
		forget_notes();
		break;
	case XACT_EVENT_ABORT:
	case XACT_EVENT_PARALLEL_COMMIT:
	case XACT_EVENT_PARALLEL_ABORT:
		forget_notes();
		break;
	default:
		break;
	}
}

// A subtransaction's claims: rolled back with it, or its parent's when it
// commits. (The nesting level is still the subtransaction's here.)
void on_subtransaction_end(SubXactEvent event, SubTransactionId, SubTransactionId, void *) noexcept {
	if (claim_count == 0 && claims_overflow_level == 0)
		return;
	if (event == SUBXACT_EVENT_ABORT_SUB)
		claims_rolled_back(GetCurrentTransactionNestLevel()); // woken once it released its locks
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
		claims_to_parent(GetCurrentTransactionNestLevel());
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
	RegisterSubXactCallback(on_subtransaction_end, nullptr);
	RegisterResourceReleaseCallback(on_resources_released, nullptr);
	if (!process_shared_preload_libraries_in_progress)
		return;
	pg::add_shared_memory(request_shared_memory, start_shared_memory);
	previous_utility = ProcessUtility_hook;
	ProcessUtility_hook = utility_hook;
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

void note_claimed(std::string_view queue, uint64_t tasks) {
	if (!wait_queues.exists() || tasks == 0)
		return;
	int level = GetCurrentTransactionNestLevel();
	if (claims_overflow_level >= level)
		return; // its rollback wakes every waiter anyway
	SharedQueueKey key = shared_queue_key(queue);
	for (int i = 0; i < claim_count; ++i)
		if (claims[i].level == level && std::memcmp(&claims[i].key, &key, sizeof key) == 0) {
			claims[i].tasks += tasks;
			return;
		}
	if (claim_count == max_notes) {
		claims_overflow_level = std::max(claims_overflow_level, level);
		return;
	}
	claims[claim_count++] = ClaimNote{key, tasks, level};
}

void note_ended(std::string_view queue) {
	if (!wait_queues.exists() || mine.ended_overflowed)
		return;
	Note *note = note_of(shared_queue_key(queue));
	if (note)
		note->ended = true;
	else
		mine.ended_overflowed = true;
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
		// the entry of the queue this backend noted last is kept (entries
		// are never removed): most calls look up nothing
		static SharedQueueKey last_key;
		static WaitEntry *last_entry = nullptr;
		if (last_entry && std::memcmp(&last_key, &key, sizeof key) == 0) {
			note->listened = last_entry;
			return true;
		}
		note->listened =
		    pg::guard([&] { return static_cast<WaitEntry *>(wait_queues.find_or_enter(key, init_entry)); });
		if (note->listened) {
			last_key = key;
			last_entry = note->listened;
		} else { // every entry taken: every queue of the database
			listeners_overflowed = true;
		}
	}
	return true;
}

void notify_listeners(std::string_view queue) {
	// A call routed here by another node (Citus) is part of a transaction
	// that Citus may commit with PREPARE TRANSACTION, which a NOTIFY forbids:
	// the node where the call was made notifies its listeners instead.
	if (citus::in_routed_call())
		return;
	switch (static_cast<NotifyMode>(notify_mode)) {
	case NotifyMode::off:
		return;
	case NotifyMode::background: // the database's notifier tells them (notifier.hpp)
		if (note_listeners(queue))
			return;
		break; // not preloaded: at commit
	case NotifyMode::commit:
		break;
	}
	std::string channel = queue_channel(queue);
	pg::guard([&] { Async_Notify(channel.c_str(), ""); });
}

void notify(std::string_view queue, uint64_t tasks) {
	note_claimable(queue, tasks);
	notify_listeners(queue);
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

} // namespace concurrency::queue
