#include "locks/lock_keys.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>
#include "common/pure.hpp" // last: checks that no PostgreSQL header came before

namespace concurrency::locks {

AdvisoryTag resource_tag(std::int64_t resource, int slot) {
	if (!valid_slot(slot))
		throw std::out_of_range(fmt::format("slot {} is outside {}–{}", slot, min_slot, max_slot));
	return AdvisoryTag{high_half(resource), low_half(resource), static_cast<std::uint16_t>(slot)};
}

std::optional<int> lowest_free_slot(std::vector<int> used) {
	std::sort(used.begin(), used.end());
	int candidate = min_slot;
	for (int slot : used) {
		if (slot < candidate)
			continue; // below the range, or a duplicate of one already passed
		if (slot > candidate)
			break; // a gap: candidate is free
		++candidate;
	}
	if (candidate > max_slot)
		return std::nullopt;
	return candidate;
}

std::optional<std::int64_t> timeout_micros(std::int32_t months, std::int32_t days, std::int64_t micros) {
	constexpr std::int64_t usecs_per_day = 86400LL * 1000000LL;
	// Months and days fit easily in a long double; the sum may not fit int64.
	long double total = static_cast<long double>(months) * 30 * usecs_per_day +
	                    static_cast<long double>(days) * usecs_per_day + static_cast<long double>(micros);
	if (total < 0)
		return std::nullopt;
	if (total >= static_cast<long double>(std::numeric_limits<std::int64_t>::max()))
		return std::numeric_limits<std::int64_t>::max();
	return static_cast<std::int64_t>(total);
}

int timeout_ms_for_lock_timeout(std::int64_t micros) {
	if (micros <= 0)
		return 0;
	std::int64_t ms = micros / 1000 + (micros % 1000 != 0 ? 1 : 0);
	return static_cast<int>(std::min<std::int64_t>(ms, std::numeric_limits<std::int32_t>::max()));
}

std::string human_duration(double seconds) {
	if (!(seconds > 0)) // negative, zero, NaN
		seconds = 0;
	if (seconds < 0.001)
		return seconds == 0 ? "0 ms" : "less than 1 ms";
	if (seconds < 1)
		return fmt::format("{} ms", static_cast<long long>(seconds * 1000)); // truncated: never "1000 ms"
	if (seconds < 60) {
		double tenths = std::floor(seconds * 10) / 10;
		return tenths == std::floor(tenths) ? fmt::format("{} s", static_cast<long long>(tenths))
		                                    : fmt::format("{:.1f} s", tenths);
	}
	auto whole = static_cast<long long>(std::min<double>(seconds, 1e15));
	if (whole < 3600)
		return whole % 60 ? fmt::format("{} min {} s", whole / 60, whole % 60)
		                  : fmt::format("{} min", whole / 60);
	if (whole < 86400)
		return (whole % 3600) / 60 ? fmt::format("{} h {} min", whole / 3600, (whole % 3600) / 60)
		                           : fmt::format("{} h", whole / 3600);
	return (whole % 86400) / 3600 ? fmt::format("{} d {} h", whole / 86400, (whole % 86400) / 3600)
	                              : fmt::format("{} d", whole / 86400);
}

NamedLock named_lock_of(const AdvisoryTag &tag, const std::vector<SubsystemKey> &registry) {
	NamedLock found;
	if (tag.klass == int8_advisory_class) {
		for (const SubsystemKey &s : registry)
			if (subsystem_tag(s.key) == tag)
				found.subsystem = &s;
	} else if (valid_slot(tag.klass)) {
		for (const SubsystemKey &s : registry)
			if (s.slot == tag.klass) {
				found.subsystem = &s;
				found.resource = resource_of(tag);
			}
	}
	return found;
}

} // namespace concurrency::locks
