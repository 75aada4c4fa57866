// The background process host (see bgworker/host.hpp).
#include "bgworker/host.hpp"

#include <array>
#include <cstring>
#include <exception>

#include "pg/guard.hpp"

extern "C" {
#include "miscadmin.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

PGDLLEXPORT void concurrency_host_main(Datum);
}

namespace concurrency::bgworker {

namespace {

constexpr std::size_t max_tenants = 8;
constexpr TimestampTz start_retry_after = 10 * USECS_PER_SEC;
constexpr TimestampTz log_at_most_every = 60 * USECS_PER_SEC;

struct Lodging {
	Tenant tenant{};
	bool started = false;
	TimestampTz start_at = 0;  // when to try its start (again)
	TimestampTz logged_at = 0; // its last failure logged
};

std::array<Lodging, max_tenants> tenants;
std::size_t tenant_count = 0;

// "<name> failed: <what>", at most once a minute per tenant. Never throws.
// Not inlined: its PG_TRY must not share a frame with the callers' locals.
[[gnu::noinline]] void report(Lodging &l, const char *what) noexcept {
	TimestampTz now = GetCurrentTimestamp();
	if (l.logged_at && now - l.logged_at < log_at_most_every)
		return;
	l.logged_at = now;
	PG_TRY();
	{ ereport(LOG, (errmsg("%s failed: %s", l.tenant.name, what))); }
	PG_CATCH();
	{ FlushErrorState(); }
	PG_END_TRY();
}

// After a tenant's failure: the LWLocks it held (an error thrown between
// acquire and release), as a backend's error recovery would.
[[gnu::noinline]] void recover() noexcept {
	PG_TRY();
	{ LWLockReleaseAll(); }
	PG_CATCH();
	{ FlushErrorState(); }
	PG_END_TRY();
}

template <typename F> bool serve(Lodging &l, F &&call) noexcept {
	try {
		call();
		return true;
	} catch (const std::exception &e) {
		report(l, e.what());
	} catch (...) {
		report(l, "unknown error");
	}
	recover();
	return false;
}

// The time left until `at`, in whole milliseconds (at least 0).
long ms_until(TimestampTz now, TimestampTz at) {
	return at <= now ? 0 : static_cast<long>((at - now + 999) / 1000);
}

[[gnu::noinline]] long tend(TimestampTz now) noexcept {
	long sleep_ms = -1;
	auto at_most = [&](long ms) {
		if (ms >= 0 && (sleep_ms < 0 || ms < sleep_ms))
			sleep_ms = ms;
	};
	for (std::size_t i = 0; i < tenant_count; ++i) {
		Lodging &l = tenants[i];
		if (!l.started) {
			if (now < l.start_at) {
				at_most(ms_until(now, l.start_at));
				continue;
			}
			l.started = serve(l, [&] { l.tenant.start(); });
			if (!l.started) {
				l.start_at = now + start_retry_after;
				at_most(ms_until(now, l.start_at));
				continue;
			}
		}
		long ms = -1;
		if (!serve(l, [&] { ms = l.tenant.tick(); }))
			ms = 1000; // after a failure: again in a second
		at_most(ms);
	}
	return sleep_ms;
}

void stop_tenants(int, Datum) {
	for (std::size_t i = 0; i < tenant_count; ++i)
		if (tenants[i].started)
			tenants[i].tenant.stop();
}

// Runs until SIGTERM. noexcept: nothing may unwind into the worker's C frames.
void run() noexcept {
	while (!ShutdownRequestPending) {
		if (ConfigReloadPending) {
			ConfigReloadPending = false;
			PG_TRY();
			{ ProcessConfigFile(PGC_SIGHUP); }
			PG_CATCH();
			{ FlushErrorState(); }
			PG_END_TRY();
		}
		long timeout_ms = tend(GetCurrentTimestamp());
		if (ShutdownRequestPending)
			break;
		PG_TRY();
		{
			(void)WaitLatch(MyLatch, WL_LATCH_SET | WL_EXIT_ON_PM_DEATH | (timeout_ms >= 0 ? WL_TIMEOUT : 0),
			                timeout_ms, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS(); // procsignal barriers
		}
		PG_CATCH();
		{ FlushErrorState(); }
		PG_END_TRY();
	}
}

} // namespace

void add_tenant(const Tenant &tenant) {
	if (tenant_count < max_tenants)
		tenants[tenant_count++].tenant = tenant;
}

void init() {
	if (!process_shared_preload_libraries_in_progress || tenant_count == 0)
		return;
	BackgroundWorker worker;
	std::memset(&worker, 0, sizeof worker);
	// A connection to no database: the tenants read shared memory and start
	// the workers that connect to a database (schedule runners, notifiers);
	// it shows in pg_stat_activity (backend_type) with its wait events.
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 5;
	strlcpy(worker.bgw_library_name, "concurrency_ext", sizeof worker.bgw_library_name);
	strlcpy(worker.bgw_function_name, "concurrency_host_main", sizeof worker.bgw_function_name);
	strlcpy(worker.bgw_name, "concurrency_ext background", sizeof worker.bgw_name);
	strlcpy(worker.bgw_type, "concurrency_ext background", sizeof worker.bgw_type);
	RegisterBackgroundWorker(&worker);
}

} // namespace concurrency::bgworker

// The entry point of the host (bgw_function_name).
extern "C" void concurrency_host_main(Datum) {
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(nullptr, nullptr, 0);
	before_shmem_exit(concurrency::bgworker::stop_tenants, 0);
	concurrency::bgworker::run();
	// Leaving on SIGTERM: exit status 1, so that the postmaster starts it
	// again after bgw_restart_time unless the server is shutting down.
	proc_exit(1);
}
