// Unit tests of the named-lock encoding (locks/lock_keys) and texts
// (locks/lock_messages), and of the name rules as subsystems use them.
#include <cstdint>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "locks/lock_keys.hpp"
#include "locks/lock_messages.hpp"
#include "common/names.hpp"

using namespace concurrency::locks;

namespace {
constexpr std::int64_t int64_min = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t int64_max = std::numeric_limits<std::int64_t>::max();

const std::vector<std::int64_t> interesting_values = {0,
                                                      1,
                                                      -1,
                                                      2,
                                                      -2,
                                                      42,
                                                      -42,
                                                      4294967295LL,
                                                      4294967296LL,
                                                      -4294967296LL,
                                                      -4294967295LL,
                                                      2147483647LL,
                                                      2147483648LL,
                                                      -2147483648LL,
                                                      int64_min,
                                                      int64_max,
                                                      int64_min + 1,
                                                      int64_max - 1,
                                                      0x0123456789ABCDEFLL};
} // namespace

// PostgreSQL's SET_LOCKTAG_INT64: field2 = (uint32)(key >> 32), field3 = (uint32)key, field4 = 1.
TEST(SubsystemTag, IsTheInt8AdvisoryLockOnTheKey) {
	EXPECT_EQ(subsystem_tag(0), (AdvisoryTag{0, 0, 1}));
	EXPECT_EQ(subsystem_tag(1001), (AdvisoryTag{0, 1001, 1}));
	EXPECT_EQ(subsystem_tag(-1), (AdvisoryTag{0xFFFFFFFFu, 0xFFFFFFFFu, 1}));
	EXPECT_EQ(subsystem_tag(-8002), (AdvisoryTag{0xFFFFFFFFu, 4294959294u, 1}));
	EXPECT_EQ(subsystem_tag(int64_min), (AdvisoryTag{0x80000000u, 0, 1}));
	EXPECT_EQ(subsystem_tag(int64_max), (AdvisoryTag{0x7FFFFFFFu, 0xFFFFFFFFu, 1}));
	EXPECT_EQ(subsystem_tag(4294967296LL), (AdvisoryTag{1, 0, 1}));
}

TEST(ResourceTag, SplitsTheResourceAndCarriesTheSlot) {
	EXPECT_EQ(resource_tag(42, 16), (AdvisoryTag{0, 42, 16}));
	EXPECT_EQ(resource_tag(-1, 17), (AdvisoryTag{0xFFFFFFFFu, 0xFFFFFFFFu, 17}));
	EXPECT_EQ(resource_tag(int64_min, 65535), (AdvisoryTag{0x80000000u, 0, 65535}));
	EXPECT_EQ(resource_tag(-4294967296LL, 40000), (AdvisoryTag{0xFFFFFFFFu, 0, 40000}));
}

TEST(ResourceTag, RoundTripsEveryInterestingValue) {
	for (std::int64_t r : interesting_values)
		for (int slot : {16, 17, 32767, 32768, 65535})
			EXPECT_EQ(resource_of(resource_tag(r, slot)), r) << r << " slot " << slot;
}

TEST(ResourceTag, RefusesSlotsOfPostgresAndCitusAndOutOfRange) {
	for (int slot : {-1, 0, 1, 2, 3, 4, 15, 65536, 1 << 20})
		EXPECT_THROW(resource_tag(1, slot), std::out_of_range) << slot;
	for (int slot : {16, 65535})
		EXPECT_NO_THROW(resource_tag(1, slot));
	EXPECT_FALSE(valid_slot(15));
	EXPECT_TRUE(valid_slot(16));
	EXPECT_TRUE(valid_slot(65535));
	EXPECT_FALSE(valid_slot(65536));
}

// The promise: a resource lock never collides with a subsystem lock, with
// another subsystem's resource locks, or with plain pg_advisory_* calls
// (classes 1 and 2); Citus's classes 4–15 are never used.
TEST(ResourceTag, NeverCollides) {
	std::set<std::tuple<std::uint32_t, std::uint32_t, std::uint16_t>> seen;
	std::size_t made = 0;
	for (std::int64_t v : interesting_values) {
		AdvisoryTag s = subsystem_tag(v);
		seen.emplace(s.high, s.low, s.klass);
		++made;
		for (int slot : {16, 17, 100, 32767, 32768, 65535}) {
			AdvisoryTag r = resource_tag(v, slot);
			EXPECT_NE(r, s);
			EXPECT_NE(r.klass, int8_advisory_class);
			EXPECT_NE(r.klass, int4_pair_advisory_class);
			EXPECT_FALSE(r.klass >= 3 && r.klass <= 15);
			seen.emplace(r.high, r.low, r.klass);
			++made;
		}
	}
	EXPECT_EQ(seen.size(), made); // all distinct
}

