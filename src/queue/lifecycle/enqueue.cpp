// Enqueue (src/sql/21_queue_lifecycle.sql): enqueue and enqueue_batch.
#include <algorithm>
#include <optional>
#include <string>
#include <map>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "pg/srf.hpp"
#include "queue/graphs/dependencies.hpp"
#include "queue/distribution.hpp"
#include "queue/flow/keys.hpp"
#include "queue/permissions.hpp"
#include "queue/queue.hpp"
#include "queue/time/wait.hpp"

extern "C" {
#include "access/detoast.h"
#include "catalog/pg_type.h"
#include "utils/array.h"
}

using namespace concurrency;
using namespace concurrency::queue;

namespace {

const Oid enqueue_types[6] = {TIMESTAMPTZOID, JSONBOID, TIMESTAMPTZOID, INT4OID, TEXTOID, TEXTOID};

// Inserts one task (parameters of QueueSql::enqueue) and returns its id, or
// with a dedupe_key, the id of the task that holds the key. ON CONFLICT waits
// for a concurrent insert (or completion) of the same key to commit or roll
// back; if the holder is gone between the insert and the lookup (purged,
// cancelled, dead), insert again. With `replace` (on_conflict => 'replace'),
// a holder that has not started takes this task's payload, run_at and
// priority (*inserted is then true as well: it may be claimable earlier).
std::optional<int64> enqueue_one(Queue &q, const Datum *values, const char *nulls, bool *inserted,
                                 bool replace = false, bool *created = nullptr) {
	bool has_dedupe = nulls[4] != 'n';
	// a task of a key, on a queue that limits its keys: admitted or blocked
	// under the key's lock
	bool keyed = q.info().key_limit > 0 && nulls[5] != 'n';
	for (int round = 0; round < 100; ++round) {
		uint64 n = keyed ? queue::enqueue_keyed(q, values, nulls)
		                 : q.run(QueueStatement::enqueue, 6, enqueue_types, values, nulls);
		if (n == 1) {
			*inserted = true;
			if (created)
				*created = true;
			return queue::int64_column(0, 1);
		}
		if (!has_dedupe)
			break;
		static const Oid lookup_types[1] = {TEXTOID};
		if (q.run(QueueStatement::dedupe_lookup, 1, lookup_types, &values[4]) == 1) {
			int64 holder = queue::int64_column(0, 1);
			*inserted = false;
			if (replace) {
				static const Oid replace_types[5] = {TIMESTAMPTZOID, JSONBOID, TIMESTAMPTZOID, INT4OID,
				                                     INT8OID};
				Datum replace_values[5] = {values[0], values[1], values[2], values[3], Int64GetDatum(holder)};
				char replace_nulls[5] = {nulls[0], nulls[1], nulls[2], nulls[3], ' '};
				// a holder leased or finished meanwhile is left as it is
				*inserted = q.run("dedupe_replace", q.sql().dedupe_replace(), 5, replace_types,
				                  replace_values, replace_nulls) == 1;
			}
			return holder;
		}
	}
	return std::nullopt;
}

// The parameters of QueueSql::enqueue and enqueue_batch from the arguments
// of enqueue and enqueue_batch, which have the same order: queue, payload(s),
// run_at, priority, dedupe key(s), concurrency key(s).
void enqueue_params(FunctionCallInfo fcinfo, TimestampTz now, int32 priority, Datum values[6],
                    char nulls[6]) {
	values[0] = TimestampTzGetDatum(now);
	values[1] = PG_GETARG_DATUM(1);
	values[3] = Int32GetDatum(priority);
	nulls[0] = nulls[1] = nulls[3] = ' ';
	for (int n : {2, 4, 5}) {
		nulls[n] = arg_null(fcinfo, n) ? 'n' : ' ';
		values[n] = nulls[n] == 'n' ? Datum(0) : PG_GETARG_DATUM(n);
	}
}

// On a distributed queue: the shard on this node that a task with these
// parameters (QueueSql::enqueue's) goes to, or nothing when it goes to
// another node's shard (the call is routed). A task of a concurrency_key
// goes to the key's shard, else one with a dedupe_key to that key's shard
// (so that the key is unique across the queue), else to the next of this
// node's shards.
std::optional<queue::LocalShard> shard_for_task(Queue &q, const Datum *values, const char *nulls) {
	if (!distribution().shards_served_here(q, false)) // enqueue takes no lease slot
		return std::nullopt;
	const queue::Shards &shards = distribution().distributed_shards(q);
	const queue::LocalShard *shard = nullptr;
	if (nulls[5] != 'n' || nulls[4] != 'n') {
		if (shards.count > 0)
			shard =
			    shards.at(distribution().key_position(nulls[5] != 'n' ? values[5] : values[4], shards.count));
	} else {
		shard = distribution().next_local_shard(shards);
	}
	if (!shard)
		return std::nullopt;
	return *shard;
}

// On a distributed queue whose calls this node's C++ serves: the position of
// the shard that a task with these parameters goes to when it is not on this
// node (shard_for_task found none): its key's shard, or, for a task without
// keys on a node that holds no shard of the queue, the next shard.
int32 routed_task_position(Queue &q, const Datum *values, const char *nulls) {
	const queue::Shards &shards = distribution().distributed_shards(q);
	if (shards.count < 1)
		throw Error(sqlstate::object_not_in_prerequisite_state,
		            fmt::format("distributed queue \"{}\" has no shards", q.name()));
	if (nulls[5] != 'n' || nulls[4] != 'n')
		return distribution().key_position(nulls[5] != 'n' ? values[5] : values[4], shards.count);
	return distribution().next_position(shards);
}

// A batch on a distributed queue whose calls this node's C++ serves (Citus):
// where each task goes. `position` of each task is its key's shard
// (concurrency_key, else dedupe_key), or -1 for a task without keys. When
// every task fits one shard on this node, that shard (the caller serves the
// batch there); otherwise nothing, and `groups` has, per shard in shard
// order, the tasks (indexes into the batch) that go there: the tasks without
// keys join a shard of this node where the batch has one, else one of the
// batch's shards, else the next shard.
std::optional<queue::LocalShard> place_batch(Queue &q, const std::vector<int32> &position,
                                             std::map<int32, std::vector<int>> &groups) {
	const queue::Shards &shards = distribution().distributed_shards(q);
	std::optional<int32> only;
	bool several = false, keyless = false;
	for (int32 p : position) {
		if (p < 0)
			keyless = true;
		else if (!only)
			only = p;
		else if (*only != p)
			several = true;
	}
	if (!several) {
		const queue::LocalShard *here = only ? shards.at(*only) : distribution().next_local_shard(shards);
		if (here)
			return *here;
	}
	for (std::size_t i = 0; i < position.size(); ++i)
		if (position[i] >= 0)
			groups[position[i]].push_back(static_cast<int>(i));
	if (keyless) {
		int32 target = -1;
		for (const auto &[p, members] : groups)
			if (shards.at(p)) {
				target = p;
				break;
			}
		if (target < 0) {
			if (const queue::LocalShard *next = distribution().next_local_shard(shards))
				target = next->position;
			else if (!groups.empty())
				target = groups.begin()->first;
			else
				target = distribution().next_position(shards);
		}
		for (std::size_t i = 0; i < position.size(); ++i)
			if (position[i] < 0)
				groups[target].push_back(static_cast<int>(i));
		for (auto &[p, members] : groups)
			std::sort(members.begin(), members.end());
	}
	return std::nullopt;
}

// The on_conflict argument n of enqueue (absent before the update from
// 0.2.0): 'ignore' (the default: the holder of the dedupe_key is returned as
// it is) or 'replace'.
bool on_conflict_arg(FunctionCallInfo fcinfo, int n) {
	if (PG_NARGS() <= n)
		return false;
	std::string_view mode = pg::text_view_arg(fcinfo, n, "on_conflict");
	if (mode == "ignore")
		return false;
	if (mode == "replace")
		return true;
	throw Error(sqlstate::invalid_parameter_value, fmt::format("on_conflict must be 'ignore' or 'replace'"),
	            fmt::format("It is '{}'.", mode.substr(0, 64)),
	            "'replace' gives the new payload, run_at and priority to the task that holds the dedupe_key, "
	            "if it has not started.");
}

[[noreturn]] void dedupe_holder_vanished(const std::string &queue) {
	throw Error(sqlstate::serialization_failure, fmt::format("could not enqueue into queue \"{}\"", queue),
	            "The task holding its dedupe_key kept disappearing.", "Retry the transaction.");
}

// A concurrency_key or dedupe_key must fit the indexes built on it (a B-tree
// entry holds about a third of a page): 22023 before anything is written,
// rather than the B-tree's own 54000 in the middle of the insert.
void check_key_size(Datum key, const char *argument, std::size_t max_bytes, int element) {
	Size bytes = pg::guard([&] { return toast_raw_datum_size(key); }) - VARHDRSZ;
	if (bytes > max_bytes)
		throw Error(sqlstate::invalid_parameter_value,
		            element < 0 ? fmt::format("{} is too long", argument)
		                        : fmt::format("{}s[{}] is too long", argument, element + 1),
		            fmt::format("It has {} bytes; at most {} are allowed.", bytes, max_bytes));
}

// One task of enqueue_batch, element i of its arrays, added on its own (as
// enqueue adds it) with enqueue's parameters (values, nulls: the batch's
// statement parameters, of which the run_at and priority serve every task).
// Its id; *inserted_any becomes true when it is a new task, whose id then
// goes to `created`.
int64 enqueue_element(Queue &q, const Datum *values, const char *nulls, const ArrayArg &payloads,
                      const ArrayArg *dedupe_keys, const ArrayArg *concurrency_keys, int i,
                      bool *inserted_any, std::vector<int64> &created) {
	bool has_dedupe = dedupe_keys && !dedupe_keys->nulls[i];
	bool has_key = concurrency_keys && !concurrency_keys->nulls[i];
	Datum one[6] = {values[0],
	                payloads.elems[i],
	                values[2],
	                values[3],
	                has_dedupe ? dedupe_keys->elems[i] : Datum(0),
	                has_key ? concurrency_keys->elems[i] : Datum(0)};
	char one_nulls[6] = {' ', ' ', nulls[2], ' ', has_dedupe ? ' ' : 'n', has_key ? ' ' : 'n'};
	bool inserted = false;
	std::optional<int64> id = enqueue_one(q, one, one_nulls, &inserted);
	if (!id)
		dedupe_holder_vanished(std::string(q.name()));
	*inserted_any = *inserted_any || inserted;
	if (inserted)
		created.push_back(*id);
	return *id;
}

void add_id_row(pg::ResultSet &out, int64 id) {
	Datum cols[1] = {Int64GetDatum(id)};
	bool isnull[1] = {false};
	pg::add_row(out, cols, isnull);
}

} // namespace

