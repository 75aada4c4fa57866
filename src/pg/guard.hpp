// The border between C++ and PostgreSQL, in both directions.
//
//  * pg::guard(f) calls PostgreSQL from C++: an ereport(ERROR) inside f is
//    caught (PG_TRY), copied out of ErrorContext, and rethrown as a C++
//    PgException, with the caller's memory context restored. Keep f to plain
//    PostgreSQL calls: C++ objects created inside f are not unwound.
//    A C++ exception thrown by f passes through unchanged, after PostgreSQL's
//    error handler is restored.
//  * pg::invoke(body, fcinfo) runs the C++ body of a SQL-callable function and
//    lets no exception escape: it catches everything, leaves the handler, and
//    only then raises the error with ereport (or ReThrowError). A
//    concurrency::Error is reported at the place that threw it (LOCATION).
//
// Rule for the code in between: no C++ object with a destructor may be alive
// across a direct PostgreSQL call that can raise an error; either go through
// pg::guard or keep such calls in plain C-style code.
#pragma once

#include <exception>
#include <new>
#include <string>
#include <type_traits>

#include "common/error.hpp"
#include "pg/postgres.hpp"

namespace concurrency::pg {

// A PostgreSQL error, captured by guard(), on its way back to PostgreSQL.
class PgException : public std::exception {
  public:
	explicit PgException(ErrorData *edata) noexcept : edata_(edata) {}
	const char *what() const noexcept override {
		return edata_ && edata_->message ? edata_->message : "error";
	}
	ErrorData *data() const noexcept { return edata_; }
	int sqlerrcode() const noexcept { return edata_ ? edata_->sqlerrcode : 0; }

  private:
	ErrorData *edata_; // palloc'd in the context that was current at guard()
};

// guard()'s PG_TRY, apart: the result and the held C++ exception are
// written through references, so that no local of the frame that calls
// setjmp changes after it (nothing for longjmp to clobber). Returns the
// PostgreSQL error, copied into `caller_context`, or nullptr.
template <typename F, typename Result>
ErrorData *guarded_call(F &f, Result &result, std::exception_ptr &cpp_error, MemoryContext caller_context) {
	ErrorData *volatile edata = nullptr;
	PG_TRY();
	{
		// A C++ exception from f must not leave PG_TRY's frame by itself: it
		// would skip PG_END_TRY, and PG_exception_stack would keep pointing
		// at this dead frame for the next ereport. It is held and rethrown
		// once the handler is restored.
		try {
			result = f();
		} catch (...) {
			cpp_error = std::current_exception();
		}
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(caller_context);
		edata = CopyErrorData();
		FlushErrorState();
	}
	PG_END_TRY();
	return edata;
}

template <typename F> auto guard(F &&f) -> decltype(f()) {
	using Result = decltype(f());
	if constexpr (std::is_void_v<Result>) {
		guard([&] {
			f();
			return true;
		});
	} else {
		static_assert(std::is_trivially_copyable_v<Result>, "guard() returns plain values only");
		std::exception_ptr cpp_error;
		Result result{};
		if (ErrorData *edata = guarded_call(f, result, cpp_error, CurrentMemoryContext))
			throw PgException(edata);
		if (cpp_error)
			std::rethrow_exception(cpp_error);
		return result;
	}
}

// Text of an error on its way out of the C++ frames: fixed buffers, so that
// nothing needs a destructor once the handler is left. The location is the
// place that threw (string literals, kept as pointers).
struct PendingError {
	char code[6];
	char message[1024];
	char detail[1024];
	char hint[1024];
	SourceLocation where;

	// Only the first bytes: invoke() builds one on every call, and
	// initializing all 3 KB cost more than a whole lock call.
	PendingError() noexcept : code{'X', 'X', '0', '0', '0', '\0'} { message[0] = detail[0] = hint[0] = '\0'; }

	void set(const char *sqlstate, const char *msg, const char *det = "", const char *hnt = "",
	         SourceLocation at = SourceLocation::current()) noexcept;
	[[noreturn]] void raise() const;
};

template <typename Body> Datum invoke(Body body, FunctionCallInfo fcinfo) {
	ErrorData *pg_error = nullptr;
	PendingError pending;
	try {
		return body(fcinfo);
	} catch (const PgException &e) {
		pg_error = e.data();
	} catch (const Error &e) {
		pending.set(e.code().c_str(), e.what(), e.detail().c_str(), e.hint().c_str(), e.where());
	} catch (const std::bad_alloc &) {
		pending.set(sqlstate::out_of_memory, "out of memory in concurrency_ext");
	} catch (const std::exception &e) {
		pending.set(sqlstate::internal_error, "unexpected C++ exception in concurrency_ext", e.what());
	} catch (...) {
		pending.set(sqlstate::internal_error, "unexpected C++ exception of unknown type in concurrency_ext");
	}
	if (pg_error)
		ReThrowError(pg_error);
	pending.raise();
}

} // namespace concurrency::pg

// Defines a SQL-callable function `name` whose body is C++:
//   CONCURRENCY_FUNCTION(my_fn) { ... return Datum; }
// The body is a function of the same name in namespace concurrency_sql, so
// that an error's LOCATION, a debugger and a profiler name it as the SQL
// declaration does ('MODULE_PATHNAME', 'my_fn').
#define CONCURRENCY_FUNCTION(name)                                                                           \
	namespace concurrency_sql {                                                                              \
	static Datum name(PG_FUNCTION_ARGS);                                                                     \
	}                                                                                                        \
	extern "C" {                                                                                             \
	PG_FUNCTION_INFO_V1(name);                                                                               \
	PGDLLEXPORT Datum name(PG_FUNCTION_ARGS) {                                                               \
		return concurrency::pg::invoke(concurrency_sql::name, fcinfo);                                       \
	}                                                                                                        \
	}                                                                                                        \
	Datum concurrency_sql::name(PG_FUNCTION_ARGS)
