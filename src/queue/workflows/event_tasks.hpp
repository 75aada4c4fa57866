// Durable workflows: the parts of await_event and emit_event that act on a
// task's row (event_tasks.cpp), on the queue's table or, on a distributed
// queue, on the task's shard: here when the shard is on this node, else on
// its node through the routed functions concurrency_internal.await_event_task
// and deliver_event (src/sql/80_queue_workflows.sql). Internal to
// src/queue/workflows.
#pragma once

#include <optional>
#include <string>

#include "queue/queue.hpp"

extern "C" {
#include "utils/timestamp.h"
}

namespace concurrency::queue {

// Where a call about task `task_id` of queue `whole` (`what`, the
// function's name) is served. `held`: a call under the task's lease, routed
// as heartbeat is; else a read, as task_status. False with `shard` opened
// where the task's shard is on this node (empty for a queue that is not
// distributed); true where the call must be made on the node of the task's
// shard, `position`, or -1 for a read of an id that names no shard of the
// queue (no such task: a held call raises CE001). 0A000 where this node does
// not serve the queue's calls. Call while SPI is connected.
bool task_elsewhere(Queue &whole, int64 task_id, const char *what, bool held, std::optional<Queue> &shard,
                    int32 &position);

// What await_event does to the task (held under its lease).
enum class EventTaskOp {
	look,     // nothing: the event's step and the task's awaiting
	receive,  // the payload recorded as the event's step, the wait ended where it was this event's
	time_out, // the await's timeout recorded as the event's step, the wait ended
	park,     // parked until `at` (no lease, no attempt spent), awaiting the event
};

// The task's side of the event: the payload taken before (copied out of
// SPI), whether an earlier await timed out, the event the task was parked for.
struct EventTaskState {
	std::optional<Datum> taken;
	bool timed_out = false;
	std::optional<std::string> awaiting;
};

// `op` on task `task_id` of queue `whole` held with `token`, for `event`,
// with `payload` (receive) or `at` (park; the time of the others). CE001 when
// the lease is lost; for a distributed queue whose calls this node does not
// serve, as heartbeat (0A000, or CE001 for an id that names no shard). Call
// while SPI is connected, as the queue's owner.
EventTaskState event_task(Queue &whole, int64 task_id, int64 token, const std::string &event, EventTaskOp op,
                          Datum payload, TimestampTz at);

// An emitted event handed to task `task_id` of queue `queue` if it is
// parked for it (on its shard's node for a distributed queue): the task
// claimable with `payload` recorded as the event's step, the waiting claims
// (of that node) woken. Returns whether it was; false also for a queue this
// node does not know (*known false: a local queue of another node, or gone).
// Call while SPI is connected.
bool deliver_event(const std::string &queue, int64 task_id, const std::string &event, Datum payload,
                   TimestampTz now, bool *known);

} // namespace concurrency::queue
