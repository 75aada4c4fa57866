// Graphs of tasks (src/sql/27_queue_dependencies.sql): enqueue_graph, which
// adds tasks and the edges between them all or nothing, and parent_results,
// which a child's worker reads its parents' results with.
#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/names.hpp"
#include "pg/srf.hpp"
#include "queue/dependencies.hpp"
#include "queue/distributed.hpp"
#include "queue/keys.hpp"
#include "queue/permissions.hpp"
#include "queue/queue.hpp"
#include "queue/sql_operators.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/datum.h"
}

using namespace concurrency;
using namespace concurrency::queue;

namespace {

// One element of enqueue_graph's tasks.
struct GraphTask {
	std::optional<std::string> ref;
	Datum payload = 0;
	std::string queue;
	std::optional<TimestampTz> run_at;
	int32 priority = 0;
	std::optional<std::string> key;
	std::vector<std::size_t> inner; // parents in the graph (positions)
	std::vector<TaskRef> outer;     // parents enqueued before
	bool has_parents = false;
	std::optional<std::string> doom; // cancelled at once: the last_error naming the parent
	int32 open = 0;
	bool children = false;
	int64 id = 0;
};

constexpr const char *task_fields = "ref, payload, after, queue, run_at, priority, concurrency_key";

// The elements of `tasks` (a JSON array), in order: their fields read, the
// fields the graph does not know named (an error rather than a task that
// silently ignores its "aftre").
constexpr const char *elements_sql = R"(SELECT e.n::pg_catalog.int4, pg_catalog.jsonb_typeof(e.v),
       e.o ->> 'ref', COALESCE(e.o -> 'payload', '{}'::pg_catalog.jsonb),
       e.o ->> 'queue', (e.o ->> 'run_at')::pg_catalog.timestamptz, (e.o ->> 'priority')::pg_catalog.int4,
       e.o ->> 'concurrency_key',
       NULLIF(e.o - '{ref,payload,after,queue,run_at,priority,concurrency_key}'::pg_catalog.text[],
              '{}'::pg_catalog.jsonb),
       pg_catalog.jsonb_typeof(e.o -> 'after')
  FROM (SELECT v, n, CASE WHEN pg_catalog.jsonb_typeof(v) = 'object' THEN v ELSE '{}'::pg_catalog.jsonb END AS o
          FROM pg_catalog.jsonb_array_elements($1) WITH ORDINALITY AS a(v, n)) AS e
 ORDER BY e.n)";

// The elements of each task's "after" array.
constexpr const char *after_sql =
    R"(SELECT e.n::pg_catalog.int4, a.m::pg_catalog.int4, pg_catalog.jsonb_typeof(a.v),
       a.v #>> '{}', a.v ->> 'queue', a.v ->> 'id',
       (SELECT pg_catalog.string_agg(k, ', ' ORDER BY k) FROM pg_catalog.jsonb_object_keys(
            CASE WHEN pg_catalog.jsonb_typeof(a.v) = 'object' THEN a.v ELSE '{}'::pg_catalog.jsonb END) AS k
         WHERE k <> ALL ('{queue,id}'::pg_catalog.text[]))
  FROM pg_catalog.jsonb_array_elements($1) WITH ORDINALITY AS e(v, n),
       pg_catalog.jsonb_array_elements(CASE WHEN pg_catalog.jsonb_typeof(e.v) = 'object'
                                             AND pg_catalog.jsonb_typeof(e.v -> 'after') = 'array'
                                            THEN e.v -> 'after' ELSE '[]'::pg_catalog.jsonb END)
            WITH ORDINALITY AS a(v, m)
 ORDER BY e.n, a.m)";

[[noreturn]] void bad_graph(std::string message, std::string detail = {}) {
	throw Error(
	    sqlstate::invalid_parameter_value, std::move(message), std::move(detail),
	    fmt::format("tasks is a JSON array of objects with the fields {}; \"after\" lists refs of "
	                "tasks of the graph, ids of tasks of the task's queue, or {{\"queue\": …, \"id\": …}}.",
	                task_fields));
}

