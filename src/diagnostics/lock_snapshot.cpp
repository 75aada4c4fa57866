// The lock-manager snapshot behind lock_waits and lock_tree.
//
// pg_blocking_pids(pid) takes ProcArrayLock and all 16 lock-partition locks
// for one blocked pid; calling it for every backend costs the whole server 16
// lock round trips per backend and each call sees a different instant. Here
// one pass does it for everybody: ProcArrayLock shared, then every partition
// lock shared in partition order (the order GetLockStatusData and the deadlock
// detector use), walk all PGPROCs, and for each distinct lock somebody waits
// for, copy its PROCLOCKs (hold mask, requested mode, lock-group leader) and
// the wait-queue position of every waiter; release. The buffers are sized
// before the locks are taken; when they turn out too small, the pass counts
// what it would have needed, releases everything, grows them and starts over.
// Nothing is allocated, logged or raised while the LWLocks are held.
//
// Struct access is what differs between majors. Covered: PostgreSQL 13 to 18
// (SHM_QUEUE lists up to 15, ilist from 16; xid in PGXACT in 13; waitStart
// from 14). Compiled and tested here on 15.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "diagnostics/lock_snapshot.hpp"

extern "C" {
#include "storage/lmgr.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"
}

#if PG_VERSION_NUM < 130000 || PG_VERSION_NUM >= 190000
#error                                                                                                       \
    "concurrency_ext lock diagnostics cover PostgreSQL 13 to 18: check PGPROC and LOCK before building for this major"
#endif

