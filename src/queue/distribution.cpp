// The registered Distribution (distribution.hpp), and the refusals of what
// a distributed queue does not support, which the rooms of the queue raise
// without asking it.
#include "queue/distribution.hpp"

#include <fmt/format.h>

#include "common/error.hpp"

namespace concurrency::queue {

Distribution *registered_distribution = nullptr;

void set_distribution(Distribution &implementation) {
	registered_distribution = &implementation;
}

const LocalShard *Shards::at(int32 position) const {
	for (const LocalShard &shard : local)
		if (shard.position == position)
			return &shard;
	return nullptr;
}

void refuse_not_served_here(std::string_view queue, const char *what) {
	throw Error(sqlstate::feature_not_supported,
	            fmt::format("{} is not supported on distributed queue \"{}\" here", what, queue),
	            "The extension's objects are older than its module, or the other nodes do not see "
	            "every table of the queue yet (it was distributed in this transaction after a parallel "
	            "query on a distributed table, which leaves its shards on several connections per node).",
	            "Run ALTER EXTENSION concurrency_ext UPDATE, or use the queue once the transaction that "
	            "distributed it has committed.");
}

void refuse_graph_distributed(std::string_view queue) {
	throw Error(sqlstate::feature_not_supported,
	            fmt::format("a graph with tasks in distributed queue \"{}\" must have all its tasks and "
	                        "parents in that queue",
	                        queue),
	            "The edges of a distributed queue's tasks are kept in their rows, in its shards; an edge to "
	            "another queue would be a row of another table.",
	            "Enqueue the tasks of each queue with a graph of their own.");
}

void refuse_graph_shards(std::string_view queue) {
	throw Error(sqlstate::feature_not_supported,
	            fmt::format("the tasks of a graph on distributed queue \"{}\" must be in one shard", queue),
	            "A graph's tasks go to one shard (that of their keys, else of their first parent enqueued "
	            "before), and a key's tasks are all in the key's shard: the graph's concurrency keys are in "
	            "several shards.",
	            "Give the graph's tasks keys of one shard, or enqueue it as several graphs.");
}

void refuse_key_rate_distributed(std::string_view queue, const char *hint) {
	throw Error(
	    sqlstate::feature_not_supported,
	    fmt::format("key_rate_limit with rate_limit is not supported on distributed queue \"{}\"", queue),
	    "The claims of a distributed queue with rate_limit are made on the coordinator, those under "
	    "key_rate_limit on each key's shard.",
	    hint);
}

} // namespace concurrency::queue
