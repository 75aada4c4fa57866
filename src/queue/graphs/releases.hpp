// What the end of parents does to their children, for the ends seen on this
// node (dependencies.cpp) and those told by the messages between the shards
// of a distributed queue (messages.cpp). Internal to src/queue/graphs.
#pragma once

#include <map>
#include <string_view>
#include <vector>

#include "queue/graphs/dependencies.hpp"

namespace concurrency::queue {

// The children of done tasks `parents` of `q` (ordinary and finally ones
// alike): one parent less each; a waiting child with none left is released.
// `in_row`: children named in the parents' rows (id -> how many of their
// parents ended), counted as well.
void release_children(Queue &q, const std::vector<int64> &parents, const std::map<int64, int32> &in_row,
                      TimestampTz now);

// The waiting descendants of task `root` of `queue` (`in_row`: its children
// named in its row), which ended dead or cancelled: cancelled, generation by
// generation, their last_error naming it. A finally-child (after_ends) is not
// cancelled: the end of each of its parents counts as one parent less, and
// the cancellation goes no further down its line. `own`: the queue (or
// shard) whose task it is, where the caller has it, or nullptr.
void cancel_descendants(std::string_view queue, int64 root, const std::vector<int64> &in_row, Ending how,
                        TimestampTz now, Queue *own);

} // namespace concurrency::queue
