// Dependencies between tasks (src/sql/23_queue_graphs.sql; for users:
// docs/queue.md, "Dependencies"). A task with parents waits in state
// 'waiting' with parents_open, the number of its parents not done yet, on its
// own row. An edge (parent, child) between two tasks of one queue that one
// enqueue_graph made is in their rows (the parent's children, the child's
// parents: no row of its own, which would cost more than the tasks); every
// other edge is a row of the extension's table concurrency.task_dependency,
// read and written as that table's owner.
//
// A finally-child (enqueue_graph's after_ends) waits for each of its parents
// to end, whatever the end: the mark is the child's row's (the column
// after_ends), not the edge's, so that edges are stored, counted and told as
// before; what differs is a dead or cancelled parent's effect, which counts
// one parent less for it (as a done one does) where it cancels an ordinary
// child (cancel_descendants).
//
// Why the count is on the child's row: two parents completing at the same
// time in two transactions each decrement it with an UPDATE of that row, so
// the second waits for the first and sees its decrement (or, under
// REPEATABLE READ, fails to serialize and is retried): the last one makes
// the child ready, and only when both have committed. A parent's row carries
// has_children, set by the enqueue of a child in the enqueuer's transaction,
// so that a complete without children pays nothing, and a complete racing
// with the enqueue of a child waits for it on the parent's row.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "queue/queue.hpp"

namespace concurrency::queue {

// A task that has just left the live states, as the statement that finished
// it returned it.
struct FinishedTask {
	int64 id;
	bool had_parents;            // parents_open was not NULL: its edges as a child go
	bool has_children;           // its children learn of it
	std::vector<int64> children; // those of them named in its row (same queue)
	std::vector<int64> parents;  // its parents named in its row (same queue)
};

// The FinishedTask of row `row` of SPI_tuptable: the task `id`, with
// parents_open, has_children, children and parents in columns `first_col`
// and the three after it (QueueSql's link columns).
FinishedTask finished_row(int row, int64 id, int first_col);

// The int8[] column `col` of row `row` of SPI_tuptable (NULL: none).
std::vector<int64> int8_column(uint64 row, int col);
// The elements of int8[] `array` that are not NULL (*has_nulls set where
// some are).
std::vector<int64> int8_elements(Datum array, bool *has_nulls = nullptr);

enum class Ending { done, dead, cancelled, dropped };

// After tasks of `q` ended `how` (in the caller's transaction): each one's
// edges as a child go; the children of a done task have one parent less, and
// those left with none become ready (scheduled, or blocked behind their key);
// the waiting descendants of a dead or cancelled task are cancelled, their
// last_error naming it, but for finally-children, which have one parent less. Does nothing for tasks without
// parents or children.
void tasks_finished(Queue &q, const std::vector<FinishedTask> &tasks, Ending how, TimestampTz now);

// enqueue(…, after), enqueue_batch(…, after): the tasks `children` of `q`,
// just inserted by this call, wait for the tasks `parents` of the same queue
// (22023 naming one that does not exist); on a shard of a distributed queue,
// of the same shard, the edges written into their rows. A parent done already counts as
// done; a dead or cancelled one cancels the children at once. Returns how
// many of the children are claimable (ready or scheduled) after that.
uint64 attach_parents(Queue &q, const std::vector<int64> &children, std::vector<int64> parents,
                      TimestampTz now);

// drop_queue(queue), before its table goes: the waiting children in other
// queues of its tasks are cancelled (their last_error naming the parent and
// the drop), and every edge from or to its tasks is deleted (a queue made
// again under the name starts with none). Nothing before the update from
// 0.2.0 (no task_dependency).
void forget_dependencies(std::string_view queue, TimestampTz now);

// A task of a queue.
struct TaskRef {
	std::string queue;
	int64 id;
};

// The parts enqueue_graph shares (queue/graph.cpp).

// Marks tasks `ids` of `q` as parents (has_children), on the latest committed
// state, and returns the state of each; 22023 naming one that does not exist.
// `children` (tasks of `q`): added to each one's row (the edges of a shard
// of a distributed queue are in its rows).
std::map<int64, std::string> mark_parents(Queue &q, std::vector<int64> ids,
                                          const std::vector<int64> &children = {});
// Adds task `child` to the children named in the row of task `parent` of `q`
// (enqueue_graph on a shard of a distributed queue, for a parent enqueued
// before).
void add_row_child(Queue &q, int64 parent, int64 child);
// The last_error of a child whose parent `parent` of `queue` is in `state`,
// if that state cancels it (dead, cancelled).
std::optional<std::string> doom_of(int64 parent, std::string_view queue, const std::string &state);
// Adds the edges parents[i] -> children[i].
void insert_edges(const std::vector<TaskRef> &parents, const std::vector<TaskRef> &children);
// Runs `sql` (kept under `key`) on concurrency.task_dependency as its owner.
uint64 run_edges(const char *key, const char *sql, int nargs, const Oid *types, const Datum *values,
                 const char *nulls, bool latest);
// int8[] of `values`; a one-dimensional array of `elems` of type `elemtype`
// (nulls[i] == 'n': NULL).
Datum int8_array(const std::vector<int64> &values);
Datum array_datum(const std::vector<Datum> &elems, const std::vector<char> &nulls, Oid elemtype);

// Edges between shards of a distributed queue. A task and its parents may be
// in different shards, on different nodes. Its edges are in both rows (the
// parent's children, the child's parents), and what one end must tell the
// other travels as a message, made in the same transaction:
//   mark (parent, child): to the parent's shard, from the child's enqueue:
//     the parent has the child (22023 if there is no such parent); a parent
//     that has ended already answers with done or its doom;
//   done (parent, child): to the child's shard: one parent less;
//   dead, cancelled, dropped (root, child): to the child's shard: the child
//     and its waiting descendants are cancelled, last_error naming `root`;
//   forget (parent, child): to the parent's shard: the child has ended (the
//     parent, kept as done for its children, may be purged once none is left).
// A message is posted where the change is made and delivered by the node
// that made the top-level call: a call that another node routed here cannot
// run a distributed statement (Citus refuses it), so its messages go back
// with its result (concurrency_internal.dependency_outbox, a column of every
// routed statement that writes), and the caller delivers them
// (concurrency_internal.dependency_messages on the node of their shard, or
// here), again and again while deliveries post more (a cancellation that
// reaches grandchildren on a third shard).
enum class Message : int64 { mark = 1, done = 2, dead = 3, cancelled = 4, dropped = 5, forget = 6 };

// Posts a message about tasks of distributed queue `queue`.
void post_message(std::string_view queue, Message kind, int64 a, int64 b);
// Delivers the messages posted in this backend, unless this is a call that
// another node routed here (they go back with its result) or a delivery is
// under way (it takes them). Needs SPI connected; changes SPI_tuptable.
void deliver_messages();
// The messages of a routed statement's outbox column (`outbox`: an int8[] of
// (kind, a, b) triples, or NULL), posted here about queue `queue`.
void receive_messages(std::string_view queue, Datum outbox, bool isnull);
// At backend start: the outbox, emptied at each transaction's end.
void dependencies_init();

} // namespace concurrency::queue
