// The names of a queue's relations on the PostgreSQL side (names.cpp).
#pragma once

#include <string>

#include "queue/relation_names.hpp"

namespace concurrency::queue {

// Before a new queue's relations are created under `naming` (create_queue,
// SPI connected): refuses (42P07, with a DETAIL naming the queue and a HINT)
// a name whose relations another queue already has.
void refuse_names_of_other_queues(const std::string &name, Naming naming, bool rate_limit,
                                  bool key_rate_limit);

} // namespace concurrency::queue
