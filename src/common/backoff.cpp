#include "common/backoff.hpp"

#include <algorithm>
#include <cmath>
#include "common/pure.hpp" // last: checks that no PostgreSQL header came before

namespace concurrency {

std::int64_t backoff_delay_us(int attempt, double unit_random, const BackoffPolicy &policy) {
	const double cap = static_cast<double>(std::max<std::int64_t>(policy.cap_us, 1));
	const double base = std::clamp(static_cast<double>(policy.base_us), 1.0, cap);
	const double factor = std::isfinite(policy.factor) ? std::max(policy.factor, 1.0) : 1.0;
	const int steps = std::max(attempt, 1) - 1;

	// base * factor^steps, computed in logarithms so that a large attempt
	// number cannot overflow before the cap applies.
	double delay = cap;
	if (factor == 1.0 || std::log(base) + steps * std::log(factor) < std::log(cap))
		delay = std::min(cap, base * std::pow(factor, steps));

	double u = std::isfinite(unit_random) ? std::clamp(unit_random, 0.0, std::nextafter(1.0, 0.0)) : 0.0;
	double jitter = std::isfinite(policy.jitter) ? std::clamp(policy.jitter, 0.0, 1.0) : 0.0;
	delay *= 1.0 - jitter * u;
	return std::max<std::int64_t>(1, static_cast<std::int64_t>(delay));
}

} // namespace concurrency
