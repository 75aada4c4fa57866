// The task queue's PostgreSQL side: per-backend queue cache, plan runner,
// materialized result sets. Internal to src/queue.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "queue/claim_cursor.hpp"
#include "queue/queue_sql.hpp"
#include "pg/datum.hpp"
#include "pg/spi.hpp"

extern "C" {
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
}

namespace concurrency::queue {

// What a backend remembers about one queue. The settings of a queue never
// change after creation, so they are valid as long as the queue's table is
// the same (the same OID); a dropped and re-created queue is loaded again.
struct QueueInfo {
	Oid relid = InvalidOid;
	Interval lease{};
	int32 max_attempts = 0;
	ClaimCursor cursor;
};

// An open queue for the duration of one function call (SPI connected).
class Queue {
public:
	// Looks the queue up (42704 if it does not exist) and loads its settings
	// when this backend has not seen this incarnation of it yet.
	explicit Queue(std::string name);

	const std::string &name() const { return name_; }
	const QueueSql &sql() const { return sql_; }
	QueueInfo &info() { return *info_; }

	// Runs statement `op` of this queue, prepared on first use in this
	// backend and kept. Returns SPI_processed; rows are in SPI_tuptable.
	uint64 run(const char *op, const std::string &sql, int nargs, const Oid *types, const Datum *values,
	           const char *nulls = nullptr);

	// Raises CE001 for task `task_id` after a statement under a lease token
	// found nothing, with what became of the task.
	[[noreturn]] void lease_lost(int64 task_id);

	// NOTIFY concurrency_<queue> (delivered at commit; one per transaction).
	void notify();

private:
	std::string name_;
	QueueSql sql_;
	QueueInfo *info_;
};

// Validated queue name from argument 0 (22004 when NULL, 22023 when invalid).
std::string queue_name_arg(FunctionCallInfo fcinfo);

// Oid of concurrency."q_<queue>", or InvalidOid.
Oid queue_relid(const std::string &queue);

// Forgets this backend's plans and settings of `queue` (after DROP).
void forget_queue(const std::string &queue);

// Positive interval from argument n (22023 otherwise); n must not be NULL.
Interval positive_interval_arg(FunctionCallInfo fcinfo, int n, const char *argname);

// How many transaction ids the xmin horizon (the oldest one that some
// snapshot may still need, server-wide) trails the next one by.
uint32 horizon_lag();

// SPI_getbinval through the guard.
Datum column(int row, int col, bool *isnull);
int64 int64_column(int row, int col);

} // namespace concurrency::queue
