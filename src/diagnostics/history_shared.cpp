// Settings, shared memory and the sampler's registration for the lock-wait
// history. Only a preloaded module (shared_preload_libraries) gets the ring
// and the sampler; loaded lazily by CREATE EXTENSION, the module defines the
// settings and everything else works as without the history.
#include <cstring>

#include "common/error.hpp"
#include "diagnostics/history_exits.hpp"
#include "diagnostics/history_shared.hpp"
#include "pg/shmem.hpp"

extern "C" {
#include "postmaster/bgworker.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/guc.h"
}

namespace concurrency::diagnostics {

int history_interval_ms = 500;
int history_size = 1000;
int history_log_min_duration_ms = -1;

namespace {

HistoryShared *shared = nullptr;

Size shared_size() {
	return add_size(offsetof(HistoryShared, slots),
	                mul_size(static_cast<Size>(history_size), sizeof(HistorySlot)));
}

// 1 to 9 ms would sample so often that the sampler itself becomes the load.
bool check_interval(int *value, void **, GucSource) {
	if (*value == 0 || *value >= 10)
		return true;
	GUC_check_errdetail("The interval is 0 (sampling off) or between 10 ms and 1 h.");
	return false;
}

void request_shared_memory() {
	RequestAddinShmemSpace(shared_size());
}

void start_shared_memory() {
	bool found = false;
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	auto *ring =
	    static_cast<HistoryShared *>(ShmemInitStruct("concurrency_ext lock history", shared_size(), &found));
	if (!found) {
		std::memset(static_cast<void *>(ring), 0, shared_size());
		pg_atomic_init_u64(&ring->floor, 1);
		pg_atomic_init_u64(&ring->next_id, 1);
		pg_atomic_init_u32(&ring->worker_pid, 0);
		pg_atomic_init_u64(&ring->samples, 0);
		pg_atomic_init_u64(&ring->sample_cpu_ns, 0);
		pg_atomic_init_u64(&ring->last_sample_at, 0);
		ring->next_slot = 0;
		ring->capacity = static_cast<uint32>(history_size);
		for (uint32 i = 0; i < ring->capacity; ++i)
			pg_atomic_init_u32(&ring->slots[i].changecount, 0);
	}
	LWLockRelease(AddinShmemInitLock);
	shared = ring;
}

void define_settings() {
	DefineCustomIntVariable("concurrency.history_interval",
	                        "How often the lock-wait history samples the wait graph (0 turns sampling off).",
	                        "Needs concurrency_ext in shared_preload_libraries.", &history_interval_ms, 500,
	                        0, 3600 * 1000, PGC_SIGHUP, GUC_UNIT_MS, check_interval, nullptr, nullptr);
	DefineCustomIntVariable("concurrency.history_log_min_duration",
	                        "Logs every lock-wait episode that lasted at least this long (-1 turns it off).",
	                        nullptr, &history_log_min_duration_ms, -1, -1, INT_MAX, PGC_SIGHUP, GUC_UNIT_MS,
	                        nullptr, nullptr, nullptr);
	// A server-start setting can only be defined while the server starts
	// (PostgreSQL refuses it later with FATAL): only when preloading.
	if (process_shared_preload_libraries_in_progress)
		DefineCustomIntVariable("concurrency.history_size", "How many lock-wait episodes the history keeps.",
		                        "Set at server start; each episode takes about 2.5 kB of shared memory.",
		                        &history_size, 1000, 1, 100000, PGC_POSTMASTER, 0, nullptr, nullptr, nullptr);
}

} // namespace

HistoryShared *history_shared() {
	return shared;
}

HistoryShared &require_history() {
	if (!shared)
		throw Error(sqlstate::object_not_in_prerequisite_state, "lock history is not enabled",
		            "The lock-wait history needs its shared memory and sampler, set up at server start.",
		            "Add concurrency_ext to shared_preload_libraries and restart the server.");
	return *shared;
}

void history_write(HistoryShared &ring, uint32 i, const HistoryEpisode &episode) {
	HistorySlot &slot = ring.slots[i];
	pg_atomic_fetch_add_u32(&slot.changecount, 1); // odd: being written (a full barrier)
	std::memcpy(static_cast<void *>(&slot.episode), &episode, sizeof episode);
	pg_atomic_fetch_add_u32(&slot.changecount, 1); // even again (a full barrier)
}

bool history_read(const HistoryShared &ring, uint32 i, HistoryEpisode *out) {
	auto &slot = const_cast<HistorySlot &>(ring.slots[i]);
	for (int attempt = 0; attempt < 1000; ++attempt) {
		uint32 before = pg_atomic_read_u32(&slot.changecount);
		pg_read_barrier();
		if ((before & 1) == 0) {
			std::memcpy(static_cast<void *>(out), &slot.episode, sizeof *out);
			pg_read_barrier();
			if (pg_atomic_read_u32(&slot.changecount) == before)
				return true;
		}
		if (attempt >= 10)
			pg_usleep(10);
	}
	return false;
}

void history_init() {
	define_settings();
	if (!process_shared_preload_libraries_in_progress)
		return;
	pg::add_shared_memory(request_shared_memory, start_shared_memory);
	history_exits_init();
	history_sampler_tenant();
}

} // namespace concurrency::diagnostics
