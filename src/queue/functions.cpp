// SQL-callable functions of the task queue (src/sql/20_queue.sql).
#include <algorithm>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/backoff.hpp"
#include "common/sql_text.hpp"
#include "pg/srf.hpp"
#include "queue/distributed.hpp"
#include "queue/queue.hpp"

extern "C" {
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/inval.h"
}

using namespace concurrency;
using namespace concurrency::queue;

namespace {

// The task functions take the clock once per call, here, and pass it to their
// statements: a deadline computed from now() would be as old as the
// transaction.
TimestampTz clock_now() {
	return pg::guard([] { return GetCurrentTimestamp(); });
}

int32 int32_arg(FunctionCallInfo fcinfo, int n, const char *argname) {
	pg::require_arg(fcinfo, n, argname);
	return PG_GETARG_INT32(n);
}

// run_at may be NULL (now) or a finite time: 'infinity' would be a task that
// never runs, and either infinity breaks every age computed from it.
void check_run_at(FunctionCallInfo fcinfo, int n) {
	if (!PG_ARGISNULL(n) && TIMESTAMP_NOT_FINITE(PG_GETARG_TIMESTAMPTZ(n)))
		throw Error(sqlstate::invalid_parameter_value, "run_at must be a finite time",
		            "Use NULL to run the task now.");
}

int64 int64_arg(FunctionCallInfo fcinfo, int n, const char *argname) {
	pg::require_arg(fcinfo, n, argname);
	return PG_GETARG_INT64(n);
}

std::string interval_text(const Interval &value) {
	return pg::guard([&] {
		return DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(const_cast<Interval *>(&value))));
	});
}

// Uniform in [0, 1), for the jitter of retry delays; seeded once per backend.
double unit_random() {
	static std::mt19937_64 engine{std::random_device{}()};
	return std::uniform_real_distribution<double>(0.0, 1.0)(engine);
}

// SPI_execute_with_args through the guard (one-off statements of create/drop).
uint64 execute(const std::string &sql, int nargs = 0, const Oid *types = nullptr, const Datum *values = nullptr,
               const char *nulls = nullptr) {
	int rc = pg::guard([&] {
		return SPI_execute_with_args(sql.c_str(), nargs, const_cast<Oid *>(types), const_cast<Datum *>(values), nulls,
		                             false, 0);
	});
	if (rc < 0)
		throw Error(sqlstate::internal_error, fmt::format("SPI_execute failed: {}", SPI_result_code_string(rc)), sql);
	return SPI_processed;
}

bool owns_relation(Oid relid, Oid role) {
	return pg::guard([&] {
#if PG_VERSION_NUM >= 160000
		return object_ownercheck(RelationRelationId, relid, role);
#else
		return pg_class_ownercheck(relid, role);
#endif
	});
}

} // namespace