// concurrency.enqueue(queue, payload, run_at, priority, dedupe_key,
// concurrency_key, on_conflict, after) -> task id
CONCURRENCY_FUNCTION(concurrency_enqueue) {
	std::string name = queue::queue_name_arg(fcinfo);
	pg::require_arg(fcinfo, 1, "payload");
	queue::check_payload_size(PG_GETARG_DATUM(1), "payload");
	bool replace = on_conflict_arg(fcinfo, 6);
	int32 priority = int32_arg(fcinfo, 3, "priority");
	check_run_at(fcinfo, 2);
	if (!arg_null(fcinfo, 4))
		check_key_size(PG_GETARG_DATUM(4), "dedupe_key", max_dedupe_key_bytes, -1);
	if (!arg_null(fcinfo, 5))
		check_key_size(PG_GETARG_DATUM(5), "concurrency_key", max_concurrency_key_bytes, -1);
	// after: the parents (tasks of this queue) it waits for
	std::vector<int64> after;
	if (!arg_null(fcinfo, 7))
		after = queue::int8_array_arg(fcinfo, 7, "after");
	TimestampTz now = clock_now();

	Datum values[6];
	char nulls[6];
	enqueue_params(fcinfo, now, priority, values, nulls);

	pg::spi_connect();
	Queue q(name);
	AsRole as_owner = authorize(q, Permission::enqueue, "enqueue");
	std::optional<Queue> shard;
	if (distribution().is_distributed(q.info().relid)) { // Citus: src/queue/distribution.hpp
		if (!after.empty()) {                            // beside its parents, on their node
			if (!distribution().shards_served_here(q, false))
				queue::refuse_not_served_here(name, "enqueue with after");
			bool keyed = nulls[5] != 'n' || nulls[4] != 'n';
			int32 position = distribution().parents_position(q, after);
			if (keyed)
				position = routed_task_position(q, values, nulls);
			const queue::LocalShard *at = distribution().distributed_shards(q).at(position);
			if (!at) {
				queue::notify_listeners(name);
				return distribution().route_call(fcinfo, q, position);
			}
			shard.emplace(name, *at);
		}
	}
	if (!shard && distribution().is_distributed(q.info().relid)) {
		std::optional<queue::LocalShard> here = shard_for_task(q, values, nulls);
		if (!here &&
		    distribution().shards_served_here(q, false)) { // to its shard's node; listeners here are told
			queue::notify_listeners(name);
			return distribution().route_call(fcinfo, q, routed_task_position(q, values, nulls));
		}
		if (!here && replace)
			queue::refuse_not_served_here(name, "on_conflict => 'replace'");
		if (!here)
			return distribution().forward_distributed(fcinfo, "distributed_enqueue", nullptr, 6);
		shard.emplace(name, *here);
	}
	Queue &target = shard ? *shard : q;
	bool inserted = false, created = false;
	std::optional<int64> id = enqueue_one(target, values, nulls, &inserted, replace, &created);
	if (!id)
		dedupe_holder_vanished(name);
	// a new task waits for its parents (the holder of a dedupe_key keeps its own)
	if (created && !after.empty())
		inserted = queue::attach_parents(target, {*id}, std::move(after), now) > 0;
	if (inserted)
		queue::notify(target.name());
	pg::spi_finish();
	PG_RETURN_INT64(*id);
}

