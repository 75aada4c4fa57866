// Graphs of tasks (src/sql/23_queue_graphs.sql): enqueue_graph, which
// adds tasks and the edges between them all or nothing (a task's parents in
// after, or in after_ends for a finally-child). Its input is read by
// graph_input.cpp; parent_results and parent_outcomes are in parents.cpp.
#include <algorithm>
#include <array>
#include <cstring>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "common/names.hpp"
#include "pg/srf.hpp"
#include "queue/graphs/dependencies.hpp"
#include "queue/graphs/graph_input.hpp"
#include "queue/distribution.hpp"
#include "queue/flow/keys.hpp"
#include "queue/permissions.hpp"
#include "queue/queue.hpp"
#include "queue/sql_operators.hpp"
#include "queue/time/wait.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"
#include "utils/timestamp.h"
}

using namespace concurrency;
using namespace concurrency::queue;

namespace {
// the state of a parent enqueued before that is in another shard of the
// graph's distributed queue: open, as far as this node knows
const std::string elsewhere_state = "(elsewhere)";
} // namespace

namespace {

// A finally-child (after_ends) of tasks[at] in queue `q`: refused where the
// queue cannot keep its mark (a table from before the update to 0.4.0). On a
// distributed queue the mark is in the child's row, in its shard, and the
// ends of parents in other shards reach it as the messages between shards
// (done, dead, cancelled: dependencies.hpp), which release it as they count.
void refuse_finally(Queue &q, std::size_t at) {
	if (!q.info().after_ends)
		throw Error(sqlstate::object_not_in_prerequisite_state,
		            fmt::format("tasks[{}].after_ends: the table of queue \"{}\" is older than the module",
		                        at, q.name()),
		            "Its table has no column after_ends.", "Run ALTER EXTENSION concurrency_ext UPDATE.");
}

void add_graph_row(pg::ResultSet &out, const GraphTask &t) {
	Datum cols[2] = {t.ref ? pg::text_datum(*t.ref) : Datum(0), Int64GetDatum(t.id)};
	bool isnull[2] = {!t.ref, false};
	pg::add_row(out, cols, isnull);
}

} // namespace