// concurrency.create_queue(queue, lease, max_attempts) — SECURITY DEFINER:
// runs as the extension owner; the table it creates belongs to the caller.
CONCURRENCY_FUNCTION(concurrency_create_queue) {
	std::string name = queue::queue_name_arg(fcinfo);
	pg::require_arg(fcinfo, 1, "lease");
	Interval lease = queue::positive_interval_arg(fcinfo, 1, "lease");
	int32 max_attempts = int32_arg(fcinfo, 2, "max_attempts");
	if (max_attempts < 1)
		throw Error(sqlstate::invalid_parameter_value, "max_attempts must be at least 1");

	Oid caller = pg::guard([] { return GetOuterUserId(); });
	std::string caller_name = pg::guard([&] { return GetUserNameFromId(caller, false); });
	QueueSql sql(name);

	pg::spi_connect();
	static const Oid insert_types[4] = {TEXTOID, INTERVALOID, INT4OID, TEXTOID};
	Datum insert_values[4] = {pg::text_datum(name), IntervalPGetDatum(&lease), Int32GetDatum(max_attempts),
	                          pg::text_datum(caller_name)};
	uint64 inserted =
	    execute("INSERT INTO concurrency.queue (name, lease, max_attempts, created_by) "
	            "VALUES ($1, $2, $3, $4::pg_catalog.name) ON CONFLICT (name) DO NOTHING",
	            4, insert_types, insert_values);
	if (inserted == 0) {
		// It exists (or another session has just created it: ON CONFLICT waited
		// for that one to commit). Same settings: nothing to do.
		static const Oid types[3] = {TEXTOID, INTERVALOID, INT4OID};
		Datum values[3] = {insert_values[0], insert_values[1], insert_values[2]};
		uint64 same = execute("SELECT lease = $2 AND max_attempts = $3 FROM concurrency.queue WHERE name = $1", 3,
		                      types, values);
		bool isnull = false;
		if (same == 1 && !DatumGetBool(queue::column(0, 1, &isnull))) {
			execute("SELECT lease::text, max_attempts FROM concurrency.queue WHERE name = $1", 1, types, values);
			std::string existing_lease = pg::guard([&] { return TextDatumGetCString(queue::column(0, 1, &isnull)); });
			int32 existing_attempts = DatumGetInt32(queue::column(0, 2, &isnull));
			throw Error(sqlstate::duplicate_object,
			            fmt::format("queue \"{}\" already exists with other settings", name),
			            fmt::format("It has lease {} and max_attempts {}; this call asked for lease {} and "
			                        "max_attempts {}.",
			                        existing_lease, existing_attempts, interval_text(lease), max_attempts),
			            "Drop the queue first to change its settings.");
		}
		// Same settings. Only a queue whose table was dropped by hand is
		// missing its table: create it again.
		if (OidIsValid(queue::queue_relid(name))) {
			pg::spi_finish();
			PG_RETURN_VOID();
		}
	}
	execute(sql.create_table());
	if (caller != pg::guard([] { return GetUserId(); }))
		execute(sql.alter_owner(caller_name));
	queue::forget_queue(name);
	pg::spi_finish();
	PG_RETURN_VOID();
}

// concurrency.drop_queue(queue) — SECURITY DEFINER; the caller must own the
// queue's table (superusers do).
CONCURRENCY_FUNCTION(concurrency_drop_queue) {
	std::string name = queue::queue_name_arg(fcinfo);
	Oid caller = pg::guard([] { return GetOuterUserId(); });
	QueueSql sql(name);

	pg::spi_connect();
	Oid relid = queue::queue_relid(name);
	if (OidIsValid(relid)) {
		if (!owns_relation(relid, caller))
			throw Error(sqlstate::insufficient_privilege, fmt::format("must be owner of queue \"{}\"", name),
			            fmt::format("Only the owner of table {} may drop the queue.", sql.table()));
		execute(sql.drop_table());
	}
	static const Oid types[1] = {TEXTOID};
	Datum values[1] = {pg::text_datum(name)};
	uint64 deleted = execute("DELETE FROM concurrency.queue WHERE name = $1", 1, types, values);
	if (!OidIsValid(relid) && deleted == 0)
		throw Error(sqlstate::undefined_object, fmt::format("queue \"{}\" does not exist", name));
	queue::forget_queue(name);
	pg::spi_finish();
	PG_RETURN_VOID();
}

// concurrency.enqueue(queue, payload, run_at, priority, dedupe_key) -> task id
CONCURRENCY_FUNCTION(concurrency_enqueue) {
	std::string name = queue::queue_name_arg(fcinfo);
	pg::require_arg(fcinfo, 1, "payload");
	int32 priority = int32_arg(fcinfo, 3, "priority");
	check_run_at(fcinfo, 2);
	bool has_dedupe = !PG_ARGISNULL(4);
	TimestampTz now = clock_now();

	static const Oid types[5] = {TIMESTAMPTZOID, JSONBOID, TIMESTAMPTZOID, INT4OID, TEXTOID};
	Datum values[5] = {TimestampTzGetDatum(now), PG_GETARG_DATUM(1), PG_ARGISNULL(2) ? Datum(0) : PG_GETARG_DATUM(2),
	                   Int32GetDatum(priority), has_dedupe ? PG_GETARG_DATUM(4) : Datum(0)};
	char nulls[5] = {' ', ' ', PG_ARGISNULL(2) ? 'n' : ' ', ' ', has_dedupe ? ' ' : 'n'};

	pg::spi_connect();
	Queue q(name);
	q.require(ACL_INSERT | ACL_SELECT, "enqueue into");
	if (queue::is_distributed(q.info().relid)) // Citus: src/queue/distributed.hpp
		return queue::forward_distributed(fcinfo, "distributed_enqueue");
	// With a dedupe_key, the insert either adds the task or finds the live
	// task that holds the key (ON CONFLICT waits for a concurrent insert of the
	// same key to commit or roll back). If that task is finished between the
	// insert and the lookup, insert again.
	for (int round = 0; round < 100; ++round) {
		if (q.run(QueueStatement::enqueue, 5, types, values, nulls) == 1) {
			int64 id = queue::int64_column(0, 1);
			q.notify();
			pg::spi_finish();
			PG_RETURN_INT64(id);
		}
		if (!has_dedupe)
			break;
		static const Oid lookup_types[1] = {TEXTOID};
		if (q.run(QueueStatement::dedupe_lookup, 1, lookup_types, &values[4]) == 1) {
			int64 id = queue::int64_column(0, 1);
			pg::spi_finish();
			PG_RETURN_INT64(id);
		}
	}
	throw Error(sqlstate::serialization_failure, fmt::format("could not enqueue into queue \"{}\"", name),
	            "The task holding its dedupe_key kept disappearing.", "Retry the transaction.");
}