namespace concurrency::diagnostics {

namespace {

// --- the copy, plain data only ---------------------------------------------

struct RawWaiter {
	uint32 procno;
	int leader_pid;
	uint32 lock; // index into Capture::locks
	TimestampTz wait_start;
};

struct RawLock {
	LOCKTAG tag;
	uint32 first_entry;
	uint32 entries;
};

struct RawEntry { // one PROCLOCK of an awaited lock
	uint32 procno;
	int leader_pid;
	TransactionId leader_xid; // for a prepared transaction (pid 0)
	LOCKMASK hold_mask;
	LOCKMODE wait_mode; // NoLock unless the process waits on this very lock
};

struct Capture {
	uint32 procs; // ProcGlobal->allProcCount: every PGPROC that can wait (not those of prepared transactions)
	RawWaiter *waiters;
	uint32 n_waiters;
	RawLock *locks; // at most one per waiting process
	uint32 n_locks;
	RawEntry *entries;
	uint32 n_entries, entry_capacity, entries_needed;
	uint32 *queue_pos; // by procno: position in the wait queue of the lock it waits for
	// open addressing LOCK* -> index into locks, capacity a power of two
	LOCK **slot_lock;
	uint32 *slot_index;
	uint32 slot_mask;
	TimestampTz taken_at;
};

inline uint32 procno_of(const PGPROC *proc) {
	return static_cast<uint32>(proc - ProcGlobal->allProcs);
}

inline TransactionId xid_of(const PGPROC *proc) {
#if PG_VERSION_NUM >= 140000
	return proc->xid;
#else
	return ProcGlobal->allPgXact[proc->pgprocno].xid;
#endif
}

inline int leader_pid_of(const PGPROC *proc) {
	return proc->lockGroupLeader ? proc->lockGroupLeader->pid : proc->pid;
}

// Index of `lock` in c->locks, or UINT32_MAX when it is not there yet (then
// *slot is where it goes).
inline uint32 find_lock(const Capture *c, const LOCK *lock, uint32 *slot) {
	uint64 h = reinterpret_cast<uintptr_t>(lock);
	h = (h >> 4) * UINT64CONST(0x9E3779B97F4A7C15);
	uint32 i = static_cast<uint32>(h >> 32) & c->slot_mask;
	while (c->slot_lock[i] != nullptr) {
		if (c->slot_lock[i] == lock)
			return c->slot_index[i];
		i = (i + 1) & c->slot_mask;
	}
	*slot = i;
	return UINT32_MAX;
}

// Only processes with a PGPROC below allProcCount can wait (the PGPROCs of
// prepared transactions come after them, and never wait).
inline void set_queue_pos(Capture *c, const PGPROC *proc, uint32 pos) {
	uint32 procno = procno_of(proc);
	if (procno < c->procs)
		c->queue_pos[procno] = pos;
}

// Copies the PROCLOCKs and the queue order of `lock`. Runs under the locks.
void copy_lock(Capture *c, LOCK *lock, uint32 index) {
	RawLock *raw = &c->locks[index];
	raw->tag = lock->tag;
	raw->first_entry = c->n_entries;
	uint32 count = 0;

	auto take = [&](PROCLOCK *proclock) {
		PGPROC *proc = proclock->tag.myProc;
		PGPROC *leader = proclock->groupLeader;
		++c->entries_needed;
		if (c->n_entries >= c->entry_capacity)
			return;
		RawEntry *e = &c->entries[c->n_entries++];
		e->procno = procno_of(proc);
		e->leader_pid = leader->pid;
		e->leader_xid = leader->pid == 0 ? xid_of(leader) : InvalidTransactionId;
		e->hold_mask = proclock->holdMask;
		e->wait_mode = proc->waitLock == lock ? proc->waitLockMode : NoLock;
		++count;
	};
	uint32 pos = 0;
#if PG_VERSION_NUM >= 160000
	// ilist.h's foreach and container macros assert types with
	// __builtin_types_compatible_p, which C++ compilers lack: walk by hand.
	dlist_head *holders = &lock->procLocks;
	for (dlist_node *n = holders->head.next; n != nullptr && n != &holders->head; n = n->next)
		take(reinterpret_cast<PROCLOCK *>(reinterpret_cast<char *>(n) - offsetof(PROCLOCK, lockLink)));
	dlist_head *queue = &lock->waitProcs.dlist;
	for (dlist_node *n = queue->head.next; n != nullptr && n != &queue->head; n = n->next)
		set_queue_pos(c, reinterpret_cast<PGPROC *>(reinterpret_cast<char *>(n) - offsetof(PGPROC, links)),
		              pos++);
#else
	SHM_QUEUE *head = &lock->procLocks;
	for (auto *pl = reinterpret_cast<PROCLOCK *>(SHMQueueNext(head, head, offsetof(PROCLOCK, lockLink))); pl;
	     pl = reinterpret_cast<PROCLOCK *>(SHMQueueNext(head, &pl->lockLink, offsetof(PROCLOCK, lockLink))))
		take(pl);
	PROC_QUEUE *queue = &lock->waitProcs;
	auto *proc = reinterpret_cast<PGPROC *>(queue->links.next);
	for (int i = 0; i < queue->size; ++i) {
		set_queue_pos(c, proc, pos++);
		proc = reinterpret_cast<PGPROC *>(proc->links.next);
	}
#endif
	raw->entries = count;
}

// The pass under the LWLocks. Returns false when the entry buffer was too
// small (c->entries_needed says how big it must be).
bool capture(Capture *c) {
	c->n_waiters = c->n_locks = c->n_entries = c->entries_needed = 0;
	std::memset(c->slot_lock, 0, sizeof(LOCK *) * (c->slot_mask + 1));

	LWLockAcquire(ProcArrayLock, LW_SHARED);
	for (int i = 0; i < NUM_LOCK_PARTITIONS; i++)
		LWLockAcquire(LockHashPartitionLockByIndex(i), LW_SHARED);
	c->taken_at = GetCurrentTimestamp();

	for (uint32 procno = 0; procno < c->procs; ++procno) {
		PGPROC *proc = &ProcGlobal->allProcs[procno];
		LOCK *lock = proc->waitLock;
		if (lock == nullptr)
			continue;
		uint32 slot = 0;
		uint32 index = find_lock(c, lock, &slot);
		if (index == UINT32_MAX) {
			index = c->n_locks++;
			c->slot_lock[slot] = lock;
			c->slot_index[slot] = index;
			copy_lock(c, lock, index);
		}
		RawWaiter *w = &c->waiters[c->n_waiters++];
		w->procno = procno;
		w->leader_pid = leader_pid_of(proc);
		w->lock = index;
#if PG_VERSION_NUM >= 140000
		w->wait_start = static_cast<TimestampTz>(pg_atomic_read_u64(&proc->waitStart));
#else
		w->wait_start = 0;
#endif
	}

	for (int i = NUM_LOCK_PARTITIONS; --i >= 0;)
		LWLockRelease(LockHashPartitionLockByIndex(i));
	LWLockRelease(ProcArrayLock);
	return c->entries_needed <= c->entry_capacity;
}

void allocate(Capture *c) {
	c->procs = ProcGlobal->allProcCount;
	uint32 slots = 16;
	while (slots < 2 * c->procs)
		slots <<= 1;
	c->slot_mask = slots - 1;
	c->waiters = static_cast<RawWaiter *>(palloc(sizeof(RawWaiter) * c->procs));
	c->locks = static_cast<RawLock *>(palloc(sizeof(RawLock) * c->procs));
	c->queue_pos = static_cast<uint32 *>(palloc(sizeof(uint32) * c->procs));
	c->slot_lock = static_cast<LOCK **>(palloc(sizeof(LOCK *) * slots));
	c->slot_index = static_cast<uint32 *>(palloc(sizeof(uint32) * slots));
	// every waiter has a PROCLOCK on its lock, and most waits have few holders
	c->entry_capacity = 2 * c->procs + 64;
	c->entries = static_cast<RawEntry *>(palloc(sizeof(RawEntry) * c->entry_capacity));
}

void grow_entries(Capture *c) {
	uint32 want = c->entries_needed + c->entries_needed / 4 + 64;
	c->entries = static_cast<RawEntry *>(repalloc(c->entries, sizeof(RawEntry) * want));
	c->entry_capacity = want;
}

uint64 session_key(int pid, TransactionId xid) {
	return (static_cast<uint64>(static_cast<uint32>(pid)) << 32) | (pid == 0 ? xid : 0);
}

} // namespace

WaitPicture take_wait_picture() {
	Capture c{};
	pg::guard([&] { allocate(&c); });
	constexpr int attempts = 8;
	bool complete = false;
	for (int i = 0; i < attempts && !complete; ++i) {
		complete = pg::guard([&] { return capture(&c); });
		if (!complete)
			pg::guard([&] { grow_entries(&c); });
	}
	if (!complete)
		throw Error(sqlstate::object_not_in_prerequisite_state,
		            "could not take a snapshot of the lock manager",
		            fmt::format("the number of lock holders kept growing ({} needed after {} attempts)",
		                        c.entries_needed, attempts),
		            "try again");

	WaitPicture picture;
	picture.taken_at = c.taken_at;

	// sessions, by (pid, xid): every holder or waiter of an awaited lock
	std::vector<uint64> keys;
	keys.reserve(c.n_entries);
	for (uint32 i = 0; i < c.n_entries; ++i)
		keys.push_back(session_key(c.entries[i].leader_pid, c.entries[i].leader_xid));
	std::sort(keys.begin(), keys.end());
	keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
	auto id_of = [&](uint64 key) {
		auto it = std::lower_bound(keys.begin(), keys.end(), key);
		return it != keys.end() && *it == key ? static_cast<uint32_t>(it - keys.begin()) : none;
	};
	picture.sessions.resize(keys.size());
	for (std::size_t i = 0; i < keys.size(); ++i) {
		picture.sessions[i].pid = static_cast<int>(keys[i] >> 32);
		picture.sessions[i].xid = static_cast<TransactionId>(keys[i] & 0xFFFFFFFFu);
	}
	for (uint32 i = 0; i < c.n_waiters; ++i) {
		const RawWaiter &w = c.waiters[i];
		uint32_t id = id_of(session_key(w.leader_pid, InvalidTransactionId));
		if (id == none)
			continue;
		Session &s = picture.sessions[id];
		s.waiting = true;
		if (w.wait_start != 0 && (s.waiting_since == 0 || w.wait_start < s.waiting_since))
			s.waiting_since = w.wait_start;
	}

	std::vector<AwaitedLock> locks(c.n_locks);
	picture.locks.resize(c.n_locks);
	for (uint32 l = 0; l < c.n_locks; ++l) {
		const RawLock &raw = c.locks[l];
		picture.locks[l] = raw.tag;
		const LOCKTAG *tag = &picture.locks[l];
		LockMethod method = pg::guard([&] { return GetLockTagsMethodTable(tag); });
		locks[l].first = raw.first_entry;
		locks[l].count = raw.entries;
		// LOCKMASK is int: the same bits as an unsigned mask
		locks[l].conflicts = reinterpret_cast<const LockMask *>(method->conflictTab);
		locks[l].max_mode = method->numLockModes;
	}
	std::vector<LockEntry> entries(c.n_entries);
	for (uint32 i = 0; i < c.n_entries; ++i) {
		const RawEntry &raw = c.entries[i];
		LockEntry &e = entries[i];
		e.session = id_of(session_key(raw.leader_pid, raw.leader_xid));
		e.hold_mask = raw.hold_mask;
		e.wait_mode = raw.wait_mode;
		e.queue_pos = raw.wait_mode != NoLock && raw.procno < c.procs ? c.queue_pos[raw.procno] : none;
	}
	picture.edges = derive_edges(locks, entries);

	pg::guard([&] {
		pfree(c.waiters);
		pfree(c.locks);
		pfree(c.entries);
		pfree(c.queue_pos);
		pfree(c.slot_lock);
		pfree(c.slot_index);
	});
	return picture;
}

} // namespace concurrency::diagnostics
