// Test-only SQL entry points that exercise the C++/PostgreSQL border.
#include <stdexcept>
#include <string>
#include <vector>

#include "pg/datum.hpp"

extern "C" {
PG_MODULE_MAGIC;
}

using concurrency::pg::guard;
using concurrency::pg::PgException;

// A PostgreSQL error raised inside guarded C++ code surfaces with its SQLSTATE:
// int4in('not a number') raises 22P02 inside guard(), which becomes a
// PgException, travels through C++ frames holding a std::vector, and is
// re-raised by the entry wrapper.
CONCURRENCY_FUNCTION(border_test_pg_error) {
	std::vector<std::string> alive_while_unwinding{"a", "b"};
	const char *input = PG_ARGISNULL(0) ? "not a number" : text_to_cstring(PG_GETARG_TEXT_PP(0));
	Datum value = guard([&] { return DirectFunctionCall1(int4in, CStringGetDatum(input)); });
	return value;
}

// A C++ exception of each kind becomes a clean ERROR.
CONCURRENCY_FUNCTION(border_test_cpp_exception) {
	std::string kind = concurrency::pg::text_arg(fcinfo, 0, "kind");
	if (kind == "error")
		throw concurrency::Error(concurrency::sqlstate::invalid_parameter_value, "bad value from C++",
		                         "detail from C++", "hint from C++");
	if (kind == "std")
		throw std::runtime_error("std::runtime_error from C++");
	if (kind == "bad_alloc")
		throw std::bad_alloc();
	if (kind == "unknown")
		throw 42;
	return concurrency::pg::text_datum("no exception");
}

// guard() restores the caller's memory context and error state, so C++ code
// can catch a side-effect-free PostgreSQL error and carry on.
CONCURRENCY_FUNCTION(border_test_guard_recovers) {
	MemoryContext before = CurrentMemoryContext;
	int caught = 0;
	int count = PG_GETARG_INT32(0);
	for (int i = 0; i < count; ++i) {
		try {
			guard([] { return DirectFunctionCall1(int4in, CStringGetDatum("x")); });
		} catch (const PgException &e) {
			if (e.sqlerrcode() == ERRCODE_INVALID_TEXT_REPRESENTATION && CurrentMemoryContext == before)
				++caught;
		}
	}
	PG_RETURN_INT32(caught);
}