TEST(Halves, JoinInvertsSplit) {
	for (std::int64_t v : interesting_values)
		EXPECT_EQ(join_halves(high_half(v), low_half(v)), v) << v;
	EXPECT_EQ(high_half(-1), 0xFFFFFFFFu);
	EXPECT_EQ(low_half(int64_min), 0u);
}

TEST(LowestFreeSlot, FindsTheFirstGap) {
	EXPECT_EQ(lowest_free_slot({}), 16);
	EXPECT_EQ(lowest_free_slot({16}), 17);
	EXPECT_EQ(lowest_free_slot({17}), 16);
	EXPECT_EQ(lowest_free_slot({16, 17, 19}), 18);
	EXPECT_EQ(lowest_free_slot({19, 16, 17}), 18);          // any order
	EXPECT_EQ(lowest_free_slot({16, 16, 17, 17}), 18);      // duplicates
	EXPECT_EQ(lowest_free_slot({1, 2, 15, 16, 70000}), 17); // values outside the range ignored
}

TEST(LowestFreeSlot, NothingWhenAllAreTaken) {
	std::vector<int> all;
	for (int s = min_slot; s <= max_slot; ++s)
		all.push_back(s);
	EXPECT_FALSE(lowest_free_slot(all).has_value());
	all.pop_back();
	EXPECT_EQ(lowest_free_slot(all), max_slot); // only the last one free
	all.erase(all.begin() + 100);
	EXPECT_EQ(lowest_free_slot(all), min_slot + 100);
}

TEST(Timeout, IntervalToMicroseconds) {
	EXPECT_EQ(timeout_micros(0, 0, 0), 0);
	EXPECT_EQ(timeout_micros(0, 0, 200000), 200000);
	EXPECT_EQ(timeout_micros(0, 1, 0), 86400LL * 1000000);
	EXPECT_EQ(timeout_micros(1, -29, 0), 86400LL * 1000000); // a month counts 30 days
	EXPECT_EQ(timeout_micros(0, 1, -1), 86400LL * 1000000 - 1);
	EXPECT_FALSE(timeout_micros(0, 0, -1));
	EXPECT_FALSE(timeout_micros(-1, 0, 0));
	EXPECT_FALSE(timeout_micros(0, -1, 86399LL * 1000000));
	EXPECT_FALSE(timeout_micros(std::numeric_limits<std::int32_t>::min(), 0, 0));
	// no overflow: clamped
	EXPECT_EQ(timeout_micros(std::numeric_limits<std::int32_t>::max(),
	                         std::numeric_limits<std::int32_t>::max(), int64_max),
	          int64_max);
}

TEST(Timeout, MillisecondsForLockTimeout) {
	EXPECT_EQ(timeout_ms_for_lock_timeout(0), 0);
	EXPECT_EQ(timeout_ms_for_lock_timeout(-5), 0);
	EXPECT_EQ(timeout_ms_for_lock_timeout(1), 1); // rounded up: never "no timeout"
	EXPECT_EQ(timeout_ms_for_lock_timeout(999), 1);
	EXPECT_EQ(timeout_ms_for_lock_timeout(1000), 1);
	EXPECT_EQ(timeout_ms_for_lock_timeout(1001), 2);
	EXPECT_EQ(timeout_ms_for_lock_timeout(10000000), 10000);
	EXPECT_EQ(timeout_ms_for_lock_timeout(int64_max), std::numeric_limits<std::int32_t>::max());
}

TEST(HumanDuration, ReadableUnits) {
	EXPECT_EQ(human_duration(0), "0 ms");
	EXPECT_EQ(human_duration(-3), "0 ms");
	EXPECT_EQ(human_duration(0.0004), "less than 1 ms");
	EXPECT_EQ(human_duration(0.010), "10 ms");
	EXPECT_EQ(human_duration(0.9999), "999 ms");
	EXPECT_EQ(human_duration(1), "1 s");
	EXPECT_EQ(human_duration(3.21), "3.2 s");
	EXPECT_EQ(human_duration(59.99), "59.9 s");
	EXPECT_EQ(human_duration(60), "1 min");
	EXPECT_EQ(human_duration(252), "4 min 12 s");
	EXPECT_EQ(human_duration(3600), "1 h");
	EXPECT_EQ(human_duration(7500), "2 h 5 min");
	EXPECT_EQ(human_duration(86400 * 3 + 3600 * 4 + 5), "3 d 4 h");
	EXPECT_EQ(human_duration(1e300), human_duration(1e15)); // no overflow
}

