// enqueue_graph's input (graph_input.hpp): the JSON array of tasks read in
// place (the jsonb containers, without a statement) and checked.
#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "common/names.hpp"
#include "queue/graphs/graph_input.hpp"

extern "C" {
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"
}

namespace concurrency::queue {

namespace {

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

} // namespace

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

} // namespace concurrency::queue
