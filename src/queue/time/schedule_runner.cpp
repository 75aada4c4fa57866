// The schedule runner and its launcher (see queue/schedule_runner.hpp).
//
// Shared state: one slot per database, holding the next time a runner must
// look there (0: at once; `never`: only when asked). The launcher is the
// only process that starts runners; a backend asks for one by writing 0
// into its database's slot and setting the launcher's latch. A runner, once
// connected, writes a retry time first (so that one that fails is started
// again later) and the database's next due time last. A runner that cannot
// connect (the database was dropped) leaves `never`, which the launcher
// wrote before starting it.
#include "queue/time/schedule_runner.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bgworker/host.hpp"
#include "pg/guard.hpp"
#include "pg/shmem.hpp"
#include "pg/spi.hpp"
#include "queue/queue.hpp"
#include "queue/time/schedule.hpp"
#include "queue/time/stats_history.hpp"

extern "C" {
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
}

using namespace concurrency;
using namespace concurrency::queue;

namespace {

// Databases the runner serves; beyond them, their dequeue calls alone
// enqueue due times (a slot whose database was dropped is reused).
constexpr int max_runner_databases = 256;
constexpr TimestampTz never = PG_INT64_MAX;
// A runner that failed (a queue's materialization raised an error) looks
// again after this long.
constexpr TimestampTz retry_after = 10 * USECS_PER_SEC;
// A runner that could not be started (no free background worker slot).
constexpr TimestampTz start_retry_after = USECS_PER_SEC;

struct RunnerSlot {
	Oid database; // InvalidOid: free
	pg_atomic_uint64 next_look;
};

struct RunnerShared {
	slock_t mutex; // guards `used`, the slots' databases and `launcher`
	Latch *launcher;
	int used;
	RunnerSlot slots[max_runner_databases];
};

RunnerShared *shared = nullptr; // nullptr: not preloaded
bool runner_enabled = true;     // concurrency.schedule_runner
bool wake_at_commit = false;    // this transaction wrote concurrency.schedule
bool start_at_commit = false;   // this transaction created a queue
bool quiet = false;             // QuietSchedules alive

// The launcher's handles of the runners it started, by slot.
std::array<BackgroundWorkerHandle *, max_runner_databases> running{};

void request_shared_memory() {
	RequestAddinShmemSpace(sizeof(RunnerShared));
}

void start_shared_memory() {
	bool found = false;
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	auto *s = static_cast<RunnerShared *>(
	    ShmemInitStruct("concurrency_ext schedule runner", sizeof(RunnerShared), &found));
	if (!found) {
		std::memset(static_cast<void *>(s), 0, sizeof *s);
		SpinLockInit(&s->mutex);
		for (RunnerSlot &slot : s->slots)
			pg_atomic_init_u64(&slot.next_look, static_cast<uint64>(never));
	}
	LWLockRelease(AddinShmemInitLock);
	shared = s;
}

// The slot of `database`, added when missing (reusing one that waits for
// nothing); -1 when every slot is taken. Spinlock held by the caller.
int slot_of_locked(Oid database) {
	for (int i = 0; i < shared->used; ++i)
		if (shared->slots[i].database == database)
			return i;
	int free = -1;
	if (shared->used < max_runner_databases)
		free = shared->used++;
	else
		for (int i = 0; i < shared->used && free < 0; ++i)
			if (pg_atomic_read_u64(&shared->slots[i].next_look) == static_cast<uint64>(never))
				free = i;
	if (free >= 0)
		shared->slots[free].database = database;
	return free;
}

// Asks for a runner in `database` at once: its next look becomes 0 and the
// launcher's latch is set. Raises no error.
void ask_for_look(Oid database) {
	if (!shared)
		return;
	SpinLockAcquire(&shared->mutex);
	int i = slot_of_locked(database);
	Latch *launcher = shared->launcher;
	SpinLockRelease(&shared->mutex);
	if (i < 0)
		return;
	pg_atomic_write_u64(&shared->slots[i].next_look, 0);
	if (launcher)
		SetLatch(launcher);
}

// Asks for a runner in `database` at once where none is due there: its next
// look is `never` (no runner started since the server started, or the last
// one found nothing to look at again, such as no extension). A database
// whose runner runs, or will at its next look, is left alone: that runner
// looks at what the caller made (its next sample) without a background
// worker more. Raises no error.
void ask_for_look_if_none_due(Oid database) {
	if (!shared)
		return;
	SpinLockAcquire(&shared->mutex);
	int i = slot_of_locked(database);
	SpinLockRelease(&shared->mutex);
	if (i >= 0 && pg_atomic_read_u64(&shared->slots[i].next_look) == static_cast<uint64>(never))
		ask_for_look(database);
}

// For a runner: replaces its database's next look when it still holds
// `expected` (what the launcher or the runner wrote before), so that a
// backend's request for a look at once, written meanwhile, is not lost.
bool replace_next_look(Oid database, TimestampTz expected, TimestampTz at) {
	if (!shared)
		return false;
	SpinLockAcquire(&shared->mutex);
	int i = slot_of_locked(database);
	SpinLockRelease(&shared->mutex);
	if (i < 0)
		return false;
	auto seen = static_cast<uint64>(expected);
	return pg_atomic_compare_exchange_u64(&shared->slots[i].next_look, &seen, static_cast<uint64>(at));
}

void on_transaction_end(XactEvent event, void *) {
	switch (event) {
	case XACT_EVENT_COMMIT:
	case XACT_EVENT_PARALLEL_COMMIT:
		if (wake_at_commit)
			ask_for_look(MyDatabaseId);
		else if (start_at_commit)
			ask_for_look_if_none_due(MyDatabaseId);
		wake_at_commit = start_at_commit = false;
		break;
	case XACT_EVENT_ABORT:
	case XACT_EVENT_PARALLEL_ABORT:
	case XACT_EVENT_PREPARE:
		wake_at_commit = start_at_commit = false;
		break;
	default:
		break;
	}
}

// --- the runner -----------------------------------------------------------

// Runs `body` in a transaction of its own, committed; false (logged, rolled
// back) when it raised an error.
template <typename F> bool in_transaction(const char *what, F &&body) noexcept {
	try {
		pg::guard([] {
			SetCurrentStatementStartTimestamp();
			StartTransactionCommand();
			PushActiveSnapshot(GetTransactionSnapshot());
		});
		body();
		pg::guard([] {
			PopActiveSnapshot();
			CommitTransactionCommand();
		});
		return true;
	} catch (const std::exception &e) {
		std::string message = e.what();
		PG_TRY();
		{
			AbortCurrentTransaction();
			ereport(LOG, (errmsg("schedule runner: %s: %s", what, message.c_str())));
		}
		PG_CATCH();
		{ FlushErrorState(); }
		PG_END_TRY();
		return false;
	}
}

// The queues of this database with a schedule due at `now`; nothing where
// the extension (or its schedules) is not installed here.
std::vector<std::string> due_queues(TimestampTz now, bool &installed) {
	installed = pg::guard([] { return OidIsValid(get_extension_oid("concurrency_ext", true)); }) &&
	            OidIsValid(concurrency_relid("schedule"));
	std::vector<std::string> queues;
	if (!installed)
		return queues;
	pg::spi_connect();
	static const Oid types[1] = {TIMESTAMPTZOID};
	Datum values[1] = {TimestampTzGetDatum(now)};
	// concurrency.schedule only: a transaction that locks it and then
	// concurrency.queue would deadlock with DROP EXTENSION, which takes them
	// the other way round (the paused queues are left out queue by queue)
	uint64 n =
	    pg::execute("SELECT DISTINCT queue FROM concurrency.schedule WHERE enabled AND next_run_at <= $1 "
	                "ORDER BY queue",
	                1, types, values, nullptr, true);
	for (uint64 i = 0; i < n; ++i)
		queues.push_back(pg::text_column(i, 1).value_or(""));
	pg::spi_finish();
	return queues;
}

// The earliest next due time of this database's enabled schedules (the same
// per queue is schedule.cpp's earliest_due), leaving out the queues in
// `paused`: a paused queue's schedules wait for its resume (which asks for a
// look), whose catch-up then follows catch_up.
TimestampTz next_due_in_database(const std::vector<std::string> &paused) {
	pg::spi_connect();
	TimestampTz at = never;
	uint64 n =
	    pg::execute("SELECT queue, min(next_run_at) FROM concurrency.schedule WHERE enabled GROUP BY queue",
	                0, nullptr, nullptr, nullptr, true);
	for (uint64 i = 0; i < n; ++i) {
		std::string queue = pg::text_column(i, 1).value_or("");
		bool isnull = false;
		Datum d = pg::column(i, 2, &isnull);
		if (!isnull && std::find(paused.begin(), paused.end(), queue) == paused.end())
			at = std::min(at, DatumGetTimestampTz(d));
	}
	pg::spi_finish();
	return at;
}

// One runner's work in this database: the due times of every due schedule
// become tasks, one transaction per queue. Returns when to look next.
TimestampTz run_schedules() noexcept {
	TimestampTz next = never;
	bool installed = false;
	std::vector<std::string> queues;
	if (!runner_enabled)
		return never;
	if (!in_transaction("reading schedules", [&] { queues = due_queues(GetCurrentTimestamp(), installed); }))
		return GetCurrentTimestamp() + retry_after;
	if (!installed)
		return never;
	std::vector<std::string> paused;
	for (const std::string &name : queues) {
		// (its writes ask for no runner: `quiet` is set for the whole runner)
		bool ok = in_transaction(fmt::format("queue \"{}\"", name).c_str(), [&] {
			pg::spi_connect();
			Queue q(name);
			if (q.info().paused) // left to its resume
				paused.push_back(name);
			else
				materialize_due(q, GetCurrentTimestamp());
			pg::spi_finish();
		});
		if (!ok)
			next = std::min(next, GetCurrentTimestamp() + retry_after);
	}
	TimestampTz due = never;
	if (!in_transaction("reading schedules", [&] { due = next_due_in_database(paused); }))
		return GetCurrentTimestamp() + retry_after;
	return std::min(next, due);
}

// --- the launcher ---------------------------------------------------------

void start_runner(int i, Oid database) {
	BackgroundWorker worker;
	std::memset(&worker, 0, sizeof worker);
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = BGW_NEVER_RESTART;
	strlcpy(worker.bgw_library_name, "concurrency_ext", sizeof worker.bgw_library_name);
	strlcpy(worker.bgw_function_name, "concurrency_schedule_runner_main", sizeof worker.bgw_function_name);
	strlcpy(worker.bgw_name, "concurrency_ext schedule runner", sizeof worker.bgw_name);
	strlcpy(worker.bgw_type, "concurrency_ext schedule runner", sizeof worker.bgw_type);
	worker.bgw_main_arg = ObjectIdGetDatum(database);
	worker.bgw_notify_pid = MyProcPid; // its start and exit set our latch
	pg_atomic_uint64 &next = shared->slots[i].next_look;
	// a runner that does not get connected leaves this (a dropped database)
	pg_atomic_write_u64(&next, static_cast<uint64>(never));
	BackgroundWorkerHandle *handle = nullptr;
	if (!RegisterDynamicBackgroundWorker(&worker, &handle)) {
		pg_atomic_write_u64(&next, static_cast<uint64>(GetCurrentTimestamp() + start_retry_after));
		return;
	}
	running[static_cast<std::size_t>(i)] = handle;
}

} // namespace

