#include <cstdint>
#include <limits>

#include <gtest/gtest.h>

#include "common/backoff.hpp"

using concurrency::backoff_delay_us;
using concurrency::BackoffPolicy;

namespace {
constexpr std::int64_t second = 1'000'000;
}

TEST(Backoff, DoublesFromOneSecondWithoutJitter) {
	// unit_random 0 scales by 1: the undisturbed schedule
	EXPECT_EQ(backoff_delay_us(1, 0.0), 1 * second);
	EXPECT_EQ(backoff_delay_us(2, 0.0), 2 * second);
	EXPECT_EQ(backoff_delay_us(3, 0.0), 4 * second);
	EXPECT_EQ(backoff_delay_us(10, 0.0), 512 * second);
}

TEST(Backoff, IsCappedAtOneHour) {
	EXPECT_EQ(backoff_delay_us(13, 0.0), 3600 * second); // 4096 s > cap
	EXPECT_EQ(backoff_delay_us(1000, 0.0), 3600 * second);
	EXPECT_EQ(backoff_delay_us(std::numeric_limits<int>::max(), 0.0), 3600 * second);
}

TEST(Backoff, JitterStaysWithinTheUpperHalf) {
	for (int attempt : {1, 2, 5, 20}) {
		std::int64_t full = backoff_delay_us(attempt, 0.0);
		for (double u : {0.0, 0.25, 0.5, 0.75, 0.999999}) {
			std::int64_t d = backoff_delay_us(attempt, u);
			EXPECT_LE(d, full) << attempt << " " << u;
			EXPECT_GE(d, full / 2) << attempt << " " << u;
		}
	}
	// more randomness, less delay: two workers failing together spread out
	EXPECT_GT(backoff_delay_us(4, 0.1), backoff_delay_us(4, 0.9));
}

TEST(Backoff, ToleratesOutOfRangeInputs) {
	// attempts below 1 count as the first
	EXPECT_EQ(backoff_delay_us(0, 0.0), 1 * second);
	EXPECT_EQ(backoff_delay_us(-5, 0.0), 1 * second);
	// random values outside [0, 1) are clamped, NaN counts as 0
	EXPECT_EQ(backoff_delay_us(3, -1.0), 4 * second);
	EXPECT_GE(backoff_delay_us(3, 7.0), 2 * second); // clamped just below 1
	EXPECT_EQ(backoff_delay_us(3, std::numeric_limits<double>::quiet_NaN()), 4 * second);
}

TEST(Backoff, PolicyIsHonouredAndSanitised) {
	BackoffPolicy linear{5 * second, 1.0, 60 * second, 0.0};
	EXPECT_EQ(backoff_delay_us(1, 0.9, linear), 5 * second);
	EXPECT_EQ(backoff_delay_us(50, 0.9, linear), 5 * second);

	BackoffPolicy tripling{100'000, 3.0, 10 * second, 0.0};
	EXPECT_EQ(backoff_delay_us(3, 0.0, tripling), 900'000);
	EXPECT_EQ(backoff_delay_us(8, 0.0, tripling), 10 * second);

	// nonsense policies still give a positive, capped delay
	BackoffPolicy broken{-7, std::numeric_limits<double>::infinity(), 0, 5.0};
	EXPECT_GE(backoff_delay_us(3, 0.5, broken), 1);
	BackoffPolicy shrinking{10 * second, 0.5, 60 * second, 0.0};
	EXPECT_EQ(backoff_delay_us(4, 0.0, shrinking), 10 * second); // factor < 1 is treated as 1
	BackoffPolicy full_jitter{second, 2.0, 60 * second, 1.0};
	EXPECT_GE(backoff_delay_us(1, 0.999999, full_jitter), 1);
}
