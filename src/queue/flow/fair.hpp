// Fair claims (alter_queue(…, fair => true); docs/queue.md, "Fair claims"):
// where in the rotation of a queue's keys the next claim starts. Internal to
// src/queue.
//
// A fair queue's claims take the first ready task of each key in turn, the
// keys in their sort order (the tasks without a key first, as one more key),
// and start after the last key the previous claim of the queue looked at,
// from any backend: the position is kept in shared memory where the module
// is preloaded (per backend otherwise, and for a queue beyond the slots
// there). It is a hint, not a lock: two claims that start at the same moment
// may both serve the same key, and a restart begins the rotation again.
#pragma once

#include <string>
#include <string_view>

#include "queue/queue_sql.hpp"

namespace concurrency::queue {

struct FairPosition {
	FairFrom from = FairFrom::start;
	std::string key; // after_key: the key after which the rotation goes on
};

// From _PG_init: the shared memory, when preloading.
void fair_init();

// The position of `queue` (of this database) in its rotation.
FairPosition fair_position(std::string_view queue);
// Sets it after a claim. A key longer than the shared slot holds is kept
// per backend.
void set_fair_position(std::string_view queue, const FairPosition &at);

} // namespace concurrency::queue