// The keys of JSON object `fields`, for an error message.
std::string field_names(Datum fields) {
	static const Oid types[1] = {JSONBOID};
	SPIPlanPtr plan = pg::prepared_plan(
	    "graph:field-names",
	    "SELECT pg_catalog.string_agg(k, ', ' ORDER BY k) FROM pg_catalog.jsonb_object_keys($1) AS k", 1,
	    types);
	pg::execute(plan, &fields, nullptr, true);
	return pg::text_column(0, 1).value_or("");
}

int64 task_id_of(const std::string &text, std::size_t n, int m) {
	std::size_t used = 0;
	long long id = 0;
	try {
		id = std::stoll(text, &used);
	} catch (const std::exception &) {
		used = 0;
	}
	if (used == 0 || used != text.size())
		bad_graph(fmt::format("tasks[{}].after[{}] is not a task id", n, m),
		          fmt::format("It is {}.", text.substr(0, 64)));
	return static_cast<int64>(id);
}

// The tasks of the graph, read and checked: fields, refs, parents, no cycle.
std::vector<GraphTask> read_graph(Datum tasks, const std::string &default_queue) {
	static const Oid types[1] = {JSONBOID};
	SPIPlanPtr plan = pg::prepared_plan("graph:type", "SELECT pg_catalog.jsonb_typeof($1)", 1, types);
	pg::execute(plan, &tasks, nullptr, true);
	if (pg::text_column(0, 1) != "array")
		bad_graph("tasks must be a JSON array");

	std::vector<GraphTask> graph;
	plan = pg::prepared_plan("graph:elements", elements_sql, 1, types);
	uint64 n = pg::execute(plan, &tasks, nullptr, true);
	std::map<std::string, std::size_t> refs;
	for (uint64 row = 0; row < n; ++row) {
		std::size_t at = graph.size() + 1; // tasks[at], 1-based as in SQL
		if (pg::text_column(row, 2) != "object")
			bad_graph(fmt::format("tasks[{}] is not a JSON object", at));
		bool isnull = false;
		Datum unknown = pg::column(row, 9, &isnull);
		if (!isnull)
			bad_graph(fmt::format("tasks[{}] has a field enqueue_graph does not know: {}", at,
			                      field_names(unknown)));
		std::optional<std::string> after_type = pg::text_column(row, 10);
		if (after_type && *after_type != "array" && *after_type != "null")
			bad_graph(fmt::format("tasks[{}].after must be a JSON array", at));
		GraphTask t;
		t.ref = pg::text_column(row, 3);
		Datum payload = pg::column(row, 4, &isnull);
		t.payload = pg::guard([&] { return datumCopy(payload, false, -1); });
		t.queue = pg::text_column(row, 5).value_or(default_queue);
		if (auto problem = name_problem(t.queue, max_queue_name_bytes))
			bad_graph(fmt::format("tasks[{}].queue is not a queue name", at),
			          fmt::format("The {}.", *problem));
		Datum run_at = pg::column(row, 6, &isnull);
		if (!isnull) {
			TimestampTz time = DatumGetTimestampTz(run_at);
			if (TIMESTAMP_NOT_FINITE(time))
				bad_graph(fmt::format("tasks[{}].run_at must be a finite time", at));
			t.run_at = time;
		}
		t.priority = pg::column_as<int32>(row, 7).value_or(0);
		t.key = pg::text_column(row, 8);
		if (t.key && t.key->size() > max_concurrency_key_bytes)
			bad_graph(fmt::format("tasks[{}].concurrency_key is too long", at),
			          fmt::format("It has {} bytes; at most {} are allowed.", t.key->size(),
			                      max_concurrency_key_bytes));
		if (t.ref && !refs.emplace(*t.ref, graph.size()).second)
			bad_graph(fmt::format("ref \"{}\" is used by more than one task", t.ref->substr(0, 64)),
			          fmt::format("tasks[{}] and tasks[{}] have it.", refs.at(*t.ref) + 1, at));
		graph.push_back(std::move(t));
	}

	plan = pg::prepared_plan("graph:after", after_sql, 1, types);
	n = pg::execute(plan, &tasks, nullptr, true);
	for (uint64 row = 0; row < n; ++row) {
		std::size_t at = static_cast<std::size_t>(pg::column_as<int32>(row, 1).value_or(0));
		int m = pg::column_as<int32>(row, 2).value_or(0);
		GraphTask &t = graph.at(at - 1);
		std::string type = pg::text_column(row, 3).value_or("null");
		std::string text = pg::text_column(row, 4).value_or("");
		t.has_parents = true;
		if (type == "string") {
			auto parent = refs.find(text);
			if (parent == refs.end())
				bad_graph(fmt::format("tasks[{}].after[{}] names ref \"{}\", which no task of the graph has",
				                      at, m, text.substr(0, 64)));
			if (parent->second == at - 1)
				bad_graph(fmt::format("tasks[{}] names itself in after", at));
			t.inner.push_back(parent->second);
		} else if (type == "number") {
			t.outer.push_back(TaskRef{t.queue, task_id_of(text, at, m)});
		} else if (type == "object") {
			if (auto unknown = pg::text_column(row, 7))
				bad_graph(fmt::format("tasks[{}].after[{}] has a field enqueue_graph does not know: {}", at,
				                      m, *unknown));
			std::optional<std::string> queue = pg::text_column(row, 5);
			std::optional<std::string> id = pg::text_column(row, 6);
			if (!id)
				bad_graph(fmt::format("tasks[{}].after[{}] has no \"id\"", at, m));
			std::string parent_queue = queue.value_or(t.queue);
			if (name_problem(parent_queue, max_queue_name_bytes))
				bad_graph(fmt::format("tasks[{}].after[{}].queue is not a queue name", at, m));
			t.outer.push_back(TaskRef{parent_queue, task_id_of(*id, at, m)});
		} else {
			bad_graph(fmt::format("tasks[{}].after[{}] is neither a ref, a task id nor a task", at, m),
			          fmt::format("It is a JSON {}.", type));
		}
	}
	// a parent named twice is one parent (one edge, counted once)
	auto same = [](const TaskRef &a, const TaskRef &b) { return a.queue == b.queue && a.id == b.id; };
	auto before = [](const TaskRef &a, const TaskRef &b) {
		return a.queue < b.queue || (a.queue == b.queue && a.id < b.id);
	};
	for (GraphTask &t : graph) {
		std::sort(t.inner.begin(), t.inner.end());
		t.inner.erase(std::unique(t.inner.begin(), t.inner.end()), t.inner.end());
		std::sort(t.outer.begin(), t.outer.end(), before);
		t.outer.erase(std::unique(t.outer.begin(), t.outer.end(), same), t.outer.end());
	}
	return graph;
}

