// The relations a queue's name gives (its table, indexes and side tables in
// the schema concurrency), and the queue a relation of that schema belongs
// to. Queue names are free text, so one queue's derived name can be
// another's: queue "jobs" has the index q_jobs_keyed, which is the table of
// a queue "jobs_keyed". create_queue uses these to say which queue holds a
// name before it creates anything. Pure C++; unit-tested in
// test/unit/relation_names_test.cpp.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace concurrency::queue {

// The relations create_queue makes for `queue` under its own names (not the
// identity sequence, whose name PostgreSQL chooses free of clashes): the
// table q_<queue> and its indexes, the key and lease-slot tables, and with a
// rate limit (key rate limit) its slot table (and the fair index).
std::vector<std::string> relations_of_new_queue(std::string_view queue, bool rate_limit, bool key_rate_limit);

// The queue whose table or side table `table` (unquoted, a table's name, not
// an index's) would be, by its prefix: q_, k_, s_, r_ or rk_; nothing for a
// name with none of them.
std::optional<std::string> queue_of_table(std::string_view table);

} // namespace concurrency::queue
