// Per-queue state in shared memory (see queue/shared_queues.hpp).
#include "queue/shared_queues.hpp"

#include <algorithm>
#include <cstring>

extern "C" {
#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
}

namespace concurrency::queue {

SharedQueueKey shared_queue_key(std::string_view queue) {
	SharedQueueKey key;
	std::memset(&key, 0, sizeof key);
	key.database = MyDatabaseId;
	std::memcpy(key.queue, queue.data(), std::min(queue.size(), max_queue_name_bytes));
	return key;
}

void SharedQueues::request() const {
	RequestAddinShmemSpace(hash_estimate_size(max_entries_, entry_size_));
	RequestNamedLWLockTranche(name_, 1);
}

void SharedQueues::start() {
	HASHCTL info;
	std::memset(&info, 0, sizeof info);
	info.keysize = sizeof(SharedQueueKey);
	info.entrysize = entry_size_;
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	table_ =
	    ShmemInitHash(name_, max_entries_, max_entries_, &info, HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
	lock_ = &GetNamedLWLockTranche(name_)->lock;
	LWLockRelease(AddinShmemInitLock);
}

void *SharedQueues::find_or_enter(const SharedQueueKey &key, void (*init)(void *entry)) {
	LWLockAcquire(lock_, LW_SHARED);
	void *entry = hash_search(table_, &key, HASH_FIND, nullptr);
	LWLockRelease(lock_);
	if (entry)
		return entry;
	bool found = false;
	LWLockAcquire(lock_, LW_EXCLUSIVE);
	entry = hash_search(table_, &key, HASH_ENTER_NULL, &found);
	if (entry && !found)
		init(entry);
	LWLockRelease(lock_);
	return entry;
}

} // namespace concurrency::queue
