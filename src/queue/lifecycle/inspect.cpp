// Inspection (src/sql/21_queue_lifecycle.sql): what is
// in a queue (queue_stats, queue_keys, task_status), and purge, which deletes
// the finished tasks whose retention has passed.
#include <optional>
#include <string>
#include <vector>

#include "pg/srf.hpp"
#include "queue/distribution.hpp"
#include "queue/flow/keys_sql.hpp"
#include "queue/flow/rate.hpp"
#include "queue/lifecycle/purge.hpp"
#include "queue/lifecycle/stats_sql.hpp"
#include "queue/permissions.hpp"
#include "queue/queue.hpp"

extern "C" {
#include "catalog/pg_type.h"
}

using namespace concurrency;
using namespace concurrency::queue;

namespace concurrency::queue {

namespace {
// A chunk at most this often per backend and queue while the chunks come
// back short, at once while they come back full.
constexpr int32 purge_chunk = 500;
constexpr TimestampTz purge_interval_us = 1'000'000;
} // namespace

void maybe_purge(Queue &q, TimestampTz now, bool distributed) {
	QueueInfo &info = q.info();
	if (now < info.next_purge)
		return;
	// a distributed queue: a chunk of one shard (queue/distributed/)
	uint64 purged =
	    distributed ? distribution().distributed_purge_chunk(q, purge_chunk, now) : q.purge(now, purge_chunk);
	info.next_purge = purged == static_cast<uint64>(purge_chunk) ? now : now + purge_interval_us;
	// key_rate_limit: the slots of keys not claimed for long (rate.cpp,
	// forget_old_key_rate_slots); a distributed queue's on each shard, by
	// the claims that visit it (the slots are beside the shard's tasks)
	if (info.key_rate_limit > 0 && !distributed)
		forget_old_key_rate_slots(q, now, purge_chunk);
}

} // namespace concurrency::queue

// concurrency.queue_stats_rows() — the rows of the view concurrency.queue_stats
CONCURRENCY_FUNCTION(concurrency_queue_stats) {
	TimestampTz now = clock_now();
	pg::ResultSet out = pg::materialize(fcinfo);
	pg::spi_connect();
	std::vector<std::string> names;
	SPIPlanPtr list = pg::prepared_plan("queue-catalog:names", catalog_sql::names, 0, nullptr);
	uint64 n = pg::execute(list, nullptr, nullptr, true);
	for (uint64 i = 0; i < n; ++i) {
		bool isnull = false;
		Datum d = queue::column(static_cast<int>(i), 1, &isnull);
		names.emplace_back(pg::guard([&] { return TextDatumGetCString(d); }));
	}
	for (const std::string &name : names) {
		Datum cols[11];
		bool isnull[11] = {false, true, true, true, true, true, true, true, true, true, true};
		cols[0] = pg::text_datum(name);
		std::optional<Queue> q;
		if (OidIsValid(queue::queue_relid(name)))
			q.emplace(name);
		if (q && holds(*q, Permission::read)) {
			AsRole as_owner(queue_owner(*q));
			static const Oid types[1] = {TIMESTAMPTZOID};
			Datum values[1] = {TimestampTzGetDatum(now)};
			if (distribution().is_distributed(q->info().relid)) // Citus: one query over every shard, planned
				pg::execute(StatsSql(name).stats_over_shards(), 1, types, values, nullptr,
				            true); // with `now`
			else
				q->run("queue_stats", StatsSql(name).stats(), 1, types, values);
			for (int c = 1; c < 11; ++c)
				cols[c] = queue::column(0, c, &isnull[c]);
			// blocked: behind their key, and while the queue has max_leased
			// leases, every ready task
			int64 leased = DatumGetInt64(cols[3]) + DatumGetInt64(cols[4]);
			int64 blocked = DatumGetInt64(cols[9]);
			if (q->info().max_leased > 0 && leased >= q->info().max_leased)
				blocked += DatumGetInt64(cols[1]);
			cols[9] = Int64GetDatum(blocked);
		}
		pg::add_row(out, cols, isnull);
	}
	pg::spi_finish();
	return Datum(0);
}

