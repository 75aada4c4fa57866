// Argument and result conversions for SQL-callable functions.
#pragma once

#include <string>
#include <string_view>

#include "pg/guard.hpp"

namespace concurrency::pg {

// The text argument `n` as a std::string; NULL raises 22004 naming `argname`
// (our functions are not STRICT: a NULL must never silently skip work).
std::string text_arg(FunctionCallInfo fcinfo, int n, const char *argname);

// Raises 22004 when argument `n` is NULL.
void require_arg(FunctionCallInfo fcinfo, int n, const char *argname);

// A palloc'd text datum from C++ text.
Datum text_datum(std::string_view s);

} // namespace concurrency::pg