// The positions of the graph's tasks, parents before children; 22023 when
// the graph has a cycle.
std::vector<std::size_t> parents_first(const std::vector<GraphTask> &graph) {
	std::vector<std::vector<std::size_t>> children(graph.size());
	std::vector<std::size_t> waiting(graph.size(), 0), order;
	for (std::size_t i = 0; i < graph.size(); ++i) {
		waiting[i] = graph[i].inner.size();
		for (std::size_t p : graph[i].inner)
			children[p].push_back(i);
	}
	for (std::size_t i = 0; i < graph.size(); ++i)
		if (waiting[i] == 0)
			order.push_back(i);
	for (std::size_t next = 0; next < order.size(); ++next)
		for (std::size_t c : children[order[next]])
			if (--waiting[c] == 0)
				order.push_back(c);
	if (order.size() < graph.size())
		for (std::size_t i = 0; i < graph.size(); ++i)
			if (waiting[i] > 0)
				bad_graph("the graph has a cycle",
				          fmt::format("tasks[{}]{} is on a cycle, or after one.", i + 1,
				                      graph[i].ref ? fmt::format(" (ref \"{}\")", graph[i].ref->substr(0, 64))
				                                   : std::string()));
	return order;
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
	for (const auto &entry : members) {
		Queue q(entry.first);
		require(q, caller, Permission::enqueue, "enqueue_graph");
		if (is_distributed(q.info().relid))
			refuse_on_distributed(entry.first, "enqueue_graph");
	}

	// parents enqueued before: the caller may read their queues; each is
	// marked as a parent (waiting for a complete that holds it) and its
	// state decides: done counts as done, dead or cancelled cancels
	std::map<std::string, std::vector<int64>> outer_ids;
	for (const GraphTask &t : graph)
		for (const TaskRef &p : t.outer)
			outer_ids[p.queue].push_back(p.id);
	std::map<std::string, std::map<int64, std::string>> outer_states;
	for (auto &[queue_name, ids] : outer_ids) {
		Queue q(queue_name);
		if (!holds(q, caller, Permission::enqueue))
			require(q, caller, Permission::read, "enqueue_graph");
		if (is_distributed(q.info().relid))
			refuse_on_distributed(queue_name, "enqueue_graph");
		outer_states[queue_name] = mark_parents(q, ids);
	}

	for (std::size_t i : order) {
		GraphTask &t = graph[i];
		for (const TaskRef &p : t.outer) {
			const std::string &state = outer_states.at(p.queue).at(p.id);
			if (!t.doom)
				t.doom = doom_of(p.id, p.queue, state);
			if (state != "done" && state != "dead" && state != "cancelled")
				++t.open;
		}
		for (std::size_t p : t.inner)
			if (!t.doom && graph[p].doom)
				t.doom = graph[p].doom;
		t.open += static_cast<int32>(t.inner.size());
		if (!t.doom)
			for (std::size_t p : t.inner)
				graph[p].children = true;
	}

	// each queue's tasks in one statement, ids drawn in graph order
	for (const auto &[queue_name, positions] : members) {
		if (positions.empty())
			continue;
		Queue q(queue_name);
		std::vector<Datum> payloads, run_ats, priorities, keys, opens, children, errors;
		std::vector<char> run_at_nulls, key_nulls, open_nulls, children_nulls, error_nulls;
		for (std::size_t i : positions) {
			const GraphTask &t = graph[i];
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
		}
		std::vector<char> none(positions.size(), ' ');
		std::string sql = fmt::format(
		    R"(INSERT INTO {t} (state, priority, run_at, payload, concurrency_key, enqueued_at, parents_open,
                  has_children, finished_at, last_error)
SELECT CASE WHEN u.error IS NOT NULL THEN 'cancelled'
            WHEN u.open )" GT R"( 0 THEN 'waiting'
            WHEN $3 AND u.key IS NOT NULL THEN 'blocked'
            WHEN u.run_at )" GT R"( $1 THEN 'scheduled' ELSE 'ready' END,
       u.priority, COALESCE(u.run_at, $1), u.payload, u.key, $1, u.open, u.children,
       CASE WHEN u.error IS NOT NULL THEN $1 END, u.error
  FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($4), pg_catalog.unnest($5), pg_catalog.unnest($6),
                  pg_catalog.unnest($7), pg_catalog.unnest($8), pg_catalog.unnest($9))
       WITH ORDINALITY AS u(payload, run_at, priority, key, open, children, error, n)
 ORDER BY u.n
RETURNING id, state, concurrency_key)",
		    fmt::arg("t", q.sql().table()));
		static const Oid types[9] = {TIMESTAMPTZOID,      JSONBARRAYOID, BOOLOID,
		                             TIMESTAMPTZARRAYOID, INT4ARRAYOID,  TEXTARRAYOID,
		                             INT4ARRAYOID,        BOOLARRAYOID,  TEXTARRAYOID};
		Datum values[9] = {TimestampTzGetDatum(now),
		                   array_datum(payloads, none, JSONBOID),
		                   BoolGetDatum(q.info().key_limit > 0),
		                   array_datum(run_ats, run_at_nulls, TIMESTAMPTZOID),
		                   array_datum(priorities, none, INT4OID),
		                   array_datum(keys, key_nulls, TEXTOID),
		                   array_datum(opens, open_nulls, INT4OID),
		                   array_datum(children, children_nulls, BOOLOID),
		                   array_datum(errors, error_nulls, TEXTOID)};
		uint64 n = q.run_internal("graph:insert", sql, 9, types, values, nullptr, Access::owner);
		std::vector<int64> ids;
		uint64 claimable = 0;
		std::vector<std::string> blocked_keys;
		for (uint64 row = 0; row < n; ++row) {
			ids.push_back(pg::int64_column(row, 1));
			std::optional<std::string> state = pg::text_column(row, 2);
			if (state == "ready" || state == "scheduled")
				++claimable;
			else if (state == "blocked")
				if (auto key = pg::text_column(row, 3))
					blocked_keys.push_back(*key);
		}
		std::sort(ids.begin(), ids.end());
		for (std::size_t k = 0; k < positions.size() && k < ids.size(); ++k)
			graph[positions[k]].id = ids[k];
		if (!blocked_keys.empty())
			release_keys(q, std::move(blocked_keys), now);
		if (claimable > 0)
			q.notify(claimable);
	}

	std::vector<TaskRef> from, to;
	for (const GraphTask &t : graph) {
		if (t.doom)
			continue;
		for (std::size_t p : t.inner) {
			from.push_back(TaskRef{graph[p].queue, graph[p].id});
			to.push_back(TaskRef{t.queue, t.id});
		}
		for (const TaskRef &p : t.outer) {
			from.push_back(p);
			to.push_back(TaskRef{t.queue, t.id});
		}
	}
	insert_edges(from, to);

	for (const GraphTask &t : graph)
		add_graph_row(out, t);
	pg::spi_finish();
	return Datum(0);
}

