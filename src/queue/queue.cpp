// Per-backend queue cache, plan runner and result sets of the task queue.
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "common/names.hpp"
#include "common/sql_text.hpp"
#include "queue/queue.hpp"

extern "C" {
#include "access/transam.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "storage/procarray.h"
#include "utils/acl.h"
#include "utils/lsyscache.h"
}

namespace concurrency::queue {

namespace {

// Queue name -> what this backend knows about it. Plain C++ (not palloc'd):
// it lives for the whole backend.
std::unordered_map<std::string, QueueInfo> &known_queues() {
	static std::unordered_map<std::string, QueueInfo> queues;
	return queues;
}

// Plan keys: "queue:<name>\x1f<op>". A queue name has no control characters,
// so the prefix "queue:<name>\x1f" names the plans of exactly one queue.
std::string plan_prefix(const std::string &queue) { return fmt::format("queue:{}\x1f", queue); }

void load_settings(const std::string &name, Oid relid, QueueInfo &info) {
	static const Oid types[1] = {TEXTOID};
	SPIPlanPtr plan =
	    pg::prepared_plan("queue-catalog:settings", "SELECT lease, max_attempts FROM concurrency.queue WHERE name OPERATOR(pg_catalog.=) $1",
	                      1, types, CURSOR_OPT_GENERIC_PLAN);
	Datum values[1] = {pg::text_datum(name)};
	if (pg::spi_execute_plan(plan, values, nullptr, true, 1) != 1)
		throw Error(sqlstate::undefined_object, fmt::format("queue \"{}\" does not exist", name),
		            fmt::format("Table concurrency.{} exists, but the queue is not in concurrency.queue.",
		                        quote_ident(queue_table_name(name))));
	bool isnull = false;
	Datum lease = column(0, 1, &isnull);
	Datum max_attempts = column(0, 2, &isnull);
	info.lease = *DatumGetIntervalP(lease);
	info.max_attempts = DatumGetInt32(max_attempts);
	info.cursor = ClaimCursor();
	info.relid = relid;
}

} // namespace

std::string queue_name_arg(FunctionCallInfo fcinfo) {
	std::string name = pg::text_arg(fcinfo, 0, "queue");
	if (auto problem = name_problem(name, max_queue_name_bytes))
		throw Error(sqlstate::invalid_parameter_value, "invalid queue name", fmt::format("The {}.", *problem),
		            fmt::format("A queue name has 1 to {} bytes and no whitespace or control characters.",
		                        max_queue_name_bytes));
	return name;
}

Oid queue_relid(const std::string &queue) {
	std::string table = queue_table_name(queue);
	return pg::guard([&] {
		Oid nsp = get_namespace_oid("concurrency", true);
		return OidIsValid(nsp) ? get_relname_relid(table.c_str(), nsp) : InvalidOid;
	});
}

void forget_queue(const std::string &queue) {
	std::string prefix = plan_prefix(queue);
	pg::guard([&] { pg::forget_plans(prefix.c_str()); });
	known_queues().erase(queue);
}

Interval positive_interval_arg(FunctionCallInfo fcinfo, int n, const char *argname) {
	Interval value = *PG_GETARG_INTERVAL_P(n);
	Interval zero{};
	bool positive = pg::guard([&] {
		return DatumGetBool(DirectFunctionCall2(interval_gt, IntervalPGetDatum(&value), IntervalPGetDatum(&zero)));
	});
	if (!positive)
		throw Error(sqlstate::invalid_parameter_value, fmt::format("{} must be positive", argname));
	return value;
}

uint32 horizon_lag() {
	return pg::guard([] {
		TransactionId next = XidFromFullTransactionId(ReadNextFullTransactionId());
#if PG_VERSION_NUM >= 140000
		TransactionId oldest = GetOldestNonRemovableTransactionId(nullptr);
#else
		TransactionId oldest = GetOldestXmin(nullptr, PROCARRAY_FLAGS_DEFAULT);
#endif
		return TransactionIdIsNormal(oldest) ? static_cast<uint32>(next - oldest) : 0u;
	});
}

Queue::Queue(std::string name) : name_(std::move(name)), sql_(name_), info_(nullptr) {
	Oid relid = queue_relid(name_);
	if (!OidIsValid(relid))
		throw Error(sqlstate::undefined_object, fmt::format("queue \"{}\" does not exist", name_), "",
		            "Create it with concurrency.create_queue().");
	QueueInfo &info = known_queues()[name_];
	if (info.relid != relid) {
		info.relid = InvalidOid;
		load_settings(name_, relid, info);
	}
	info_ = &info;
}

uint64 Queue::run(const char *op, const std::string &sql, int nargs, const Oid *types, const Datum *values,
                  const char *nulls) {
	std::string key = plan_prefix(name_) + op;
	try {
		// One generic plan per statement, planned once: the statements are
		// written so that it is the right one (index scans whatever the values).
		SPIPlanPtr plan = pg::prepared_plan(key.c_str(), sql.c_str(), nargs, types, CURSOR_OPT_GENERIC_PLAN);
		return pg::spi_execute_plan(plan, values, nulls, false);
	} catch (const pg::PgException &e) {
		// the queue was dropped after we looked it up (its table is gone)
		if (e.sqlerrcode() == ERRCODE_UNDEFINED_TABLE)
			throw Error(sqlstate::undefined_object, fmt::format("queue \"{}\" does not exist", name_),
			            "It was dropped while this call was running.");
		throw;
	}
}

void Queue::lease_lost(int64 task_id) {
	static const Oid types[1] = {INT8OID};
	Datum values[1] = {Int64GetDatum(task_id)};
	const char *hint = "Roll back the work done under this lease: the task is no longer yours.";
	if (run("inspect", sql_.inspect(), 1, types, values) == 0)
		throw Error(sqlstate::lease_lost, fmt::format("task {} of queue \"{}\" does not exist", task_id, name_),
		            "It was completed already, or it never existed.", hint);
	bool isnull = false;
	std::string state = pg::guard([&] { return TextDatumGetCString(column(0, 1, &isnull)); });
	int32 attempt = DatumGetInt32(column(0, 2, &isnull));
	Datum worker_datum = column(0, 3, &isnull);
	std::string worker = isnull ? "" : pg::guard([&] { return TextDatumGetCString(worker_datum); });
	bool held = DatumGetBool(column(0, 4, &isnull));
	std::string detail =
	    held ? fmt::format("Another lease was issued for the task since: it is {} at attempt {}{}.", state, attempt,
	                       worker.empty() ? "" : fmt::format(", worker \"{}\"", worker))
	         : fmt::format("The lease was released since: the task is {} at attempt {}.", state, attempt);
	throw Error(sqlstate::lease_lost, fmt::format("lease on task {} of queue \"{}\" was lost", task_id, name_), detail,
	            hint);
}

void Queue::notify() {
	std::string channel = queue_channel(name_);
	pg::guard([&] { Async_Notify(channel.c_str(), ""); });
}

Datum column(int row, int col, bool *isnull) {
	return pg::guard([&] { return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col, isnull); });
}

int64 int64_column(int row, int col) {
	bool isnull = false;
	Datum d = column(row, col, &isnull);
	return isnull ? 0 : DatumGetInt64(d);
}

} // namespace concurrency::queue
