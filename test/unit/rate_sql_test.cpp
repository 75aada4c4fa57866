#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sql_checks.hpp"

#include "common/names.hpp"
#include "queue/flow/rate_sql.hpp"

using concurrency::max_queue_name_bytes;
using concurrency::queue::rate_table_name;
using concurrency::queue::RateSql;

namespace {
std::vector<std::string> statements(const RateSql &sql) {
	return {sql.resize(), sql.take(), sql.give_back(), sql.oldest_use()};
}
} // namespace

TEST(RateSql, SideTableFitsAName) {
	std::string longest(max_queue_name_bytes, 'x');
	EXPECT_LE(concurrency::queue::derived_name(concurrency::queue::QueueTable::rate, longest,
	                                           concurrency::queue::Role::pkey)
	              .size(),
	          63u);
	EXPECT_EQ(rate_table_name("jobs"), "r_jobs");
}

TEST(RateSql, HostileNameStaysInsideItsQuotes) {
	const std::string hostile = "x\";DROP/**/TABLE/**/t;--";
	RateSql sql(hostile);
	EXPECT_NE(sql.create_table(concurrency::queue::Naming::role_first)
	              .find("CREATE TABLE concurrency.\"r_x\"\";DROP/**/TABLE/**/t;--\""),
	          std::string::npos)
	    << sql.create_table(concurrency::queue::Naming::role_first);
	for (const std::string &statement : statements(sql)) {
		std::size_t quotes = 0;
		for (char c : statement)
			quotes += c == '"';
		EXPECT_EQ(quotes % 2, 0u) << statement;
	}
	EXPECT_EQ(RateSql("a").drop_table(), "DROP TABLE IF EXISTS concurrency.\"r_a\"");
	EXPECT_EQ(RateSql("a").alter_owner("o\"x"), "ALTER TABLE concurrency.\"r_a\" OWNER TO \"o\"\"x\"");
}

TEST(RateSql, SlotsAreTakenWithoutWaitingOldestFirst) {
	RateSql sql("jobs");
	std::string take = sql.take();
	EXPECT_NE(take.find("FOR UPDATE SKIP LOCKED"), std::string::npos) << take;
	// free: last used at or before now - rate_period ($1); the previous time
	// comes back for give_back
	EXPECT_NE(take.find("used_at OPERATOR(pg_catalog.<=) $1"), std::string::npos) << take;
	EXPECT_NE(take.find("RETURNING s.slot, free.used_at AS before"), std::string::npos) << take;
	// given back with that time, never as "free" ('-infinity')
	std::string give_back = sql.give_back();
	EXPECT_NE(give_back.find("SET used_at = b.before"), std::string::npos) << give_back;
	EXPECT_EQ(give_back.find("infinity"), std::string::npos) << give_back;
}

TEST(RateSql, SlotsFillHalfAPageThenPagesArePrunedWhenNearlyFull) {
	EXPECT_EQ(RateSql("a").layout(true), "ALTER TABLE concurrency.\"r_a\" SET (fillfactor = 50)");
	EXPECT_EQ(RateSql("a").layout(false), "ALTER TABLE concurrency.\"r_a\" SET (fillfactor = 100)");
}

TEST(RateSql, StatementsQualifyEveryOperator) {
	RateSql sql("jobs");
	for (const std::string &statement : statements(sql))
		expect_every_operator_qualified(statement);
}

using concurrency::queue::key_rate_table_name;
using concurrency::queue::KeyRateSql;

TEST(KeyRateSql, SideTableFitsANameAndHostileNamesStayQuoted) {
	std::string longest(max_queue_name_bytes, 'x');
	EXPECT_LE(concurrency::queue::derived_name(concurrency::queue::QueueTable::key_rate, longest,
	                                           concurrency::queue::Role::pkey)
	              .size(),
	          63u);
	EXPECT_EQ(key_rate_table_name("jobs"), "rk_jobs");
	const std::string hostile = "x\";DROP/**/TABLE/**/t;--";
	KeyRateSql sql(hostile);
	EXPECT_NE(sql.create_table(concurrency::queue::Naming::role_first)
	              .find("CREATE TABLE concurrency.\"rk_x\"\";DROP/**/TABLE/**/t;--\""),
	          std::string::npos)
	    << sql.create_table(concurrency::queue::Naming::role_first);
	EXPECT_EQ(KeyRateSql("a").drop_table(), "DROP TABLE IF EXISTS concurrency.\"rk_a\"");
	for (const std::string &statement :
	     {sql.resize(), sql.take(), sql.give_back(), sql.oldest_use(), sql.forget_old()}) {
		std::size_t quotes = 0;
		for (char c : statement)
			quotes += c == '"';
		EXPECT_EQ(quotes % 2, 0u) << statement;
		expect_every_operator_qualified(statement);
	}
}

TEST(KeyRateSql, ASlotIsTakenWithoutWaitingOrMadeUpToTheLimit) {
	std::string take = KeyRateSql("jobs").take();
	// a free slot of the key: locked without waiting, checked again on its
	// latest version by the lock
	EXPECT_NE(take.find("FOR UPDATE SKIP LOCKED"), std::string::npos) << take;
	EXPECT_NE(take.find("used_at OPERATOR(pg_catalog.<=) $2"), std::string::npos) << take;
	// a new one only while the key has fewer than the limit, and only when
	// no slot was free (the primary key makes two claims' same new slot one)
	EXPECT_NE(take.find("last.slot OPERATOR(pg_catalog.<) $4 AND NOT EXISTS (SELECT FROM free)"),
	          std::string::npos)
	    << take;
	EXPECT_NE(take.find("ON CONFLICT DO NOTHING"), std::string::npos) << take;
	// forgetting old slots never touches one a claim holds
	EXPECT_NE(KeyRateSql("jobs").forget_old().find("FOR UPDATE SKIP LOCKED"), std::string::npos);
}

TEST(KeyRateSql, OnAShardEveryStatementKeepsToItsShardKey) {
	concurrency::queue::ShardPlacement shard{"q_jobs_102008", 7, 0, 1, "k_jobs_102040", "rk_jobs_102072"};
	KeyRateSql sql("jobs", shard);
	EXPECT_EQ(sql.table(), "concurrency.\"rk_jobs_102072\"");
	const std::string take = sql.take();
	EXPECT_NE(
	    take.find("INSERT INTO concurrency.\"rk_jobs_102072\" (concurrency_key, slot, used_at, shard_key)"),
	    std::string::npos)
	    << take;
	EXPECT_NE(take.find("$3, 7\n"), std::string::npos) << take;
	for (const std::string &statement : {take, sql.give_back(), sql.oldest_use(), sql.forget_old()}) {
		EXPECT_NE(statement.find("shard_key OPERATOR(pg_catalog.=) 7 AND "), std::string::npos) << statement;
		expect_every_operator_qualified(statement);
	}
	EXPECT_EQ(KeyRateSql("jobs").shard_filter(), "");
}