// concurrency.enqueue_graph(queue, tasks) -> (ref, task_id) per task, in order
CONCURRENCY_FUNCTION(concurrency_enqueue_graph) {
	std::string name = queue::queue_name_arg(fcinfo);
	pg::require_arg(fcinfo, 1, "tasks");
	Datum tasks_arg = PG_GETARG_DATUM(1);
	TimestampTz now = clock_now();
	Oid caller = pg::guard([] { return GetUserId(); });

	pg::ResultSet out = pg::materialize(fcinfo);
	pg::spi_connect();
	std::vector<GraphTask> graph = read_graph(tasks_arg, name);
	std::vector<std::size_t> order = parents_first(graph);

	// the queues the tasks go to: the caller may enqueue into each
	std::map<std::string, std::vector<std::size_t>> members;
	for (std::size_t i = 0; i < graph.size(); ++i)
		members[graph[i].queue].push_back(i);
	members.try_emplace(name);
	std::string distributed; // the distributed queue that tasks go to
	for (const auto &entry : members) {
		Queue q(entry.first);
		require(q, caller, Permission::enqueue, "enqueue_graph");
		if (!entry.second.empty() && distribution().is_distributed(q.info().relid))
			distributed = entry.first;
		for (std::size_t i : entry.second)
			if (graph[i].finally)
				refuse_finally(q, i + 1);
	}
	// Citus: a graph's tasks in a distributed queue go to one shard, that of
	// their parents enqueued before (or of their keys), on its node, their
	// edges in its rows; no task of the graph in another queue
	std::optional<Queue> shard;
	if (!distributed.empty()) {
		for (const auto &entry : members)
			if (!entry.second.empty() && entry.first != distributed)
				refuse_graph_distributed(distributed);
		Queue whole(distributed);
		if (!distribution().shards_served_here(whole, false))
			refuse_not_served_here(distributed, "enqueue_graph");
		const Shards &shards = distribution().distributed_shards(whole);
		std::vector<int64> outer;
		std::vector<int32> keys;
		for (const GraphTask &t : graph) {
			for (const TaskRef &p : t.outer) {
				if (p.queue != distributed)
					refuse_graph_distributed(distributed);
				outer.push_back(p.id);
			}
			if (t.key && shards.count > 0)
				keys.push_back(distribution().key_position(pg::text_datum(*t.key), shards.count));
		}
		// the shard of the keys, else of the first parent enqueued before
		// (parents in other shards are told of their children by messages:
		// dependencies.hpp)
		std::optional<int32> position;
		for (int32 k : keys)
			if (!position)
				position = k;
			else if (*position != k)
				refuse_graph_shards(distributed);
		if (!outer.empty()) {
			int32 first = distribution().parents_position(whole, outer);
			if (!position)
				position = first;
		}
		if (!position) {
			const LocalShard *mine = distribution().next_local_shard(shards);
			position = mine ? mine->position : distribution().next_position(shards);
		}
		const LocalShard *at = shards.at(*position);
		if (!at)
			return distribution().route_call(fcinfo, whole, *position, &out);
		shard.emplace(distributed, *at);
	}
	// queue `queue_name`: the shard where the graph's tasks go, or the queue
	// opened into `opened`
	auto open = [&](const std::string &queue_name, std::optional<Queue> &opened) -> Queue & {
		return shard && queue_name == distributed ? *shard : opened.emplace(queue_name);
	};

	// parents enqueued before: the caller may read their queues; each is
	// marked as a parent (waiting for a complete that holds it) and its
	// state decides: done counts as done, dead or cancelled cancels
	std::map<std::string, std::vector<int64>> outer_ids;
	for (const GraphTask &t : graph)
		for (const TaskRef &p : t.outer)
			outer_ids[p.queue].push_back(p.id);
	std::map<std::string, std::map<int64, std::string>> outer_states;
	for (auto &[queue_name, ids] : outer_ids) {
		Queue whole(queue_name);
		if (!holds(whole, caller, Permission::enqueue))
			require(whole, caller, Permission::read, "enqueue_graph");
		if (queue_name != distributed && distribution().is_distributed(whole.info().relid))
			refuse_graph_distributed(queue_name);
		std::optional<Queue> opened;
		Queue &q = open(queue_name, opened);
		std::vector<int64> here;
		for (int64 id : ids)
			if (q.on_shard() && task_position(id) != q.info().shard_position)
				outer_states[queue_name][id] = elsewhere_state; // open until its shard answers
			else
				here.push_back(id);
		for (auto &[id, state] : mark_parents(q, here))
			outer_states[queue_name][id] = std::move(state);
	}

	// (a finally-child counts a parent that has ended, however, as ended)
	for (std::size_t i : order) {
		GraphTask &t = graph[i];
		for (const TaskRef &p : t.outer) {
			const std::string &state = outer_states.at(p.queue).at(p.id);
			if (!t.doom && !t.finally)
				t.doom = doom_of(p.id, p.queue, state);
			if (state != "done" && state != "dead" && state != "cancelled")
				++t.open;
		}
		for (std::size_t p : t.inner) {
			if (!t.finally && !t.doom && graph[p].doom)
				t.doom = graph[p].doom;
			if (!t.finally || !graph[p].doom) // a parent cancelled at once has ended
				++t.open;
		}
		if (!t.doom)
			for (std::size_t p : t.inner) {
				graph[p].children = true;
				if (graph[p].queue == t.queue) { // the edge goes into both rows
					graph[p].row_children.push_back(i);
					t.row_parents.push_back(p);
				}
			}
	}

	// each queue's tasks in one statement, with ids drawn first, in graph
	// order (the rows name each other's)
	for (const auto &[queue_name, positions] : members) {
		if (positions.empty())
			continue;
		std::optional<Queue> opened;
		Queue &q = open(queue_name, opened);
		if (q.on_shard()) { // ids that name the shard
			static const Oid count_type[1] = {INT4OID};
			Datum count = Int32GetDatum(static_cast<int32>(positions.size()));
			q.run_internal("graph:shard-ids", q.sql().draw_shard_ids(), 1, count_type, &count, nullptr,
			               Access::owner);
			std::vector<int64> drawn = int8_column(0, 1);
			for (std::size_t k = 0; k < drawn.size() && k < positions.size(); ++k)
				graph[positions[k]].id = drawn[k];
			continue;
		}
		// the identity sequence of the queue's table, looked up once (an
		// expression of the draw would be evaluated for every id)
		static const Oid table_type[1] = {TEXTOID};
		Datum table_name = pg::text_datum(q.sql().table());
		q.run_internal(
		    "graph:sequence",
		    "SELECT pg_catalog.pg_get_serial_sequence($1, 'id')::pg_catalog.regclass::pg_catalog.oid", 1,
		    table_type, &table_name, nullptr, Access::owner);
		bool isnull = false;
		Datum sequence = pg::column(0, 1, &isnull);
		if (isnull)
			throw Error(sqlstate::internal_error,
			            fmt::format("the table of queue \"{}\" has no id sequence", queue_name));
		static const Oid draw_types[2] = {OIDOID, INT4OID};
		Datum draw_values[2] = {sequence, Int32GetDatum(static_cast<int32>(positions.size()))};
		q.run_internal(
		    "graph:ids",
		    "SELECT pg_catalog.array_agg(pg_catalog.nextval($1::pg_catalog.regclass) ORDER BY n.n) "
		    "FROM pg_catalog.generate_series(1, $2) AS n",
		    2, draw_types, draw_values, nullptr, Access::owner);
		std::vector<int64> drawn = int8_column(0, 1);
		for (std::size_t k = 0; k < drawn.size() && k < positions.size(); ++k)
			graph[positions[k]].id = drawn[k];
	}
	for (const auto &[queue_name, positions] : members) {
		if (positions.empty())
			continue;
		std::optional<Queue> opened;
		Queue &q = open(queue_name, opened);
		// the rows' children and parents: slices of one flat array each,
		// from the row's start, of its count (0: NULL)
		std::vector<Datum> flat_children, flat_parents, children_at, children_count, parents_at,
		    parents_count;
		auto add_slice = [&](const std::vector<std::size_t> &tasks, std::vector<Datum> &flat,
		                     std::vector<Datum> &start, std::vector<Datum> &count) {
			start.push_back(Int32GetDatum(static_cast<int32>(flat.size()) + 1));
			count.push_back(Int32GetDatum(static_cast<int32>(tasks.size())));
			for (std::size_t k : tasks)
				flat.push_back(Int64GetDatum(graph[k].id));
		};
		std::vector<Datum> ids, payloads, run_ats, priorities, keys, opens, children, errors, finals;
		std::vector<char> run_at_nulls, key_nulls, open_nulls, children_nulls, error_nulls, final_nulls;
		for (std::size_t i : positions) {
			const GraphTask &t = graph[i];
			ids.push_back(Int64GetDatum(t.id));
			add_slice(t.row_children, flat_children, children_at, children_count);
			add_slice(t.row_parents, flat_parents, parents_at, parents_count);
			if (q.on_shard() && !t.doom) // and those enqueued before, in the rows too
				for (const TaskRef &p : t.outer) {
					flat_parents.push_back(Int64GetDatum(p.id));
					parents_count.back() = Int32GetDatum(DatumGetInt32(parents_count.back()) + 1);
				}
			payloads.push_back(t.payload);
			run_ats.push_back(t.run_at ? TimestampTzGetDatum(*t.run_at) : Datum(0));
			run_at_nulls.push_back(t.run_at ? ' ' : 'n');
			priorities.push_back(Int32GetDatum(t.priority));
			keys.push_back(t.key ? pg::text_datum(*t.key) : Datum(0));
			key_nulls.push_back(t.key ? ' ' : 'n');
			opens.push_back(Int32GetDatum(t.doom ? 0 : t.open));
			open_nulls.push_back(t.has_parents ? ' ' : 'n');
			children.push_back(BoolGetDatum(true));
			children_nulls.push_back(t.children ? ' ' : 'n');
			errors.push_back(t.doom ? pg::text_datum(*t.doom) : Datum(0));
			error_nulls.push_back(t.doom ? ' ' : 'n');
			finals.push_back(BoolGetDatum(true));
			final_nulls.push_back(t.finally ? ' ' : 'n');
		}
		// the mark of finally-children, where the table has it (refused
		// before where it has not: refuse_finally)
		const bool ends = q.info().after_ends;
		std::vector<char> none(positions.size(), ' ');
		std::optional<int32> shard_key = q.sql().shard_key();
		std::string sql = fmt::format(
		    R"(INSERT INTO {t} ({sk}id, state, priority, run_at, payload, concurrency_key, enqueued_at, parents_open,
                  has_children, finished_at, last_error, children, parents{ec})
OVERRIDING SYSTEM VALUE
SELECT {skv}u.id,
       CASE WHEN u.error IS NOT NULL THEN 'cancelled'
            WHEN u.open )" GT R"( 0 THEN 'waiting'
            WHEN $3 AND u.key IS NOT NULL THEN 'blocked'
            WHEN u.run_at )" GT R"( $1 THEN 'scheduled' ELSE 'ready' END,
       u.priority, COALESCE(u.run_at, $1), u.payload, u.key, $1, u.open, u.children,
       CASE WHEN u.error IS NOT NULL THEN $1 END, u.error,
       CASE WHEN u.cn )" GT R"( 0 THEN $11[u.cs:u.cs )" PLUS R"( u.cn )" MINUS R"( 1] END,
       CASE WHEN u.pn )" GT R"( 0 THEN $14[u.ps:u.ps )" PLUS R"( u.pn )" MINUS R"( 1] END{ev}
  FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($4), pg_catalog.unnest($5), pg_catalog.unnest($6),
                  pg_catalog.unnest($7), pg_catalog.unnest($8), pg_catalog.unnest($9), pg_catalog.unnest($10),
                  pg_catalog.unnest($12), pg_catalog.unnest($13), pg_catalog.unnest($15), pg_catalog.unnest($16){eu})
       AS u(payload, run_at, priority, key, open, children, error, id, cs, cn, ps, pn{ea})
RETURNING state, concurrency_key)",
		    fmt::arg("t", q.sql().table()), fmt::arg("sk", shard_key ? "shard_key, " : ""),
		    fmt::arg("skv", shard_key ? fmt::format("{}, ", *shard_key) : std::string()),
		    fmt::arg("ec", ends ? ", after_ends" : ""), fmt::arg("ev", ends ? ", u.ends" : ""),
		    fmt::arg("eu", ends ? ", pg_catalog.unnest($17)" : ""), fmt::arg("ea", ends ? ", ends" : ""));
		static const Oid types[17] = {
		    TIMESTAMPTZOID, JSONBARRAYOID, BOOLOID,      TIMESTAMPTZARRAYOID, INT4ARRAYOID, TEXTARRAYOID,
		    INT4ARRAYOID,   BOOLARRAYOID,  TEXTARRAYOID, INT8ARRAYOID,        INT8ARRAYOID, INT4ARRAYOID,
		    INT4ARRAYOID,   INT8ARRAYOID,  INT4ARRAYOID, INT4ARRAYOID,        BOOLARRAYOID};
		std::vector<char> flat_none(std::max(flat_children.size(), flat_parents.size()), ' ');
		Datum values[17] = {TimestampTzGetDatum(now),
		                    array_datum(payloads, none, JSONBOID),
		                    BoolGetDatum(q.info().key_limit > 0),
		                    array_datum(run_ats, run_at_nulls, TIMESTAMPTZOID),
		                    array_datum(priorities, none, INT4OID),
		                    array_datum(keys, key_nulls, TEXTOID),
		                    array_datum(opens, open_nulls, INT4OID),
		                    array_datum(children, children_nulls, BOOLOID),
		                    array_datum(errors, error_nulls, TEXTOID),
		                    array_datum(ids, none, INT8OID),
		                    array_datum(flat_children, flat_none, INT8OID),
		                    array_datum(children_at, none, INT4OID),
		                    array_datum(children_count, none, INT4OID),
		                    array_datum(flat_parents, flat_none, INT8OID),
		                    array_datum(parents_at, none, INT4OID),
		                    array_datum(parents_count, none, INT4OID),
		                    ends ? array_datum(finals, final_nulls, BOOLOID) : Datum(0)};
		uint64 n = q.run_internal(shard_key ? (ends ? "graph:shard-insert-ends" : "graph:shard-insert")
		                                    : (ends ? "graph:insert-ends" : "graph:insert"),
		                          sql, ends ? 17 : 16, types, values, nullptr, Access::owner);
		uint64 claimable = 0;
		std::vector<std::string> blocked_keys;
		for (uint64 row = 0; row < n; ++row) {
			std::optional<std::string> state = pg::text_column(row, 1);
			if (state == "ready" || state == "scheduled")
				++claimable;
			else if (state == "blocked")
				if (auto key = pg::text_column(row, 2))
					blocked_keys.push_back(*key);
		}
		if (!blocked_keys.empty())
			release_keys(q, std::move(blocked_keys), now);
		if (claimable > 0)
			queue::notify(q.name(), claimable);
	}

	std::vector<TaskRef> from, to;
	for (const GraphTask &t : graph) {
		if (shard && t.queue == distributed) // parents in other shards learn of it
			for (const TaskRef &p : t.outer)
				if (outer_states.at(p.queue).at(p.id) == elsewhere_state) {
					post_message(distributed, Message::mark, p.id, t.id);
					if (t.doom) // cancelled already: the mark checks that the parent exists
						post_message(distributed, Message::forget, p.id, t.id);
				}
		if (t.doom)
			continue;
		for (std::size_t p : t.inner)
			if (graph[p].queue != t.queue) { // the others are in the rows
				from.push_back(TaskRef{graph[p].queue, graph[p].id});
				to.push_back(TaskRef{t.queue, t.id});
			}
		if (shard && t.queue == distributed) { // in the parents' rows (the child's: inserted so)
			for (const TaskRef &p : t.outer)
				if (outer_states.at(p.queue).at(p.id) != elsewhere_state)
					add_row_child(*shard, p.id, t.id);
			continue;
		}
		for (const TaskRef &p : t.outer) {
			from.push_back(p);
			to.push_back(TaskRef{t.queue, t.id});
		}
	}
	insert_edges(from, to);
	deliver_messages();

	for (const GraphTask &t : graph)
		add_graph_row(out, t);
	pg::spi_finish();
	return Datum(0);
}
