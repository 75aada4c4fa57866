// Retry delays: exponential backoff with jitter and a cap (failed queue tasks,
// retried transactions, run_ddl attempts).
// Pure C++ (no PostgreSQL headers), unit-tested in test/unit/backoff_test.cpp.
#pragma once

#include <cstdint>

namespace concurrency {

struct BackoffPolicy {
	std::int64_t base_us = 1'000'000;      // delay after the first failed attempt: 1 s
	double factor = 2.0;                   // growth per further attempt
	std::int64_t cap_us = 3'600'000'000LL; // never more than 1 hour
	double jitter = 0.5;                   // the delay is scaled by a factor in [1 - jitter, 1]
};

// Microseconds to wait before the next attempt of a task whose attempt number
// `attempt` (1 for the first) has just failed: min(cap, base * factor^(attempt-1)),
// scaled by (1 - jitter * unit_random) and truncated to whole microseconds.
// `unit_random` is a uniform value in
// [0, 1) supplied by the caller (clamped into that range), so that the function
// stays deterministic for tests. The result is at least 1 microsecond.
std::int64_t backoff_delay_us(int attempt, double unit_random, const BackoffPolicy &policy = {});

} // namespace concurrency
