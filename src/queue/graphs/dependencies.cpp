// Dependencies between tasks: what happens to children when their parents
// end, and the parents of a task enqueued with `after` (queue/dependencies.hpp).
#include "queue/graphs/dependencies.hpp"
#include "queue/graphs/releases.hpp"

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
#include "queue/distribution.hpp"
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
// (parent_queue, parent_id). Each id of $2 is one descent of an index: the
// primary key (parent_queue, parent_id, child_queue, child_id) or the child
// index, the id a scalar key of the inner scan of a nested loop (OFFSET 0
// keeps the planner from flattening it). The generic plan of `id = ANY ($2)`
// may instead scan every edge of the queue ($1 as the only index key, the ids
// a filter) while the table has no statistics, as a new one has not. One
// id (a task's complete): the plain index scan, $2 a scalar.
constexpr const char *children_one_sql = "SELECT child_queue, child_id FROM concurrency.task_dependency "
                                         "WHERE parent_queue " EQ " $1 AND parent_id " EQ " $2";
constexpr const char *drop_child_one_sql =
    "DELETE FROM concurrency.task_dependency WHERE child_queue " EQ " $1 AND child_id " EQ " $2";
constexpr const char *children_sql =
    "SELECT e.child_queue, e.child_id FROM (SELECT DISTINCT u.id FROM pg_catalog.unnest($2) AS u(id)) AS u, "
    "LATERAL (SELECT d.child_queue, d.child_id FROM concurrency.task_dependency AS d "
    "WHERE d.parent_queue " EQ " $1 AND d.parent_id " EQ " u.id OFFSET 0) AS e";
constexpr const char *drop_child_sql =
    "DELETE FROM concurrency.task_dependency WHERE ctid " EQ " ANY (ARRAY("
    "SELECT e.ctid FROM (SELECT DISTINCT u.id FROM pg_catalog.unnest($2) AS u(id)) AS u, "
    "LATERAL (SELECT d.ctid FROM concurrency.task_dependency AS d "
    "WHERE d.child_queue " EQ " $1 AND d.child_id " EQ " u.id OFFSET 0) AS e))";

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
	const bool one = parents.size() == 1;
	static const Oid types[2] = {TEXTOID, INT8ARRAYOID};
	static const Oid one_types[2] = {TEXTOID, INT8OID};
	Datum values[2] = {pg::text_datum(queue), one ? Int64GetDatum(parents[0]) : int8_array(parents)};
	uint64 n =
	    one ? run_edges("dependencies:children-one", children_one_sql, 2, one_types, values, nullptr, true)
	        : run_edges("dependencies:children-each", children_sql, 2, types, values, nullptr, true);
	std::map<std::string, std::map<int64, int32>> children;
	for (uint64 i = 0; i < n; ++i) {
		std::optional<std::string> child_queue = pg::text_column(i, 1);
		if (child_queue)
			children[*child_queue][pg::int64_column(i, 2)] += 1;
	}
	return children;
}

void drop_child_edges(std::string_view queue, const std::vector<int64> &children) {
	const bool one = children.size() == 1;
	static const Oid types[2] = {TEXTOID, INT8ARRAYOID};
	static const Oid one_types[2] = {TEXTOID, INT8OID};
	Datum values[2] = {pg::text_datum(queue), one ? Int64GetDatum(children[0]) : int8_array(children)};
	if (one)
		run_edges("dependencies:drop-child-one", drop_child_one_sql, 2, one_types, values, nullptr, false);
	else
		run_edges("dependencies:drop-child-each", drop_child_sql, 2, types, values, nullptr, false);
}

// Queue `name` to act on its tasks: `own` where that is its name (the queue,
// or the shard of a distributed queue, whose tasks ended: children in the
// parents' rows are in the same table), else opened into `opened`.
Queue &queue_of(const std::string &name, Queue *own, std::optional<Queue> &opened) {
	if (own && own->name() == name)
		return *own;
	return opened.emplace(name);
}

// The waiting tasks `counts` of `child` (id -> how many of their parents
// have just ended): that many parents less each; those left with none become
// ready, scheduled, or (on a queue with a key_limit) blocked until their key
// admits them. `finally_only`: only finally-children (after_ends) are
// touched, the others having been cancelled by the same ends.
void release_waiting(Queue &child, const std::map<int64, int32> &counts, TimestampTz now, bool finally_only) {
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
 WHERE {tk}t.id )" EQ R"( ANY ($1) AND t.state )" EQ R"( 'waiting'{finally}
RETURNING t.state, t.concurrency_key)",
		    fmt::arg("t", child.sql().table()), fmt::arg("tk", child.sql().shard_filter(true)),
		    fmt::arg("finally", finally_only ? " AND t.after_ends" : ""));
		static const Oid types[4] = {INT8ARRAYOID, INT4OID, TIMESTAMPTZOID, BOOLOID};
		Datum values[4] = {int8_array(ids), Int32GetDatum(count), TimestampTzGetDatum(now),
		                   BoolGetDatum(limited)};
		uint64 n = child.run_internal(finally_only ? "dependencies:release-finally" : "dependencies:release",
		                              sql, 4, types, values, nullptr, Access::owner_latest);
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
		queue::notify(child.name(), claimable);
}
} // namespace