// concurrency.enqueue_batch(queue, payloads, run_at, priority) -> task ids
CONCURRENCY_FUNCTION(concurrency_enqueue_batch) {
	std::string name = queue::queue_name_arg(fcinfo);
	pg::require_arg(fcinfo, 1, "payloads");
	int32 priority = int32_arg(fcinfo, 3, "priority");
	check_run_at(fcinfo, 2);
	Datum payloads = PG_GETARG_DATUM(1);
	bool has_nulls = pg::guard([&] { return array_contains_nulls(DatumGetArrayTypeP(payloads)); });
	if (has_nulls)
		throw Error(sqlstate::null_value_not_allowed, "payloads must not contain null");
	TimestampTz now = clock_now();

	static const Oid types[4] = {TIMESTAMPTZOID, JSONBARRAYOID, TIMESTAMPTZOID, INT4OID};
	Datum values[4] = {TimestampTzGetDatum(now), payloads, PG_ARGISNULL(2) ? Datum(0) : PG_GETARG_DATUM(2),
	                   Int32GetDatum(priority)};
	char nulls[4] = {' ', ' ', PG_ARGISNULL(2) ? 'n' : ' ', ' '};

	pg::ResultSet out = pg::materialize(fcinfo, INT8OID);
	pg::spi_connect();
	Queue q(name);
	q.require(ACL_INSERT | ACL_SELECT, "enqueue into");
	if (queue::is_distributed(q.info().relid)) // Citus: src/queue/distributed.hpp
		return queue::forward_distributed(fcinfo, "distributed_enqueue_batch", &out);
	uint64 n = q.run(QueueStatement::enqueue_batch, 4, types, values, nulls);
	for (uint64 i = 0; i < n; ++i) {
		Datum id[1] = {Int64GetDatum(queue::int64_column(static_cast<int>(i), 1))};
		bool isnull[1] = {false};
		pg::add_row(out, id, isnull);
	}
	if (n > 0)
		q.notify();
	pg::spi_finish();
	return Datum(0);
}

