// Finishing tasks (src/sql/21_queue_lifecycle.sql): what a
// worker does with its lease (heartbeat, with progress, complete, fail,
// release, one task or a batch), and what an operator does to tasks (cancel,
// retry_dead). Each change that may make tasks claimable wakes as many
// waiters of dequeue(…, wait) at commit (queue/wait.hpp).
//
// The batch forms are all or nothing: the statement acts on every named
// lease it finds; if one is missing, the call raises CE001 naming that task
// (the first one in argument order) and the error takes the statement's
// changes with it, like any error in the caller's transaction or savepoint.
#include <algorithm>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "common/backoff.hpp"

#include "pg/srf.hpp"
#include "queue/graphs/dependencies.hpp"
#include "queue/distribution.hpp"
#include "queue/flow/keys.hpp"
#include "queue/lifecycle/purge.hpp"
#include "queue/permissions.hpp"
#include "queue/queue.hpp"
#include "queue/time/wait.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/lsyscache.h"
}

using namespace concurrency;
using namespace concurrency::queue;

namespace {

// What becomes of a task that failed at `attempt`: "dead" when its attempts
// are used up, else "scheduled" or "ready" with the run_at of its retry
// (after retry_in, or the jittered exponential backoff).
struct AfterFailure {
	const char *state;
	TimestampTz run_at;
};

AfterFailure after_failure(int32 attempt, int32 max_attempts, const std::optional<Interval> &retry_in,
                           TimestampTz now) {
	if (attempt >= max_attempts)
		return {"dead", now};
	TimestampTz run_at;
	if (retry_in) {
		Interval delay = *retry_in;
		run_at = pg::guard([&] {
			return DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval, TimestampTzGetDatum(now),
			                                               IntervalPGetDatum(&delay)));
		});
	} else {
		// uniform in [0, 1), for the jitter; seeded once per backend
		static std::mt19937_64 engine{std::random_device{}()};
		run_at = now + backoff_delay_us(attempt, std::uniform_real_distribution<double>(0.0, 1.0)(engine));
	}
	return {run_at > now ? "scheduled" : "ready", run_at};
}

// task_ids and lease_tokens (arguments 1 and 2) of a batch: same length,
// no NULL, no task twice.
struct Leases {
	std::vector<int64> ids;
	std::vector<int64> tokens;
	Datum ids_array;
	Datum tokens_array;
};

Leases leases_args(FunctionCallInfo fcinfo) {
	Leases l;
	l.ids = int8_array_arg(fcinfo, 1, "task_ids");
	l.tokens = int8_array_arg(fcinfo, 2, "lease_tokens");
	if (l.ids.size() != l.tokens.size())
		throw Error(sqlstate::invalid_parameter_value, "task_ids and lease_tokens must have the same length",
		            fmt::format("There are {} task ids and {} lease tokens.", l.ids.size(), l.tokens.size()),
		            "Pass the lease_token of each task at the same position.");
	std::unordered_set<int64> seen;
	for (int64 id : l.ids)
		if (!seen.insert(id).second)
			throw Error(sqlstate::invalid_parameter_value, "task_ids must not contain duplicates",
			            fmt::format("Task {} appears more than once.", id));
	l.ids_array = PG_GETARG_DATUM(1);
	l.tokens_array = PG_GETARG_DATUM(2);
	return l;
}

// CE001 for the first task of the batch whose lease is not among `found`.
void require_ids(Queue &q, const Leases &l, const std::unordered_set<int64> &found) {
	if (found.size() == l.ids.size())
		return;
	for (int64 id : l.ids)
		if (!found.count(id))
			q.lease_lost(id);
}

// After a batch statement acted on the rows whose ids are in column 1 of
// SPI_tuptable: CE001 for the first task of the batch it did not find.
void require_all(Queue &q, const Leases &l, uint64 found) {
	if (found == l.ids.size())
		return;
	std::unordered_set<int64> done;
	for (uint64 i = 0; i < found; ++i)
		done.insert(int64_column(static_cast<int>(i), 1));
	require_ids(q, l, done);
}

