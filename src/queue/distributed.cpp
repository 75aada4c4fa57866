#include "queue/distributed.hpp"

#include <string>
#include <unordered_map>

#include <fmt/format.h>

#include "citus/node.hpp"
#include "pg/datum.hpp"
#include "pg/invalidation.hpp"
#include "queue/queue.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "utils/lsyscache.h"
}

namespace concurrency::queue {

namespace {

// relid -> distributed; entries dropped by a relcache invalidation of the
// table (distribute_queue changes it; Citus invalidates it when it
// distributes it), all of them by a full reset.
std::unordered_map<Oid, bool> *known = nullptr;

void forget(Datum, Oid relid) {
	if (!known)
		return;
	if (relid == InvalidOid)
		known->clear();
	else
		known->erase(relid);
}

} // namespace

bool is_distributed(Oid relid) {
	if (citus::local_role().role == citus::Role::none)
		return false;
	if (!known) {
		known = new std::unordered_map<Oid, bool>();
		pg::register_relcache_callback(forget, (Datum)0);
	}
	if (auto it = known->find(relid); it != known->end())
		return it->second;
	static const Oid types[1] = {OIDOID};
	Datum values[1] = {ObjectIdGetDatum(relid)};
	SPIPlanPtr plan = pg::prepared_plan(
	    "distributed:is",
	    "SELECT FROM concurrency.distributed_queue d JOIN pg_catalog.pg_class c"
	    "    ON c.relname OPERATOR(pg_catalog.=) ('q_' OPERATOR(pg_catalog.||) d.queue)"
	    "   AND c.relnamespace OPERATOR(pg_catalog.=) 'concurrency'::pg_catalog.regnamespace"
	    " WHERE c.oid OPERATOR(pg_catalog.=) $1",
	    1, types);
	bool distributed = pg::execute(plan, values, nullptr, true) > 0;
	(*known)[relid] = distributed;
	return distributed;
}

Datum forward_distributed(FunctionCallInfo fcinfo, const char *function, const pg::ResultSet *out, int max_args) {
	Oid fn = fcinfo->flinfo->fn_oid;
	Oid *argtypes = nullptr;
	int nargs = 0;
	Oid rettype = pg::guard([&] { return get_func_signature(fn, &argtypes, &nargs); });
	if (max_args >= 0 && nargs > max_args)
		nargs = max_args;
	std::string sql = out ? fmt::format("SELECT * FROM concurrency.{}(", function)
	                      : fmt::format("SELECT concurrency.{}(", function);
	for (int i = 0; i < nargs; ++i)
		sql += fmt::format("{}${}", i ? ", " : "", i + 1);
	sql += ")";
	Datum values[FUNC_MAX_ARGS];
	char nulls[FUNC_MAX_ARGS];
	for (int i = 0; i < nargs; ++i) {
		values[i] = fcinfo->args[i].value;
		nulls[i] = fcinfo->args[i].isnull ? 'n' : ' ';
	}
	SPIPlanPtr plan = pg::prepared_plan(fmt::format("distributed:{}", function).c_str(), sql.c_str(), nargs, argtypes);
	uint64 n = pg::execute(plan, values, nulls, false);
	Datum result = Datum(0);
	bool result_null = true;
	if (out) {
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
			pg::add_row(*out, cols, isnull);
		}
	} else if (n == 1) {
		result = pg::column(0, 1, &result_null);
		if (!result_null) {
			int16 len = 0;
			bool byval = false;
			pg::guard([&] { get_typlenbyval(rettype, &len, &byval); });
			result = pg::guard([&] { return SPI_datumTransfer(result, byval, len); });
		}
	}
	pg::spi_finish();
	if (out || result_null) {
		fcinfo->isnull = !out;
		return Datum(0);
	}
	return result;
}

void refuse_on_distributed(std::string_view queue, const char *what) {
	throw Error(sqlstate::feature_not_supported,
	            fmt::format("{} is not supported on distributed queue \"{}\"", what, queue),
	            "Distributed queues do not hand tasks back, wait for tasks or keep progress yet.",
	            "Use fail(…, retry_in => '0') to give a task back, and call dequeue without wait.");
}

void require_coordinator(const std::string &queue) {
	citus::Role role = citus::local_role().role;
	if (role == citus::Role::coordinator)
		return;
	throw Error(sqlstate::feature_not_supported,
	            fmt::format("cannot create distributed queue \"{}\": this server is not a Citus coordinator", queue),
	            fmt::format("Its Citus node role is {}.", role == citus::Role::worker ? "worker" : "none"),
	            "Create distributed queues on the coordinator of a Citus cluster, or leave out distributed => true "
	            "for a queue on this server.");
}

void distribute(const std::string &queue) {
	static const Oid types[1] = {TEXTOID};
	Datum values[1] = {pg::text_datum(queue)};
	SPIPlanPtr plan = pg::prepared_plan("distributed:distribute", "SELECT concurrency.distribute_queue($1)", 1, types);
	pg::execute(plan, values, nullptr, false);
}

void distributed_limits(const std::string &queue, bool key_limit_changed, std::optional<int32> max_leased) {
	static const Oid types[2] = {TEXTOID, INT4OID};
	Datum values[2] = {pg::text_datum(queue), Int32GetDatum(max_leased.value_or(0))};
	if (key_limit_changed) {
		SPIPlanPtr plan =
		    pg::prepared_plan("distributed:rebalance", "SELECT concurrency.distributed_rebalance($1)", 1, types);
		pg::execute(plan, values, nullptr, false);
	}
	if (max_leased) {
		SPIPlanPtr plan = pg::prepared_plan("distributed:resize_slots",
		                                    "SELECT concurrency.distributed_resize_slots($1, $2)", 2, types);
		pg::execute(plan, values, nullptr, false);
	}
}

uint64 distributed_purge_chunk(const std::string &queue, int32 chunk) {
	static const Oid types[2] = {TEXTOID, INT4OID};
	Datum values[2] = {pg::text_datum(queue), Int32GetDatum(chunk)};
	SPIPlanPtr plan = pg::prepared_plan("distributed:purge_chunk", "SELECT concurrency.distributed_purge_chunk($1, $2)",
	                                    2, types);
	pg::execute(plan, values, nullptr, false);
	bool isnull = false;
	Datum purged = pg::column(0, 1, &isnull);
	return isnull ? 0 : static_cast<uint64>(DatumGetInt64(purged));
}

void distributed_stats(const std::string &queue, TimestampTz now) {
	static const Oid types[2] = {TEXTOID, TIMESTAMPTZOID};
	Datum values[2] = {pg::text_datum(queue), TimestampTzGetDatum(now)};
	SPIPlanPtr plan = pg::prepared_plan("distributed:stats", "SELECT * FROM concurrency.distributed_stats($1, $2)", 2,
	                                    types);
	pg::execute(plan, values, nullptr, false);
}

} // namespace concurrency::queue
