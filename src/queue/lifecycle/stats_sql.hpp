// The SQL of concurrency.queue_stats for one queue: each count is read from
// the partial index of its state (ready, scheduled, leased, dead, finished,
// keyed), so that retained tasks (done, cancelled: possibly millions, kept
// for `retain`) are read only to count them, and no count reads the whole
// table. Pure C++ (no PostgreSQL headers); identifiers quoted, operators
// schema-qualified. Unit-tested in test/unit/stats_sql_test.cpp.
#pragma once

#include <string>
#include <string_view>

#include "queue/relation_names.hpp"

namespace concurrency::queue {

class StatsSql {
  public:
	explicit StatsSql(std::string_view queue);

	// The partial index of dead tasks (dead_q_<queue>), the only state that
	// no other index covers: made by create_queue next to the table's
	// others (the update from 0.1.0 adds it to existing queues). Dead tasks
	// are few and rarely change, so it costs the claim path nothing.
	// named as QueueSql::create_table names the others (`naming`)
	std::string create_index(Naming naming) const;
	// $1 timestamptz now -> one row: ready (with due scheduled tasks),
	// scheduled, leased, expired, dead, oldest_ready_age, done, cancelled,
	// blocked (keyed tasks held back by their key).
	std::string stats() const;
	// The same counts of a distributed queue (Citus), in one query over
	// every shard of its table: aggregates that Citus computes on each shard
	// and adds up (the subqueries of stats() it cannot plan across shards).
	std::string stats_over_shards() const;

  private:
	std::string queue_;
	std::string table_; // concurrency."q_<queue>", quoted
};

} // namespace concurrency::queue
