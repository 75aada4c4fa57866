#include <cstdint>
#include <optional>

#include <gtest/gtest.h>

#include "queue/claim_cursor.hpp"

using concurrency::queue::ClaimCursor;
using concurrency::queue::ClaimKey;
using concurrency::queue::ScanPolicy;

namespace {
constexpr std::uint32_t fresh = 3;       // horizon lag of a healthy server
constexpr std::uint32_t pinned = 50'000; // someone holds an old snapshot
constexpr std::int64_t ms = 1000;

ClaimKey key(std::int64_t priority, std::int64_t run_at, std::int64_t id) {
	return {-priority, run_at, id};
}
} // namespace

TEST(ClaimKey, OrdersByPriorityThenRunAtThenId) {
	EXPECT_LT(key(10, 500, 9), key(0, 1, 1)); // higher priority first
	EXPECT_LT(key(0, 1, 9), key(0, 2, 1));    // then earlier run_at
	EXPECT_LT(key(0, 1, 1), key(0, 1, 2));    // then lower id
	EXPECT_TRUE(ClaimKey::front().is_front());
	EXPECT_LT(ClaimKey::front(), key(std::numeric_limits<int>::max(), -1, 1));
	// the lowest priority negates without overflow (int4 widened to int8)
	EXPECT_LT(key(0, 0, 0), key(std::numeric_limits<std::int32_t>::min(), 0, 0));
}

TEST(ClaimCursor, FreshHorizonAlwaysScansFromTheFront) {
	ClaimCursor c;
	for (int call = 0; call < 5; ++call) {
		c.begin(call * ms, fresh);
		EXPECT_FALSE(c.resuming());
		EXPECT_EQ(c.wake_floor(), ClaimCursor::from_the_start);
		c.woke(false);
		EXPECT_TRUE(c.ready_floor().is_front());
		EXPECT_FALSE(c.rescan_from_front(0, 1)); // already from the front
		c.finish(key(0, 100 + call, call + 1));
	}
}

TEST(ClaimCursor, PinnedHorizonResumesAfterTheLastClaim) {
	ClaimCursor c;
	// the first call knows nothing yet: from the front
	c.begin(0, pinned);
	EXPECT_TRUE(c.resuming());
	EXPECT_EQ(c.wake_floor(), ClaimCursor::from_the_start);
	c.woke(false);
	EXPECT_TRUE(c.ready_floor().is_front());
	c.finish(key(0, 100, 7));

	// the next one resumes at the last claimed key, and the wake-up scan
	// at the time of the previous one
	c.begin(1 * ms, pinned);
	EXPECT_EQ(c.wake_floor(), 0);
	c.woke(false);
	EXPECT_EQ(c.ready_floor(), key(0, 100, 7));
	EXPECT_FALSE(c.rescan_from_front(1, 1));
	c.finish(key(0, 101, 8));

	c.begin(2 * ms, pinned);
	EXPECT_EQ(c.wake_floor(), 1 * ms);
	c.woke(false);
	EXPECT_EQ(c.ready_floor(), key(0, 101, 8));
	c.finish(std::nullopt);
}

TEST(ClaimCursor, ShortResumedScanRetriesFromTheFront) {
	ClaimCursor c;
	c.begin(0, pinned);
	c.woke(false);
	c.finish(key(0, 100, 7));

	c.begin(1 * ms, pinned);
	c.woke(false);
	EXPECT_FALSE(c.ready_floor().is_front());
	EXPECT_TRUE(c.rescan_from_front(3, 10)); // asked for 10, got 3
	EXPECT_TRUE(c.ready_floor().is_front());
	EXPECT_FALSE(c.rescan_from_front(5, 10)); // a second time: no
	c.finish(key(0, 50, 3));

	// a scan from the front counts as the periodic one
	c.begin(1 * ms + ScanPolicy{}.rescan_interval_us - 1, pinned);
	c.woke(false);
	EXPECT_EQ(c.ready_floor(), key(0, 50, 3));
}

TEST(ClaimCursor, RescansFromTheFrontAtLeastEveryInterval) {
	ScanPolicy policy;
	policy.rescan_interval_us = 100 * ms;
	ClaimCursor c(policy);
	c.begin(0, pinned);
	c.woke(false);
	c.finish(key(0, 1, 1));

	c.begin(99 * ms, pinned);
	c.woke(false);
	EXPECT_FALSE(c.ready_floor().is_front());
	EXPECT_NE(c.wake_floor(), ClaimCursor::from_the_start);
	c.finish(key(0, 2, 2));

	c.begin(100 * ms, pinned);
	EXPECT_EQ(c.wake_floor(), ClaimCursor::from_the_start);
	c.woke(false);
	EXPECT_TRUE(c.ready_floor().is_front());
	c.finish(key(0, 3, 3));

	// a clock that went backwards forces a full scan too
	c.begin(50 * ms, pinned);
	EXPECT_EQ(c.wake_floor(), ClaimCursor::from_the_start);
	c.woke(false);
	EXPECT_TRUE(c.ready_floor().is_front());
}

