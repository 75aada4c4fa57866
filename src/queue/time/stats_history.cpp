// Queue counts over time (see queue/time/stats_history.hpp): the runner's
// sampling, and concurrency.queue_stats_sample.
#include "queue/time/stats_history.hpp"

#include <climits>
#include <string>
#include <vector>

#include "pg/guard.hpp"
#include "pg/spi.hpp"
#include "queue/queue.hpp"
#include "queue/relation_names.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
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
		// change of a schedule starts it too): the microseconds until the next
		// one is due, <= 0 when it is due now.
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

using namespace concurrency::queue;

namespace {

// One row of every queue's counts that the caller may read, at now(), with
// its table ($2, the OIDs of the tables of the queues named in $1: the
// queue's relid, NULL for one not in $1) and the rows inserted into it.
constexpr const char *sample_sql = R"(INSERT INTO concurrency.queue_stats_sample
       (sampled_at, queue, relid, ready, scheduled, leased, expired, dead, done, cancelled, blocked,
        waiting, inserted)
SELECT pg_catalog.now(), s.queue, t.relid, s.ready, s.scheduled, s.leased, s.expired, s.dead, s.done,
       s.cancelled, s.blocked, s.waiting, pg_catalog.pg_stat_get_tuples_inserted(t.relid)
  FROM concurrency.queue_stats s
  LEFT JOIN ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2)) AS t(queue, relid)
         ON t.queue OPERATOR(pg_catalog.=) s.queue
 WHERE s.ready IS NOT NULL
ON CONFLICT DO NOTHING)";

// The retain argument: a positive interval (22023 otherwise, NULL too).
Interval retain_arg(FunctionCallInfo fcinfo) {
	if (PG_ARGISNULL(0))
		throw Error(sqlstate::invalid_parameter_value, "retain must be positive", "It is NULL.");
	return positive_interval_arg(fcinfo, 0, "retain");
}

// A one-dimensional array of `elements` of type `type` (text or oid).
Datum array_of(std::vector<Datum> &elements, Oid type) {
	return pg::guard([&] {
		int16 len = 0;
		bool byval = false;
		char align = TYPALIGN_INT;
		get_typlenbyvalalign(type, &len, &byval, &align);
		return PointerGetDatum(
		    construct_array(elements.data(), static_cast<int>(elements.size()), type, len, byval, align));
	});
}

} // namespace

// concurrency.queue_stats_sample(retain) -> the samples added: one row of
// every queue's counts (concurrency.queue_stats, as the function's owner:
// SECURITY DEFINER) at now(), with the OID of the queue's table and the rows
// inserted into it; the samples older than retain deleted first.
CONCURRENCY_FUNCTION(concurrency_queue_stats_sample) {
	Interval retain = retain_arg(fcinfo);

	pg::spi_connect();
	static const Oid forget_types[1] = {INTERVALOID};
	Datum forget_values[1] = {IntervalPGetDatum(&retain)};
	pg::execute(pg::prepared_plan(
	                "stats_history:forget",
	                "DELETE FROM concurrency.queue_stats_sample WHERE sampled_at OPERATOR(pg_catalog.<) "
	                "(pg_catalog.now() OPERATOR(pg_catalog.-) $1)",
	                1, forget_types),
	            forget_values, nullptr, false);
	// each queue's table, by the name relation_names gives it
	uint64 n = pg::execute(
	    pg::prepared_plan("stats_history:queues", "SELECT name FROM concurrency.queue", 0, nullptr), nullptr,
	    nullptr, true);
	std::vector<Datum> queues, tables;
	for (uint64 i = 0; i < n; ++i) {
		std::string name = pg::text_column(i, 1).value_or("");
		Oid relid = concurrency_relid(queue_table_name(name));
		if (!OidIsValid(relid))
			continue; // (its relid NULL in the sample, as of a dropped queue)
		queues.push_back(pg::text_datum(name));
		tables.push_back(ObjectIdGetDatum(relid));
	}
	static const Oid types[2] = {TEXTARRAYOID, OIDARRAYOID};
	Datum values[2] = {array_of(queues, TEXTOID), array_of(tables, OIDOID)};
	uint64 added =
	    pg::execute(pg::prepared_plan("stats_history:sample", sample_sql, 2, types), values, nullptr, false);
	pg::spi_finish();
	PG_RETURN_INT64(static_cast<int64>(added));
}
