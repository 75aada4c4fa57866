// Reading the arguments of the queue's SQL functions: the queue name and the
// argument checks that several of them share, on top of pg/datum.hpp. Like
// those, each takes the caller's place (`at`) for the errors it raises.
// Internal to src/queue.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/names.hpp"
#include "pg/datum.hpp"

extern "C" {
#include "utils/timestamp.h"
}

namespace concurrency::queue {

// A validated queue name in a fixed buffer: reading one allocates nothing.
struct QueueName {
	char bytes[max_queue_name_bytes + 1] = {};
	std::size_t size = 0;
	std::string_view view() const { return {bytes, size}; }
};

// Validated queue name from argument 0 (22004 when NULL, 22023 when invalid).
std::string queue_name_arg(FunctionCallInfo fcinfo, SourceLocation at = SourceLocation::current());
// The same into a fixed buffer (no allocation).
QueueName queue_name(FunctionCallInfo fcinfo, SourceLocation at = SourceLocation::current());

// concurrency.max_payload_size, in kB: the largest payload a task may have.
extern int max_payload_kb;
// From _PG_init: defines concurrency.max_payload_size.
void define_payload_setting();
// 22023, with a HINT naming concurrency.max_payload_size, when the jsonb
// datum `payload` is larger than it; `what` names it ("payload",
// "payloads[3]", "tasks[2].payload").
void check_payload_size(Datum payload, const char *what, int element = -1,
                        SourceLocation at = SourceLocation::current());

// Whether argument n is NULL or missing (a 0.1.0 declaration calling this
// module passes fewer arguments: a missing one counts as NULL).
bool arg_null(FunctionCallInfo fcinfo, int n);

// run_at from argument n: NULL (now) or a finite time (22023 otherwise).
void check_run_at(FunctionCallInfo fcinfo, int n, SourceLocation at = SourceLocation::current());

// Positive interval from argument n (22023 otherwise); n must not be NULL.
Interval positive_interval_arg(FunctionCallInfo fcinfo, int n, const char *argname,
                               SourceLocation at = SourceLocation::current());

// retry_in from argument n: NULL (nullopt) or not negative (22023 otherwise).
std::optional<Interval> retry_in_arg(FunctionCallInfo fcinfo, int n,
                                     SourceLocation at = SourceLocation::current());

// A one-dimensional array argument and its elements (palloc'd, in the
// function's memory context); the argument must not be NULL.
struct ArrayArg {
	int n = 0;
	Datum *elems = nullptr;
	bool *nulls = nullptr;
};
ArrayArg array_arg(FunctionCallInfo fcinfo, int argno, const char *argname, Oid elemtype,
                   SourceLocation at = SourceLocation::current());

// The int8[] argument n as values; NULL array or element: 22004.
std::vector<int64> int8_array_arg(FunctionCallInfo fcinfo, int n, const char *argname,
                                  SourceLocation at = SourceLocation::current());

// concurrency.result_retention (seconds): how long a queue that retains
// nothing keeps the finished tasks it keeps at all (completed with a result,
// cancelled, parents done); from _PG_init.
extern int result_retention_s;
void define_result_retention_setting();

} // namespace concurrency::queue