namespace concurrency::queue {

void schedule_runner_init() {
	DefineCustomBoolVariable(
	    "concurrency.schedule_runner",
	    "Whether a background worker enqueues the due times of this database's schedules.",
	    "Needs concurrency_ext in shared_preload_libraries; when off (e.g. ALTER DATABASE … "
	    "SET), only dequeue calls on a schedule's queue enqueue its due times.",
	    &runner_enabled, true, PGC_SUSET, 0, nullptr, nullptr, nullptr);
	stats_history_init();
	if (!process_shared_preload_libraries_in_progress)
		return;
	RegisterXactCallback(on_transaction_end, nullptr);
	pg::add_shared_memory(request_shared_memory, start_shared_memory);
	bgworker::add_tenant(bgworker::Tenant{"schedule launcher", schedule_launcher_start,
	                                      schedule_launcher_tick, schedule_launcher_stop});
}

// Rolls back the transaction of a failed read of pg_database and says so.
// Not inlined: its PG_TRY must not share a frame with the caller's locals.
[[gnu::noinline]] static void abort_reading_databases(const char *message) noexcept {
	PG_TRY();
	{
		AbortCurrentTransaction();
		ereport(LOG, (errmsg("schedule launcher: reading pg_database failed, its transaction rolled back: %s",
		                     message)));
	}
	PG_CATCH();
	{ FlushErrorState(); }
	PG_END_TRY();
}

// The databases whose runners may be wanted, read from pg_database in a
// transaction of its own. If the read fails (a lock timeout, say), the
// transaction is rolled back and the failure logged before it propagates, so
// that the host's next start of the launcher begins outside any transaction
// (one left open made every later StartTransactionCommand of the host fail,
// and no runner ever started).
static std::vector<Oid> databases_to_serve() {
	std::vector<Oid> databases;
	try {
		pg::guard([&] {
			SetCurrentStatementStartTimestamp();
			StartTransactionCommand();
			(void)GetTransactionSnapshot();
			Relation rel = table_open(DatabaseRelationId, AccessShareLock);
			TableScanDesc scan = table_beginscan_catalog(rel, 0, nullptr);
			HeapTuple tuple;
			while ((tuple = heap_getnext(scan, ForwardScanDirection)) != nullptr) {
				auto *db = reinterpret_cast<Form_pg_database>(GETSTRUCT(tuple));
				// -2: a database whose DROP was interrupted (DATCONNLIMIT_INVALID_DB)
				if (db->datallowconn && !db->datistemplate && db->datconnlimit != -2)
					databases.push_back(db->oid);
			}
			table_endscan(scan);
			table_close(rel, AccessShareLock);
			CommitTransactionCommand();
		});
	} catch (const std::exception &e) {
		abort_reading_databases(e.what());
		throw;
	}
	return databases;
}

void schedule_launcher_start() {
	if (!shared)
		return;
	SpinLockAcquire(&shared->mutex);
	shared->launcher = MyLatch;
	SpinLockRelease(&shared->mutex);
	for (Oid database : databases_to_serve())
		ask_for_look(database);
}

long schedule_launcher_tick() noexcept {
	if (!shared)
		return -1;
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz earliest = never;
	SpinLockAcquire(&shared->mutex);
	int used = shared->used;
	SpinLockRelease(&shared->mutex);
	for (int i = 0; i < used; ++i) {
		auto &handle = running[static_cast<std::size_t>(i)];
		if (handle) {
			pid_t pid = 0;
			BgwHandleStatus status = GetBackgroundWorkerPid(handle, &pid);
			if (status != BGWH_STOPPED && status != BGWH_POSTMASTER_DIED)
				continue; // one runner per database at a time
			pfree(handle);
			handle = nullptr;
		}
		SpinLockAcquire(&shared->mutex);
		Oid database = shared->slots[i].database;
		SpinLockRelease(&shared->mutex);
		auto at = static_cast<TimestampTz>(pg_atomic_read_u64(&shared->slots[i].next_look));
		if (!OidIsValid(database) || at == never)
			continue;
		if (at <= now) {
			PG_TRY();
			{ start_runner(i, database); }
			PG_CATCH();
			{ FlushErrorState(); }
			PG_END_TRY();
			at = static_cast<TimestampTz>(pg_atomic_read_u64(&shared->slots[i].next_look));
			if (running[static_cast<std::size_t>(i)] || at == never)
				continue;
		}
		earliest = std::min(earliest, at);
	}
	if (earliest == never)
		return -1;
	return static_cast<long>(std::clamp<TimestampTz>((earliest - now + 999) / 1000, 0, 3600 * 1000));
}

void schedule_launcher_stop() noexcept {
	if (!shared)
		return;
	SpinLockAcquire(&shared->mutex);
	if (shared->launcher == MyLatch)
		shared->launcher = nullptr;
	SpinLockRelease(&shared->mutex);
}

void schedule_changed_in_transaction() {
	if (shared && !quiet)
		wake_at_commit = true;
}

void runner_wanted_in_transaction() {
	if (shared && !quiet)
		start_at_commit = true;
}

QuietSchedules::QuietSchedules() : previous_(quiet) {
	quiet = true;
}

QuietSchedules::~QuietSchedules() {
	quiet = previous_;
}

} // namespace concurrency::queue

// The entry point of a schedule runner (bgw_function_name): connects to the
// database of bgw_main_arg, enqueues what is due there, reports the next due
// time and exits.
extern "C" PGDLLEXPORT void concurrency_schedule_runner_main(Datum arg) {
	Oid database = DatumGetObjectId(arg);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnectionByOid(database, InvalidOid, 0);
	pgstat_report_appname("concurrency_ext schedule runner");
	// Connected: a failure from here on is retried. Where a backend asked
	// for a look since the launcher started this runner, its request stays
	// and the launcher starts another runner after this one.
	TimestampTz retry = GetCurrentTimestamp() + retry_after;
	bool keep = replace_next_look(database, never, retry);
	quiet = true; // the runner's own writes ask for no runner
	TimestampTz next = run_schedules();
	// and the queues' counts, when their sample is due (stats_history.hpp)
	TimestampTz sample_at = PG_INT64_MAX;
	if (!in_transaction("sampling queue counts",
	                    [&] { sample_at = sample_queue_stats(GetCurrentTimestamp()); }))
		sample_at = next_sample_after_failure(GetCurrentTimestamp());
	next = std::min(next, sample_at);
	if (keep)
		replace_next_look(database, retry, next);
	proc_exit(0);
}