// concurrency.queue_keys(queue) -> per key with live tasks: concurrency_key,
// leased, waiting, oldest_waiting_age
CONCURRENCY_FUNCTION(concurrency_queue_keys) {
	std::string name = queue::queue_name_arg(fcinfo);
	TimestampTz now = clock_now();
	pg::ResultSet out = pg::materialize(fcinfo);
	pg::spi_connect();
	Queue q(name);
	AsRole as_owner = authorize(q, Permission::read, "queue_keys");
	static const Oid types[1] = {TIMESTAMPTZOID};
	Datum values[1] = {TimestampTzGetDatum(now)};
	// a distributed queue (Citus): the same query over every shard, planned
	// with `now` (Citus plans no multi-shard query with a parameter unknown)
	uint64 n = distribution().is_distributed(q.info().relid)
	               ? pg::execute(KeySql(name).queue_keys(), 1, types, values, nullptr, true)
	               : q.run("queue_keys", KeySql(name).queue_keys(), 1, types, values);
	for (uint64 i = 0; i < n; ++i) {
		Datum cols[4];
		bool isnull[4];
		for (int c = 0; c < 4; ++c)
			cols[c] = queue::column(static_cast<int>(i), c + 1, &isnull[c]);
		pg::add_row(out, cols, isnull);
	}
	pg::spi_finish();
	return Datum(0);
}

// concurrency.purge(queue) -> how many finished tasks were deleted (every
// one whose retention has passed, in chunks)
CONCURRENCY_FUNCTION(concurrency_purge) {
	QueueName name = queue_name(fcinfo);
	TimestampTz now = clock_now();

	pg::spi_connect();
	Queue q(name.view());
	AsRole as_owner = authorize(q, Permission::manage, "purge");
	auto purge_all = [now](Queue &table) {
		constexpr int32 chunk = 10'000;
		int64 total = 0;
		for (;;) {
			uint64 n = table.purge(now, chunk, true);
			total += static_cast<int64>(n);
			if (n < static_cast<uint64>(chunk))
				return total;
		}
	};
	int64 total = 0;
	if (!distribution().is_distributed(q.info().relid))
		total = purge_all(q);
	else if (distribution().shards_served_here(q, false)) // Citus: each node purges its own shards
		total = distribution().on_every_node(fcinfo, q, purge_all);
	else
		return distribution().forward_distributed(fcinfo, "distributed_purge");
	pg::spi_finish();
	PG_RETURN_INT64(total);
}

// concurrency.task_status(queue, id) -> one row, or none
CONCURRENCY_FUNCTION(concurrency_task_status) {
	QueueName name = queue_name(fcinfo);
	pg::require_arg(fcinfo, 1, "id");
	int64 id = PG_GETARG_INT64(1);
	TimestampTz now = clock_now();

	pg::ResultSet out = pg::materialize(fcinfo);
	pg::spi_connect();
	Queue whole(name.view());
	AsRole as_owner = authorize(whole, Permission::read, "task_status");
	std::optional<Queue> shard; // Citus: the tasks' shard where it is on this node
	if (distribution().route_tasks(whole, &id, 1, shard, nullptr, false)) {
		if (auto position = distribution().routed_position(whole, &id, 1, false))
			return distribution().route_call(fcinfo, whole, *position, &out, -1, false);
		if (distribution().shards_served_here(whole,
		                                      false)) { // its id names no shard of the queue: no such task
			pg::spi_finish();
			return Datum(0);
		}
		return distribution().forward_distributed(fcinfo, "distributed_task_status", &out);
	}
	Queue &q = shard ? *shard : whole;
	static const Oid types[2] = {INT8OID, TIMESTAMPTZOID};
	Datum values[2] = {Int64GetDatum(id), TimestampTzGetDatum(now)};
	if (q.run("task_status", q.sql().task_status(), 2, types, values) == 1) {
		constexpr int ncols = 15;
		Datum cols[ncols];
		bool isnull[ncols];
		for (int c = 0; c < ncols; ++c)
			cols[c] = column(0, c + 1, &isnull[c]);
		pg::add_row(out, cols, isnull);
	}
	pg::spi_finish();
	return Datum(0);
}