TEST(ClaimCursor, TasksMadeReadyAgainAreLookedForFromTheFront) {
	ClaimCursor c;
	c.begin(0, pinned);
	c.woke(false);
	c.finish(key(0, 100, 7));

	c.begin(1 * ms, pinned);
	c.woke(true); // an expired lease went back to ready, with its old key
	EXPECT_TRUE(c.ready_floor().is_front());
}

TEST(ClaimCursor, DearFrontResumesUnderAFreshHorizon) {
	ClaimCursor c;
	const ScanPolicy policy;
	// a dequeue from the front that read few buffers: the next starts there too
	c.begin(0, fresh);
	c.woke(false);
	c.cost(policy.costly_front_buffers + policy.buffers_per_task, 1);
	c.finish(key(0, 100, 7));
	EXPECT_FALSE(c.costly_front());
	c.begin(1 * ms, fresh);
	EXPECT_FALSE(c.resuming());
	c.woke(false);
	EXPECT_TRUE(c.ready_floor().is_front());
	// one that read more than the allowance for its tasks: a backlog of dead
	// index entries at the front; the next resumes after the last claim
	c.cost(policy.costly_front_buffers + 2 * policy.buffers_per_task + 1, 2);
	c.finish(key(0, 101, 9));
	EXPECT_TRUE(c.costly_front());
	c.begin(2 * ms, fresh);
	EXPECT_TRUE(c.resuming());
	c.woke(false);
	EXPECT_EQ(c.ready_floor(), key(0, 101, 9));
	// a resumed dequeue is cheap, and says nothing about the front
	c.cost(3, 1);
	c.finish(key(0, 102, 10));
	EXPECT_TRUE(c.costly_front());
	// the rescan from the front (at least every interval) measures it again:
	// found cheap (VACUUM removed the entries), claims start there again
	c.begin(2 * ms + policy.rescan_interval_us, fresh);
	EXPECT_TRUE(c.resuming());
	c.woke(false);
	EXPECT_TRUE(c.ready_floor().is_front());
	c.cost(10, 1);
	c.finish(key(0, 103, 11));
	EXPECT_FALSE(c.costly_front());
	c.begin(3 * ms + policy.rescan_interval_us, fresh);
	EXPECT_FALSE(c.resuming());
}

TEST(ClaimCursor, DearFrontIsMeasuredByAShortResumedScanFromTheFront) {
	ClaimCursor c;
	c.begin(0, fresh);
	c.woke(false);
	c.cost(1000, 1);
	c.finish(key(0, 100, 7));
	c.begin(1 * ms, fresh);
	c.woke(false);
	EXPECT_FALSE(c.ready_floor().is_front());
	// the resumed scan found nothing: from the front for the rest, which
	// measures the front (here cheap: the backlog is gone)
	EXPECT_TRUE(c.rescan_from_front(0, 1));
	c.cost(9, 1);
	c.finish(key(0, 50, 3));
	EXPECT_FALSE(c.costly_front());
}

TEST(ClaimCursor, ThresholdIsConfigurable) {
	ScanPolicy policy;
	policy.pinned_horizon_xids = 10;
	ClaimCursor c(policy);
	c.begin(0, 10);
	EXPECT_FALSE(c.resuming());
	c.begin(0, 11);
	EXPECT_TRUE(c.resuming());
}

TEST(HorizonSampler, SamplesAtMostOncePerInterval) {
	concurrency::queue::HorizonSampler sampler(100 * ms);
	int samples = 0;
	std::uint32_t value = fresh;
	auto sample = [&] {
		++samples;
		return value;
	};
	EXPECT_EQ(sampler.lag(0, sample), fresh);
	value = pinned;
	EXPECT_EQ(sampler.lag(50 * ms, sample), fresh); // the old sample, not read again
	EXPECT_EQ(samples, 1);
	EXPECT_EQ(sampler.lag(100 * ms, sample), pinned); // the interval has passed
	EXPECT_EQ(samples, 2);
	EXPECT_EQ(sampler.lag(90 * ms, sample), pinned); // clock went backwards: sampled again
	EXPECT_EQ(samples, 3);
}
