// The pure rules of run_transaction and run_ddl (src/transactions/policy.hpp).
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "transactions/policy.hpp"

using namespace concurrency;
using namespace concurrency::transactions;

namespace {
constexpr std::int64_t ms = 1000;
constexpr std::int64_t s = 1'000'000;

Blocker blocker(int pid, const char *state, std::optional<double> age = std::nullopt) {
	Blocker b;
	b.pid = pid;
	b.application = "app";
	if (state)
		b.state = state;
	b.xact_age_s = age;
	b.query = "SELECT 1";
	b.relation = "\"public\".\"t\"";
	b.mode = "AccessShareLock";
	return b;
}
} // namespace

TEST(Isolation, AcceptsPostgresLevelsInAnySpelling) {
	EXPECT_EQ(isolation_setting("read committed"), "read committed");
	EXPECT_EQ(isolation_setting("SERIALIZABLE"), "serializable");
	EXPECT_EQ(isolation_setting("  Repeatable \t READ "), "repeatable read");
	EXPECT_EQ(isolation_setting("read uncommitted"), "read uncommitted");
}

TEST(Isolation, RefusesAnythingElse) {
	for (const char *bad :
	     {"", " ", "snapshot", "readcommitted", "read committed;", "serializable x", "read\0x"})
		EXPECT_FALSE(isolation_setting(bad)) << bad;
}

TEST(Retryable, TransactionRetriesSerializationFailuresAndDeadlocksOnly) {
	EXPECT_TRUE(transaction_retryable("40001"));
	EXPECT_TRUE(transaction_retryable("40P01"));
	for (const char *code : {"55P03", "23505", "40002", "40003", "57014", "XX000", ""})
		EXPECT_FALSE(transaction_retryable(code)) << code;
}

TEST(Retryable, DdlRetriesLockTimeoutsAndDeadlocksOnly) {
	EXPECT_TRUE(ddl_retryable("55P03"));
	EXPECT_TRUE(ddl_retryable("40P01"));
	for (const char *code : {"40001", "42P01", "42701", "57014", "25001"})
		EXPECT_FALSE(ddl_retryable(code)) << code;
}

TEST(Backoff, TransactionWaitsGrowFromTenMillisecondsToOneSecond) {
	BackoffPolicy p = transaction_backoff();
	EXPECT_EQ(backoff_delay_us(1, 0.0, p), 10 * ms);
	EXPECT_EQ(backoff_delay_us(2, 0.0, p), 20 * ms);
	EXPECT_EQ(backoff_delay_us(8, 0.0, p), 1 * s);
	EXPECT_EQ(backoff_delay_us(1000, 0.0, p), 1 * s);
	// jitter: at most halved, never more than the schedule
	for (double u : {0.0, 0.25, 0.5, 0.999}) {
		std::int64_t d = backoff_delay_us(3, u, p);
		EXPECT_LE(d, 40 * ms);
		EXPECT_GE(d, 20 * ms);
	}
}

TEST(Backoff, DdlWaitsAreCappedByLockTimeout) {
	EXPECT_EQ(backoff_delay_us(1, 0.0, ddl_backoff(1 * s)), 50 * ms);
	EXPECT_EQ(backoff_delay_us(10, 0.0, ddl_backoff(1 * s)), 1 * s);
	EXPECT_EQ(backoff_delay_us(10, 0.0, ddl_backoff(200 * ms)), 200 * ms);
	EXPECT_EQ(backoff_delay_us(10, 0.0, ddl_backoff(1 * ms)), 50 * ms); // floor
	EXPECT_EQ(backoff_delay_us(10, 0.0, ddl_backoff(60 * s)), 1 * s);   // ceiling
}

TEST(Backoff, WaitNeverPassesTheDeadline) {
	EXPECT_EQ(wait_before_next(500 * ms, 0, 10 * s), 500 * ms);
	EXPECT_EQ(wait_before_next(500 * ms, 9800 * ms, 10 * s), 200 * ms);
	EXPECT_EQ(wait_before_next(500 * ms, 11 * s, 10 * s), 0);
	EXPECT_EQ(wait_before_next(-5, 0, 10 * s), 0);
}

TEST(Approach, QueuesWhenTheWayIsClear) {
	EXPECT_EQ(next_approach(1, false, true), Approach::queue);
	EXPECT_EQ(next_approach(1, false, false), Approach::queue);
}

TEST(Approach, WaitsWithoutQueueingBehindALongHolder) {
	for (int losses : {1, 2, 3, 10, 1000})
		EXPECT_EQ(next_approach(losses, true, false), Approach::conditional) << losses;
}

TEST(Approach, QueuesAfterLosingRepeatedlyToShortHolders) {
	EXPECT_EQ(next_approach(1, true, true), Approach::conditional);
	EXPECT_EQ(next_approach(losses_before_queueing - 1, true, true), Approach::conditional);
	EXPECT_EQ(next_approach(losses_before_queueing, true, true), Approach::queue);
}

TEST(ShortLived, IdleInTransactionIsNeverShortLived) {
	EXPECT_FALSE(short_lived(blocker(1, "idle in transaction", 0.001), 0, 1 * s));
	EXPECT_FALSE(short_lived(blocker(1, "idle in transaction (aborted)", 0.001), 0, 1 * s));
}

