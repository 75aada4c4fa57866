// Dependencies between tasks: what happens to children when their parents
// end, and the parents of a task enqueued with `after` (queue/dependencies.hpp).
#include "queue/graphs/dependencies.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "citus/node.hpp"
#include "queue/args.hpp"
#include "queue/distributed/distributed.hpp"
#include "queue/flow/keys.hpp"
#include "queue/permissions.hpp"
#include "queue/sql_operators.hpp"
#include "queue/time/wait.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/lsyscache.h"
}

using namespace concurrency;

namespace concurrency::queue {

namespace {

// The edges: parents of a task (child_queue, child_id), children of tasks
// (parent_queue, parent_id). Each statement is one index scan: the primary
// key (parent_queue, parent_id, child_queue, child_id) or the child index.
constexpr const char *children_sql = "SELECT child_queue, child_id FROM concurrency.task_dependency "
                                     "WHERE parent_queue " EQ " $1 AND parent_id " EQ " ANY ($2)";
constexpr const char *drop_child_sql =
    "DELETE FROM concurrency.task_dependency WHERE child_queue " EQ " $1 AND child_id " EQ " ANY ($2)";

// Whether task `id` of the queue of `q` is in another shard than `q`, a shard
// of a distributed queue (ids carry their shard's position).
bool elsewhere(Queue &q, int64 id) {
	return q.on_shard() && task_position(id) != q.info().shard_position;
}

Message doom_message(Ending how) {
	return how == Ending::dead      ? Message::dead
	       : how == Ending::dropped ? Message::dropped
	                                : Message::cancelled;
}

// The owner of concurrency.task_dependency, as whom its statements run: the
// caller holds no privilege on it (its rights on queues were checked).
Oid edge_owner() {
	Oid relid = concurrency_relid("task_dependency");
	if (!OidIsValid(relid))
		throw Error(
		    sqlstate::object_not_in_prerequisite_state, "the extension's objects are older than its module",
		    "concurrency.task_dependency does not exist.", "Run ALTER EXTENSION concurrency_ext UPDATE.");
	return relation_owner(relid);
}

// Children of tasks `parents` of queue `queue`, on the latest committed
// state (an edge committed after this transaction's snapshot counts: its
// enqueue held the parent's row, which this transaction has just written),
// per queue and task, with how many of `parents` each one has.
std::map<std::string, std::map<int64, int32>> children_of(std::string_view queue,
                                                          const std::vector<int64> &parents) {
	static const Oid types[2] = {TEXTOID, INT8ARRAYOID};
	Datum values[2] = {pg::text_datum(queue), int8_array(parents)};
	uint64 n = run_edges("dependencies:children", children_sql, 2, types, values, nullptr, true);
	std::map<std::string, std::map<int64, int32>> children;
	for (uint64 i = 0; i < n; ++i) {
		std::optional<std::string> child_queue = pg::text_column(i, 1);
		if (child_queue)
			children[*child_queue][pg::int64_column(i, 2)] += 1;
	}
	return children;
}

void drop_child_edges(std::string_view queue, const std::vector<int64> &children) {
	static const Oid types[2] = {TEXTOID, INT8ARRAYOID};
	Datum values[2] = {pg::text_datum(queue), int8_array(children)};
	run_edges("dependencies:drop-child", drop_child_sql, 2, types, values, nullptr, false);
}

// Queue `name` to act on its tasks: `own` where that is its name (the queue,
// or the shard of a distributed queue, whose tasks ended: children in the
// parents' rows are in the same table), else opened into `opened`.
Queue &queue_of(const std::string &name, Queue *own, std::optional<Queue> &opened) {
	if (own && own->name() == name)
		return *own;
	return opened.emplace(name);
}

// The children of done tasks `parents` of `q`: one parent less each; those
// left with none become ready, scheduled, or (on a queue with a key_limit)
// blocked until their key admits them.
void release_children(Queue &q, const std::vector<int64> &parents, const std::map<int64, int32> &in_row,
                      TimestampTz now) {
	std::string queue(q.name());
	std::map<std::string, std::map<int64, int32>> children = children_of(queue, parents);
	for (const auto &[id, count] : in_row)
		children[queue][id] += count;
	for (const auto &[child_queue, counts] : children) {
		if (!OidIsValid(queue_relid(child_queue))) // dropped since
			continue;
		std::optional<Queue> opened;
		Queue &child = queue_of(child_queue, &q, opened);
		std::map<int32, std::vector<int64>> by_count; // mostly one entry: one parent each
		for (const auto &[id, count] : counts)
			by_count[count].push_back(id);
		bool limited = child.info().key_limit > 0;
		uint64 claimable = 0;
		std::vector<std::string> keys;
		for (const auto &[count, ids] : by_count) {
			std::string sql = fmt::format(
			    R"(UPDATE {t} AS t
   SET parents_open = t.parents_open )" MINUS R"( $2,
       state = CASE WHEN t.parents_open )" GT R"( $2 THEN 'waiting'
                    WHEN $4 AND t.concurrency_key IS NOT NULL THEN 'blocked'
                    WHEN t.run_at )" GT R"( $3 THEN 'scheduled' ELSE 'ready' END
 WHERE {tk}t.id )" EQ R"( ANY ($1) AND t.state )" EQ R"( 'waiting'
RETURNING t.state, t.concurrency_key)",
			    fmt::arg("t", child.sql().table()), fmt::arg("tk", child.sql().shard_filter(true)));
			static const Oid types[4] = {INT8ARRAYOID, INT4OID, TIMESTAMPTZOID, BOOLOID};
			Datum values[4] = {int8_array(ids), Int32GetDatum(count), TimestampTzGetDatum(now),
			                   BoolGetDatum(limited)};
			uint64 n = child.run_internal("dependencies:release", sql, 4, types, values, nullptr,
			                              Access::owner_latest);
			for (uint64 i = 0; i < n; ++i) {
				std::optional<std::string> state = pg::text_column(i, 1);
				if (state == "ready" || state == "scheduled")
					++claimable;
				else if (state == "blocked")
					if (auto key = pg::text_column(i, 2))
						keys.push_back(*key);
			}
		}
		if (!keys.empty())
			release_keys(child, std::move(keys), now);
		if (claimable > 0)
			child.notify(claimable);
	}
}

// The waiting descendants of task `root` of `queue` (`in_row`: its children
// named in its row), which ended dead or cancelled: cancelled, generation by
// generation, their last_error naming it. `own`: the queue (or shard) whose
// task it is, where the caller has it.
void cancel_descendants(std::string_view queue, int64 root, const std::vector<int64> &in_row, Ending how,
                        TimestampTz now, Queue *own) {
	std::string error =
	    how == Ending::dropped
	        ? fmt::format("parent task {} of queue \"{}\" was dropped with its queue", root, queue)
	        : fmt::format("parent task {} of queue \"{}\" ended {}", root, queue,
	                      how == Ending::dead ? "dead" : "cancelled");
	// a generation: the parents whose edges are rows of task_dependency, and
	// the children named in their parents' rows, per queue
	std::map<std::string, std::vector<int64>> parents{{std::string(queue), {root}}};
	std::map<std::string, std::set<int64>> named{{std::string(queue), {in_row.begin(), in_row.end()}}};
	while (!parents.empty() || !named.empty()) {
		std::map<std::string, std::set<int64>> children = std::move(named);
		for (const auto &[parent_queue, ids] : parents)
			for (const auto &[child_queue, counts] : children_of(parent_queue, ids))
				for (const auto &entry : counts)
					children[child_queue].insert(entry.first);
		parents.clear();
		named.clear();
		for (const auto &[child_queue, set] : children) {
			if (set.empty() || !OidIsValid(queue_relid(child_queue)))
				continue;
			std::optional<Queue> opened;
			Queue &child = queue_of(child_queue, own, opened);
			std::vector<int64> ids;
			for (int64 id : set) {
				if (elsewhere(child, id)) // on another shard: told so
					post_message(child_queue, doom_message(how), root, id);
				else
					ids.push_back(id);
			}
			if (ids.empty())
				continue;
			std::string sql = fmt::format(
			    R"(UPDATE {t} AS t
   SET state = 'cancelled', finished_at = $2, last_error = $3
 WHERE {tk}t.id )" EQ R"( ANY ($1) AND t.state )" EQ R"( 'waiting'
RETURNING t.id, t.has_children, t.children, t.parents)",
			    fmt::arg("t", child.sql().table()), fmt::arg("tk", child.sql().shard_filter(true)));
			static const Oid types[3] = {INT8ARRAYOID, TIMESTAMPTZOID, TEXTOID};
			Datum values[3] = {int8_array(ids), TimestampTzGetDatum(now), pg::text_datum(error)};
			uint64 n = child.run_internal("dependencies:cancel", sql, 3, types, values, nullptr,
			                              Access::owner_latest);
			std::vector<int64> cancelled;
			for (uint64 r = 0; r < n; ++r) {
				cancelled.push_back(pg::int64_column(r, 1));
				if (pg::column_as<bool>(r, 2).value_or(false))
					parents[child_queue].push_back(cancelled.back());
				for (int64 c : int8_column(r, 3))
					named[child_queue].insert(c);
				for (int64 p : int8_column(r, 4))
					if (elsewhere(child, p))
						post_message(child_queue, Message::forget, p, cancelled.back());
			}
			if (!cancelled.empty())
				drop_child_edges(child_queue, cancelled);
		}
	}
}

} // namespace