// The jsonb[] progress argument n of heartbeat_batch: NULL (no progress), or
// one element per task (a NULL element leaves that task's progress alone).
bool progress_array_arg(FunctionCallInfo fcinfo, int n, std::size_t tasks) {
	if (PG_NARGS() <= n || PG_ARGISNULL(n))
		return false;
	ArrayType *array = pg::guard([&] { return DatumGetArrayTypeP(PG_GETARG_DATUM(n)); });
	int count = pg::guard([&] { return ArrayGetNItems(ARR_NDIM(array), ARR_DIMS(array)); });
	if (ARR_NDIM(array) > 1 || static_cast<std::size_t>(count) != tasks)
		throw Error(sqlstate::invalid_parameter_value, "progress must have one element per task",
		            fmt::format("There are {} task ids and {} progress values.", tasks, count),
		            "Pass NULL for a task whose progress is unchanged.");
	return true;
}

// release and release_batch: the leases `l` handed back, all or none.
uint64 hand_back(Queue &q, const Leases &l, FunctionCallInfo fcinfo, TimestampTz now) {
	if (l.ids.empty())
		return 0;
	bool run_at_null = PG_NARGS() <= 3 || PG_ARGISNULL(3);
	static const Oid types[4] = {INT8ARRAYOID, INT8ARRAYOID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	Datum values[4] = {l.ids_array, l.tokens_array, run_at_null ? Datum(0) : PG_GETARG_DATUM(3),
	                   TimestampTzGetDatum(now)};
	char nulls[4] = {' ', ' ', run_at_null ? 'n' : ' ', ' '};
	uint64 n = q.run("release", q.sql().release_many(), 4, types, values, nulls);
	require_all(q, l, n);
	note_claimable(q.name(), n);
	return n;
}

void check_release_run_at(FunctionCallInfo fcinfo) {
	if (PG_NARGS() > 3 && !PG_ARGISNULL(3) && TIMESTAMP_NOT_FINITE(PG_GETARG_TIMESTAMPTZ(3)))
		throw Error(sqlstate::invalid_parameter_value, "run_at must be a finite time",
		            "Use NULL to make the task ready at once, in its place.");
}

} // namespace

// concurrency.heartbeat(queue, task_id, lease_token, extend, progress) -> new
// deadline; a progress given is stored, shown by task_status
CONCURRENCY_FUNCTION(concurrency_heartbeat) {
	queue::QueueName name = queue::queue_name(fcinfo);
	int64 task_id = int64_arg(fcinfo, 1, "task_id");
	int64 token = int64_arg(fcinfo, 2, "lease_token");
	std::optional<Interval> extend_arg;
	if (!PG_ARGISNULL(3))
		extend_arg = queue::positive_interval_arg(fcinfo, 3, "extend");
	bool with_progress = !arg_null(fcinfo, 4);
	TimestampTz now = clock_now();

	pg::spi_connect();
	Queue whole(name.view());
	AsRole as_owner = authorize(whole, Permission::work, "heartbeat");
	std::optional<queue::SlotsDecided> decided; // Citus, max_leased: queue/distribution.hpp
	std::optional<Queue> shard;                 // Citus: the tasks' shard where it is on this node
	if (distribution().route_acknowledgement(whole, &task_id, 1, false, "heartbeat", decided, shard)) {
		if (auto position = distribution().routed_position(whole, &task_id, 1))
			return distribution().route_call(fcinfo, whole, *position);
		if (distribution().shards_served_here(whole))
			queue::task_gone(whole.name(), task_id); // its id names no shard of the queue
		// (0.2.0's routed SQL functions store no progress)
		if (with_progress)
			queue::refuse_not_served_here(whole.name(), "heartbeat with progress");
		return distribution().forward_distributed(fcinfo, "distributed_heartbeat", nullptr, 4);
	}
	Queue &q = shard ? *shard : whole;
	Interval extend = extend_arg ? *extend_arg : q.info().lease;
	static const Oid types[5] = {INT8OID, INT8OID, TIMESTAMPTZOID, INTERVALOID, JSONBOID};
	Datum values[5] = {Int64GetDatum(task_id), Int64GetDatum(token), TimestampTzGetDatum(now),
	                   IntervalPGetDatum(&extend), with_progress ? PG_GETARG_DATUM(4) : Datum(0)};
	uint64 n = with_progress ? q.run("heartbeat_progress", q.sql().heartbeat_progress(), 5, types, values)
	                         : q.run(QueueStatement::heartbeat, 4, types, values);
	if (n == 0)
		q.lease_lost(task_id);
	bool isnull = false;
	TimestampTz deadline = DatumGetTimestampTz(queue::column(0, 1, &isnull));
	pg::spi_finish();
	PG_RETURN_TIMESTAMPTZ(deadline);
}

