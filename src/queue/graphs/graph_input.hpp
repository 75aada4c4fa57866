// enqueue_graph's input (src/queue/graphs/graph.cpp): the JSON array of
// tasks read in place and checked, and the order the tasks are enqueued in.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "queue/graphs/dependencies.hpp"

namespace concurrency::queue {

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

// The tasks of the graph, read and checked: fields, refs, parents, no cycle
// (22023 for what is wrong, naming the element).
std::vector<GraphTask> read_graph(Datum tasks, const std::string &default_queue);

// The positions of the graph's tasks, parents before children; 22023 when
// the graph has a cycle.
std::vector<std::size_t> parents_first(const std::vector<GraphTask> &graph);

} // namespace concurrency::queue