Datum int8_array(const std::vector<int64> &values) {
	std::vector<Datum> elems;
	elems.reserve(values.size());
	for (int64 v : values)
		elems.push_back(Int64GetDatum(v));
	Datum *data = elems.data();
	int count = static_cast<int>(elems.size());
	return pg::guard([&] {
		return PointerGetDatum(construct_array(data, count, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	});
}

Datum array_datum(const std::vector<Datum> &elems, const std::vector<char> &nulls, Oid elemtype) {
	int count = static_cast<int>(elems.size());
	std::vector<Datum> data(elems);
	std::unique_ptr<bool[]> isnull(new bool[elems.size() + 1]);
	for (std::size_t i = 0; i < elems.size(); ++i)
		isnull[i] = nulls[i] == 'n';
	bool *flags = isnull.get();
	Datum *values = data.data();
	return pg::guard([&] {
		int16 typlen;
		bool typbyval;
		char typalign;
		get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
		if (count == 0)
			return PointerGetDatum(construct_empty_array(elemtype));
		int dims[1] = {count};
		int lbs[1] = {1};
		return PointerGetDatum(
		    construct_md_array(values, flags, 1, dims, lbs, elemtype, typlen, typbyval, typalign));
	});
}

uint64 run_edges(const char *key, const char *sql, int nargs, const Oid *types, const Datum *values,
                 const char *nulls, bool latest) {
	SPIPlanPtr plan = pg::prepared_plan(key, sql, nargs, types, CURSOR_OPT_GENERIC_PLAN);
	return run_plan_as(plan, values, nulls, edge_owner(), latest);
}

// The callers name each edge once (their parents are distinct, and so are
// their children): no ON CONFLICT, which would cost a probe of each index.
void insert_edges(const std::vector<TaskRef> &parents, const std::vector<TaskRef> &children) {
	if (parents.empty())
		return;
	std::vector<Datum> pq, pid, cq, cid;
	for (std::size_t i = 0; i < parents.size(); ++i) {
		pq.push_back(pg::text_datum(parents[i].queue));
		pid.push_back(Int64GetDatum(parents[i].id));
		cq.push_back(pg::text_datum(children[i].queue));
		cid.push_back(Int64GetDatum(children[i].id));
	}
	std::vector<char> none(parents.size(), ' ');
	static const Oid types[4] = {TEXTARRAYOID, INT8ARRAYOID, TEXTARRAYOID, INT8ARRAYOID};
	Datum values[4] = {array_datum(pq, none, TEXTOID), array_datum(pid, none, INT8OID),
	                   array_datum(cq, none, TEXTOID), array_datum(cid, none, INT8OID)};
	run_edges("dependencies:insert",
	          "INSERT INTO concurrency.task_dependency (parent_queue, parent_id, child_queue, child_id) "
	          "SELECT u.pq, u.pid, u.cq, u.cid FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), "
	          "pg_catalog.unnest($3), pg_catalog.unnest($4)) AS u(pq, pid, cq, cid)",
	          4, types, values, nullptr, false);
}

std::map<int64, std::string> mark_parents(Queue &q, std::vector<int64> ids,
                                          const std::vector<int64> &children) {
	std::sort(ids.begin(), ids.end());
	ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
	// on the latest committed state (whatever the isolation level): a parent
	// that a concurrent complete holds is waited for, and then seen done (or
	// gone); through the primary key, in id order
	std::string sql = fmt::format(
	    R"(UPDATE {t} AS t SET has_children = true{children}
 WHERE {tk}t.id )" EQ R"( ANY ($1)
RETURNING t.id, t.state)",
	    fmt::arg("t", q.sql().table()), fmt::arg("tk", q.sql().shard_filter(true)),
	    fmt::arg("children", children.empty() ? "" : ", children = pg_catalog.array_cat(t.children, $2)"));
	static const Oid types[2] = {INT8ARRAYOID, INT8ARRAYOID};
	Datum values[2] = {int8_array(ids), children.empty() ? Datum(0) : int8_array(children)};
	uint64 n =
	    q.run_internal(children.empty() ? "dependencies:mark-parents" : "dependencies:mark-parents-in-row",
	                   sql, children.empty() ? 1 : 2, types, values, nullptr, Access::owner_latest);
	std::map<int64, std::string> states;
	for (uint64 i = 0; i < n; ++i)
		states[pg::int64_column(i, 1)] = pg::text_column(i, 2).value_or("");
	for (int64 id : ids)
		if (!states.count(id))
			throw Error(
			    sqlstate::invalid_parameter_value,
			    fmt::format("parent task {} of queue \"{}\" does not exist", id, q.name()), std::string(),
			    "A parent must exist when its child is enqueued (a queue that retains nothing deletes "
			    "a task when it completes): enqueue the child before the parent completes, or both "
			    "with enqueue_graph.");
	return states;
}

void add_row_child(Queue &q, int64 parent, int64 child) {
	std::string sql = fmt::format(
	    "UPDATE {} AS t SET children = pg_catalog.array_append(t.children, $2) WHERE {}t.id " EQ " $1",
	    q.sql().table(), q.sql().shard_filter(true));
	static const Oid types[2] = {INT8OID, INT8OID};
	Datum values[2] = {Int64GetDatum(parent), Int64GetDatum(child)};
	q.run_internal("dependencies:row-child", sql, 2, types, values, nullptr, Access::owner);
}

std::optional<std::string> doom_of(int64 parent, std::string_view queue, const std::string &state) {
	if (state == "dead" || state == "cancelled")
		return fmt::format("parent task {} of queue \"{}\" ended {}", parent, queue, state);
	return std::nullopt;
}

std::vector<int64> int8_elements(Datum array, bool *has_nulls) {
	Datum *elems = nullptr;
	bool *nulls = nullptr;
	int count = 0;
	pg::guard([&] {
		deconstruct_array(DatumGetArrayTypeP(array), INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &elems,
		                  &nulls, &count);
	});
	std::vector<int64> values;
	for (int i = 0; i < count; ++i) {
		if (!nulls[i])
			values.push_back(DatumGetInt64(elems[i]));
		else if (has_nulls)
			*has_nulls = true;
	}
	return values;
}

std::vector<int64> int8_column(uint64 row, int col) {
	bool isnull = false;
	Datum d = pg::column(row, col, &isnull);
	return isnull ? std::vector<int64>{} : int8_elements(d);
}

FinishedTask finished_row(int row, int64 id, int first_col) {
	bool isnull = false;
	auto r = static_cast<uint64>(row);
	pg::column(r, first_col, &isnull);
	bool had_parents = !isnull;
	bool has_children = pg::column_as<bool>(r, first_col + 1).value_or(false);
	return FinishedTask{id, had_parents, has_children,
	                    has_children ? int8_column(r, first_col + 2) : std::vector<int64>{},
	                    had_parents ? int8_column(r, first_col + 3) : std::vector<int64>{}};
}

void tasks_finished(Queue &q, const std::vector<FinishedTask> &tasks, Ending how, TimestampTz now) {
	if (!tasks.empty() && how != Ending::dropped) // await_task callers are woken at commit
		note_ended(q.name());
	std::vector<int64> children, parents;
	for (const FinishedTask &t : tasks) {
		if (t.had_parents)
			children.push_back(t.id);
		if (t.has_children)
			parents.push_back(t.id);
	}
	if (children.empty() && parents.empty())
		return;
	std::string queue(q.name());
	if (!children.empty()) {
		drop_child_edges(queue, children);
		// parents on other shards keep an ended child no longer
		for (const FinishedTask &t : tasks)
			for (int64 p : t.parents)
				if (elsewhere(q, p))
					post_message(queue, Message::forget, p, t.id);
	}
	if (!parents.empty()) {
		if (how == Ending::done) {
			std::map<int64, int32> in_row;
			for (const FinishedTask &t : tasks)
				for (int64 c : t.children) {
					if (elsewhere(q, c))
						post_message(queue, Message::done, t.id, c);
					else
						in_row[c] += 1;
				}
			release_children(q, parents, in_row, now);
		} else {
			for (const FinishedTask &t : tasks)
				if (t.has_children)
					cancel_descendants(queue, t.id, t.children, how, now, &q);
		}
	}
	deliver_messages();
}

uint64 attach_parents(Queue &q, const std::vector<int64> &children, std::vector<int64> parents,
                      TimestampTz now) {
	if (children.empty())
		return 0;
	// on a shard of a distributed queue the edges are in the rows (parent
	// and children on one shard: they move with it), elsewhere rows of
	// concurrency.task_dependency
	const bool in_rows = q.on_shard();
	// parents on other shards of a distributed queue count as open until
	// their shards answer the mark posted below (done, or a doom)
	std::vector<int64> remote;
	if (in_rows) {
		std::sort(parents.begin(), parents.end());
		parents.erase(std::unique(parents.begin(), parents.end()), parents.end());
		auto moved =
		    std::stable_partition(parents.begin(), parents.end(), [&](int64 p) { return !elsewhere(q, p); });
		remote.assign(moved, parents.end());
		parents.erase(moved, parents.end());
	}
	std::map<int64, std::string> states =
	    mark_parents(q, std::move(parents), in_rows ? children : std::vector<int64>{});
	int32 open = static_cast<int32>(remote.size());
	std::optional<std::string> doomed;
	for (const auto &[id, state] : states) {
		if (!doomed)
			doomed = doom_of(id, q.name(), state);
		if (state != "done" && state != "dead" && state != "cancelled")
			++open;
	}
	std::vector<int64> parent_ids;
	for (const auto &entry : states)
		parent_ids.push_back(entry.first);
	parent_ids.insert(parent_ids.end(), remote.begin(), remote.end());
	// a child cancelled already by a parent here is forgotten at once by
	// those elsewhere (the mark still checks that they exist)
	for (int64 p : remote)
		for (int64 child : children) {
			post_message(q.name(), Message::mark, p, child);
			if (doomed)
				post_message(q.name(), Message::forget, p, child);
		}
	if (!doomed && !in_rows) {
		std::vector<TaskRef> from, to;
		for (int64 child : children)
			for (const auto &entry : states) {
				from.push_back(TaskRef{std::string(q.name()), entry.first});
				to.push_back(TaskRef{std::string(q.name()), child});
			}
		insert_edges(from, to);
	}
	std::string sql = fmt::format(
	    R"(UPDATE {t} AS t
   SET parents_open = $2,
       state = CASE WHEN $3::pg_catalog.text IS NOT NULL THEN 'cancelled'
                    WHEN $2 )" GT R"( 0 THEN 'waiting' ELSE t.state END,
       finished_at = CASE WHEN $3::pg_catalog.text IS NOT NULL THEN $4 END,
       last_error = $3,
       parents = COALESCE($5, t.parents)
 WHERE {tk}t.id )" EQ R"( ANY ($1)
RETURNING t.state, t.concurrency_key)",
	    fmt::arg("t", q.sql().table()), fmt::arg("tk", q.sql().shard_filter(true)));
	static const Oid types[5] = {INT8ARRAYOID, INT4OID, TEXTOID, TIMESTAMPTZOID, INT8ARRAYOID};
	Datum values[5] = {int8_array(children), Int32GetDatum(doomed ? 0 : open),
	                   doomed ? pg::text_datum(*doomed) : Datum(0), TimestampTzGetDatum(now),
	                   in_rows ? int8_array(parent_ids) : Datum(0)};
	char nulls[5] = {' ', ' ', doomed ? ' ' : 'n', ' ', in_rows ? ' ' : 'n'};
	uint64 n = q.run_internal("dependencies:attach", sql, 5, types, values, nulls, Access::owner);
	uint64 claimable = 0;
	std::vector<std::string> keys;
	for (uint64 i = 0; i < n; ++i) {
		std::optional<std::string> state = pg::text_column(i, 1);
		if (state == "ready" || state == "scheduled")
			++claimable;
		else if (auto key = pg::text_column(i, 2))
			keys.push_back(*key);
	}
	// tasks admitted for their keys that now wait leave their places to the next
	if (!keys.empty() && q.info().key_limit > 0)
		release_keys(q, std::move(keys), now);
	deliver_messages();
	return claimable;
}