// concurrency.complete(queue, task_id, lease_token, result). On a queue that
// retains tasks the task stays as done with its result; on one that does not,
// it is deleted and the result is dropped (a worker need not know how its
// queue is set up).
CONCURRENCY_FUNCTION(concurrency_complete) {
	queue::QueueName name = queue::queue_name(fcinfo);
	int64 task_id = int64_arg(fcinfo, 1, "task_id");
	int64 token = int64_arg(fcinfo, 2, "lease_token");
	bool has_result = !arg_null(fcinfo, 3);
	TimestampTz now = clock_now();

	pg::spi_connect();
	Queue whole(name.view());
	AsRole as_owner = authorize(whole, Permission::work, "complete");
	std::optional<queue::SlotsDecided> decided; // Citus, max_leased: its slot emptied first
	std::optional<Queue> shard;                 // Citus: the tasks' shard where it is on this node
	if (distribution().route_acknowledgement(whole, &task_id, 1, true, "complete", decided, shard)) {
		if (auto position = distribution().routed_position(whole, &task_id, 1))
			return distribution().route_call(fcinfo, whole, *position); // purges there
		if (distribution().shards_served_here(whole))
			queue::task_gone(whole.name(), task_id);
		maybe_purge(whole, now, /*distributed=*/true);
		return distribution().forward_distributed(fcinfo, "distributed_complete");
	}
	Queue &q = shard ? *shard : whole;
	uint64 n = 0;
	if (!q.info().has_retain && !has_result) { // a result is kept for await_task (result_retention)
		static const Oid types[2] = {INT8OID, INT8OID};
		Datum values[2] = {Int64GetDatum(task_id), Int64GetDatum(token)};
		n = q.run(QueueStatement::complete, 2, types, values);
	}
	if (n == 0) {
		// a queue that retains tasks, or a parent (kept as done with its
		// result for its children, whatever the retention), or a lost lease
		static const Oid types[4] = {INT8OID, INT8OID, TIMESTAMPTZOID, JSONBOID};
		Datum values[4] = {Int64GetDatum(task_id), Int64GetDatum(token), TimestampTzGetDatum(now),
		                   has_result ? PG_GETARG_DATUM(3) : Datum(0)};
		char nulls[4] = {' ', ' ', ' ', has_result ? ' ' : 'n'};
		n = q.run(QueueStatement::complete_retained, 4, types, values, nulls);
	}
	if (n == 0)
		q.lease_lost(task_id);
	queue::FinishedTask finished = queue::finished_row(0, task_id, 2);
	std::optional<std::string> key = q.info().key_limit > 0 ? queue::key_column(0, 1) : std::nullopt;
	queue::tasks_finished(q, {finished}, queue::Ending::done, now);
	if (key)
		queue::release_keys(q, {*key}, now);
	if (q.info().max_leased > 0) // its lease slot is free
		queue::note_claimable(q.name(), 1);
	maybe_purge(q, now, /*distributed=*/false);
	pg::spi_finish();
	PG_RETURN_VOID();
}

