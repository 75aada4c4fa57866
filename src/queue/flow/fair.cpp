// Fair claims: the rotation's position of each queue (see queue/fair.hpp).
#include "queue/flow/fair.hpp"

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>

#include "pg/guard.hpp"
#include "pg/shmem.hpp"
#include "queue/shared_queues.hpp"

extern "C" {
#include "miscadmin.h"
#include "storage/spin.h"
}

namespace concurrency::queue {

namespace {

// Queues (of all databases) whose position is shared; an entry is never
// removed (about 1.1 kB each).
struct FairEntry {
	SharedQueueKey key; // hash key: must come first
	slock_t mutex;
	uint8 from;
	uint16 length;
	char last_key[max_concurrency_key_bytes];
};

SharedQueues fair_queues("concurrency_ext fair claims", 256, sizeof(FairEntry));

// Positions not shared: per backend (not preloaded, or every slot taken).
std::map<std::pair<Oid, std::string>, FairPosition> &local_positions() {
	static std::map<std::pair<Oid, std::string>, FairPosition> positions;
	return positions;
}

void request_shared_memory() {
	fair_queues.request();
}

void start_shared_memory() {
	fair_queues.start();
}

// The queue's shared entry, made when missing; nullptr where there is none.
FairEntry *shared_entry(std::string_view queue) {
	if (!fair_queues.exists())
		return nullptr;
	SharedQueueKey key = shared_queue_key(queue);
	return pg::guard([&] {
		return static_cast<FairEntry *>(fair_queues.find_or_enter(key, [](void *made) {
			auto *entry = static_cast<FairEntry *>(made);
			SpinLockInit(&entry->mutex);
			entry->from = static_cast<uint8>(FairFrom::start);
			entry->length = 0;
		}));
	});
}

} // namespace

void fair_init() {
	if (!process_shared_preload_libraries_in_progress)
		return;
	pg::add_shared_memory(request_shared_memory, start_shared_memory);
}

FairPosition fair_position(std::string_view queue) {
	auto local = local_positions().find({MyDatabaseId, std::string(queue)});
	if (local != local_positions().end())
		return local->second;
	FairEntry *entry = shared_entry(queue);
	if (!entry)
		return {};
	FairPosition at;
	char copy[max_concurrency_key_bytes];
	SpinLockAcquire(&entry->mutex);
	at.from = static_cast<FairFrom>(entry->from);
	uint16 length = entry->length;
	std::memcpy(copy, entry->last_key, length);
	SpinLockRelease(&entry->mutex);
	if (at.from == FairFrom::after_key)
		at.key.assign(copy, length);
	return at;
}

void set_fair_position(std::string_view queue, const FairPosition &at) {
	FairEntry *entry = at.key.size() <= max_concurrency_key_bytes ? shared_entry(queue) : nullptr;
	auto &local = local_positions();
	if (!entry) {
		local[{MyDatabaseId, std::string(queue)}] = at;
		return;
	}
	local.erase({MyDatabaseId, std::string(queue)});
	SpinLockAcquire(&entry->mutex);
	entry->from = static_cast<uint8>(at.from);
	entry->length = static_cast<uint16>(at.from == FairFrom::after_key ? at.key.size() : 0);
	std::memcpy(entry->last_key, at.key.data(), entry->length);
	SpinLockRelease(&entry->mutex);
}

} // namespace concurrency::queue
