// The exit marks of the lock-wait history (see history_exits.hpp).
#include "diagnostics/history_exits.hpp"

#include "pg/shmem.hpp"

extern "C" {
#include "access/xact.h"
#include "libpq/auth.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/shmem.h"
#if PG_VERSION_NUM < 150000
#include "postmaster/autovacuum.h"
#include "replication/walsender.h"
#endif
}

namespace concurrency::diagnostics {

namespace {

struct ExitSlot {
	pg_atomic_uint32 pid;     // 0: nobody exited from this slot yet
	pg_atomic_uint64 started; // that backend's start (MyStartTimestamp)
};

struct Exits {
	uint32 count;
	ExitSlot slots[FLEXIBLE_ARRAY_MEMBER];
};

Exits *exits = nullptr;
bool marked = false; // this backend's mark is written
ClientAuthentication_hook_type previous_authentication = nullptr;

// A slot per PGPROC of a regular backend (client, autovacuum, background
// worker, WAL sender): those come first in ProcGlobal->allProcs.
uint32 slot_count() {
#if PG_VERSION_NUM >= 150000
	return static_cast<uint32>(MaxBackends);
#else
	// _PG_init, where the request is made, comes before InitializeMaxBackends(): its sum
	return static_cast<uint32>(MaxConnections + autovacuum_max_workers + 1 + max_worker_processes +
	                           max_wal_senders);
#endif
}

Size shared_size() {
	return add_size(offsetof(Exits, slots), mul_size(slot_count(), sizeof(ExitSlot)));
}

void request_shared_memory() {
	RequestAddinShmemSpace(shared_size());
}

void start_shared_memory() {
	bool found = false;
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	auto *e =
	    static_cast<Exits *>(ShmemInitStruct("concurrency_ext lock history exits", shared_size(), &found));
	if (!found) {
		e->count = slot_count();
		for (uint32 i = 0; i < e->count; ++i) {
			pg_atomic_init_u32(&e->slots[i].pid, 0);
			pg_atomic_init_u64(&e->slots[i].started, 0);
		}
	}
	LWLockRelease(AddinShmemInitLock);
	exits = e;
}

// Writes this backend's mark: the start time, then the pid, and both before
// the caller goes on to release any lock (a full barrier; a sample that sees
// a lock gone took the lock manager's locks after it).
void mark_exiting() noexcept {
	if (marked || exits == nullptr || MyProc == nullptr)
		return;
	const auto procno = static_cast<uint32>(MyProc - ProcGlobal->allProcs);
	if (procno >= exits->count)
		return;
	ExitSlot &slot = exits->slots[procno];
	pg_atomic_write_u32(&slot.pid, 0);
	pg_write_barrier();
	pg_atomic_write_u64(&slot.started, static_cast<uint64>(MyStartTimestamp));
	pg_write_barrier();
	pg_atomic_write_u32(&slot.pid, static_cast<uint32>(MyProcPid));
	pg_memory_barrier();
	marked = true;
}

// A transaction ends while the backend exits: its locks go next.
void at_transaction_end(XactEvent, void *) noexcept {
	if (proc_exit_inprogress)
		mark_exiting();
}

void at_subtransaction_end(SubXactEvent, SubTransactionId, SubTransactionId, void *) noexcept {
	if (proc_exit_inprogress)
		mark_exiting();
}

void at_exit(int, Datum) noexcept {
	mark_exiting();
}

// Registered after ShutdownPostgres (InitPostgres registers it before it
// authenticates), at_exit runs before it: before the session locks go, and
// before the transaction is rolled back unless an exit callback registered
// later (the temporary tables' drop) does that first.
void at_authentication(Port *port, int status) {
	if (previous_authentication)
		previous_authentication(port, status);
	if (status == STATUS_OK)
		before_shmem_exit(at_exit, 0);
}

} // namespace

bool history_exiting(int pid, TimestampTz started) {
	if (exits == nullptr || pid <= 0)
		return false;
	for (uint32 i = 0; i < exits->count; ++i) {
		ExitSlot &slot = exits->slots[i];
		if (pg_atomic_read_u32(&slot.pid) != static_cast<uint32>(pid))
			continue;
		pg_read_barrier();
		if (static_cast<TimestampTz>(pg_atomic_read_u64(&slot.started)) == started)
			return true;
	}
	return false;
}

void history_exits_init() {
	pg::add_shared_memory(request_shared_memory, start_shared_memory);
	RegisterXactCallback(at_transaction_end, nullptr);
	RegisterSubXactCallback(at_subtransaction_end, nullptr);
	previous_authentication = ClientAuthentication_hook;
	ClientAuthentication_hook = at_authentication;
}

} // namespace concurrency::diagnostics