// concurrency.fail(queue, task_id, lease_token, error, retry_in) -> 'ready' | 'dead'
CONCURRENCY_FUNCTION(concurrency_fail) {
	queue::QueueName name = queue::queue_name(fcinfo);
	int64 task_id = int64_arg(fcinfo, 1, "task_id");
	int64 token = int64_arg(fcinfo, 2, "lease_token");
	std::optional<Interval> retry_in = queue::retry_in_arg(fcinfo, 4);
	TimestampTz now = clock_now();

	pg::spi_connect();
	Queue whole(name.view());
	AsRole as_owner = authorize(whole, Permission::work, "fail");
	std::optional<queue::SlotsDecided> decided; // Citus, max_leased: its slot emptied first
	std::optional<Queue> shard;                 // Citus: the tasks' shard where it is on this node
	if (distribution().route_acknowledgement(whole, &task_id, 1, true, "fail", decided, shard)) {
		if (auto position = distribution().routed_position(whole, &task_id, 1))
			return distribution().route_call(fcinfo, whole, *position);
		if (distribution().shards_served_here(whole))
			queue::task_gone(whole.name(), task_id);
		return distribution().forward_distributed(fcinfo, "distributed_fail");
	}
	Queue &q = shard ? *shard : whole;
	static const Oid lock_types[2] = {INT8OID, INT8OID};
	Datum lock_values[2] = {Int64GetDatum(task_id), Int64GetDatum(token)};
	if (q.run(QueueStatement::fail_lock, 2, lock_types, lock_values) == 0)
		q.lease_lost(task_id);
	bool isnull = false;
	int32 attempt = DatumGetInt32(queue::column(0, 1, &isnull));
	std::optional<std::string> key = q.info().key_limit > 0 ? queue::key_column(0, 2) : std::nullopt;
	queue::FinishedTask finished = queue::finished_row(0, task_id, 3);

	auto [state, run_at] = after_failure(attempt, q.info().max_attempts, retry_in, now);
	static const Oid types[4] = {INT8OID, TEXTOID, TIMESTAMPTZOID, TEXTOID};
	Datum values[4] = {Int64GetDatum(task_id), pg::text_datum(state), TimestampTzGetDatum(run_at),
	                   PG_ARGISNULL(3) ? Datum(0) : PG_GETARG_DATUM(3)};
	char nulls[4] = {' ', ' ', ' ', PG_ARGISNULL(3) ? 'n' : ' '};
	q.run(QueueStatement::fail_update, 4, types, values, nulls);
	if (std::string_view(state) == "dead") // its waiting descendants are cancelled
		queue::tasks_finished(q, {finished}, queue::Ending::dead, now);
	// a task that will be retried keeps its key; a dead one releases it
	if (key && std::string_view(state) == "dead")
		queue::release_keys(q, {*key}, now);
	// a retry (and, with max_leased, the freed lease slot) may be claimable
	if (std::string_view(state) != "dead" || q.info().max_leased > 0)
		queue::note_claimable(q.name(), 1);
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
	AsRole as_owner = authorize(q, Permission::manage, "retry_dead");
	bool ids_null = PG_ARGISNULL(1);
	Datum ids = ids_null ? Datum(0) : PG_GETARG_DATUM(1);
	auto revive = [&](Queue &table) {
		static const Oid types[3] = {TIMESTAMPTZOID, INT8ARRAYOID, BOOLOID};
		bool limited = table.info().key_limit > 0;
		Datum values[3] = {TimestampTzGetDatum(now), ids, BoolGetDatum(limited)};
		char nulls[3] = {' ', ids_null ? 'n' : ' ', ' '};
		uint64 n = table.run(QueueStatement::retry_dead, 3, types, values, nulls);
		if (limited) {
			// revived tasks of keys came back blocked: admit them as their keys allow
			std::vector<std::string> keys;
			for (uint64 i = 0; i < n; ++i)
				if (auto key = queue::key_column(static_cast<int>(i), 2))
					keys.push_back(*key);
			queue::release_keys(table, std::move(keys), now);
		}
		if (n > 0)
			queue::notify(table.name(), n);
		return static_cast<int64>(n);
	};
	int64 n = 0;
	if (!distribution().is_distributed(q.info().relid))
		n = revive(q);
	else if (distribution().shards_served_here(
	             q, false)) { // Citus: each node revives the tasks of its own shards
		n = distribution().on_every_node(fcinfo, q, revive);
		if (n > 0)
			queue::notify_listeners(q.name());
	} else
		return distribution().forward_distributed(fcinfo, "distributed_retry_dead");
	pg::spi_finish();
	PG_RETURN_INT64(n);
}

