// Messages between the shards of a distributed queue (dependencies.hpp):
// what a parent's end does to children in other shards, posted in the
// transaction, delivered by the node that made the top-level call, and
// handled on each shard's node (releases.hpp).
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
			const Shards &shards = distribution().distributed_shards(whole);
			TimestampTz now = clock_now();
			for (const auto &[position, flat] : by_position) {
				if (position >= shards.count)
					continue; // no such shard: no such task (a mark was refused before)
				if (const LocalShard *here = shards.at(position)) {
					Queue shard(name, *here);
					handle_messages(shard, flat, now);
					distribution().note_local_writes(whole); // where other nodes were written before
					continue;
				}
				static const Oid types[2] = {TEXTOID, INT8ARRAYOID};
				Datum values[2] = {pg::text_datum(name), int8_array(flat)};
				distribution().call_on_shard(whole, position, "dependency_messages", 2, types, values,
				                             nullptr, false, true, "concurrency_internal");
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
	if (!distribution().is_distributed(whole.info().relid))
		throw Error(sqlstate::object_not_in_prerequisite_state,
		            fmt::format("queue \"{}\" is not a distributed queue", whole.name()));
	// all of one shard's (deliver_messages): that of the first
	if (!flat.empty()) {
		Message kind = static_cast<Message>(flat[0]);
		int64 to = kind == Message::mark || kind == Message::forget ? flat[1] : flat[2];
		const Shards &shards = distribution().distributed_shards(whole);
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