// concurrency.enqueue_batch(queue, payloads, run_at, priority, dedupe_keys,
// concurrency_keys, after) -> task ids in payload order
CONCURRENCY_FUNCTION(concurrency_enqueue_batch) {
	std::string name = queue::queue_name_arg(fcinfo);
	pg::require_arg(fcinfo, 1, "payloads");
	int32 priority = int32_arg(fcinfo, 3, "priority");
	check_run_at(fcinfo, 2);
	ArrayArg payloads = array_arg(fcinfo, 1, "payloads", JSONBOID);
	for (int i = 0; i < payloads.n; ++i)
		if (payloads.nulls[i])
			throw Error(sqlstate::null_value_not_allowed, "payloads must not contain null",
			            fmt::format("Element {} is null.", i + 1));
		else
			queue::check_payload_size(payloads.elems[i], "payloads", i);
	bool has_dedupe = !arg_null(fcinfo, 4);
	bool has_keys = !arg_null(fcinfo, 5);
	ArrayArg dedupe_keys, concurrency_keys;
	if (has_dedupe) {
		dedupe_keys = array_arg(fcinfo, 4, "dedupe_keys", TEXTOID);
		if (dedupe_keys.n != payloads.n)
			throw Error(sqlstate::invalid_parameter_value, "dedupe_keys must have one element per payload",
			            fmt::format("There are {} payloads and {} dedupe keys.", payloads.n, dedupe_keys.n),
			            "Use NULL elements for payloads without a key.");
		for (int i = 0; i < dedupe_keys.n; ++i)
			if (!dedupe_keys.nulls[i])
				check_key_size(dedupe_keys.elems[i], "dedupe_key", max_dedupe_key_bytes, i);
	}
	if (has_keys) {
		concurrency_keys = array_arg(fcinfo, 5, "concurrency_keys", TEXTOID);
		if (concurrency_keys.n != payloads.n)
			throw Error(
			    sqlstate::invalid_parameter_value, "concurrency_keys must have one element per payload",
			    fmt::format("There are {} payloads and {} concurrency keys.", payloads.n, concurrency_keys.n),
			    "Use NULL elements for payloads without a key.");
		for (int i = 0; i < concurrency_keys.n; ++i)
			if (!concurrency_keys.nulls[i])
				check_key_size(concurrency_keys.elems[i], "concurrency_key", max_concurrency_key_bytes, i);
	}
	// after: the parents (tasks of this queue) every new task waits for
	std::vector<int64> after;
	if (!arg_null(fcinfo, 6))
		after = queue::int8_array_arg(fcinfo, 6, "after");
	TimestampTz now = clock_now();

	static const Oid types[6] = {TIMESTAMPTZOID, JSONBARRAYOID, TIMESTAMPTZOID,
	                             INT4OID,        TEXTARRAYOID,  TEXTARRAYOID};
	Datum values[6];
	char nulls[6];
	enqueue_params(fcinfo, now, priority, values, nulls);

	// the keys as C++ text, before SPI (the datums live in this call's context)
	std::vector<std::optional<std::string>> keys(static_cast<std::size_t>(payloads.n));
	if (has_dedupe)
		for (int i = 0; i < payloads.n; ++i)
			if (!dedupe_keys.nulls[i]) {
				Datum d = dedupe_keys.elems[i];
				keys[i] = pg::guard([&] { return TextDatumGetCString(d); });
			}

	pg::ResultSet out = pg::materialize(fcinfo, INT8OID);
	pg::spi_connect();
	Queue q(name);
	AsRole as_owner = authorize(q, Permission::enqueue, "enqueue_batch");
	std::optional<Queue> shard;
	if (distribution().is_distributed(q.info().relid)) { // Citus: src/queue/distribution.hpp
		// a batch whose tasks all go to one shard of this node is served
		// there; otherwise each shard's tasks are enqueued on its node, and
		// the ids put back in payload order
		if (!distribution().shards_served_here(q, false)) {
			if (!after.empty())
				queue::refuse_not_served_here(name, "enqueue_batch with after");
			return distribution().forward_distributed(fcinfo, "distributed_enqueue_batch", &out, 6);
		}
		const queue::Shards &shards = distribution().distributed_shards(q);
		std::vector<int32> position(static_cast<std::size_t>(payloads.n), -1);
		for (int i = 0; i < payloads.n && shards.count > 0; ++i)
			if (has_keys && !concurrency_keys.nulls[i])
				position[i] = distribution().key_position(concurrency_keys.elems[i], shards.count);
			else if (has_dedupe && !dedupe_keys.nulls[i])
				position[i] = distribution().key_position(dedupe_keys.elems[i], shards.count);
		if (!after.empty()) { // the tasks without keys beside the first parent
			int32 parents = distribution().parents_position(q, after);
			for (int32 &p : position)
				if (p < 0)
					p = parents;
		}
		std::map<int32, std::vector<int>> groups;
		std::optional<queue::LocalShard> here = place_batch(q, position, groups);
		if (!here) {
			std::vector<int64> ids(static_cast<std::size_t>(payloads.n), 0);
			for (const auto &[p, members] : groups) {
				// a batch of this shard's tasks, made on its node: its ids in
				// the order of its payloads
				uint64 n = distribution().call_subset(fcinfo, q, p, members, {1, 4, 5}, true);
				for (uint64 r = 0; r < n && r < members.size(); ++r)
					ids[static_cast<std::size_t>(members[r])] = queue::int64_column(static_cast<int>(r), 1);
			}
			for (int64 id : ids)
				add_id_row(out, id);
			queue::notify_listeners(name);
			pg::spi_finish();
			return Datum(0);
		}
		shard.emplace(name, *here);
	}
	Queue &target = shard ? *shard : q;
	if (target.info().key_limit > 0 && has_keys &&
	    std::any_of(concurrency_keys.nulls, concurrency_keys.nulls + concurrency_keys.n,
	                [](bool n) { return !n; })) {
		// Tasks of keys on a queue that limits its keys: each is admitted or
		// blocked under its key's lock, so they are added one by one, in
		// payload order, after locking all their keys in sorted order.
		std::vector<std::string> key_names;
		for (int i = 0; i < concurrency_keys.n; ++i)
			if (!concurrency_keys.nulls[i]) {
				Datum d = concurrency_keys.elems[i];
				key_names.push_back(std::string(pg::guard([&] { return TextDatumGetCString(d); })));
			}
		queue::lock_keys(target, key_names);
		bool inserted_any = false;
		std::vector<int64> created;
		for (int i = 0; i < payloads.n; ++i)
			add_id_row(out,
			           enqueue_element(target, values, nulls, payloads, has_dedupe ? &dedupe_keys : nullptr,
			                           &concurrency_keys, i, &inserted_any, created));
		if (!after.empty()) // the new tasks wait for their parents
			inserted_any = queue::attach_parents(target, created, std::move(after), now) > 0;
		if (inserted_any)
			queue::notify(target.name(), static_cast<uint64>(payloads.n));
		pg::spi_finish();
		return Datum(0);
	}
	bool any_dedupe = std::any_of(keys.begin(), keys.end(), [](const auto &k) { return k.has_value(); });
	uint64 n = target.run(any_dedupe ? QueueStatement::enqueue_batch_dedupe : QueueStatement::enqueue_batch,
	                      6, types, values, nulls);
	bool inserted_any = n > 0;
	std::vector<int64> ids(keys.size(), 0), created;
	// Ids were drawn in payload order: the keyless tasks, by ascending id,
	// are the keyless payloads in order; a keyed one is found by its key.
	std::vector<int64> keyless;
	std::unordered_map<std::string, int64> by_key;
	for (uint64 i = 0; i < n; ++i) {
		int row = static_cast<int>(i);
		int64 id = queue::int64_column(row, 1);
		created.push_back(id);
		bool isnull = false;
		Datum key = queue::column(row, 2, &isnull);
		if (isnull)
			keyless.push_back(id);
		else
			by_key.emplace(pg::guard([&] { return TextDatumGetCString(key); }), id);
	}
	std::sort(keyless.begin(), keyless.end());
	std::size_t next_keyless = 0;
	for (std::size_t i = 0; i < keys.size(); ++i)
		if (!keys[i])
			ids[i] = keyless.at(next_keyless++);
	if (any_dedupe) {
		// keys held by tasks already there: one lookup for all of them
		std::vector<std::string> missing;
		for (const auto &k : keys)
			if (k && !by_key.count(*k))
				missing.push_back(*k);
		if (!missing.empty()) {
			std::vector<Datum> elems;
			for (const std::string &k : missing)
				elems.push_back(pg::text_datum(k));
			Datum *data = elems.data();
			int count = static_cast<int>(elems.size());
			Datum array = pg::guard([&] {
				return PointerGetDatum(construct_array(data, count, TEXTOID, -1, false, TYPALIGN_INT));
			});
			static const Oid lookup_types[1] = {TEXTARRAYOID};
			uint64 found =
			    target.run("dedupe_many", target.sql().dedupe_lookup_many(), 1, lookup_types, &array);
			for (uint64 i = 0; i < found; ++i) {
				bool isnull = false;
				Datum key = queue::column(static_cast<int>(i), 1, &isnull);
				by_key.emplace(pg::guard([&] { return TextDatumGetCString(key); }),
				               queue::int64_column(static_cast<int>(i), 2));
			}
		}
		for (std::size_t i = 0; i < keys.size(); ++i) {
			if (!keys[i])
				continue;
			auto found = by_key.find(*keys[i]);
			if (found == by_key.end()) {
				// its holder vanished between the insert and the lookup
				int64 id = enqueue_element(target, values, nulls, payloads, &dedupe_keys,
				                           has_keys ? &concurrency_keys : nullptr, i, &inserted_any, created);
				found = by_key.emplace(*keys[i], id).first;
			}
			ids[i] = found->second;
		}
	}
	for (int64 id : ids)
		add_id_row(out, id);
	uint64 claimable = std::max<uint64>(n, 1);
	if (!after.empty()) { // the new tasks wait for their parents
		claimable = queue::attach_parents(target, created, std::move(after), now);
		inserted_any = claimable > 0;
	}
	if (inserted_any)
		queue::notify(target.name(), claimable);
	pg::spi_finish();
	return Datum(0);
}