TEST(LockMessages, Description) {
	EXPECT_EQ(lock_description("relay", std::nullopt, false), "lock \"relay\"");
	EXPECT_EQ(lock_description("booking", -42, true), "shared lock \"booking\" on resource -42");
}

TEST(LockMessages, HolderInTransaction) {
	LockHolder h{4242, "relay", std::string("idle in transaction"), true, 3.2, true, "ExclusiveLock"};
	EXPECT_EQ(describe_holders({h}, 1),
	          "Held by pid 4242 (application \"relay\", state \"idle in transaction\"), for 3.2 s since its "
	          "transaction started.");
	EXPECT_FALSE(held_by_idle_session({h}));
}

TEST(LockMessages, IdleHolderIsASessionLock) {
	LockHolder h{7, "", std::string("idle"), false, 300, true, "ExclusiveLock"};
	std::string d = describe_holders({h}, 1);
	EXPECT_NE(d.find("pid 7 (no application name, state \"idle\")"), std::string::npos) << d;
	EXPECT_NE(d.find("for 5 min since its last state change"), std::string::npos) << d;
	EXPECT_NE(d.find("session-level"), std::string::npos) << d;
	EXPECT_TRUE(held_by_idle_session({h}));
}

TEST(LockMessages, InvisibleStatePreparedAndMany) {
	LockHolder hidden{9, "app", std::nullopt, false, std::nullopt, true, "ShareLock"};
	LockHolder prepared{std::nullopt, "", std::nullopt, false, std::nullopt, true, "ShareLock"};
	std::string d = describe_holders({hidden, prepared}, 7);
	EXPECT_EQ(d, "Held by pid 9 (application \"app\", state not visible to you); a prepared transaction (see "
	             "pg_prepared_xacts); and 5 more.");
	EXPECT_FALSE(held_by_idle_session({hidden, prepared}));
}

TEST(LockMessages, QueuedAheadAndNobody) {
	LockHolder waiter{11, "w", std::string("active"), true, 1.5, false, "ExclusiveLock"};
	std::string d = describe_holders({waiter}, 1);
	EXPECT_EQ(d.rfind("Not held in a conflicting mode, but queued ahead of this request: pid 11", 0), 0u)
	    << d;
	EXPECT_NE(d.find("waiting for ExclusiveLock"), std::string::npos) << d;
	EXPECT_FALSE(held_by_idle_session({waiter})); // a waiter holds nothing
	EXPECT_EQ(describe_holders({}, 0), "No session holds it any more.");
}

// Subsystem names: 1–63 bytes, counted in bytes, no whitespace or control
// characters; everything else is just a name.
TEST(SubsystemNames, Rules) {
	using concurrency::max_subsystem_name_bytes;
	using concurrency::name_problem;
	EXPECT_EQ(max_subsystem_name_bytes, 63u);
	EXPECT_FALSE(name_problem("outbox_relay", max_subsystem_name_bytes));
	EXPECT_FALSE(name_problem("billing.nightly-report/v2", max_subsystem_name_bytes));
	EXPECT_FALSE(name_problem("t10_x\";DROP/**/TABLE/**/concurrency.subsystem;--", max_subsystem_name_bytes));
	std::string e_acute = "\xc3\xa9"; // é, two bytes
	std::string name62;
	for (int i = 0; i < 31; ++i)
		name62 += e_acute;
	EXPECT_FALSE(name_problem(name62 + "x", max_subsystem_name_bytes));    // 63 bytes
	EXPECT_TRUE(name_problem(name62 + e_acute, max_subsystem_name_bytes)); // 64 bytes, 32 characters
	EXPECT_TRUE(name_problem("", max_subsystem_name_bytes));
	EXPECT_TRUE(name_problem("two words", max_subsystem_name_bytes));
	EXPECT_TRUE(name_problem("tab\there", max_subsystem_name_bytes));
	EXPECT_TRUE(name_problem(std::string("nul\0byte", 8), max_subsystem_name_bytes));
	EXPECT_TRUE(name_problem("nbsp\xc2\xa0x", max_subsystem_name_bytes));
}