// concurrency.complete(queue, task_ids, lease_tokens) -> how many (all)
CONCURRENCY_FUNCTION(concurrency_complete_many) {
	QueueName name = queue_name(fcinfo);
	Leases l = leases_args(fcinfo);
	TimestampTz now = clock_now();

	pg::spi_connect();
	Queue whole(name.view());
	bool retain = whole.info().has_retain;
	AsRole as_owner = authorize(whole, Permission::work, "complete_batch");
	std::optional<SlotsDecided> decided; // Citus, max_leased: their slots emptied first
	std::optional<Queue> shard;          // Citus: the tasks' shard where it is on this node
	if (distribution().route_acknowledgement(whole, l.ids.data(), static_cast<int>(l.ids.size()), true,
	                                         "complete_batch", decided, shard)) {
		if (distribution().shards_served_here(whole)) { // each shard's part on its node, which purges there
			int64 total = distribution().route_batch_count(fcinfo, whole, l.ids, {1, 2}, true);
			pg::spi_finish();
			PG_RETURN_INT64(total);
		}
		maybe_purge(whole, now, /*distributed=*/true);
		return distribution().forward_distributed(fcinfo, "distributed_complete_batch");
	}
	Queue &q = shard ? *shard : whole;
	uint64 n = 0;
	if (!l.ids.empty()) {
		static const Oid types[3] = {INT8ARRAYOID, INT8ARRAYOID, TIMESTAMPTZOID};
		Datum values[3] = {l.ids_array, l.tokens_array, TimestampTzGetDatum(now)};
		std::unordered_set<int64> found;
		std::vector<std::string> keys;
		std::vector<FinishedTask> finished;
		auto collect = [&](uint64 rows) {
			for (uint64 i = 0; i < rows; ++i) {
				int row = static_cast<int>(i);
				int64 id = int64_column(row, 1);
				found.insert(id);
				finished.push_back(finished_row(row, id, 3));
				if (q.info().key_limit > 0)
					if (auto key = key_column(row, 2))
						keys.push_back(*key);
			}
		};
		if (!retain)
			collect(q.run(QueueStatement::complete_many, 2, types, values));
		// a queue that retains tasks, or parents (kept as done for their children)
		if (found.size() < l.ids.size())
			collect(q.run(QueueStatement::complete_many_retained, 3, types, values));
		require_ids(q, l, found);
		n = found.size();
		tasks_finished(q, finished, Ending::done, now);
		release_keys(q, std::move(keys), now);
		if (q.info().max_leased > 0) // their lease slots are free
			note_claimable(q.name(), n);
	}
	maybe_purge(q, now, /*distributed=*/false);
	pg::spi_finish();
	PG_RETURN_INT64(static_cast<int64>(n));
}

// concurrency.heartbeat_batch(queue, task_ids, lease_tokens, extend, progress)
// -> new deadline (NULL for empty arrays)
CONCURRENCY_FUNCTION(concurrency_heartbeat_many) {
	QueueName name = queue_name(fcinfo);
	Leases l = leases_args(fcinfo);
	std::optional<Interval> extend_arg;
	if (!PG_ARGISNULL(3))
		extend_arg = positive_interval_arg(fcinfo, 3, "extend");
	bool with_progress = progress_array_arg(fcinfo, 4, l.ids.size());
	TimestampTz now = clock_now();

	pg::spi_connect();
	Queue whole(name.view());
	AsRole as_owner = authorize(whole, Permission::work, "heartbeat_batch");
	std::optional<SlotsDecided> decided; // Citus, max_leased: queue/distribution.hpp
	std::optional<Queue> shard;          // Citus: the tasks' shard where it is on this node
	if (distribution().route_acknowledgement(whole, l.ids.data(), static_cast<int>(l.ids.size()), false,
	                                         "heartbeat_batch", decided, shard)) {
		if (distribution().shards_served_here(whole)) {
			// each shard's node extends from its own clock: the earliest of
			// their deadlines, by which every lease must be heartbeated again
			std::optional<TimestampTz> deadline;
			distribution().route_batch(fcinfo, whole, l.ids, {1, 2, 4}, false, true, [&](uint64 n) {
				bool isnull = true;
				Datum d = n == 1 ? column(0, 1, &isnull) : Datum(0);
				if (!isnull)
					deadline = std::min(deadline.value_or(DatumGetTimestampTz(d)), DatumGetTimestampTz(d));
			});
			pg::spi_finish();
			if (!deadline)
				PG_RETURN_NULL();
			PG_RETURN_TIMESTAMPTZ(*deadline);
		}
		// (0.2.0's routed SQL functions store no progress)
		if (with_progress)
			refuse_not_served_here(whole.name(), "heartbeat_batch with progress");
		return distribution().forward_distributed(fcinfo, "distributed_heartbeat_batch", nullptr, 4);
	}
	Queue &q = shard ? *shard : whole;
	if (l.ids.empty()) {
		pg::spi_finish();
		PG_RETURN_NULL();
	}
	Interval extend = extend_arg ? *extend_arg : q.info().lease;
	static const Oid types[5] = {INT8ARRAYOID, INT8ARRAYOID, TIMESTAMPTZOID, INTERVALOID, JSONBARRAYOID};
	Datum values[5] = {l.ids_array, l.tokens_array, TimestampTzGetDatum(now), IntervalPGetDatum(&extend),
	                   with_progress ? PG_GETARG_DATUM(4) : Datum(0)};
	uint64 n = with_progress
	               ? q.run("heartbeat_many_progress", q.sql().heartbeat_many_progress(), 5, types, values)
	               : q.run(QueueStatement::heartbeat_many, 4, types, values);
	require_all(q, l, n);
	bool isnull = false;
	TimestampTz deadline = DatumGetTimestampTz(column(0, 2, &isnull));
	pg::spi_finish();
	PG_RETURN_TIMESTAMPTZ(deadline);
}