// concurrency.dequeue(queue, batch, lease, worker) -> claimed tasks
CONCURRENCY_FUNCTION(concurrency_dequeue) {
	queue::QueueName name = queue::queue_name(fcinfo);
	int32 batch = int32_arg(fcinfo, 1, "batch");
	if (batch < 1)
		throw Error(sqlstate::invalid_parameter_value, "batch must be at least 1");
	std::optional<Interval> lease_arg;
	if (!PG_ARGISNULL(2))
		lease_arg = queue::positive_interval_arg(fcinfo, 2, "lease");
	Datum worker = PG_ARGISNULL(3) ? Datum(0) : PG_GETARG_DATUM(3);
	char worker_null = PG_ARGISNULL(3) ? 'n' : ' ';
	TimestampTz now = clock_now();

	pg::ResultSet out = pg::materialize(fcinfo);
	pg::spi_connect();
	Queue q(name.view());
	q.require(ACL_SELECT | ACL_UPDATE, "dequeue from");
	if (queue::is_distributed(q.info().relid)) // Citus: src/queue/distributed.hpp
		return queue::forward_distributed(fcinfo, "distributed_dequeue", &out);
	Interval lease = lease_arg ? *lease_arg : q.info().lease;
	ClaimCursor &cursor = q.info().cursor;
	// the horizon matters to the cursor only to tell whether it is pinned:
	// sampled at most every 100 ms, not read on every claim
	cursor.begin(now, q.info().horizon.lag(now, queue::horizon_lag));

	static const Oid claim_types[9] = {TIMESTAMPTZOID, INT4OID,        INTERVALOID, TEXTOID, INT8OID,
	                                   TIMESTAMPTZOID, INT8OID, TIMESTAMPTZOID, BOOLOID};
	std::optional<ClaimKey> last;
	std::size_t claimed = 0;
	auto claim_from = [&](ClaimKey start, int32 wanted, bool even_if_tasks_wait) {
		Datum values[9] = {TimestampTzGetDatum(now),
		                   Int32GetDatum(wanted),
		                   IntervalPGetDatum(&lease),
		                   worker,
		                   Int64GetDatum(start.neg_priority),
		                   TimestampTzGetDatum(start.run_at),
		                   Int64GetDatum(start.id),
		                   TimestampTzGetDatum(cursor.wake_floor()),
		                   BoolGetDatum(even_if_tasks_wait)};
		char nulls[9] = {' ', ' ', ' ', worker_null, ' ', ' ', ' ', ' ', ' '};
		uint64 n = q.run(QueueStatement::claim, 9, claim_types, values, nulls);
		auto emit = [&](int row) {
			Datum cols[6];
			bool isnull[6];
			for (int c = 0; c < 6; ++c)
				cols[c] = queue::column(row, c + 1, &isnull[c]);
			pg::add_row(out, cols, isnull);
		};
		auto key_of = [](int row) {
			return ClaimKey{queue::int64_column(row, 7), queue::int64_column(row, 8), queue::int64_column(row, 1)};
		};
		std::optional<ClaimKey> greatest;
		if (n == 1) {
			emit(0);
			greatest = key_of(0);
		} else if (n > 1) {
			// the rows come in primary-key order; return them in claim order
			std::vector<std::pair<ClaimKey, int>> order;
			order.reserve(n);
			for (uint64 i = 0; i < n; ++i)
				order.emplace_back(key_of(static_cast<int>(i)), static_cast<int>(i));
			std::sort(order.begin(), order.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
			for (const auto &entry : order)
				emit(entry.second);
			greatest = order.back().first;
		}
		if (greatest && (!last || *last < *greatest))
			last = greatest;
		claimed += n;
	};

	// 1. The claim, unless due scheduled tasks or expired leases wait to be
	// woken up (two index probes): the common case is this one statement.
	claim_from(cursor.ready_floor(), batch, false);
	if (claimed < static_cast<std::size_t>(batch)) {
		// 2. Wake-up: due scheduled tasks become ready, expired leases are
		// reclaimed (ready again, or dead when their attempts are used up).
		static const Oid wake_types[4] = {TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, INT4OID};
		Datum wake_values[4] = {TimestampTzGetDatum(now), Int32GetDatum(std::max(batch, 32)),
		                        TimestampTzGetDatum(cursor.wake_floor()), Int32GetDatum(q.info().max_attempts)};
		uint64 woken = q.run(QueueStatement::wake, 4, wake_types, wake_values);
		bool made_ready = false;
		for (uint64 i = 0; i < woken && !made_ready; ++i) {
			bool isnull = false;
			made_ready = DatumGetBool(queue::column(static_cast<int>(i), 1, &isnull));
		}
		cursor.woke(made_ready);
		// 3. The rest of the batch, now whatever waits (tasks locked by
		// another worker's wake-up must not stop this one), from the front
		// if tasks were made ready or a resumed scan came back short.
		bool from_front = cursor.rescan_from_front(claimed, static_cast<std::size_t>(batch));
		claim_from(from_front ? ClaimKey::front() : cursor.ready_floor(), batch - static_cast<int32>(claimed), true);
	} else {
		cursor.woke(false);
	}
	cursor.finish(last);
	pg::spi_finish();
	return Datum(0);
}

// concurrency.heartbeat(queue, task_id, lease_token, extend) -> new deadline
CONCURRENCY_FUNCTION(concurrency_heartbeat) {
	queue::QueueName name = queue::queue_name(fcinfo);
	int64 task_id = int64_arg(fcinfo, 1, "task_id");
	int64 token = int64_arg(fcinfo, 2, "lease_token");
	std::optional<Interval> extend_arg;
	if (!PG_ARGISNULL(3))
		extend_arg = queue::positive_interval_arg(fcinfo, 3, "extend");
	TimestampTz now = clock_now();

	pg::spi_connect();
	Queue q(name.view());
	q.require(ACL_SELECT | ACL_UPDATE, "heartbeat tasks of");
	if (queue::is_distributed(q.info().relid)) // Citus: src/queue/distributed.hpp
		return queue::forward_distributed(fcinfo, "distributed_heartbeat");
	Interval extend = extend_arg ? *extend_arg : q.info().lease;
	static const Oid types[4] = {INT8OID, INT8OID, TIMESTAMPTZOID, INTERVALOID};
	Datum values[4] = {Int64GetDatum(task_id), Int64GetDatum(token), TimestampTzGetDatum(now),
	                   IntervalPGetDatum(&extend)};
	if (q.run(QueueStatement::heartbeat, 4, types, values) == 0)
		q.lease_lost(task_id);
	bool isnull = false;
	TimestampTz deadline = DatumGetTimestampTz(queue::column(0, 1, &isnull));
	pg::spi_finish();
	PG_RETURN_TIMESTAMPTZ(deadline);
}

// concurrency.complete(queue, task_id, lease_token)
CONCURRENCY_FUNCTION(concurrency_complete) {
	queue::QueueName name = queue::queue_name(fcinfo);
	int64 task_id = int64_arg(fcinfo, 1, "task_id");
	int64 token = int64_arg(fcinfo, 2, "lease_token");

	pg::spi_connect();
	Queue q(name.view());
	q.require(ACL_SELECT | ACL_DELETE, "complete tasks of");
	if (queue::is_distributed(q.info().relid)) // Citus: src/queue/distributed.hpp
		return queue::forward_distributed(fcinfo, "distributed_complete");
	static const Oid types[2] = {INT8OID, INT8OID};
	Datum values[2] = {Int64GetDatum(task_id), Int64GetDatum(token)};
	if (q.run(QueueStatement::complete, 2, types, values) == 0)
		q.lease_lost(task_id);
	pg::spi_finish();
	PG_RETURN_VOID();
}

// concurrency.fail(queue, task_id, lease_token, error, retry_in) -> 'ready' | 'dead'
CONCURRENCY_FUNCTION(concurrency_fail) {
	queue::QueueName name = queue::queue_name(fcinfo);
	int64 task_id = int64_arg(fcinfo, 1, "task_id");
	int64 token = int64_arg(fcinfo, 2, "lease_token");
	std::optional<Interval> retry_in;
	if (!PG_ARGISNULL(4)) {
		Interval value = *PG_GETARG_INTERVAL_P(4);
		Interval zero{};
		bool negative = pg::guard([&] {
			return DatumGetBool(DirectFunctionCall2(interval_lt, IntervalPGetDatum(&value), IntervalPGetDatum(&zero)));
		});
		if (negative)
			throw Error(sqlstate::invalid_parameter_value, "retry_in must not be negative");
		retry_in = value;
	}
	TimestampTz now = clock_now();

	pg::spi_connect();
	Queue q(name.view());
	q.require(ACL_SELECT | ACL_UPDATE, "fail tasks of");
	if (queue::is_distributed(q.info().relid)) // Citus: src/queue/distributed.hpp
		return queue::forward_distributed(fcinfo, "distributed_fail");
	static const Oid lock_types[2] = {INT8OID, INT8OID};
	Datum lock_values[2] = {Int64GetDatum(task_id), Int64GetDatum(token)};
	if (q.run(QueueStatement::fail_lock, 2, lock_types, lock_values) == 0)
		q.lease_lost(task_id);
	bool isnull = false;
	int32 attempt = DatumGetInt32(queue::column(0, 1, &isnull));

	const char *state = "dead";
	TimestampTz run_at = now;
	if (attempt < q.info().max_attempts) {
		if (retry_in) {
			Interval delay = *retry_in;
			run_at = pg::guard([&] {
				return DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval, TimestampTzGetDatum(now),
				                                               IntervalPGetDatum(&delay)));
			});
		} else {
			run_at = now + backoff_delay_us(attempt, unit_random());
		}
		state = run_at > now ? "scheduled" : "ready";
	}
	static const Oid types[4] = {INT8OID, TEXTOID, TIMESTAMPTZOID, TEXTOID};
	Datum values[4] = {Int64GetDatum(task_id), pg::text_datum(state), TimestampTzGetDatum(run_at),
	                   PG_ARGISNULL(3) ? Datum(0) : PG_GETARG_DATUM(3)};
	char nulls[4] = {' ', ' ', ' ', PG_ARGISNULL(3) ? 'n' : ' '};
	q.run(QueueStatement::fail_update, 4, types, values, nulls);
	pg::spi_finish();
	// a retry waiting for its run_at is 'ready' to the caller (queue_stats
	// counts it as scheduled until then)
	return pg::text_datum(std::string_view(state) == "dead" ? "dead" : "ready");
}