// concurrency.parent_results(queue, task_id) -> (task_id, queue, result) of
// each parent of the task that is done
CONCURRENCY_FUNCTION(concurrency_parent_results) {
	std::string name = queue::queue_name_arg(fcinfo);
	int64 id = int64_arg(fcinfo, 1, "task_id");
	pg::ResultSet out = pg::materialize(fcinfo);
	pg::spi_connect();
	Queue q(name);
	AsRole as_owner = authorize(q, Permission::work, "parent_results");
	static const Oid types[2] = {TEXTOID, INT8OID};
	Datum values[2] = {pg::text_datum(name), Int64GetDatum(id)};
	uint64 n =
	    run_edges("dependencies:parents",
	              "SELECT parent_queue, parent_id FROM concurrency.task_dependency "
	              "WHERE child_queue " EQ " $1 AND child_id " EQ " $2 ORDER BY parent_queue, parent_id",
	              2, types, values, nullptr, false);
	std::vector<TaskRef> parents;
	for (uint64 row = 0; row < n; ++row)
		parents.push_back(TaskRef{pg::text_column(row, 1).value_or(""), pg::int64_column(row, 2)});
	for (const TaskRef &p : parents) {
		if (!OidIsValid(queue_relid(p.queue))) // dropped since
			continue;
		Queue parent(p.queue);
		std::string sql = fmt::format("SELECT result FROM {} WHERE id " EQ " $1 AND state " EQ " 'done'",
		                              parent.sql().table());
		static const Oid id_type[1] = {INT8OID};
		Datum parent_id = Int64GetDatum(p.id);
		if (parent.run_internal("dependencies:result", sql, 1, id_type, &parent_id, nullptr, Access::owner) ==
		    1) {
			bool isnull = false;
			Datum cols[3] = {Int64GetDatum(p.id), pg::text_datum(p.queue), pg::column(0, 1, &isnull)};
			bool nulls[3] = {false, false, isnull};
			pg::add_row(out, cols, nulls);
		}
	}
	pg::spi_finish();
	return Datum(0);
}
