// Numeric arguments of the counter functions: finite, or an error.
#pragma once

#include <optional>

#include "pg/guard.hpp"

namespace concurrency::counters {

// Argument `n`, a numeric: 22004 for NULL, 22023 for NaN or infinity.
Datum finite_numeric_arg(FunctionCallInfo fcinfo, int n, const char *argname,
                         SourceLocation at = SourceLocation::current());
// The same, NULL allowed (nothing).
std::optional<Datum> nullable_finite_numeric_arg(FunctionCallInfo fcinfo, int n, const char *argname,
                                                 SourceLocation at = SourceLocation::current());
// 0 as a numeric datum.
Datum numeric_zero();
// -1, 0 or 1.
int numeric_sign(Datum value);
// a < b: -1, a = b: 0, a > b: 1.
int numeric_compare(Datum a, Datum b);

} // namespace concurrency::counters
