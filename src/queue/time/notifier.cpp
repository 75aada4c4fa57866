// The notifiers of LISTEN users and their launcher (see queue/notifier.hpp).
//
// Shared state: one slot per database that has had work marked, holding
// whether its notifier is wanted (`wanted`, `all`) and the latch of the
// notifier that runs there (nullptr: none). A committing backend sets
// `wanted` and the notifier's latch, or the launcher's when none runs; the
// launcher (in the background host) starts a notifier where one is wanted
// and none runs. A notifier leaves (clears its latch) only under the
// spinlock and only while nothing is wanted, so that no request is left
// with nobody to serve it.
#include "queue/time/notifier.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "bgworker/host.hpp"
#include "common/names.hpp"
#include "pg/guard.hpp"
#include "pg/shmem.hpp"
#include "pg/spi.hpp"
#include "queue/queue.hpp"
#include "queue/time/wait.hpp"

extern "C" {
#include "access/xact.h"
#include "commands/async.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

PGDLLEXPORT void concurrency_notifier_main(Datum);
}

namespace concurrency::queue {

int notify_mode = static_cast<int>(NotifyMode::background);

namespace {

int notify_interval_ms = 20; // concurrency.notify_interval

// Databases with notifiers; a database beyond them is notified by nobody
// until a slot frees (a slot nobody wants and no notifier holds is reused).
constexpr int max_notifier_databases = 256;
// A notifier with nothing to do for this long exits: a quiet database has
// none connected, and DROP DATABASE (which waits up to 5 s for the other
// sessions of the database to leave) is not refused because of it.
constexpr TimestampTz idle_exit = 2 * USECS_PER_SEC;
// The launcher's next try when no background worker slot was free.
constexpr long start_retry_ms = 1000;

struct NotifierSlot {
	Oid database;            // InvalidOid: free; guarded by the mutex
	Latch *latch;            // the running notifier's; guarded by the mutex
	pg_atomic_uint32 wanted; // work was marked since the notifier last looked
	pg_atomic_uint32 all;    // ... in more queues than a transaction could note
};

struct NotifierShared {
	slock_t mutex; // guards `used`, `launcher` and the slots' database and latch
	Latch *launcher;
	int used;
	NotifierSlot slots[max_notifier_databases];
};

NotifierShared *shared = nullptr; // nullptr: not preloaded

// The launcher's handles of the notifiers it started, by slot.
std::array<BackgroundWorkerHandle *, max_notifier_databases> running{};

const struct config_enum_entry notify_modes[] = {
    {"background", static_cast<int>(NotifyMode::background), false},
    {"commit", static_cast<int>(NotifyMode::commit), false},
    {"off", static_cast<int>(NotifyMode::off), false},
    {nullptr, 0, false},
};

void request_shared_memory() {
	RequestAddinShmemSpace(sizeof(NotifierShared));
}

void start_shared_memory() {
	bool found = false;
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	auto *s = static_cast<NotifierShared *>(
	    ShmemInitStruct("concurrency_ext notifiers", sizeof(NotifierShared), &found));
	if (!found) {
		std::memset(static_cast<void *>(s), 0, sizeof *s);
		SpinLockInit(&s->mutex);
		for (NotifierSlot &slot : s->slots) {
			pg_atomic_init_u32(&slot.wanted, 0);
			pg_atomic_init_u32(&slot.all, 0);
		}
	}
	LWLockRelease(AddinShmemInitLock);
	shared = s;
}

// The slot of `database`, added when missing (reusing one that nobody wants
// and no notifier holds); -1 when every slot is taken. Spinlock held.
int slot_of_locked(Oid database) {
	for (int i = 0; i < shared->used; ++i)
		if (shared->slots[i].database == database)
			return i;
	int free = -1;
	if (shared->used < max_notifier_databases)
		free = shared->used++;
	else
		for (int i = 0; i < shared->used && free < 0; ++i) {
			NotifierSlot &s = shared->slots[i];
			if (!s.latch && pg_atomic_read_u32(&s.wanted) == 0 && pg_atomic_read_u32(&s.all) == 0)
				free = i;
		}
	if (free >= 0) {
		shared->slots[free].database = database;
		shared->slots[free].latch = nullptr;
	}
	return free;
}

// --- the launcher (a tenant of the background host) -----------------------

void launcher_start() {
	if (!shared)
		return;
	SpinLockAcquire(&shared->mutex);
	shared->launcher = MyLatch;
	SpinLockRelease(&shared->mutex);
}

void launcher_stop() noexcept {
	if (!shared)
		return;
	SpinLockAcquire(&shared->mutex);
	if (shared->launcher == MyLatch)
		shared->launcher = nullptr;
	SpinLockRelease(&shared->mutex);
}

// False when no background worker slot was free.
bool start_notifier(int i, Oid database) {
	BackgroundWorker worker;
	std::memset(&worker, 0, sizeof worker);
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "concurrency_ext", sizeof worker.bgw_library_name);
	strlcpy(worker.bgw_function_name, "concurrency_notifier_main", sizeof worker.bgw_function_name);
	strlcpy(worker.bgw_name, "concurrency_ext notifier", sizeof worker.bgw_name);
	strlcpy(worker.bgw_type, "concurrency_ext notifier", sizeof worker.bgw_type);
	worker.bgw_main_arg = Int32GetDatum(i);
	std::memcpy(worker.bgw_extra, &database, sizeof database);
	worker.bgw_notify_pid = MyProcPid; // its start and exit set our latch
	BackgroundWorkerHandle *handle = nullptr;
	bool ok = pg::guard([&] { return RegisterDynamicBackgroundWorker(&worker, &handle); });
	if (ok)
		running[static_cast<std::size_t>(i)] = handle;
	return ok;
}

long launcher_tick() {
	if (!shared)
		return -1;
	long sleep_ms = -1;
	SpinLockAcquire(&shared->mutex);
	int used = shared->used;
	SpinLockRelease(&shared->mutex);
	for (int i = 0; i < used; ++i) {
		auto &handle = running[static_cast<std::size_t>(i)];
		if (handle) {
			pid_t pid = 0;
			BgwHandleStatus status = GetBackgroundWorkerPid(handle, &pid);
			if (status != BGWH_STOPPED && status != BGWH_POSTMASTER_DIED)
				continue; // starting or running: it serves the slot
			pfree(handle);
			handle = nullptr;
		}
		NotifierSlot &slot = shared->slots[i];
		if (pg_atomic_read_u32(&slot.wanted) == 0 && pg_atomic_read_u32(&slot.all) == 0)
			continue;
		SpinLockAcquire(&shared->mutex);
		Oid database = slot.database;
		bool served = slot.latch != nullptr; // one started by an earlier launcher
		SpinLockRelease(&shared->mutex);
		if (served || !OidIsValid(database))
			continue;
		if (!start_notifier(i, database))
			sleep_ms = start_retry_ms;
	}
	return sleep_ms;
}

// --- the notifier ---------------------------------------------------------

NotifierSlot *my_slot = nullptr;

void leave_slot(int, Datum) {
	SpinLockAcquire(&shared->mutex);
	if (my_slot->latch == MyLatch)
		my_slot->latch = nullptr;
	SpinLockRelease(&shared->mutex);
}

// Every queue of this database (where the extension is installed).
void add_every_queue(std::vector<std::string> &queues) {
	bool installed = pg::guard([] { return OidIsValid(get_extension_oid("concurrency_ext", true)); }) &&
	                 OidIsValid(concurrency_relid("queue"));
	if (!installed)
		return;
	pg::spi_connect();
	uint64 n = pg::execute("SELECT name FROM concurrency.queue", 0, nullptr, nullptr, nullptr, true);
	for (uint64 r = 0; r < n; ++r)
		queues.push_back(pg::text_column(r, 1).value_or(""));
	pg::spi_finish();
}

// One transaction: the channels of the marked queues (or of every queue)
// notified. An error is logged and the marks it took are lost (their
// waiters do not depend on them; LISTEN users hear of the next commit).
void send(bool all) noexcept {
	try {
		pg::guard([] {
			SetCurrentStatementStartTimestamp();
			StartTransactionCommand();
			PushActiveSnapshot(GetTransactionSnapshot());
		});
		std::vector<std::string> queues;
		take_marked_queues(MyDatabaseId, queues);
		if (all)
			add_every_queue(queues);
		std::sort(queues.begin(), queues.end());
		queues.erase(std::unique(queues.begin(), queues.end()), queues.end());
		for (const std::string &queue : queues) {
			std::string channel = queue_channel(queue);
			pg::guard([&] { Async_Notify(channel.c_str(), ""); });
		}
		pg::guard([] {
			PopActiveSnapshot();
			CommitTransactionCommand();
		});
		pgstat_report_stat(false);
	} catch (const std::exception &e) {
		std::string message = e.what();
		PG_TRY();
		{
			AbortCurrentTransaction();
			ereport(LOG, (errmsg("concurrency_ext notifier failed: %s", message.c_str())));
		}
		PG_CATCH();
		{ FlushErrorState(); }
		PG_END_TRY();
	}
}

long ms_until(TimestampTz now, TimestampTz at) {
	return at <= now ? 0 : static_cast<long>(std::min<TimestampTz>((at - now + 999) / 1000, 3600 * 1000));
}

// Not inlined: its PG_TRY must not share a frame with the loop's locals.
[[gnu::noinline]] void interrupts_and_settings() noexcept {
	PG_TRY();
	{
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending) {
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
	}
	PG_CATCH();
	{ FlushErrorState(); }
	PG_END_TRY();
}

// Until idle for idle_exit (or terminated: die() at CHECK_FOR_INTERRUPTS).
void serve(NotifierSlot &slot) noexcept {
	TimestampTz last_sent = 0;
	TimestampTz last_busy = GetCurrentTimestamp();
	for (;;) {
		interrupts_and_settings();
		TimestampTz now = GetCurrentTimestamp();
		long timeout_ms;
		if (pg_atomic_read_u32(&slot.wanted) != 0 || pg_atomic_read_u32(&slot.all) != 0) {
			TimestampTz next = last_sent + static_cast<TimestampTz>(notify_interval_ms) * 1000;
			if (last_sent == 0 || now >= next) {
				pg_atomic_write_u32(&slot.wanted, 0);
				bool all = pg_atomic_exchange_u32(&slot.all, 0) != 0;
				send(all);
				last_sent = last_busy = GetCurrentTimestamp();
				continue;
			}
			timeout_ms = ms_until(now, next);
		} else {
			TimestampTz end = last_busy + idle_exit;
			if (now >= end) {
				SpinLockAcquire(&shared->mutex);
				bool stay = pg_atomic_read_u32(&slot.wanted) != 0 || pg_atomic_read_u32(&slot.all) != 0;
				if (!stay)
					slot.latch = nullptr;
				SpinLockRelease(&shared->mutex);
				if (!stay)
					return;
				continue;
			}
			timeout_ms = ms_until(now, end);
		}
		(void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, timeout_ms,
		                PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

} // namespace

void notifier_init() {
	DefineCustomEnumVariable(
	    "concurrency.notify", "How LISTEN users hear that a queue has new work: background, commit or off.",
	    "background: a notifier process of the module notifies the queue's channel shortly after the "
	    "commit, and the committing transaction sends no NOTIFY (its commit does not wait for others'); "
	    "commit: a NOTIFY in the committing transaction (commits that notify are serialised); off: none. "
	    "Without the module in shared_preload_libraries, background notifies at commit.",
	    &notify_mode, static_cast<int>(NotifyMode::background), notify_modes, PGC_USERSET, 0, nullptr,
	    nullptr, nullptr);
	DefineCustomIntVariable("concurrency.notify_interval",
	                        "The shortest time between two notifications of a database's notifier.",
	                        "Work committed meanwhile is told in the next one.", &notify_interval_ms, 20, 1,
	                        60 * 1000, PGC_SIGHUP, GUC_UNIT_MS, nullptr, nullptr, nullptr);
	if (!process_shared_preload_libraries_in_progress)
		return;
	pg::add_shared_memory(request_shared_memory, start_shared_memory);
	bgworker::add_tenant(bgworker::Tenant{"notifier launcher", launcher_start, launcher_tick, launcher_stop});
}

bool notifier_available() {
	return shared != nullptr;
}

void notifier_wanted(Oid database, bool all) noexcept {
	if (!shared)
		return;
	SpinLockAcquire(&shared->mutex);
	int i = slot_of_locked(database);
	Latch *latch = shared->launcher;
	if (i >= 0) {
		NotifierSlot &slot = shared->slots[i];
		if (all)
			pg_atomic_write_u32(&slot.all, 1);
		pg_atomic_write_u32(&slot.wanted, 1);
		if (slot.latch)
			latch = slot.latch;
	}
	SpinLockRelease(&shared->mutex);
	if (latch)
		SetLatch(latch);
}

} // namespace concurrency::queue

using namespace concurrency::queue;

// The entry point of a database's notifier (bgw_function_name): bgw_main_arg
// is its slot, bgw_extra its database.
extern "C" void concurrency_notifier_main(Datum arg) {
	int i = DatumGetInt32(arg);
	Oid database = InvalidOid;
	std::memcpy(&database, MyBgworkerEntry->bgw_extra, sizeof database);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	if (!shared || i < 0 || i >= max_notifier_databases)
		proc_exit(0);
	BackgroundWorkerInitializeConnectionByOid(database, InvalidOid, 0);
	pgstat_report_appname("concurrency_ext notifier");
	// Its commits carry notifications only: none waits for the flush.
	SetConfigOption("synchronous_commit", "off", PGC_SUSET, PGC_S_OVERRIDE);
	NotifierSlot &slot = shared->slots[i];
	SpinLockAcquire(&shared->mutex);
	bool mine = slot.database == database && slot.latch == nullptr;
	if (mine)
		slot.latch = MyLatch;
	SpinLockRelease(&shared->mutex);
	if (!mine) // the slot went to another database, or another notifier serves it
		proc_exit(0);
	my_slot = &slot;
	before_shmem_exit(leave_slot, 0);
	serve(slot);
	proc_exit(0);
}
