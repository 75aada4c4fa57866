// Test-only SQL entry points that exercise the C++/PostgreSQL border.
#include <stdexcept>
#include <string>
#include <vector>

#include "pg/datum.hpp"
#include "pg/xact.hpp"

extern "C" {
#include "utils/resowner.h"
}

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

// Surviving a PostgreSQL error the way PostgreSQL allows it: inside a
// subtransaction (pg::in_subtransaction), which is rolled back. Returns how
// many of `count` failing calls were survived with the caller's memory
// context and resource owner back in place.
CONCURRENCY_FUNCTION(border_test_subtransaction) {
	MemoryContext context = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	int survived = 0;
	int count = PG_GETARG_INT32(0);
	for (int i = 0; i < count; ++i) {
		ErrorData *error = concurrency::pg::in_subtransaction(
		    [] { guard([] { return DirectFunctionCall1(int4in, CStringGetDatum("x")); }); });
		if (error && error->sqlerrcode == ERRCODE_INVALID_TEXT_REPRESENTATION &&
		    CurrentMemoryContext == context && CurrentResourceOwner == owner)
			++survived;
	}
	PG_RETURN_INT32(survived);
}

// A C++ exception thrown inside guard() leaves PostgreSQL's error handler as
// it was: true when PG_exception_stack is restored. Then a PostgreSQL error
// (22P02) is raised through the same handler, which would jump into a dead
// frame if it were not.
CONCURRENCY_FUNCTION(border_test_guard_cpp_throw) {
	sigjmp_buf *before = PG_exception_stack;
	bool restored = false;
	try {
		guard([]() -> int { throw std::runtime_error("thrown inside guard"); });
	} catch (const std::runtime_error &) {
		restored = PG_exception_stack == before;
	}
	if (!PG_ARGISNULL(0) && PG_GETARG_BOOL(0))
		guard([] { return DirectFunctionCall1(int4in, CStringGetDatum("after the throw")); });
	PG_RETURN_BOOL(restored);
}

// An Error's LOCATION is where it was thrown (this file, function and line:
// expected/border.out has the line), not the wrapper that reports it.
CONCURRENCY_FUNCTION(border_test_location) {
	throw concurrency::Error(concurrency::sqlstate::invalid_parameter_value, "raised at a known place");
}
