// Numeric arguments of the counter functions (see numeric_arg.hpp).
#include <fmt/format.h>

#include "counters/numeric_arg.hpp"
#include "pg/datum.hpp"

extern "C" {
#include "utils/fmgrprotos.h"
#include "utils/numeric.h"
}

namespace concurrency::counters {

std::optional<Datum> nullable_finite_numeric_arg(FunctionCallInfo fcinfo, int n, const char *argname,
                                                 SourceLocation at) {
	if (PG_ARGISNULL(n))
		return std::nullopt;
	Datum value = pg::guard([&] { return PointerGetDatum(PG_GETARG_NUMERIC(n)); });
	bool finite = pg::guard([&] {
		Numeric num = DatumGetNumeric(value);
		return !numeric_is_nan(num) && !numeric_is_inf(num);
	});
	if (!finite)
		throw Error(sqlstate::invalid_parameter_value, fmt::format("{} must be a finite number", argname), "",
		            "", at);
	return value;
}

Datum finite_numeric_arg(FunctionCallInfo fcinfo, int n, const char *argname, SourceLocation at) {
	pg::require_arg(fcinfo, n, argname, at);
	return *nullable_finite_numeric_arg(fcinfo, n, argname, at);
}

int numeric_compare(Datum a, Datum b) {
	return pg::guard([&] { return DatumGetInt32(DirectFunctionCall2(numeric_cmp, a, b)); });
}

Datum numeric_zero() {
	return pg::guard([] { return NumericGetDatum(int64_to_numeric(0)); });
}

int numeric_sign(Datum value) {
	int c = numeric_compare(value, numeric_zero());
	return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

} // namespace concurrency::counters