// concurrency.retry_dead(queue, task_ids) -> how many
CONCURRENCY_FUNCTION(concurrency_retry_dead) {
	std::string name = queue::queue_name_arg(fcinfo);
	TimestampTz now = clock_now();

	pg::spi_connect();
	Queue q(name);
	q.require(ACL_SELECT | ACL_UPDATE, "retry dead tasks of");
	if (queue::is_distributed(q.info().relid)) // Citus: src/queue/distributed.hpp
		return queue::forward_distributed(fcinfo, "distributed_retry_dead");
	static const Oid types[2] = {TIMESTAMPTZOID, INT8ARRAYOID};
	Datum values[2] = {TimestampTzGetDatum(now), PG_ARGISNULL(1) ? Datum(0) : PG_GETARG_DATUM(1)};
	char nulls[2] = {' ', PG_ARGISNULL(1) ? 'n' : ' '};
	uint64 n = q.run(QueueStatement::retry_dead, 2, types, values, nulls);
	if (n > 0)
		q.notify();
	pg::spi_finish();
	PG_RETURN_INT64(static_cast<int64>(n));
}

// concurrency.queue_changed() — statement trigger on concurrency.queue: a
// relcache invalidation of the catalog makes every backend read the settings
// of its cached queues again.
CONCURRENCY_FUNCTION(concurrency_queue_changed) {
	if (!CALLED_AS_TRIGGER(fcinfo))
		throw Error("39P01", "concurrency.queue_changed() is a trigger function");
	auto *trigger = reinterpret_cast<TriggerData *>(fcinfo->context);
	pg::guard([&] { CacheInvalidateRelcache(trigger->tg_relation); });
	return PointerGetDatum(nullptr);
}

