// Argument readers shared by the queue's SQL functions (see args.hpp).
#include "queue/args.hpp"

#include <cstring>

#include <fmt/format.h>

extern "C" {
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "access/detoast.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
}

namespace concurrency::queue {

std::string queue_name_arg(FunctionCallInfo fcinfo, SourceLocation at) {
	return std::string(queue_name(fcinfo, at).view());
}

QueueName queue_name(FunctionCallInfo fcinfo, SourceLocation at) {
	pg::require_arg(fcinfo, 0, "queue", at);
	text *t = pg::guard([&] { return PG_DETOAST_DATUM_PACKED(PG_GETARG_DATUM(0)); });
	std::string_view name(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
	if (auto problem = name_problem(name, max_queue_name_bytes))
		throw Error(sqlstate::invalid_parameter_value, "invalid queue name", fmt::format("The {}.", *problem),
		            fmt::format("A queue name has 1 to {} bytes and no whitespace or control characters.",
		                        max_queue_name_bytes),
		            at);
	QueueName out;
	std::memcpy(out.bytes, name.data(), name.size());
	out.size = name.size();
	return out;
}

bool arg_null(FunctionCallInfo fcinfo, int n) {
	return PG_NARGS() <= n || PG_ARGISNULL(n);
}

// run_at may be NULL (now) or a finite time: 'infinity' would be a task that
// never runs, and either infinity breaks every age computed from it.
void check_run_at(FunctionCallInfo fcinfo, int n, SourceLocation at) {
	if (!PG_ARGISNULL(n) && TIMESTAMP_NOT_FINITE(PG_GETARG_TIMESTAMPTZ(n)))
		throw Error(sqlstate::invalid_parameter_value, "run_at must be a finite time",
		            "Use NULL to run the task now.", {}, at);
}

Interval positive_interval_arg(FunctionCallInfo fcinfo, int n, const char *argname, SourceLocation at) {
	Interval value = *PG_GETARG_INTERVAL_P(n);
	Interval zero{};
	bool positive = pg::guard([&] {
		return DatumGetBool(
		    DirectFunctionCall2(interval_gt, IntervalPGetDatum(&value), IntervalPGetDatum(&zero)));
	});
	if (!positive)
		throw Error(sqlstate::invalid_parameter_value, fmt::format("{} must be positive", argname), {}, {},
		            at);
	return value;
}

std::optional<Interval> retry_in_arg(FunctionCallInfo fcinfo, int n, SourceLocation at) {
	if (arg_null(fcinfo, n))
		return std::nullopt;
	Interval value = *PG_GETARG_INTERVAL_P(n);
	Interval zero{};
	bool negative = pg::guard([&] {
		return DatumGetBool(
		    DirectFunctionCall2(interval_lt, IntervalPGetDatum(&value), IntervalPGetDatum(&zero)));
	});
	if (negative)
		throw Error(sqlstate::invalid_parameter_value, "retry_in must not be negative", {}, {}, at);
	return value;
}

ArrayArg array_arg(FunctionCallInfo fcinfo, int argno, const char *argname, Oid elemtype, SourceLocation at) {
	ArrayType *array = pg::guard([&] { return DatumGetArrayTypeP(PG_GETARG_DATUM(argno)); });
	if (ARR_NDIM(array) > 1)
		throw Error(sqlstate::invalid_parameter_value,
		            fmt::format("{} must be a one-dimensional array", argname), {}, {}, at);
	ArrayArg out;
	int16 typlen = 0;
	bool typbyval = false;
	char typalign = 'i';
	pg::guard([&] {
		get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
		deconstruct_array(array, elemtype, typlen, typbyval, typalign, &out.elems, &out.nulls, &out.n);
	});
	return out;
}

std::vector<int64> int8_array_arg(FunctionCallInfo fcinfo, int n, const char *argname, SourceLocation at) {
	pg::require_arg(fcinfo, n, argname, at);
	ArrayType *array = pg::guard([&] { return DatumGetArrayTypeP(PG_GETARG_DATUM(n)); });
	if (ARR_NDIM(array) > 1)
		throw Error(sqlstate::invalid_parameter_value,
		            fmt::format("{} must be a one-dimensional array", argname), {}, {}, at);
	Datum *elems = nullptr;
	bool *nulls = nullptr;
	int count = 0;
	pg::guard([&] {
		deconstruct_array(array, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &elems, &nulls, &count);
	});
	std::vector<int64> out;
	out.reserve(static_cast<std::size_t>(count));
	for (int i = 0; i < count; ++i) {
		if (nulls[i])
			throw Error(sqlstate::null_value_not_allowed, fmt::format("{} must not contain null", argname),
			            fmt::format("Element {} is null.", i + 1), {}, at);
		out.push_back(DatumGetInt64(elems[i]));
	}
	return out;
}

int max_payload_kb = 4 * 1024;

void define_payload_setting() {
	DefineCustomIntVariable("concurrency.max_payload_size", "The largest payload a task may have.",
	                        "enqueue, enqueue_batch and enqueue_graph refuse a larger payload (22023).",
	                        &max_payload_kb, 4 * 1024, 1, 1024 * 1024, PGC_USERSET, GUC_UNIT_KB, nullptr,
	                        nullptr, nullptr);
}

int result_retention_s = 3600;

void define_result_retention_setting() {
	DefineCustomIntVariable(
	    "concurrency.result_retention",
	    "How long a queue that retains nothing keeps its finished tasks that are kept at all.",
	    "A task completed with a result, a cancelled task and a parent done are kept this long for "
	    "await_task and task_status; a task completed without a result is removed at once.",
	    &result_retention_s, 3600, 0, 10 * 365 * 86400, PGC_SIGHUP, GUC_UNIT_S, nullptr, nullptr, nullptr);
}

void check_payload_size(Datum payload, const char *what, int element, SourceLocation at) {
	Size bytes = pg::guard([&] { return toast_raw_datum_size(payload); }) - VARHDRSZ;
	Size max_bytes = static_cast<Size>(max_payload_kb) * 1024;
	if (bytes <= max_bytes)
		return;
	std::string name = element < 0 ? std::string(what) : fmt::format("{}[{}]", what, element + 1);
	throw Error(sqlstate::invalid_parameter_value, fmt::format("{} is too large", name),
	            fmt::format("It has {} bytes; concurrency.max_payload_size allows {}.", bytes, max_bytes),
	            "Keep large data in a table of your own and put its key in the payload, or raise "
	            "concurrency.max_payload_size.",
	            at);
}

} // namespace concurrency::queue
