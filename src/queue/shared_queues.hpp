// Per-queue state in shared memory: a hash table keyed by (database, queue
// name), in the shared memory of a preloaded module, guarded by an LWLock of
// its own. Used by dequeue(…, wait)'s condition variables (wait.cpp) and the
// fair rotation's position (fair.cpp). Internal to src/queue.
#pragma once

#include <string_view>

#include "common/names.hpp"
#include "pg/postgres.hpp"

extern "C" {
#include "storage/lwlock.h"
#include "utils/hsearch.h"
}

namespace concurrency::queue {

struct SharedQueueKey {
	Oid database;
	char queue[max_queue_name_bytes + 1];
};

// The key of `queue` in this database (every byte set: the hash reads them all).
SharedQueueKey shared_queue_key(std::string_view queue);

// One table. Entries start with their SharedQueueKey and are never removed.
// An object of static storage: request() from the shared memory request hook,
// start() from the start-up hook (pg::add_shared_memory); until then (the
// module not preloaded) there is no table.
class SharedQueues {
  public:
	constexpr SharedQueues(const char *name, long max_entries, Size entry_size)
	    : name_(name), max_entries_(max_entries), entry_size_(entry_size) {}
	void request() const;
	void start();

	bool exists() const { return table_ != nullptr; }
	HTAB *table() const { return table_; }
	LWLock *lock() const { return lock_; }

	// The entry of `key`, made and set up by `init` (under the exclusive
	// lock) when missing; nullptr when every entry is taken. Errors are
	// PostgreSQL's (call inside pg::guard).
	void *find_or_enter(const SharedQueueKey &key, void (*init)(void *entry));

  private:
	const char *name_;
	long max_entries_;
	Size entry_size_;
	HTAB *table_ = nullptr;
	LWLock *lock_ = nullptr;
};

} // namespace concurrency::queue