TEST(ShortLived, ByTransactionAgeOrTimeSeen) {
	EXPECT_TRUE(short_lived(blocker(1, "active", 0.2), 0, 1 * s));
	EXPECT_FALSE(short_lived(blocker(1, "active", 1.5), 0, 1 * s));
	EXPECT_FALSE(
	    short_lived(blocker(1, "active", 0.2), 2 * s, 1 * s)); // seen in the way longer than its age says
	EXPECT_TRUE(short_lived(blocker(1, nullptr), 100 * ms, 1 * s)); // not visible: by how long we saw it
	EXPECT_FALSE(short_lived(blocker(1, nullptr), 1 * s, 1 * s));
}

TEST(Signal, TerminatesIdleTransactionsAndCancelsActiveQueries) {
	EXPECT_EQ(signal_for(blocker(1, "idle in transaction")), Signal::terminate);
	EXPECT_EQ(signal_for(blocker(1, "idle in transaction (aborted)")), Signal::terminate);
	EXPECT_EQ(signal_for(blocker(1, "active")), Signal::cancel);
	EXPECT_EQ(signal_for(blocker(1, nullptr)), Signal::terminate);
}

TEST(Describe, NamesEverythingPgStatActivityShows) {
	Blocker b = blocker(4711, "idle in transaction", 8.2);
	b.application = "psql";
	EXPECT_EQ(describe_blocker(b),
	          "pid 4711 (application \"psql\", state \"idle in transaction\", transaction open "
	          "for 8.2 s, query \"SELECT 1\") holds AccessShareLock on \"public\".\"t\"");
	Blocker hidden = blocker(12, nullptr);
	hidden.application = "";
	hidden.granted = false;
	EXPECT_EQ(describe_blocker(hidden),
	          "pid 12 (no application name, state not visible to you) waits ahead for "
	          "AccessShareLock on \"public\".\"t\"");
}

TEST(Describe, LongQueriesAreCutOnOneLine) {
	Blocker b = blocker(1, "active", 1.0);
	b.query = "SELECT\n" + std::string(300, 'x') + "ñ";
	std::string text = describe_blocker(b);
	EXPECT_EQ(text.find('\n'), std::string::npos);
	EXPECT_NE(text.find("…"), std::string::npos);
	EXPECT_LT(text.size(), 300u);
}

TEST(BlockerLog, ReportsEachBlockerAtMostOncePerInterval) {
	BlockerLog log(5 * s);
	std::vector<Blocker> look{blocker(1, "idle in transaction", 1.0), blocker(2, "active", 0.1)};
	EXPECT_EQ(log.observe(look, 0), (std::vector<std::size_t>{0, 1}));
	EXPECT_TRUE(log.observe(look, 1 * s).empty());
	EXPECT_TRUE(log.observe(look, 4 * s).empty());
	EXPECT_EQ(log.observe(look, 5 * s), (std::vector<std::size_t>{0, 1}));
	// a newcomer is reported at once, the others stay quiet
	look.push_back(blocker(3, "active", 0.1));
	EXPECT_EQ(log.observe(look, 6 * s), (std::vector<std::size_t>{2}));
}

TEST(BlockerLog, CountsUnbrokenTimeInTheWay) {
	BlockerLog log(5 * s);
	log.observe({blocker(1, "active", 0.0)}, 0);
	log.observe({blocker(1, "active", 0.0)}, 2 * s);
	EXPECT_EQ(log.seen_for_us(1), 2 * s);
	log.observe({blocker(2, "active", 0.0)}, 3 * s); // 1 gone
	EXPECT_EQ(log.seen_for_us(1), 0);
	log.observe({blocker(1, "active", 0.0)}, 4 * s); // back: starts again
	EXPECT_EQ(log.seen_for_us(1), 0);
	EXPECT_EQ(log.seen_for_us(99), 0);
}

TEST(BlockerLog, ShortLivedLookAndLongestList) {
	BlockerLog log(5 * s);
	EXPECT_FALSE(log.anybody_in_last_look());
	EXPECT_TRUE(log.all_short_lived(1 * s));
	log.observe({blocker(1, "active", 0.1), blocker(2, "active", 0.1)}, 0);
	EXPECT_TRUE(log.anybody_in_last_look());
	EXPECT_TRUE(log.all_short_lived(1 * s));
	log.observe({blocker(1, "active", 0.1), blocker(2, "idle in transaction", 0.1)}, 100 * ms);
	EXPECT_FALSE(log.all_short_lived(1 * s));
	log.observe({blocker(2, "idle in transaction", 3.0)}, 3 * s);
	std::string longest = log.longest(1);
	EXPECT_EQ(longest.rfind("pid 2 ", 0), 0u) << longest;
	EXPECT_NE(longest.find("in the way for 3 s"), std::string::npos) << longest;
	EXPECT_NE(longest.find("and 1 more"), std::string::npos) << longest;
}

TEST(Messages, GiveUpAndSuccess) {
	EXPECT_EQ(give_up_detail(1, 0.5, ""), "1 attempt, 500 ms waited.");
	EXPECT_EQ(give_up_detail(42, 600, "pid 1 (…)"),
	          "42 attempts, 10 min waited. In the way longest: pid 1 (…).");
	EXPECT_EQ(success_notice(3, 2.5), "run_ddl: done in 3 attempts, 2.5 s waited");
}
