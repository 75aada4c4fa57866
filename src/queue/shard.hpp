// One shard of a distributed queue, as the queue's own code serves it
// (Queue(name, LocalShard)); which shards there are, and where, is the
// distributed room's business (queue/distributed/). Internal to src/queue.
#pragma once

#include <string>

#include "pg/postgres.hpp"

namespace concurrency::queue {

// One shard of a distributed queue whose placement is on this node.
struct LocalShard {
	int64 shard_id;
	int32 position;  // among the queue's shards, in shard id order (the low 10 bits of its task ids)
	int32 shard_key; // the shard's value of the distribution column
	int32 group;     // this node's Citus group
	Oid ready_index, scheduled_index, leased_index;
	// the shard's index of finished tasks (InvalidOid: none found; purges then run
	// their statement without the probe)
	Oid finished_index = InvalidOid;
	std::string relname;     // the shard's table (unquoted)
	std::string key_relname; // the key table's shard beside it (unquoted; "" if missing)
	// the shard of the slots of key_rate_limit beside it (unquoted; "" if
	// the queue has no such limit)
	std::string key_rate_relname;
};

} // namespace concurrency::queue
