#include <fmt/format.h>

#include "pg/datum.hpp"

namespace concurrency::pg {

void require_arg(FunctionCallInfo fcinfo, int n, const char *argname, SourceLocation at) {
	if (PG_NARGS() <= n || PG_ARGISNULL(n))
		throw Error(sqlstate::null_value_not_allowed, fmt::format("{} must not be null", argname), {}, {},
		            at);
}

std::string_view text_view(Datum value) {
	auto *text = reinterpret_cast<struct varlena *>(DatumGetPointer(value));
	if (VARATT_IS_COMPRESSED(text) || VARATT_IS_EXTERNAL(text))
		text = guard([&] { return pg_detoast_datum_packed(text); });
	return std::string_view(VARDATA_ANY(text), VARSIZE_ANY_EXHDR(text));
}

std::string_view text_view_arg(FunctionCallInfo fcinfo, int n, const char *argname, SourceLocation at) {
	require_arg(fcinfo, n, argname, at);
	return text_view(PG_GETARG_DATUM(n));
}

std::string text_arg(FunctionCallInfo fcinfo, int n, const char *argname, SourceLocation at) {
	return std::string(text_view_arg(fcinfo, n, argname, at));
}

bool bool_arg(FunctionCallInfo fcinfo, int n, const char *argname, SourceLocation at) {
	require_arg(fcinfo, n, argname, at);
	return PG_GETARG_BOOL(n);
}

std::int32_t int32_arg(FunctionCallInfo fcinfo, int n, const char *argname, SourceLocation at) {
	require_arg(fcinfo, n, argname, at);
	return PG_GETARG_INT32(n);
}

std::int64_t int64_arg(FunctionCallInfo fcinfo, int n, const char *argname, SourceLocation at) {
	require_arg(fcinfo, n, argname, at);
	return PG_GETARG_INT64(n);
}

std::optional<std::int64_t> nullable_int64_arg(FunctionCallInfo fcinfo, int n) {
	if (PG_NARGS() <= n || PG_ARGISNULL(n))
		return std::nullopt;
	return PG_GETARG_INT64(n);
}

Datum text_datum(std::string_view s) {
	return guard(
	    [&] { return PointerGetDatum(cstring_to_text_with_len(s.data(), static_cast<int>(s.size()))); });
}

} // namespace concurrency::pg
