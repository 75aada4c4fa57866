// Queue counts over time (see queue/time/stats_history.hpp).
#include "queue/time/stats_history.hpp"

#include <climits>

#include "pg/guard.hpp"
#include "pg/spi.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
}

using namespace concurrency;

namespace {

int interval_s = 60;      // concurrency.stats_history_interval (0: off)
int retention_min = 1440; // concurrency.stats_history_retention

constexpr TimestampTz never = PG_INT64_MAX;

} // namespace

namespace concurrency::queue {

void stats_history_init() {
	DefineCustomIntVariable("concurrency.stats_history_interval",
	                        "How often each database's queue counts are sampled into "
	                        "concurrency.queue_stats_sample (0 turns sampling off).",
	                        "Needs concurrency_ext in shared_preload_libraries; may be set per database "
	                        "(ALTER DATABASE … SET).",
	                        &interval_s, 60, 0, 24 * 3600, PGC_SUSET, GUC_UNIT_S, nullptr, nullptr, nullptr);
	DefineCustomIntVariable("concurrency.stats_history_retention",
	                        "How long the samples of concurrency.queue_stats_sample are kept.", nullptr,
	                        &retention_min, 1440, 1, 366 * 1440, PGC_SUSET, GUC_UNIT_MIN, nullptr, nullptr,
	                        nullptr);
}

bool stats_history_enabled() {
	return interval_s > 0;
}

TimestampTz sample_queue_stats(TimestampTz now) {
	if (interval_s <= 0)
		return never;
	if (!pg::guard([] { return OidIsValid(get_extension_oid("concurrency_ext", true)); }))
		return never;
	pg::spi_connect();
	// an older version of the extension has no such function: no sampling
	uint64 n = pg::execute("SELECT pg_catalog.to_regprocedure('concurrency.queue_stats_sample(interval)') "
	                       "IS NOT NULL",
	                       0, nullptr, nullptr, nullptr, true);
	bool present = n == 1 && pg::column_as<bool>(0, 1).value_or(false);
	TimestampTz next = never;
	if (present) {
		// At most one sample an interval, however often the runner starts (a
		// create_queue starts it too): the microseconds until the next one
		// is due, <= 0 when it is due now.
		static const Oid wait_types[1] = {INT4OID};
		Datum wait_values[1] = {Int32GetDatum(interval_s)};
		(void)pg::execute(
		    "SELECT COALESCE(pg_catalog.date_part('epoch', pg_catalog.max(sampled_at) "
		    "OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => $1) OPERATOR(pg_catalog.-) "
		    "pg_catalog.now()), 0) FROM concurrency.queue_stats_sample",
		    1, wait_types, wait_values, nullptr, true);
		double wait_s = pg::column_as<double>(0, 1).value_or(0);
		if (wait_s > 0) {
			next = now + static_cast<TimestampTz>(wait_s * USECS_PER_SEC);
		} else {
			// A sample reads every queue's table: it gives way to DDL (a
			// drop_queue, DROP EXTENSION) at once instead of holding one
			// table's lock while it waits for another's, which could close a
			// deadlock with the DDL (lock_timeout, for this transaction only;
			// the sample is then taken at the next interval).
			// It reads each state's count from its partial index, as a user's
			// queue_stats does, not by a scan of a small table.
			(void)pg::execute("SELECT pg_catalog.set_config('lock_timeout', '5ms', true), "
			                  "pg_catalog.set_config('enable_seqscan', 'off', true)",
			                  0, nullptr, nullptr, nullptr, false);
			static const Oid types[1] = {INT4OID};
			Datum values[1] = {Int32GetDatum(retention_min)};
			(void)pg::execute("SELECT concurrency.queue_stats_sample(pg_catalog.make_interval(mins => $1))",
			                  1, types, values, nullptr, false);
			next = now + static_cast<TimestampTz>(interval_s) * USECS_PER_SEC;
		}
	}
	pg::spi_finish();
	return next;
}

TimestampTz next_sample_after_failure(TimestampTz now) {
	return interval_s > 0 ? now + static_cast<TimestampTz>(interval_s) * USECS_PER_SEC : never;
}

} // namespace concurrency::queue