// concurrency.queue_stats_rows() — the rows of the view concurrency.queue_stats
CONCURRENCY_FUNCTION(concurrency_queue_stats) {
	TimestampTz now = clock_now();
	pg::ResultSet out = pg::materialize(fcinfo);
	pg::spi_connect();
	std::vector<std::string> names;
	SPIPlanPtr list = pg::prepared_plan("queue-catalog:names", "SELECT name FROM concurrency.queue ORDER BY name", 0,
	                                    nullptr);
	uint64 n = pg::spi_execute_plan(list, nullptr, nullptr, true);
	for (uint64 i = 0; i < n; ++i) {
		bool isnull = false;
		Datum d = queue::column(static_cast<int>(i), 1, &isnull);
		names.emplace_back(pg::guard([&] { return TextDatumGetCString(d); }));
	}
	Oid user = pg::guard([] { return GetUserId(); });
	for (const std::string &name : names) {
		Datum cols[7];
		bool isnull[7] = {false, true, true, true, true, true, true};
		cols[0] = pg::text_datum(name);
		Oid relid = queue::queue_relid(name);
		bool readable = OidIsValid(relid) &&
		                pg::guard([&] { return pg_class_aclcheck(relid, user, ACL_SELECT) == ACLCHECK_OK; });
		if (readable && queue::is_distributed(relid)) { // Citus: src/queue/distributed.hpp
			queue::distributed_stats(name, now);
			for (int c = 1; c < 7; ++c)
				cols[c] = queue::column(0, c, &isnull[c]);
		} else if (readable) {
			Queue q(name);
			static const Oid types[1] = {TIMESTAMPTZOID};
			Datum values[1] = {TimestampTzGetDatum(now)};
			q.run(QueueStatement::stats, 1, types, values);
			for (int c = 1; c < 7; ++c)
				cols[c] = queue::column(0, c, &isnull[c]);
		}
		pg::add_row(out, cols, isnull);
	}
	pg::spi_finish();
	return Datum(0);
}
