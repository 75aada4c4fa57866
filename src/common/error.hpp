// Errors raised by C++ code. They carry a SQLSTATE and the three parts of a
// PostgreSQL message; the entry-point wrapper (pg::invoke, behind
// CONCURRENCY_FUNCTION in pg/guard.hpp) turns them into ereport(ERROR) once no
// C++ frame is left to unwind. Every SQLSTATE the extension raises is named
// here, and listed in docs/errors.md.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace concurrency {

// SQLSTATEs used across the extension, in one place so the docs can list them.
namespace sqlstate {
inline constexpr const char *null_value_not_allowed = "22004";
inline constexpr const char *invalid_parameter_value = "22023";
inline constexpr const char *undefined_object = "42704";
inline constexpr const char *undefined_table = "42P01"; // an extension table dropped by hand
inline constexpr const char *duplicate_object = "42710";
inline constexpr const char *duplicate_table = "42P07"; // a queue's derived name taken by another queue
inline constexpr const char *unique_violation = "23505";
inline constexpr const char *check_violation = "23514"; // a counter's bound would be crossed
inline constexpr const char *lock_not_available = "55P03";
inline constexpr const char *insufficient_privilege = "42501";
inline constexpr const char *read_only_sql_transaction = "25006";
inline constexpr const char *object_not_in_prerequisite_state = "55000";
inline constexpr const char *feature_not_supported =
    "0A000"; // e.g. a set-returning function where no set is accepted
inline constexpr const char *invalid_transaction_state = "25000"; // e.g. a named lock in a parallel worker
inline constexpr const char *trigger_protocol_violated = "39P01"; // a trigger function called directly
inline constexpr const char *serialization_failure = "40001";
inline constexpr const char *deadlock_detected = "40P01";
inline constexpr const char *active_sql_transaction =
    "25001"; // run_transaction / run_ddl inside a transaction block
inline constexpr const char *invalid_transaction_termination =
    "2D000"; // their statements control the transaction
inline constexpr const char *program_limit_exceeded = "54000";
inline constexpr const char *out_of_memory = "53200";
inline constexpr const char *internal_error = "XX000";
// Our own class "CE": a worker's lease on a task was taken over (or the task is
// gone). Documented in docs/errors.md; clients retry nothing, they drop the task.
inline constexpr const char *lease_lost = "CE001";
} // namespace sqlstate

// Where an error was raised: what std::source_location (C++20) gives, taken
// here with the compiler builtins behind it (GCC and Clang have them in C++17
// too). As a defaulted argument it names the caller's line, so that an error's
// LOCATION is the place that threw it, not the wrapper that reports it. The
// strings are literals: PostgreSQL keeps the pointers, not copies.
struct SourceLocation {
	const char *file = nullptr;
	int line = 0;
	const char *function = nullptr;

#if defined(__GNUC__) || defined(__clang__)
	static constexpr SourceLocation current(const char *file = __builtin_FILE(), int line = __builtin_LINE(),
	                                        const char *function = __builtin_FUNCTION()) noexcept {
		return SourceLocation{file, line, function};
	}
#else
	static constexpr SourceLocation current() noexcept {
		return SourceLocation{};
	}
#endif
};

class Error : public std::runtime_error {
  public:
	Error(std::string code, std::string message, std::string detail = {}, std::string hint = {},
	      SourceLocation where = SourceLocation::current())
	    : std::runtime_error(message), code_(std::move(code)), detail_(std::move(detail)),
	      hint_(std::move(hint)), where_(where) {}

	const std::string &code() const noexcept { return code_; }
	const std::string &detail() const noexcept { return detail_; }
	const std::string &hint() const noexcept { return hint_; }
	const SourceLocation &where() const noexcept { return where_; }

  private:
	std::string code_;
	std::string detail_;
	std::string hint_;
	SourceLocation where_;
};

} // namespace concurrency
