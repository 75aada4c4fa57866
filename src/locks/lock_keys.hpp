// How named locks map onto PostgreSQL's advisory lock tags (pure C++).
//
// An advisory lock tag has four fields: field1 is the database OID, field2 and
// field3 are two 32-bit values, field4 a 16-bit "class" that PostgreSQL shows
// as pg_locks.objsubid. PostgreSQL itself uses class 1 for
// pg_advisory_lock(bigint) and class 2 for pg_advisory_lock(int, int); Citus
// reserves 4–15. We use:
//
//   subsystem lock            class 1, field2/field3 = high/low half of the key
//                             (exactly pg_advisory_lock(key), so that code
//                             using the constant key interoperates)
//   resource lock             class = the subsystem's slot (16–65535, assigned
//                             at registration), field2/field3 = high/low half
//                             of the resource (any bigint)
//
// Two resource locks collide only if slot and resource are equal; a resource
// lock never collides with a subsystem lock (class ≥ 16 vs 1) nor with plain
// pg_advisory_* calls (classes 1 and 2).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace concurrency::locks {

inline constexpr std::uint16_t int8_advisory_class = 1;      // pg_advisory_lock(bigint)
inline constexpr std::uint16_t int4_pair_advisory_class = 2; // pg_advisory_lock(int, int)
inline constexpr int min_slot = 16;                          // above PostgreSQL (1, 2) and Citus (4–15)
inline constexpr int max_slot = 65535;                       // field4 is 16 bits wide

// The three fields of an advisory lock tag besides the database.
struct AdvisoryTag {
	std::uint32_t high = 0;  // field2, pg_locks.classid
	std::uint32_t low = 0;   // field3, pg_locks.objid
	std::uint16_t klass = 0; // field4, pg_locks.objsubid

	friend bool operator==(const AdvisoryTag &a, const AdvisoryTag &b) {
		return a.high == b.high && a.low == b.low && a.klass == b.klass;
	}
	friend bool operator!=(const AdvisoryTag &a, const AdvisoryTag &b) { return !(a == b); }
};

// High and low 32-bit halves of a bigint, as PostgreSQL splits it.
constexpr std::uint32_t high_half(std::int64_t v) {
	return static_cast<std::uint32_t>(static_cast<std::uint64_t>(v) >> 32);
}
constexpr std::uint32_t low_half(std::int64_t v) {
	return static_cast<std::uint32_t>(static_cast<std::uint64_t>(v));
}
constexpr std::int64_t join_halves(std::uint32_t high, std::uint32_t low) {
	return static_cast<std::int64_t>((static_cast<std::uint64_t>(high) << 32) | low);
}

constexpr bool valid_slot(std::int64_t slot) {
	return slot >= min_slot && slot <= max_slot;
}

// The tag of the subsystem lock on `key`: identical to pg_advisory_lock(key).
constexpr AdvisoryTag subsystem_tag(std::int64_t key) {
	return AdvisoryTag{high_half(key), low_half(key), int8_advisory_class};
}

// The tag of the lock on `resource` of the subsystem with `slot`. Throws
// std::out_of_range for a slot outside 16–65535.
AdvisoryTag resource_tag(std::int64_t resource, int slot);

// The resource a resource-lock tag stands for (inverse of resource_tag).
constexpr std::int64_t resource_of(const AdvisoryTag &tag) {
	return join_halves(tag.high, tag.low);
}

// A registered subsystem (a row of concurrency.subsystem) as its locks show
// in pg_locks: its subsystem lock is subsystem_tag(key), its resource locks
// carry class = slot.
struct SubsystemKey {
	std::string name;
	std::int64_t key = 0;
	int slot = 0;
};

// What an advisory lock tag is, among the locks of the registered subsystems:
// the subsystem lock of `subsystem` (no resource), the lock on `resource` of
// `subsystem`, or (subsystem null) none of theirs. The one inverse of
// subsystem_tag and resource_tag: the diagnostics and concurrency.held_locks
// use it rather than decode tags themselves.
struct NamedLock {
	const SubsystemKey *subsystem = nullptr; // points into the registry given
	std::optional<std::int64_t> resource;
};
NamedLock named_lock_of(const AdvisoryTag &tag, const std::vector<SubsystemKey> &registry);

// The lowest slot in 16–65535 not in `used` (any order, duplicates and values
// out of range allowed), or nothing when all are taken.
std::optional<int> lowest_free_slot(std::vector<int> used);

// A lock wait timeout given as an interval (months, days, microseconds, as
// PostgreSQL stores it; a month counts 30 days), converted for lock_timeout:
//   - negative: nothing (the caller raises 22023);
//   - zero: 0 (do not wait at all);
//   - otherwise whole milliseconds, rounded up (1 µs waits 1 ms), at most
//     INT32_MAX (lock_timeout is an int of milliseconds, about 24.8 days).
std::optional<std::int64_t> timeout_micros(std::int32_t months, std::int32_t days, std::int64_t micros);
int timeout_ms_for_lock_timeout(std::int64_t micros);

// "850 ms", "3.2 s", "4 min 12 s", "2 h 5 min", "3 d 4 h": a duration for
// humans, in the timeout message (how long a holder has held the lock, and the
// timeout itself).
std::string human_duration(double seconds);

} // namespace concurrency::locks
