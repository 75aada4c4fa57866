// Graphs of tasks (src/sql/27_queue_dependencies.sql): enqueue_graph, which
// adds tasks and the edges between them all or nothing (a task's parents in
// after, or in after_ends for a finally-child), and parent_results and
// parent_outcomes (src/sql/27_queue_outcomes.sql), which a child's worker
// reads its parents' results and ends with.
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
#include "queue/distributed/distributed.hpp"
#include "queue/flow/keys.hpp"
#include "queue/permissions.hpp"
#include "queue/queue.hpp"
#include "queue/sql_operators.hpp"

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
	// its parents are listed in after_ends: each one's end, whatever it is,
	// counts (a finally-child: no parent cancels it)
	bool finally = false;
	std::optional<std::string> doom; // cancelled at once: the last_error naming the parent
	int32 open = 0;
	bool children = false;
	// edges to tasks of the graph in the same queue, kept in the two rows
	std::vector<std::size_t> row_children, row_parents;
	int64 id = 0;
};

constexpr const char *task_fields =
    "ref, payload, after, after_ends, queue, run_at, priority, concurrency_key";

[[noreturn]] void bad_graph(std::string message, std::string detail = {}) {
	throw Error(
	    sqlstate::invalid_parameter_value, std::move(message), std::move(detail),
	    fmt::format(
	        "tasks is a JSON array of objects with the fields {}; \"after\" lists refs of "
	        "tasks of the graph, ids of tasks of the task's queue, or {{\"queue\": …, \"id\": …}}; "
	        "\"after_ends\" lists parents the same way, whose end, whatever it is, releases the task.",
	        task_fields));
}

// `where`: tasks[n].after[m] (or after_ends), for the error
int64 task_id_of(const std::string &text, const std::string &where) {
	std::size_t used = 0;
	long long id = 0;
	try {
		id = std::stoll(text, &used);
	} catch (const std::exception &) {
		used = 0;
	}
	if (used == 0 || used != text.size())
		bad_graph(fmt::format("{} is not a task id", where), fmt::format("It is {}.", text.substr(0, 64)));
	return static_cast<int64>(id);
}

// Reading the JSON of enqueue_graph in place (the jsonb containers), without
// a statement: a JSON null counts as absent, except for a payload.

const char *json_type(const JsonbValue &v) {
	switch (v.type) {
	case jbvNull:
		return "null";
	case jbvString:
		return "string";
	case jbvNumeric:
		return "number";
	case jbvBool:
		return "boolean";
	case jbvBinary:
		return JsonContainerIsObject(v.val.binary.data) ? "object" : "array";
	default:
		return "value";
	}
}

bool is_object(const JsonbValue &v) {
	return v.type == jbvBinary && JsonContainerIsObject(v.val.binary.data);
}

bool is_array(const JsonbValue &v) {
	return v.type == jbvBinary && JsonContainerIsArray(v.val.binary.data);
}

// The value of `key` in object `object` (JSON null too), if there.
std::optional<JsonbValue> member(JsonbContainer *object, const char *key) {
	JsonbValue value;
	JsonbValue *found = pg::guard([&] {
		return getKeyJsonValueFromContainer(object, key, static_cast<uint32>(std::strlen(key)), &value);
	});
	if (!found)
		return std::nullopt;
	return *found;
}

// Element i of array `array`.
JsonbValue element(JsonbContainer *array, uint32 i) {
	return *pg::guard([&] { return getIthJsonbValueFromContainer(array, i); });
}

// Where a value is in tasks, for an error message: tasks[at] or
// tasks[at].<list>[m] (list: after or after_ends), and a field of it.
struct Place {
	std::size_t at;
	int m;
	const char *field;
	const char *list = "after";
	std::string text() const {
		std::string where = m ? fmt::format("tasks[{}].{}[{}]", at, list, m) : fmt::format("tasks[{}]", at);
		return field ? where + "." + field : where;
	}
};

