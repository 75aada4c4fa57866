// parent_results and parent_outcomes (src/sql/23_queue_graphs.sql): a
// child's worker reads its parents' results, or, for a finally-child, their
// ends whatever they are.
#include <algorithm>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/names.hpp"
#include "pg/srf.hpp"
#include "queue/graphs/dependencies.hpp"
#include "queue/distribution.hpp"
#include "queue/permissions.hpp"
#include "queue/queue.hpp"
#include "queue/sql_operators.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/numeric.h"
}

using namespace concurrency;
using namespace concurrency::queue;

namespace {

// parent_results (`outcomes` false: each done parent's task_id, queue and
// result) and parent_outcomes (each parent's task_id, queue, state, result
// and last_error, whatever its state)
Datum parents_of(FunctionCallInfo fcinfo, bool outcomes) {
	const char *function = outcomes ? "parent_outcomes" : "parent_results";
	std::string name = queue::queue_name_arg(fcinfo);
	int64 id = int64_arg(fcinfo, 1, "task_id");
	pg::ResultSet out = pg::materialize(fcinfo);
	pg::spi_connect();
	Queue whole(name);
	AsRole as_owner = authorize(whole, Permission::work, function);
	static const Oid id_type[1] = {INT8OID};
	Datum child_id = Int64GetDatum(id);
	// Citus: the task's shard on this node, or read through the distributed
	// table (its parents may be in any shard)
	std::optional<Queue> shard;
	bool through_citus = false;
	if (distribution().route_tasks(whole, &id, 1, shard, nullptr, false)) {
		if (!distribution().shards_served_here(whole, false))
			queue::refuse_not_served_here(name, function);
		if (queue::task_position(id) >= distribution().distributed_shards(whole).count) {
			pg::spi_finish(); // its id names no shard of the queue: no such task
			return Datum(0);
		}
		through_citus = true;
	}
	std::vector<TaskRef> parents;
	if (!through_citus) {
		static const Oid types[2] = {TEXTOID, INT8OID};
		Datum values[2] = {pg::text_datum(name), Int64GetDatum(id)};
		uint64 n =
		    run_edges("dependencies:parents",
		              "SELECT parent_queue, parent_id FROM concurrency.task_dependency "
		              "WHERE child_queue " EQ " $1 AND child_id " EQ " $2 ORDER BY parent_queue, parent_id",
		              2, types, values, nullptr, false);
		for (uint64 row = 0; row < n; ++row)
			parents.push_back(TaskRef{pg::text_column(row, 1).value_or(""), pg::int64_column(row, 2)});
	}
	// and those named in its row (the same queue)
	Queue &q = shard ? *shard : whole;
	std::string row_sql =
	    through_citus ? fmt::format("SELECT parents FROM {} WHERE shard_key " EQ " $2 AND id " EQ " $1",
	                                whole.sql().table())
	                  : fmt::format("SELECT parents FROM {} WHERE {}id " EQ " $1", q.sql().table(),
	                                q.sql().shard_filter(false));
	static const Oid row_types[2] = {INT8OID, INT4OID};
	Datum row_values[2] = {
	    child_id, Int32GetDatum(through_citus ? distribution().distributed_shards(whole).keys.at(
	                                                static_cast<std::size_t>(queue::task_position(id)))
	                                          : 0)};
	if (q.run_internal(through_citus ? "dependencies:row-parents-citus" : "dependencies:row-parents", row_sql,
	                   through_citus ? 2 : 1, row_types, row_values, nullptr, Access::owner) == 1)
		for (int64 parent : int8_column(0, 1))
			parents.push_back(TaskRef{name, parent});
	std::sort(parents.begin(), parents.end(), [](const TaskRef &a, const TaskRef &b) {
		return a.queue < b.queue || (a.queue == b.queue && a.id < b.id);
	});
	// a parent's row as the result set gives it: (task_id, queue, result)
	// or (task_id, queue, state, result, last_error), from the columns
	// (state, result, last_error) of row `row` of SPI_tuptable, from `first`
	auto add_parent = [&](const TaskRef &p, uint64 row, int first) {
		bool null_state = false, null_result = false, null_error = false;
		Datum state = pg::column(row, first, &null_state);
		Datum result = pg::column(row, first + 1, &null_result);
		Datum error = pg::column(row, first + 2, &null_error);
		if (outcomes) {
			Datum cols[5] = {Int64GetDatum(p.id), pg::text_datum(p.queue), state, result, error};
			bool nulls[5] = {false, false, null_state, null_result, null_error};
			pg::add_row(out, cols, nulls);
		} else {
			Datum cols[3] = {Int64GetDatum(p.id), pg::text_datum(p.queue), result};
			bool nulls[3] = {false, false, null_result};
			pg::add_row(out, cols, nulls);
		}
	};
	const char *done_only = outcomes ? "" : " AND state " EQ " 'done'";
	// parents of a distributed queue that this node does not hold: their
	// rows read through the distributed table, by shard key, kept for
	// add_parent as an SPI result would be (copied out: pg::text_datum)
	struct Row {
		Datum state, result, error;
		bool null_state, null_result, null_error;
	};
	std::map<int64, Row> elsewhere;
	if (distribution().is_distributed(whole.info().relid)) {
		const queue::Shards &shards = distribution().distributed_shards(whole);
		std::map<int32, std::vector<int64>> by_position; // one router statement per shard
		for (const TaskRef &p : parents)
			if (p.queue == name && (through_citus || queue::task_position(p.id) != q.info().shard_position) &&
			    queue::task_position(p.id) < shards.count)
				by_position[queue::task_position(p.id)].push_back(p.id);
		for (const auto &[position, ids] : by_position) {
			std::string sql = fmt::format("SELECT id, state, result, last_error FROM {} WHERE shard_key " EQ
			                              " $2 AND id " EQ " ANY ($1){}",
			                              whole.sql().table(), done_only);
			static const Oid types[2] = {INT8ARRAYOID, INT4OID};
			Datum values[2] = {int8_array(ids),
			                   Int32GetDatum(shards.keys[static_cast<std::size_t>(position)])};
			uint64 n =
			    whole.run_internal(outcomes ? "dependencies:outcomes-citus" : "dependencies:results-citus",
			                       sql, 2, types, values, nullptr, Access::owner);
			for (uint64 r = 0; r < n; ++r) {
				Row row{};
				row.state = pg::column(r, 2, &row.null_state);
				row.result = pg::column(r, 3, &row.null_result);
				row.error = pg::column(r, 4, &row.null_error);
				elsewhere[pg::int64_column(r, 1)] = row;
			}
		}
	}
	for (const TaskRef &p : parents) {
		if (!OidIsValid(queue_relid(p.queue))) // dropped since
			continue;
		if (p.queue == name && distribution().is_distributed(whole.info().relid) &&
		    (through_citus || queue::task_position(p.id) != q.info().shard_position)) {
			auto found = elsewhere.find(p.id);
			if (found != elsewhere.end()) {
				const Row &r = found->second;
				if (outcomes) {
					Datum cols[5] = {Int64GetDatum(p.id), pg::text_datum(p.queue), r.state, r.result,
					                 r.error};
					bool nulls[5] = {false, false, r.null_state, r.null_result, r.null_error};
					pg::add_row(out, cols, nulls);
				} else {
					Datum cols[3] = {Int64GetDatum(p.id), pg::text_datum(p.queue), r.result};
					bool nulls[3] = {false, false, r.null_result};
					pg::add_row(out, cols, nulls);
				}
			}
			continue;
		}
		std::optional<Queue> opened;
		Queue &parent = p.queue == name ? q : opened.emplace(p.queue);
		std::string sql = fmt::format("SELECT state, result, last_error FROM {} WHERE {}id " EQ " $1{}",
		                              parent.sql().table(), parent.sql().shard_filter(false), done_only);
		Datum parent_id = Int64GetDatum(p.id);
		if (parent.run_internal(outcomes ? "dependencies:outcome" : "dependencies:result", sql, 1, id_type,
		                        &parent_id, nullptr, Access::owner) == 1)
			add_parent(p, 0, 1);
	}
	pg::spi_finish();
	return Datum(0);
}

} // namespace

// concurrency.parent_results(queue, task_id) -> (task_id, queue, result) of
// each parent of the task that is done
CONCURRENCY_FUNCTION(concurrency_parent_results) {
	return parents_of(fcinfo, false);
}

// concurrency.parent_outcomes(queue, task_id) -> (task_id, queue, state,
// result, last_error) of each parent of the task, whatever its state: what a
// finally-child's worker reads
CONCURRENCY_FUNCTION(concurrency_parent_outcomes) {
	return parents_of(fcinfo, true);
}