void forget_dependencies(std::string_view queue, TimestampTz now) {
	if (!OidIsValid(concurrency_relid("task_dependency")))
		return;
	static const Oid types[1] = {TEXTOID};
	Datum values[1] = {pg::text_datum(queue)};
	uint64 n = run_edges("dependencies:parents-elsewhere",
	                     "SELECT DISTINCT parent_id FROM concurrency.task_dependency "
	                     "WHERE parent_queue " EQ " $1 AND child_queue " NE " $1 ORDER BY parent_id",
	                     1, types, values, nullptr, true);
	std::vector<int64> parents;
	for (uint64 i = 0; i < n; ++i)
		parents.push_back(pg::int64_column(i, 1));
	for (int64 parent : parents) // edges in its tasks' rows are within the queue: dropped with it
		cancel_descendants(queue, parent, {}, Ending::dropped, now, nullptr);
	run_edges("dependencies:forget-queue",
	          "DELETE FROM concurrency.task_dependency WHERE parent_queue " EQ " $1 OR child_queue " EQ " $1",
	          1, types, values, nullptr, false);
}

} // namespace concurrency::queue

// ---------------------------------------------------------------------------
// Messages between the shards of a distributed queue (dependencies.hpp).

namespace concurrency::queue {

namespace {

struct Posted {
	int64 kind, a, b;
};

// The messages posted in this transaction and not delivered yet, all about
// one queue (the edges of a distributed queue stay within it).
std::string *outbox_queue = nullptr;
std::vector<Posted> *outbox = nullptr;
bool delivering = false;

void outbox_init() {
	if (outbox)
		return;
	outbox_queue = new std::string();
	outbox = new std::vector<Posted>();
}

// A transaction that ends with messages posted would lose them: a routed
// call whose result nobody read (a statement that Citus routed here by
// itself), or an error on the way. One that commits or prepares raises
// instead; one that aborts forgets them.
void at_transaction_end(XactEvent event, void *) {
	if (!outbox || outbox->empty())
		return;
	if (event == XACT_EVENT_PRE_COMMIT || event == XACT_EVENT_PRE_PREPARE ||
	    event == XACT_EVENT_PARALLEL_PRE_COMMIT) {
		std::size_t n = outbox->size();
		outbox->clear();
		ereport(ERROR,
		        (errcode(ERRCODE_INTERNAL_ERROR),
		         errmsg("%zu messages between the shards of distributed queue \"%s\" were not delivered", n,
		                outbox_queue->c_str()),
		         errdetail("A queue call was made on a shard in a statement that another node sent, "
		                   "not through the queue's functions.")));
	}
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT || event == XACT_EVENT_COMMIT ||
	    event == XACT_EVENT_PREPARE)
		outbox->clear();
}

// The messages `flat` ((kind, a, b) triples) for the shard `shard` of a
// distributed queue, acted on here; what they make others learn is posted.
void handle_messages(Queue &shard, const std::vector<int64> &flat, TimestampTz now) {
	std::string queue(shard.name());
	std::map<int64, std::vector<int64>> marks, forgets;
	std::map<int64, int32> done;
	std::map<std::pair<int64, int64>, std::vector<int64>> dooms; // (kind, root) -> children
	for (std::size_t i = 0; i + 2 < flat.size(); i += 3) {
		int64 kind = flat[i], a = flat[i + 1], b = flat[i + 2];
		switch (static_cast<Message>(kind)) {
		case Message::mark:
			marks[a].push_back(b);
			break;
		case Message::forget:
			forgets[a].push_back(b);
			break;
		case Message::done:
			done[b] += 1;
			break;
		case Message::dead:
		case Message::cancelled:
		case Message::dropped:
			dooms[{kind, a}].push_back(b);
			break;
		default:
			throw Error(sqlstate::internal_error, fmt::format("unknown dependency message kind {}", kind));
		}
	}
	for (const auto &[parent, kids] : marks) {
		std::map<int64, std::string> state = mark_parents(shard, {parent}, kids);
		const std::string &s = state[parent];
		for (int64 kid : kids) {
			if (s == "done")
				post_message(queue, Message::done, parent, kid);
			else if (s == "dead")
				post_message(queue, Message::dead, parent, kid);
			else if (s == "cancelled")
				post_message(queue, Message::cancelled, parent, kid);
		}
	}
	for (const auto &[parent, kids] : forgets) {
		std::string sql = fmt::format(
		    R"(UPDATE {t} AS t
   SET children = ARRAY(SELECT c FROM pg_catalog.unnest(t.children) AS c WHERE c )" NE R"( ALL ($2))
 WHERE {tk}t.id )" EQ R"( $1)",
		    fmt::arg("t", shard.sql().table()), fmt::arg("tk", shard.sql().shard_filter(true)));
		static const Oid types[2] = {INT8OID, INT8ARRAYOID};
		Datum values[2] = {Int64GetDatum(parent), int8_array(kids)};
		shard.run_internal("dependencies:forget", sql, 2, types, values, nullptr, Access::owner_latest);
	}
	if (!done.empty())
		release_children(shard, {}, done, now);
	for (const auto &[key, kids] : dooms) {
		Message kind = static_cast<Message>(key.first);
		Ending how = kind == Message::dead      ? Ending::dead
		             : kind == Message::dropped ? Ending::dropped
		                                        : Ending::cancelled;
		cancel_descendants(queue, key.second, kids, how, now, &shard);
	}
}

} // namespace