// The text of a JSON string or number (as ->> gives it); nothing for null;
// 22023 naming its place for anything else.
std::optional<std::string> scalar_text(const std::optional<JsonbValue> &v, const Place &place) {
	if (!v || v->type == jbvNull)
		return std::nullopt;
	if (v->type == jbvString)
		return std::string(v->val.string.val, static_cast<std::size_t>(v->val.string.len));
	if (v->type == jbvNumeric) {
		Numeric number = v->val.numeric;
		const char *text = pg::guard(
		    [&] { return DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(number))); });
		return std::string(text);
	}
	bad_graph(fmt::format("{} must be a string or a number", place.text()),
	          fmt::format("It is a JSON {}.", json_type(*v)));
}

// The keys of `object` other than `known`, for an error message.
template <std::size_t N>
std::string unknown_keys(JsonbContainer *object, const std::array<const char *, N> &known) {
	std::set<std::string> names;
	JsonbIterator *it = pg::guard([&] { return JsonbIteratorInit(object); });
	for (;;) {
		JsonbValue v;
		JsonbIteratorToken token = pg::guard([&] { return JsonbIteratorNext(&it, &v, true); });
		if (token == WJB_DONE)
			break;
		if (token != WJB_KEY)
			continue;
		std::string name(v.val.string.val, static_cast<std::size_t>(v.val.string.len));
		if (std::none_of(known.begin(), known.end(), [&](const char *k) { return name == k; }))
			names.insert(std::move(name));
	}
	std::string list;
	for (const std::string &name : names)
		list += (list.empty() ? "" : ", ") + name.substr(0, 64);
	return list;
}

// The members `known` of `object` (nothing where absent), in that order;
// 22023 when it has any other.
template <std::size_t N>
std::array<std::optional<JsonbValue>, N>
fields(JsonbContainer *object, const std::array<const char *, N> &known, const Place &place) {
	std::array<std::optional<JsonbValue>, N> values;
	uint32 found = 0;
	for (std::size_t k = 0; k < N; ++k)
		if ((values[k] = member(object, known[k])))
			++found;
	if (JsonContainerSize(object) > found)
		bad_graph(fmt::format("{} has a field enqueue_graph does not know: {}", place.text(),
		                      unknown_keys(object, known)));
	return values;
}

constexpr std::array<const char *, 8> task_keys = {"ref",    "payload",  "after",           "queue",
                                                   "run_at", "priority", "concurrency_key", "after_ends"};
enum TaskKey {
	ref_key,
	payload_key,
	after_key,
	queue_key,
	run_at_key,
	priority_key,
	concurrency_key_key,
	after_ends_key
};
constexpr std::array<const char *, 2> parent_keys = {"queue", "id"};

