// Distributed queues on Citus: calls that reach another node's shards
// (routed statements, calls on every node, the claim elsewhere) and the
// refusals of what a node does not serve (see queue/distributed/distributed.hpp).
#include "queue/distributed/distributed.hpp"
#include "queue/distributed/internal.hpp"

#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "citus/node.hpp"
#include "common/sql_text.hpp"
#include "pg/datum.hpp"
#include "pg/invalidation.hpp"
#include "queue/lifecycle/claim.hpp"
#include "queue/graphs/dependencies.hpp"
#include "queue/flow/keys_sql.hpp"
#include "queue/permissions.hpp"
#include "queue/flow/rate_sql.hpp"
#include "queue/queue.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
}

namespace concurrency::queue {
namespace {

// 55000 for a call that another node routed here for `what` (a shard),
// which is not on this node (any more).
[[noreturn]] void shard_moved(const std::string &what) {
	throw Error(sqlstate::object_not_in_prerequisite_state, fmt::format("{} is not on this node", what),
	            "The call was routed here by another node, whose picture of the shards is older.",
	            "Retry the transaction.");
}

// Runs `send`, which sends a queue call to another node, as the caller's
// own call. Citus sends the arguments as text written here: they are
// written in UTC and ISO style for that while (a time in a zone's local mean
// time, as America/Los_Angeles has before 1883, is written with the
// abbreviation LMT, which the other node does not read back: 22007). An
// error of the call is the callee's error as a local call raises it: without
// Citus's context (the node and the statement that carried the call).
uint64 on_other_node(const std::function<uint64()> &send) {
	try {
		return with_settings({{"TimeZone", "UTC"}, {"DateStyle", "ISO"}}, send);
	} catch (const pg::PgException &e) {
		if (ErrorData *edata = e.data())
			edata->context = nullptr;
		throw;
	}
}

} // namespace

std::optional<int32> routed_position(Queue &whole, const int64 *ids, int n, bool slots) {
	if (!shards_served_here(whole, slots))
		return std::nullopt;
	if (citus::in_routed_call())
		shard_moved(fmt::format("the tasks' shard of distributed queue \"{}\"", whole.name()));
	if (n < 1)
		return std::nullopt;
	int32 position = task_position(ids[0]);
	for (int i = 1; i < n; ++i)
		if (task_position(ids[i]) != position)
			return std::nullopt;
	if (position >= distributed_shards(whole).count)
		return std::nullopt;
	return position;
}

namespace {
// The transaction whose writes on this node's shards Citus was told of
// (note_local_writes).
TransactionId local_marked = InvalidTransactionId;

// A write on the shard of distributed queue `whole` whose shard_key is $1
// that changes nothing (no task has id 0), through Citus: it marks that
// shard's node as written in this transaction.
SPIPlanPtr mark_plan(Queue &whole) {
	std::string key = fmt::format("queue:{}\x1froute\x1fmark", whole.name());
	std::string mark = fmt::format("DELETE FROM concurrency.{} WHERE shard_key OPERATOR(pg_catalog.=) $1"
	                               " AND id OPERATOR(pg_catalog.=) 0",
	                               quote_ident(queue_table_name(whole.name())));
	static const Oid types[1] = {INT4OID};
	return pg::prepared_plan(key.c_str(), mark.c_str(), 1, types);
}
} // namespace

void note_local_writes(Queue &whole) {
	TransactionId xid = GetTopTransactionIdIfAny();
	if (!TransactionIdIsValid(xid) || xid == local_marked)
		return;
	const Shards &shards = distributed_shards(whole);
	if (shards.local.empty())
		return;
	Datum local_key = Int32GetDatum(shards.local.front().shard_key);
	pg::execute(mark_plan(whole), &local_key, nullptr, false);
	local_marked = xid;
}

uint64 call_on_shard(Queue &whole, int32 position, const char *function, int nargs, const Oid *types,
                     const Datum *values, const char *nulls, bool set_returning, bool writes,
                     const char *schema) {
	const Shards &shards = distributed_shards(whole);
	if (position < 0 || position >= shards.count)
		throw Error(sqlstate::internal_error,
		            fmt::format("queue \"{}\" has no shard at position {}", whole.name(), position));
	bool here = shards.at(position) != nullptr;
	if (!here && citus::in_routed_call())
		shard_moved(fmt::format("shard {} of distributed queue \"{}\"", position, whole.name()));
	// "queue:<name>\x1f…": forgotten with the queue's other plans
	std::string key = fmt::format("queue:{}\x1froute\x1f{}.{}\x1f{}{}{}", whole.name(), schema, function,
	                              here ? 'l' : 'r', set_returning ? 's' : 'v', writes ? 'w' : 'n');
	std::string call = fmt::format("{}.{}(", quote_ident(schema), quote_ident(function));
	for (int i = 0; i < nargs; ++i)
		call += fmt::format("{}${}", i ? ", " : "", i + 1);
	call += ")";
	// a call elsewhere that writes returns the dependency messages it posted
	// there (dependencies.hpp) in a last column, evaluated after the call;
	// a set-returning one also a column `present` before it, NULL in the one
	// row that stands for no rows
	const bool outbox = !here && writes;
	std::string sql;
	if (here)
		sql = set_returning ? fmt::format("SELECT * FROM {}", call) : fmt::format("SELECT {}", call);
	else {
		// One row from the shard whatever it holds (a grouped query without
		// rows has one group), found by an index probe that matches no task
		// (ids are positive): Citus sends the whole statement, the call
		// included, to the shard's node (it evaluates no function of a
		// SELECT itself).
		std::string one = fmt::format("FROM concurrency.{} WHERE shard_key OPERATOR(pg_catalog.=) ${}"
		                              " AND id OPERATOR(pg_catalog.=) 0 HAVING true",
		                              quote_ident(queue_table_name(whole.name())), nargs + 1);
		const char *taken = ", concurrency_internal.dependency_outbox()";
		if (!set_returning)
			sql = fmt::format("SELECT {}{} {}", call, outbox ? taken : "", one);
		else if (outbox)
			sql = fmt::format(
			    "SELECT r.*{} FROM (SELECT {}) AS one LEFT JOIN LATERAL (SELECT x.*, true AS present "
			    "FROM {} AS x) AS r ON true",
			    taken, one, call);
		else
			sql = fmt::format("SELECT r.* FROM (SELECT {}) AS one CROSS JOIN LATERAL {} AS r", one, call);
	}
	std::vector<Oid> all_types(types, types + nargs);
	std::vector<Datum> all_values(values, values + nargs);
	std::vector<char> all_nulls(static_cast<std::size_t>(nargs), ' ');
	if (nulls)
		std::copy(nulls, nulls + nargs, all_nulls.begin());
	if (!here) {
		all_types.push_back(INT4OID);
		all_values.push_back(Int32GetDatum(shards.keys[static_cast<std::size_t>(position)]));
		all_nulls.push_back(' ');
	}
	if (!here && writes) {
		// First a write on the shard that changes nothing (no task has id 0),
		// so that Citus sees this transaction modify the shard: it opens a
		// transaction block on the shard's node, keeps the call below on that
		// connection, and commits it with the rest of this transaction by
		// two-phase commit wherever another node is written too. A SELECT
		// alone would be sent as a read, outside any transaction block where
		// the caller has none, and committed there on its own.
		pg::execute(mark_plan(whole), &all_values.back(), nullptr, false);
		note_local_writes(whole);
	}
	SPIPlanPtr plan =
	    pg::prepared_plan(key.c_str(), sql.c_str(), static_cast<int>(all_types.size()), all_types.data());
	if (here) {
		uint64 n = pg::execute(plan, all_values.data(), all_nulls.data(), false);
		if (writes) {
			SPITupleTable *rows = SPI_tuptable;
			uint64 processed = SPI_processed;
			note_local_writes(whole);
			SPI_tuptable = rows;
			SPI_processed = processed;
		}
		return n;
	}
	uint64 n = on_other_node([&] { return pg::execute(plan, all_values.data(), all_nulls.data(), false); });
	if (!outbox)
		return n;
	int last = SPI_tuptable->tupdesc->natts;
	for (uint64 row = 0; row < n; ++row) {
		bool isnull = true;
		Datum taken = pg::column(row, last, &isnull);
		receive_messages(whole.name(), taken, isnull);
	}
	if (set_returning && n == 1) {
		bool isnull = false;
		pg::column(0, last - 1, &isnull);
		if (isnull)
			n = 0;
	}
	// delivered now, the rows kept for the caller (SPI keeps a result until
	// SPI_finish)
	SPITupleTable *rows = SPI_tuptable;
	uint64 processed = SPI_processed;
	deliver_messages();
	SPI_tuptable = rows;
	SPI_processed = processed;
	return n;
}

void add_rows(const pg::ResultSet &out, uint64 n) {
	int ncols = SPI_tuptable->tupdesc->natts;
	for (uint64 row = 0; row < n; ++row) {
		Datum cols[FUNC_MAX_ARGS];
		bool isnull[FUNC_MAX_ARGS];
		for (int c = 0; c < FUNC_MAX_ARGS; ++c) {
			cols[c] = Datum(0);
			isnull[c] = true;
		}
		for (int c = 0; c < ncols && c < FUNC_MAX_ARGS; ++c)
			cols[c] = pg::column(row, c + 1, &isnull[c]);
		pg::add_row(out, cols, isnull);
	}
}

namespace {

// The SQL signature of the caller: its name, argument types (the first
// `max_args` when not -1) and result type.
struct Signature {
	const char *function;
	Oid *types;
	int nargs;
	Oid rettype;
};

Signature caller_signature(FunctionCallInfo fcinfo, int max_args) {
	Signature sig{};
	Oid fn = fcinfo->flinfo->fn_oid;
	sig.rettype = pg::guard([&] { return get_func_signature(fn, &sig.types, &sig.nargs); });
	sig.function = pg::guard([&] { return static_cast<const char *>(get_func_name(fn)); });
	if (max_args >= 0 && sig.nargs > max_args)
		sig.nargs = max_args;
	return sig;
}

// The caller's own call: its signature and its arguments as SPI takes them.
struct CallerCall {
	Signature sig;
	Datum values[FUNC_MAX_ARGS];
	char nulls[FUNC_MAX_ARGS];
};

CallerCall caller_call(FunctionCallInfo fcinfo, int max_args) {
	CallerCall call;
	call.sig = caller_signature(fcinfo, max_args);
	for (int i = 0; i < call.sig.nargs; ++i) {
		call.values[i] = fcinfo->args[i].value;
		call.nulls[i] = fcinfo->args[i].isnull ? 'n' : ' ';
	}
	return call;
}

} // namespace

uint64 call_subset(FunctionCallInfo fcinfo, Queue &whole, int32 position, const std::vector<int> &members,
                   std::initializer_list<int> split, bool set_returning, int max_args) {
	CallerCall call = caller_call(fcinfo, max_args);
	const Signature &sig = call.sig;
	Datum *values = call.values;
	char *nulls = call.nulls;
	for (int arg : split) {
		if (arg >= sig.nargs || fcinfo->args[arg].isnull)
			continue;
		Datum array = fcinfo->args[arg].value;
		std::size_t count = members.size();
		values[arg] = pg::guard([&] {
			ArrayType *at = DatumGetArrayTypeP(array);
			Oid elemtype = ARR_ELEMTYPE(at);
			int16 len = 0;
			bool byval = false;
			char align = 0;
			get_typlenbyvalalign(elemtype, &len, &byval, &align);
			Datum *elems = nullptr;
			bool *elem_nulls = nullptr;
			int n = 0;
			deconstruct_array(at, elemtype, len, byval, align, &elems, &elem_nulls, &n);
			Datum *picked = static_cast<Datum *>(palloc(sizeof(Datum) * (count + 1)));
			bool *picked_nulls = static_cast<bool *>(palloc(sizeof(bool) * (count + 1)));
			for (std::size_t i = 0; i < count; ++i) {
				int from = members[i];
				if (from < 0 || from >= n)
					elog(ERROR, "array argument %d has no element %d", arg + 1, from + 1);
				picked[i] = elems[from];
				picked_nulls[i] = elem_nulls[from];
			}
			int dims[1] = {static_cast<int>(count)};
			int lbs[1] = {1};
			return PointerGetDatum(
			    construct_md_array(picked, picked_nulls, 1, dims, lbs, elemtype, len, byval, align));
		});
	}
	return call_on_shard(whole, position, sig.function, sig.nargs, sig.types, values, nulls, set_returning,
	                     true);
}

void route_batch(FunctionCallInfo fcinfo, Queue &whole, const std::vector<int64> &ids,
                 std::initializer_list<int> split, bool set_returning, bool acks,
                 const std::function<void(uint64)> &each, int max_args) {
	const Shards &shards = distributed_shards(whole);
	std::map<int32, std::vector<int>> by_position; // shard order
	for (std::size_t i = 0; i < ids.size(); ++i) {
		int32 position = task_position(ids[i]);
		if (position >= shards.count) {
			if (acks)
				task_gone(whole.name(), ids[i]);
			continue;
		}
		by_position[position].push_back(static_cast<int>(i));
	}
	for (const auto &[position, members] : by_position)
		each(call_subset(fcinfo, whole, position, members, split, set_returning, max_args));
}

int64 route_batch_count(FunctionCallInfo fcinfo, Queue &whole, const std::vector<int64> &ids,
                        std::initializer_list<int> split, bool acks) {
	int64 total = 0;
	route_batch(fcinfo, whole, ids, split, false, acks, [&](uint64 n) {
		bool isnull = true;
		Datum count = n == 1 ? pg::column(0, 1, &isnull) : Datum(0);
		total += isnull ? 0 : DatumGetInt64(count);
	});
	return total;
}

namespace {

// The caller's scalar result from SPI_tuptable's first row, copied out of
// SPI's memory, after `n` rows; ends the caller's SPI connection.
Datum caller_result(FunctionCallInfo fcinfo, Oid rettype, uint64 n, bool set) {
	Datum result = Datum(0);
	bool result_null = true;
	if (!set && n == 1) {
		result = pg::column(0, 1, &result_null);
		if (!result_null) {
			int16 len = 0;
			bool byval = false;
			pg::guard([&] { get_typlenbyval(rettype, &len, &byval); });
			result = pg::guard([&] { return SPI_datumTransfer(result, byval, len); });
		}
	}
	pg::spi_finish();
	if (set || result_null) {
		fcinfo->isnull = !set;
		return Datum(0);
	}
	return result;
}

} // namespace

Datum route_call(FunctionCallInfo fcinfo, Queue &whole, int32 position, const pg::ResultSet *out,
                 int max_args, bool writes) {
	CallerCall call = caller_call(fcinfo, max_args);
	const Signature &sig = call.sig;
	Datum *values = call.values;
	char *nulls = call.nulls;
	uint64 n = call_on_shard(whole, position, sig.function, sig.nargs, sig.types, values, nulls,
	                         out != nullptr, writes);
	if (out)
		add_rows(*out, n);
	return caller_result(fcinfo, sig.rettype, n, out != nullptr);
}

namespace {} // namespace

// The routed function `function` (its name without schema), qualified: in
// schema concurrency_internal, or in schema concurrency where the objects
// installed are still 0.2.0's (between a package update and ALTER EXTENSION
// … UPDATE). Looked up at each call (a syscache probe), so that an update
// made while this backend lives is seen at once.
std::string routed_function(const char *function) {
	Oid internal = pg::guard([] { return get_namespace_oid("concurrency_internal", true); });
	return fmt::format("{}.{}", OidIsValid(internal) ? "concurrency_internal" : "concurrency", function);
}
namespace {} // namespace

// Runs a routed statement `sql` (whose first "{}" stands for the qualified
// routed function `function`) with `nargs` arguments, prepared once per
// backend and schema. Returns the number of rows (in SPI_tuptable).
uint64 run_routed(const char *function, const char *sql, int nargs, const Oid *types, const Datum *values,
                  const char *nulls) {
	std::string qualified = routed_function(function);
	std::string text = sql;
	text.replace(text.find("{}"), 2, qualified);
	SPIPlanPtr plan =
	    pg::prepared_plan(fmt::format("routed:{}", qualified).c_str(), text.c_str(), nargs, types);
	return pg::execute(plan, values, nulls, false);
}
namespace {

// Runs the routed function `function` with the caller's first `max_args`
// arguments (all: -1); its rows go into `out` when given, else its one value
// is in SPI_tuptable. Returns the number of rows; *rettype is the caller's
// result type.
uint64 run_forwarded(FunctionCallInfo fcinfo, const char *function, const pg::ResultSet *out, int max_args,
                     Oid *rettype) {
	Oid fn = fcinfo->flinfo->fn_oid;
	if (routed_function(function).rfind("concurrency.", 0) != 0) {
		// 0.3.0's objects have no such function: the C++ serves every call
		// where it sees the queue's tables
		const char *caller = pg::guard([&] { return static_cast<const char *>(get_func_name(fn)); });
		const char *queue = fcinfo->args[0].isnull ? "" : pg::guard([&] {
			return static_cast<const char *>(TextDatumGetCString(fcinfo->args[0].value));
		});
		refuse_not_served_here(queue, caller ? caller : function);
	}
	Oid *argtypes = nullptr;
	int nargs = 0;
	*rettype = pg::guard([&] { return get_func_signature(fn, &argtypes, &nargs); });
	if (max_args >= 0 && nargs > max_args)
		nargs = max_args;
	std::string sql = out ? "SELECT * FROM {}(" : "SELECT {}(";
	for (int i = 0; i < nargs; ++i)
		sql += fmt::format("{}${}", i ? ", " : "", i + 1);
	sql += ")";
	Datum values[FUNC_MAX_ARGS];
	char nulls[FUNC_MAX_ARGS];
	for (int i = 0; i < nargs; ++i) {
		values[i] = fcinfo->args[i].value;
		nulls[i] = fcinfo->args[i].isnull ? 'n' : ' ';
	}
	uint64 n = run_routed(function, sql.c_str(), nargs, argtypes, values, nulls);
	if (out)
		add_rows(*out, n);
	return n;
}

} // namespace

namespace {} // namespace

// One shard position on each other node that holds shards of the queue, in
// position order: where a call is made to reach that node.
std::vector<int32> other_nodes(const Shards &shards) {
	int32 here = citus::local_role().group;
	std::vector<int32> nodes;
	std::vector<int32> groups;
	for (int32 p = 0; p < shards.count; ++p) {
		int32 group = shards.groups[static_cast<std::size_t>(p)];
		if (group == here || shards.at(p) || std::find(groups.begin(), groups.end(), group) != groups.end())
			continue;
		groups.push_back(group);
		nodes.push_back(p);
	}
	return nodes;
}
namespace {} // namespace

int64 on_every_node(FunctionCallInfo fcinfo, Queue &whole, const std::function<int64(Queue &)> &local) {
	// a copy: an invalidation while a shard is opened may drop the cached list
	const Shards shards = distributed_shards(whole);
	int64 total = 0;
	for (const LocalShard &s : shards.local) {
		Queue shard(whole.name(), s);
		total += local(shard);
	}
	if (citus::in_routed_call())
		return total;
	CallerCall call = caller_call(fcinfo, -1);
	for (int32 position : other_nodes(shards)) {
		uint64 n = call_on_shard(whole, position, call.sig.function, call.sig.nargs, call.sig.types,
		                         call.values, call.nulls, false, true);
		bool isnull = true;
		Datum count = n == 1 ? pg::column(0, 1, &isnull) : Datum(0);
		total += isnull ? 0 : DatumGetInt64(count);
	}
	return total;
}

uint64 dequeue_elsewhere(FunctionCallInfo fcinfo, Queue &q, int32 batch, const pg::ResultSet &out) {
	std::vector<int32> nodes = other_nodes(distributed_shards(q));
	if (nodes.empty())
		return 0;
	// dequeue(queue, batch, lease, worker) there: it claims from that node's
	// shards and does not wait
	CallerCall call = caller_call(fcinfo, 4);
	const Signature &sig = call.sig;
	Datum *values = call.values;
	char *nulls = call.nulls;
	values[1] = Int32GetDatum(batch);
	uint32 start = next_cursor();
	for (std::size_t i = 0; i < nodes.size(); ++i) {
		int32 position = nodes[(start + i) % nodes.size()];
		uint64 n = call_on_shard(q, position, sig.function, sig.nargs, sig.types, values, nulls, true, true);
		if (n > 0) {
			add_rows(out, n);
			return n;
		}
	}
	return 0;
}

uint64 dequeue_routed(FunctionCallInfo fcinfo, const pg::ResultSet &out) {
	Oid rettype = InvalidOid;
	return run_forwarded(fcinfo, "distributed_dequeue", &out, 4, &rettype);
}

Datum forward_distributed(FunctionCallInfo fcinfo, const char *function, const pg::ResultSet *out,
                          int max_args) {
	Oid rettype = InvalidOid;
	uint64 n = run_forwarded(fcinfo, function, out, max_args, &rettype);
	return caller_result(fcinfo, rettype, n, out != nullptr);
}

int32 parents_position(Queue &q, const std::vector<int64> &after) {
	const Shards &shards = distributed_shards(q);
	for (int64 id : after) {
		int32 p = task_position(id);
		if (id <= 0 || p >= shards.count)
			throw Error(
			    sqlstate::invalid_parameter_value,
			    fmt::format("parent task {} of queue \"{}\" does not exist", id, q.name()),
			    fmt::format("Its id names no shard of the distributed queue ({} shards).", shards.count));
	}
	return after.empty() ? 0 : task_position(after.front());
}

void distribute_key_rate_slots(const std::string &queue) {
	static const Oid types[1] = {TEXTOID};
	Datum values[1] = {pg::text_datum(queue)};
	run_routed("distribute_key_rate_slots", "SELECT {}($1)", 1, types, values);
}

void require_coordinator(const std::string &queue) {
	citus::Role role = citus::local_role().role;
	if (role == citus::Role::coordinator)
		return;
	throw Error(
	    sqlstate::feature_not_supported,
	    fmt::format("cannot create distributed queue \"{}\": this server is not a Citus coordinator", queue),
	    fmt::format("Its Citus node role is {}.", role == citus::Role::worker ? "worker" : "none"),
	    "Create distributed queues on the coordinator of a Citus cluster, or leave out distributed => true "
	    "for a queue on this server.");
}

} // namespace concurrency::queue