void post_message(std::string_view queue, Message kind, int64 a, int64 b) {
	outbox_init();
	if (outbox->empty())
		*outbox_queue = std::string(queue);
	else if (*outbox_queue != queue)
		throw Error(
		    sqlstate::internal_error,
		    fmt::format("dependency messages of queues \"{}\" and \"{}\" at once", *outbox_queue, queue));
	outbox->push_back(Posted{static_cast<int64>(kind), a, b});
}

void receive_messages(std::string_view queue, Datum outbox_datum, bool isnull) {
	if (isnull)
		return;
	std::vector<int64> flat = int8_elements(outbox_datum);
	for (std::size_t i = 0; i + 2 < flat.size(); i += 3)
		post_message(queue, static_cast<Message>(flat[i]), flat[i + 1], flat[i + 2]);
}

void deliver_messages() {
	if (!outbox || outbox->empty() || delivering || citus::in_routed_call())
		return;
	delivering = true;
	try {
		while (!outbox->empty()) {
			std::string name = *outbox_queue;
			std::vector<Posted> batch;
			batch.swap(*outbox);
			// per shard: a mark or forget goes to the parent's, the others
			// to the child's; shards in position order
			std::map<int32, std::vector<int64>> by_position;
			for (const Posted &m : batch) {
				Message kind = static_cast<Message>(m.kind);
				int64 to = kind == Message::mark || kind == Message::forget ? m.a : m.b;
				std::vector<int64> &flat = by_position[task_position(to)];
				flat.insert(flat.end(), {m.kind, m.a, m.b});
			}
			if (!OidIsValid(queue_relid(name))) // dropped in this transaction
				continue;
			Queue whole(name);
			const Shards &shards = distributed_shards(whole);
			TimestampTz now = clock_now();
			for (const auto &[position, flat] : by_position) {
				if (position >= shards.count)
					continue; // no such shard: no such task (a mark was refused before)
				if (const LocalShard *here = shards.at(position)) {
					Queue shard(name, *here);
					handle_messages(shard, flat, now);
					note_local_writes(whole); // where other nodes were written before
					continue;
				}
				static const Oid types[2] = {TEXTOID, INT8ARRAYOID};
				Datum values[2] = {pg::text_datum(name), int8_array(flat)};
				call_on_shard(whole, position, "dependency_messages", 2, types, values, nullptr, false, true,
				              "concurrency_internal");
			}
		}
	} catch (...) {
		delivering = false;
		throw;
	}
	delivering = false;
}

