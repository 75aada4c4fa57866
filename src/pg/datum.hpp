// Argument and result conversions for SQL-callable functions: the one place
// where a function's arguments are read (a capability adds only its own
// checks on top, e.g. a valid queue name or a non-negative timeout).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "pg/guard.hpp"

namespace concurrency::pg {

// The readers that raise take the caller's place (`at`, defaulted to the call
// site): a NULL argument's error is located in the SQL function that read it.

// Raises 22004 when argument `n` is NULL (our functions are not STRICT: a NULL
// must never silently skip work).
void require_arg(FunctionCallInfo fcinfo, int n, const char *argname,
                 SourceLocation at = SourceLocation::current());

// The text in a text datum, without a copy: valid as long as the datum is.
// Only a compressed or out-of-line value is detoasted (into the current
// memory context), never a literal or a short parameter.
std::string_view text_view(Datum value);

// The text argument `n`, without a copy (valid for the call); NULL raises 22004.
std::string_view text_view_arg(FunctionCallInfo fcinfo, int n, const char *argname,
                               SourceLocation at = SourceLocation::current());
// The text argument `n` as a std::string; NULL raises 22004.
std::string text_arg(FunctionCallInfo fcinfo, int n, const char *argname,
                     SourceLocation at = SourceLocation::current());

// Scalar arguments; NULL raises 22004.
bool bool_arg(FunctionCallInfo fcinfo, int n, const char *argname,
              SourceLocation at = SourceLocation::current());
std::int32_t int32_arg(FunctionCallInfo fcinfo, int n, const char *argname,
                       SourceLocation at = SourceLocation::current());
std::int64_t int64_arg(FunctionCallInfo fcinfo, int n, const char *argname,
                       SourceLocation at = SourceLocation::current());
// A bigint argument that may be NULL (nothing).
std::optional<std::int64_t> nullable_int64_arg(FunctionCallInfo fcinfo, int n);

// A palloc'd text datum from C++ text.
Datum text_datum(std::string_view s);

} // namespace concurrency::pg