// The children of done tasks `parents` of `q` (ordinary and finally ones
// alike): one parent less each (release_waiting).
void release_children(Queue &q, const std::vector<int64> &parents, const std::map<int64, int32> &in_row,
                      TimestampTz now) {
	std::string queue(q.name());
	std::map<std::string, std::map<int64, int32>> children = children_of(queue, parents);
	for (const auto &[id, count] : in_row)
		children[queue][id] += count;
	for (const auto &[child_queue, counts] : children) {
		// dropped since? (not `q` itself, which this call holds; a
		// distributed queue's shard is looked up as before)
		if ((child_queue != queue || q.on_shard()) && !OidIsValid(queue_relid(child_queue)))
			continue;
		std::optional<Queue> opened;
		release_waiting(queue_of(child_queue, &q, opened), counts, now, false);
	}
}

// The waiting descendants of task `root` of `queue` (`in_row`: its children
// named in its row), which ended dead or cancelled: cancelled, generation by
// generation, their last_error naming it. A finally-child (after_ends) is not
// cancelled: the end of each of its parents, the cancelled ones' too, counts
// as one parent less (release_waiting), and the cancellation goes no further
// down its line. `own`: the queue (or shard) whose task it is, where the
// caller has it.
void cancel_descendants(std::string_view queue, int64 root, const std::vector<int64> &in_row, Ending how,
                        TimestampTz now, Queue *own) {
	std::string error =
	    how == Ending::dropped
	        ? fmt::format("parent task {} of queue \"{}\" was dropped with its queue", root, queue)
	        : fmt::format("parent task {} of queue \"{}\" ended {}", root, queue,
	                      how == Ending::dead ? "dead" : "cancelled");
	// a generation: the parents whose edges are rows of task_dependency, and
	// the children named in their parents' rows, per queue, with how many of
	// the generation's parents each child has (what a finally-child counts)
	using Counts = std::map<int64, int32>;
	std::map<std::string, std::vector<int64>> parents{{std::string(queue), {root}}};
	std::map<std::string, Counts> named;
	for (int64 c : in_row)
		named[std::string(queue)][c] += 1;
	while (!parents.empty() || !named.empty()) {
		std::map<std::string, Counts> children = std::move(named);
		for (const auto &[parent_queue, ids] : parents)
			for (const auto &[child_queue, counts] : children_of(parent_queue, ids))
				for (const auto &[id, count] : counts)
					children[child_queue][id] += count;
		parents.clear();
		named.clear();
		for (const auto &[child_queue, counts] : children) {
			if (counts.empty() || !OidIsValid(queue_relid(child_queue)))
				continue;
			std::optional<Queue> opened;
			Queue &child = queue_of(child_queue, own, opened);
			std::vector<int64> ids;
			for (const auto &entry : counts) {
				if (elsewhere(child, entry.first)) // on another shard: told so
					post_message(child_queue, doom_message(how), root, entry.first);
				else
					ids.push_back(entry.first);
			}
			if (ids.empty())
				continue;
			// a queue whose table has after_ends may have finally-children
			const bool finally = child.info().after_ends;
			std::string sql = fmt::format(
			    R"(UPDATE {t} AS t
   SET state = 'cancelled', finished_at = $2, last_error = $3
 WHERE {tk}t.id )" EQ R"( ANY ($1) AND t.state )" EQ R"( 'waiting'{ordinary}
RETURNING t.id, t.has_children, t.children, t.parents)",
			    fmt::arg("t", child.sql().table()), fmt::arg("tk", child.sql().shard_filter(true)),
			    fmt::arg("ordinary", finally ? " AND t.after_ends IS NOT TRUE" : ""));
			static const Oid types[3] = {INT8ARRAYOID, TIMESTAMPTZOID, TEXTOID};
			Datum values[3] = {int8_array(ids), TimestampTzGetDatum(now), pg::text_datum(error)};
			uint64 n = child.run_internal(finally ? "dependencies:cancel-ordinary" : "dependencies:cancel",
			                              sql, 3, types, values, nullptr, Access::owner_latest);
			std::vector<int64> cancelled;
			for (uint64 r = 0; r < n; ++r) {
				cancelled.push_back(pg::int64_column(r, 1));
				if (pg::column_as<bool>(r, 2).value_or(false))
					parents[child_queue].push_back(cancelled.back());
				for (int64 c : int8_column(r, 3))
					named[child_queue][c] += 1;
				for (int64 p : int8_column(r, 4))
					if (elsewhere(child, p))
						post_message(child_queue, Message::forget, p, cancelled.back());
			}
			if (!cancelled.empty())
				drop_child_edges(child_queue, cancelled);
			// the finally-children among them: their parents have ended
			if (finally && cancelled.size() < ids.size()) {
				std::set<int64> gone(cancelled.begin(), cancelled.end());
				Counts rest;
				for (int64 id : ids)
					if (!gone.count(id))
						rest[id] = counts.at(id);
				release_waiting(child, rest, now, true);
			}
		}
	}
}

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