// The tasks of the graph, read and checked: fields, refs, parents, no cycle.
std::vector<GraphTask> read_graph(Datum tasks, const std::string &default_queue) {
	Jsonb *json = pg::guard([&] { return DatumGetJsonbP(tasks); });
	if (!JB_ROOT_IS_ARRAY(json) || JB_ROOT_IS_SCALAR(json))
		bad_graph("tasks must be a JSON array");
	uint32 count = JsonContainerSize(&json->root);
	Datum empty_object = pg::guard([] { return DirectFunctionCall1(jsonb_in, CStringGetDatum("{}")); });
	std::vector<GraphTask> graph;
	graph.reserve(count);
	std::vector<std::optional<JsonbValue>> afters;
	afters.reserve(count);
	std::unordered_map<std::string, std::size_t> refs;
	for (uint32 i = 0; i < count; ++i) {
		std::size_t at = graph.size() + 1; // tasks[at], 1-based as in SQL
		JsonbValue e = element(&json->root, i);
		if (!is_object(e))
			bad_graph(fmt::format("tasks[{}] is not a JSON object", at));
		auto f = fields(e.val.binary.data, task_keys, Place{at, 0, nullptr});
		const std::optional<JsonbValue> &after = f[after_key];
		if (after && after->type != jbvNull && !is_array(*after))
			bad_graph(fmt::format("tasks[{}].after must be a JSON array", at));
		const std::optional<JsonbValue> &after_ends = f[after_ends_key];
		if (after_ends && after_ends->type != jbvNull && !is_array(*after_ends))
			bad_graph(fmt::format("tasks[{}].after_ends must be a JSON array", at));
		auto listed = [](const std::optional<JsonbValue> &list) {
			return list && list->type != jbvNull && JsonContainerSize(list->val.binary.data) > 0;
		};
		// one kind of parents per task: the kind is the child's (its row's
		// after_ends), not the edge's
		if (listed(after) && listed(after_ends))
			bad_graph(fmt::format("tasks[{}] has both after and after_ends", at),
			          "A task waits either for its parents to be done (after) or for them to end, "
			          "whatever their end (after_ends): put a task with after between them.");
		GraphTask t;
		t.finally = listed(after_ends);
		afters.push_back(t.finally ? after_ends : after && after->type != jbvNull ? after : std::nullopt);
		t.ref = scalar_text(f[ref_key], Place{at, 0, "ref"});
		if (f[payload_key]) {
			JsonbValue v = *f[payload_key];
			t.payload = pg::guard([&] { return JsonbPGetDatum(JsonbValueToJsonb(&v)); });
			check_payload_size(t.payload, fmt::format("tasks[{}].payload", at).c_str());
		} else {
			t.payload = empty_object;
		}
		t.queue = scalar_text(f[queue_key], Place{at, 0, "queue"}).value_or(default_queue);
		if (auto problem = name_problem(t.queue, max_queue_name_bytes))
			bad_graph(fmt::format("tasks[{}].queue is not a queue name", at),
			          fmt::format("The {}.", *problem));
		if (auto run_at = scalar_text(f[run_at_key], Place{at, 0, "run_at"})) {
			TimestampTz time = pg::guard([&] {
				return DatumGetTimestampTz(
				    DirectFunctionCall3(timestamptz_in, CStringGetDatum(run_at->c_str()),
				                        ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1)));
			});
			if (TIMESTAMP_NOT_FINITE(time))
				bad_graph(fmt::format("tasks[{}].run_at must be a finite time", at));
			t.run_at = time;
		}
		if (auto priority = scalar_text(f[priority_key], Place{at, 0, "priority"}))
			t.priority = pg::guard([&] {
				return DatumGetInt32(DirectFunctionCall1(int4in, CStringGetDatum(priority->c_str())));
			});
		t.key = scalar_text(f[concurrency_key_key], Place{at, 0, "concurrency_key"});
		if (t.key && t.key->size() > max_concurrency_key_bytes)
			bad_graph(fmt::format("tasks[{}].concurrency_key is too long", at),
			          fmt::format("It has {} bytes; at most {} are allowed.", t.key->size(),
			                      max_concurrency_key_bytes));
		if (t.ref && !refs.emplace(*t.ref, graph.size()).second)
			bad_graph(fmt::format("ref \"{}\" is used by more than one task", t.ref->substr(0, 64)),
			          fmt::format("tasks[{}] and tasks[{}] have it.", refs.at(*t.ref) + 1, at));
		graph.push_back(std::move(t));
	}

	for (std::size_t i = 0; i < graph.size(); ++i) {
		if (!afters[i])
			continue;
		std::size_t at = i + 1;
		GraphTask &t = graph[i];
		const char *kind = t.finally ? "after_ends" : "after";
		JsonbContainer *list = afters[i]->val.binary.data;
		uint32 parents = JsonContainerSize(list);
		for (uint32 k = 0; k < parents; ++k) {
			int m = static_cast<int>(k) + 1;
			JsonbValue p = element(list, k);
			t.has_parents = true;
			if (p.type == jbvString) {
				std::string ref(p.val.string.val, static_cast<std::size_t>(p.val.string.len));
				auto parent = refs.find(ref);
				if (parent == refs.end())
					bad_graph(fmt::format("{} names ref \"{}\", which no task of the graph has",
					                      Place{at, m, nullptr, kind}.text(), ref.substr(0, 64)));
				if (parent->second == i)
					bad_graph(fmt::format("tasks[{}] names itself in {}", at, kind));
				t.inner.push_back(parent->second);
			} else if (p.type == jbvNumeric) {
				t.outer.push_back(TaskRef{t.queue, task_id_of(*scalar_text(p, Place{at, m, nullptr, kind}),
				                                              Place{at, m, nullptr, kind}.text())});
			} else if (is_object(p)) {
				auto f = fields(p.val.binary.data, parent_keys, Place{at, m, nullptr, kind});
				std::optional<std::string> queue = scalar_text(f[0], Place{at, m, "queue", kind});
				std::optional<std::string> id = scalar_text(f[1], Place{at, m, "id", kind});
				if (!id)
					bad_graph(fmt::format("{} has no \"id\"", Place{at, m, nullptr, kind}.text()));
				std::string parent_queue = queue.value_or(t.queue);
				if (name_problem(parent_queue, max_queue_name_bytes))
					bad_graph(fmt::format("{} is not a queue name", Place{at, m, "queue", kind}.text()));
				t.outer.push_back(TaskRef{parent_queue, task_id_of(*id, Place{at, m, nullptr, kind}.text())});
			} else {
				bad_graph(fmt::format("{} is neither a ref, a task id nor a task",
				                      Place{at, m, nullptr, kind}.text()),
				          fmt::format("It is a JSON {}.", json_type(p)));
			}
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

// A finally-child (after_ends) of tasks[at] in queue `q`: refused where the
// queue cannot keep its mark (a table from before the update to 0.4.0), and
// on a distributed queue, whose messages between shards carry no such kind.
void refuse_finally(Queue &q, std::size_t at) {
	if (is_distributed(q.info().relid))
		throw Error(sqlstate::feature_not_supported,
		            fmt::format("tasks[{}].after_ends: queue \"{}\" is a distributed queue", at, q.name()),
		            "A distributed queue has no finally-children (after_ends).",
		            "Use after, or put the finally-child in a queue that is not distributed.");
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
		if (!entry.second.empty() && is_distributed(q.info().relid))
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
		if (!shards_served_here(whole, false))
			refuse_not_served_here(distributed, "enqueue_graph");
		const Shards &shards = distributed_shards(whole);
		std::vector<int64> outer;
		std::vector<int32> keys;
		for (const GraphTask &t : graph) {
			for (const TaskRef &p : t.outer) {
				if (p.queue != distributed)
					refuse_graph_distributed(distributed);
				outer.push_back(p.id);
			}
			if (t.key && shards.count > 0)
				keys.push_back(key_position(pg::text_datum(*t.key), shards.count));
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
			int32 first = parents_position(whole, outer);
			if (!position)
				position = first;
		}
		if (!position) {
			const LocalShard *mine = next_local_shard(shards);
			position = mine ? mine->position : next_position(shards);
		}
		const LocalShard *at = shards.at(*position);
		if (!at)
			return route_call(fcinfo, whole, *position, &out);
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
		if (queue_name != distributed && is_distributed(whole.info().relid))
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
			q.notify(claimable);
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
	if (queue::route_tasks(whole, &id, 1, shard, nullptr, false)) {
		if (!queue::shards_served_here(whole, false))
			queue::refuse_not_served_here(name, function);
		if (queue::task_position(id) >= queue::distributed_shards(whole).count) {
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
	    child_id, Int32GetDatum(through_citus ? queue::distributed_shards(whole).keys.at(
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
	if (queue::is_distributed(whole.info().relid)) {
		const queue::Shards &shards = queue::distributed_shards(whole);
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
		if (p.queue == name && queue::is_distributed(whole.info().relid) &&
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