// concurrency.fail(queue, task_ids, lease_tokens, error, retry_in)
//   -> (task_id, state) per task, in argument order
CONCURRENCY_FUNCTION(concurrency_fail_many) {
	QueueName name = queue_name(fcinfo);
	Leases l = leases_args(fcinfo);
	std::optional<Interval> retry_in = retry_in_arg(fcinfo, 4);
	TimestampTz now = clock_now();

	pg::ResultSet out = pg::materialize(fcinfo);
	pg::spi_connect();
	Queue whole(name.view());
	AsRole as_owner = authorize(whole, Permission::work, "fail_batch");
	std::optional<SlotsDecided> decided; // Citus, max_leased: their slots emptied first
	std::optional<Queue> shard;          // Citus: the tasks' shard where it is on this node
	if (distribution().route_acknowledgement(whole, l.ids.data(), static_cast<int>(l.ids.size()), true,
	                                         "fail_batch", decided, shard)) {
		if (distribution().shards_served_here(whole)) {
			// each shard's tasks failed on its node; the rows in argument order
			std::unordered_map<int64, bool> dead;
			distribution().route_batch(fcinfo, whole, l.ids, {1, 2}, true, true, [&](uint64 n) {
				for (uint64 i = 0; i < n; ++i) {
					bool isnull = false;
					Datum state = column(static_cast<int>(i), 2, &isnull);
					dead[int64_column(static_cast<int>(i), 1)] =
					    !isnull &&
					    pg::guard([&] { return TextDatumGetCString(state); }) == std::string("dead");
				}
			});
			for (int64 id : l.ids) {
				Datum row[2] = {Int64GetDatum(id), pg::text_datum(dead.at(id) ? "dead" : "ready")};
				bool isnull[2] = {false, false};
				pg::add_row(out, row, isnull);
			}
			pg::spi_finish();
			return Datum(0);
		}
		return distribution().forward_distributed(fcinfo, "distributed_fail_batch", &out);
	}
	Queue &q = shard ? *shard : whole;
	if (!l.ids.empty()) {
		// lock every task (in id order, so that two batches cannot deadlock)
		static const Oid lock_types[2] = {INT8ARRAYOID, INT8ARRAYOID};
		Datum lock_values[2] = {l.ids_array, l.tokens_array};
		uint64 n = q.run(QueueStatement::fail_lock_many, 2, lock_types, lock_values);
		require_all(q, l, n);
		std::unordered_map<int64, int32> attempts;
		std::unordered_map<int64, std::string> keys; // of limited keys
		std::unordered_map<int64, FinishedTask> links;
		for (uint64 i = 0; i < n; ++i) {
			bool isnull = false;
			int row = static_cast<int>(i);
			attempts[int64_column(row, 1)] = DatumGetInt32(column(row, 2, &isnull));
			links.emplace(int64_column(row, 1), finished_row(row, int64_column(row, 1), 4));
			if (q.info().key_limit > 0)
				if (auto key = key_column(row, 3))
					keys[int64_column(row, 1)] = *key;
		}
		std::vector<Datum> states, run_ats;
		std::vector<bool> dead;
		for (int64 id : l.ids) {
			AfterFailure next = after_failure(attempts.at(id), q.info().max_attempts, retry_in, now);
			states.push_back(pg::text_datum(next.state));
			run_ats.push_back(TimestampTzGetDatum(next.run_at));
			dead.push_back(std::string_view(next.state) == "dead");
		}
		Datum *state_data = states.data();
		Datum *run_at_data = run_ats.data();
		int count = static_cast<int>(l.ids.size());
		Datum state_array = pg::guard([&] {
			return PointerGetDatum(construct_array(state_data, count, TEXTOID, -1, false, TYPALIGN_INT));
		});
		Datum run_at_array = pg::guard([&] {
			return PointerGetDatum(
			    construct_array(run_at_data, count, TIMESTAMPTZOID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		});
		static const Oid types[4] = {INT8ARRAYOID, TEXTARRAYOID, TIMESTAMPTZARRAYOID, TEXTOID};
		Datum values[4] = {l.ids_array, state_array, run_at_array,
		                   PG_ARGISNULL(3) ? Datum(0) : PG_GETARG_DATUM(3)};
		char nulls[4] = {' ', ' ', ' ', PG_ARGISNULL(3) ? 'n' : ' '};
		q.run(QueueStatement::fail_update_many, 4, types, values, nulls);
		// the waiting descendants of dead tasks are cancelled
		std::vector<FinishedTask> died;
		for (std::size_t i = 0; i < l.ids.size(); ++i)
			if (dead[i])
				died.push_back(links.at(l.ids[i]));
		tasks_finished(q, died, Ending::dead, now);
		// tasks that will be retried keep their keys; dead ones release them
		std::vector<std::string> released;
		for (std::size_t i = 0; i < l.ids.size(); ++i)
			if (dead[i] && keys.count(l.ids[i]))
				released.push_back(keys.at(l.ids[i]));
		release_keys(q, std::move(released), now);
		// retries (and, with max_leased, freed lease slots) may be claimable
		note_claimable(q.name(), q.info().max_leased > 0
		                             ? l.ids.size()
		                             : static_cast<uint64>(std::count(dead.begin(), dead.end(), false)));
		for (std::size_t i = 0; i < l.ids.size(); ++i) {
			// a retry waiting for its run_at is 'ready' to the caller, as
			// with the single fail
			Datum row[2] = {Int64GetDatum(l.ids[i]), pg::text_datum(dead[i] ? "dead" : "ready")};
			bool isnull[2] = {false, false};
			pg::add_row(out, row, isnull);
		}
	}
	pg::spi_finish();
	return Datum(0);
}

// concurrency.release(queue, task_id, lease_token, run_at) -> true: the task
// is handed back unstarted (a lost lease raises CE001)
CONCURRENCY_FUNCTION(concurrency_release) {
	QueueName name = queue_name(fcinfo);
	int64 task_id = int64_arg(fcinfo, 1, "task_id");
	int64 token = int64_arg(fcinfo, 2, "lease_token");
	check_release_run_at(fcinfo);
	TimestampTz now = clock_now();

	pg::spi_connect();
	Queue whole(name.view());
	AsRole as_owner = authorize(whole, Permission::work, "release");
	std::optional<queue::SlotsDecided> decided; // Citus, max_leased: its slot emptied first
	std::optional<Queue> shard;                 // Citus: the tasks' shard where it is on this node
	if (distribution().route_acknowledgement(whole, &task_id, 1, true, "release", decided, shard)) {
		if (auto position = distribution().routed_position(whole, &task_id, 1))
			return distribution().route_call(fcinfo, whole, *position);
		if (!distribution().shards_served_here(whole))
			queue::refuse_not_served_here(whole.name(), "release");
		queue::task_gone(whole.name(), task_id);
	}
	Queue &q = shard ? *shard : whole;
	Leases l;
	l.ids = {task_id};
	l.tokens = {token};
	l.ids_array = queue::int8_array(l.ids);
	l.tokens_array = queue::int8_array(l.tokens);
	hand_back(q, l, fcinfo, now);
	pg::spi_finish();
	PG_RETURN_BOOL(true);
}

// concurrency.release_batch(queue, task_ids, lease_tokens, run_at) -> how many
// (all: one lost lease raises CE001 and hands none back)
CONCURRENCY_FUNCTION(concurrency_release_many) {
	QueueName name = queue_name(fcinfo);
	Leases l = leases_args(fcinfo);
	check_release_run_at(fcinfo);
	TimestampTz now = clock_now();

	pg::spi_connect();
	Queue whole(name.view());
	AsRole as_owner = authorize(whole, Permission::work, "release_batch");
	std::optional<SlotsDecided> decided; // Citus, max_leased: their slots emptied first
	std::optional<Queue> shard;          // Citus: the tasks' shard where it is on this node
	if (distribution().route_acknowledgement(whole, l.ids.data(), static_cast<int>(l.ids.size()), true,
	                                         "release_batch", decided, shard)) {
		if (!distribution().shards_served_here(whole))
			queue::refuse_not_served_here(whole.name(), "release_batch");
		int64 total = distribution().route_batch_count(fcinfo, whole, l.ids, {1, 2}, true);
		pg::spi_finish();
		PG_RETURN_INT64(total);
	}
	Queue &q = shard ? *shard : whole;
	uint64 n = hand_back(q, l, fcinfo, now);
	pg::spi_finish();
	PG_RETURN_INT64(static_cast<int64>(n));
}

// concurrency.cancel(queue, task_ids) -> how many tasks were cancelled.
// Tasks in any live state (ready, scheduled, leased, dead) become cancelled;
// done and cancelled tasks and unknown ids are left alone (not counted).
CONCURRENCY_FUNCTION(concurrency_cancel) {
	QueueName name = queue_name(fcinfo);
	std::vector<int64> ids = int8_array_arg(fcinfo, 1, "task_ids");
	TimestampTz now = clock_now();

	pg::spi_connect();
	Queue whole(name.view());
	AsRole as_owner = authorize(whole, Permission::manage, "cancel");
	std::optional<SlotsDecided> decided; // Citus, max_leased: the slots of leased ones emptied first
	std::optional<Queue> shard;          // Citus: the tasks' shard where it is on this node
	if (distribution().route_acknowledgement(whole, ids.data(), static_cast<int>(ids.size()), true, "cancel",
	                                         decided, shard)) {
		if (distribution().shards_served_here(whole)) { // ids of no shard: not counted
			int64 total = distribution().route_batch_count(fcinfo, whole, ids, {1}, false);
			pg::spi_finish();
			PG_RETURN_INT64(total);
		}
		return distribution().forward_distributed(fcinfo, "distributed_cancel");
	}
	Queue &q = shard ? *shard : whole;
	uint64 n = 0;
	if (!ids.empty()) {
		static const Oid types[2] = {TIMESTAMPTZOID, INT8ARRAYOID};
		Datum values[2] = {TimestampTzGetDatum(now), PG_GETARG_DATUM(1)};
		// Blocked tasks first: they hold no place of their key, so cancelling
		// them locks no key row. (Locking the task and then its key, as one
		// statement for all states did, deadlocked with a complete of the
		// key's head, which locks the key and then admits the blocked task.)
		// Then the others, whose key's place is given to the next task.
		std::vector<FinishedTask> finished;
		auto links = [&](uint64 rows) {
			for (uint64 i = 0; i < rows; ++i)
				finished.push_back(
				    finished_row(static_cast<int>(i), int64_column(static_cast<int>(i), 1), 3));
			return rows;
		};
		n = links(q.run("cancel_blocked", q.sql().cancel(true), 2, types, values));
		uint64 holding = links(q.run("cancel", q.sql().cancel(false), 2, types, values));
		std::vector<std::string> keys = keys_of_rows(q, holding, 2);
		// their waiting descendants are cancelled as well (not counted)
		tasks_finished(q, finished, Ending::cancelled, now);
		release_keys(q, std::move(keys), now);
		if (q.info().max_leased > 0) // lease slots of cancelled leased tasks are free
			note_claimable(q.name(), holding);
		n += holding;
		// a queue that retains nothing keeps a cancelled task only while its
		// holder's lease runs (so that the holder learns it was cancelled)
		if (!q.info().has_retain && n > 0)
			q.run("cancel_drop", q.sql().cancel_drop(), 2, types, values);
	}
	pg::spi_finish();
	PG_RETURN_INT64(static_cast<int64>(n));
}