void dependencies_init() {
	outbox_init();
	RegisterXactCallback(at_transaction_end, nullptr);
}

} // namespace concurrency::queue

using namespace concurrency::queue;

// concurrency_internal.dependency_messages(queue, messages) — on the node of
// one shard of a distributed queue: the messages about its tasks (an int8[]
// of (kind, a, b) triples, dependencies.hpp), delivered by the node that
// made the top-level call. For the owner of the queue's table (the queue
// functions make it as the owner).
CONCURRENCY_FUNCTION(concurrency_dependency_messages) {
	QueueName name = queue_name(fcinfo);
	pg::require_arg(fcinfo, 1, "messages");
	bool has_nulls = false;
	std::vector<int64> flat = int8_elements(PG_GETARG_DATUM(1), &has_nulls);
	if (has_nulls)
		throw Error(sqlstate::null_value_not_allowed, "messages must not have NULL elements");
	if (flat.size() % 3 != 0)
		throw Error(sqlstate::invalid_parameter_value, "messages must be (kind, a, b) triples");
	pg::spi_connect();
	Queue whole(name.view());
	if (!pg::guard([&] { return has_privs_of_role(GetUserId(), whole.info().owner); }))
		throw Error(
		    sqlstate::insufficient_privilege,
		    fmt::format("only the owner of queue \"{}\" may deliver its dependency messages", whole.name()));
	AsRole as_owner = authorize(whole, Permission::manage, "dependency_messages");
	if (!is_distributed(whole.info().relid))
		throw Error(sqlstate::object_not_in_prerequisite_state,
		            fmt::format("queue \"{}\" is not a distributed queue", whole.name()));
	// all of one shard's (deliver_messages): that of the first
	if (!flat.empty()) {
		Message kind = static_cast<Message>(flat[0]);
		int64 to = kind == Message::mark || kind == Message::forget ? flat[1] : flat[2];
		const Shards &shards = distributed_shards(whole);
		int32 position = task_position(to);
		const LocalShard *here = position < shards.count ? shards.at(position) : nullptr;
		if (!here)
			throw Error(sqlstate::object_not_in_prerequisite_state,
			            fmt::format("shard {} of distributed queue \"{}\" is not on this node", position,
			                        whole.name()),
			            "The call was routed here by another node, whose picture of the shards is older.",
			            "Retry the transaction.");
		Queue shard(whole.name(), *here);
		handle_messages(shard, flat, clock_now());
		deliver_messages(); // where called directly, not routed
	}
	pg::spi_finish();
	PG_RETURN_VOID();
}

// concurrency_internal.dependency_outbox() -> int8[]: the messages posted in
// this backend and not delivered yet ((kind, a, b) triples; NULL: none),
// taken: the last column of a routed statement, so that the node that sent
// it delivers them (dependencies.hpp).
CONCURRENCY_FUNCTION(concurrency_dependency_outbox) {
	if (!outbox || outbox->empty())
		PG_RETURN_NULL();
	std::vector<int64> flat;
	for (const Posted &m : *outbox)
		flat.insert(flat.end(), {m.kind, m.a, m.b});
	outbox->clear();
	PG_RETURN_DATUM(int8_array(flat));
}
