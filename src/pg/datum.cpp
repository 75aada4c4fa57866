#include <fmt/format.h>

#include "pg/datum.hpp"

namespace concurrency::pg {

void require_arg(FunctionCallInfo fcinfo, int n, const char *argname) {
	if (PG_NARGS() <= n || PG_ARGISNULL(n))
		throw Error(sqlstate::null_value_not_allowed, fmt::format("{} must not be null", argname));
}

std::string text_arg(FunctionCallInfo fcinfo, int n, const char *argname) {
	require_arg(fcinfo, n, argname);
	text *t = guard([&] { return PG_DETOAST_DATUM_PACKED(PG_GETARG_DATUM(n)); });
	return std::string(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
}

Datum text_datum(std::string_view s) {
	return guard([&] { return PointerGetDatum(cstring_to_text_with_len(s.data(), static_cast<int>(s.size()))); });
}

} // namespace concurrency::pg
