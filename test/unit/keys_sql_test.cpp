#include <string>

#include <gtest/gtest.h>

#include "sql_checks.hpp"

#include "common/names.hpp"
#include "queue/flow/keys_sql.hpp"

using concurrency::max_queue_name_bytes;
using concurrency::queue::key_table_name;
using concurrency::queue::KeySql;
using concurrency::queue::slot_table_name;

namespace {
std::vector<std::string> statements(const KeySql &sql) {
	return {sql.lock_key(),        sql.add_key(),       sql.enqueue("dedupe_key IS NOT NULL"),
	        sql.admit(),           sql.forget_key(),    sql.rebalance(),
	        sql.lock_free_slots(), sql.recheck_slots(), sql.fill_slots(),
	        sql.resize_slots(),    sql.queue_keys(),    sql.rebalance(true),
	        sql.lock_keys()};
}
} // namespace

TEST(KeySql, SideTablesNeverCollideWithAQueueTable) {
	std::string longest(max_queue_name_bytes, 'x');
	EXPECT_LE(concurrency::queue::derived_name(concurrency::queue::QueueTable::keys, longest,
	                                           concurrency::queue::Role::pkey)
	              .size(),
	          63u);
	EXPECT_LE(concurrency::queue::derived_name(concurrency::queue::QueueTable::slots, longest,
	                                           concurrency::queue::Role::pkey)
	              .size(),
	          63u);
	// queue tables are q_<name>: a queue named "k_x" has table q_k_x
	EXPECT_EQ(key_table_name("jobs"), "k_jobs");
	EXPECT_EQ(slot_table_name("jobs"), "s_jobs");
}

TEST(KeySql, HostileNameStaysInsideItsQuotes) {
	const std::string hostile = "x\";DROP/**/TABLE/**/t;--";
	KeySql sql(hostile);
	EXPECT_NE(sql.create_tables(concurrency::queue::Naming::role_first)
	              .find("CREATE TABLE concurrency.\"k_x\"\";DROP/**/TABLE/**/t;--\""),
	          std::string::npos)
	    << sql.create_tables(concurrency::queue::Naming::role_first);
	for (const std::string &statement : statements(sql)) {
		std::size_t quotes = 0;
		for (char c : statement)
			quotes += c == '"';
		EXPECT_EQ(quotes % 2, 0u) << statement;
	}
	EXPECT_EQ(KeySql("a").drop_tables(), "DROP TABLE IF EXISTS concurrency.\"k_a\", concurrency.\"s_a\"");
}

TEST(KeySql, SlotsAreTakenWithoutWaiting) {
	KeySql sql("jobs");
	EXPECT_NE(sql.lock_free_slots().find("FOR UPDATE OF s SKIP LOCKED"), std::string::npos);
	// a slot is free when the lease written in it is over
	for (const std::string &s : {sql.lock_free_slots(), sql.recheck_slots()})
		EXPECT_NE(
		    s.find("t.lease_token OPERATOR(pg_catalog.=) s.lease_token AND t.state OPERATOR(pg_catalog.=) "
		           "'leased'"),
		    std::string::npos)
		    << s;
}

TEST(KeySql, AdmissionIsInEnqueueOrderAndReadsTheLimitFromTheCatalog) {
	KeySql sql("jobs");
	std::string admit = sql.admit();
	EXPECT_NE(admit.find("ORDER BY id"), std::string::npos) << admit;
	EXPECT_NE(admit.find("FROM concurrency.queue WHERE name OPERATOR(pg_catalog.=) $2"), std::string::npos)
	    << admit;
	// a blocked task cancelled meanwhile is not admitted
	EXPECT_NE(admit.find("WHERE t.state OPERATOR(pg_catalog.=) 'blocked'"), std::string::npos) << admit;
	EXPECT_NE(sql.enqueue("h").find("THEN 'blocked'"), std::string::npos);
}

TEST(KeySql, RebalanceTakesTheLimitGivenOrTheCatalogs) {
	KeySql sql("jobs");
	// alter_queue on one server: the catalog row its transaction wrote
	EXPECT_NE(sql.rebalance().find("FROM concurrency.queue WHERE name OPERATOR(pg_catalog.=) $1"),
	          std::string::npos);
	// on a node of a distributed queue: the limit the coordinator sends
	std::string given = sql.rebalance(true);
	EXPECT_EQ(given.find("FROM concurrency.queue"), std::string::npos) << given;
	EXPECT_NE(given.find("COALESCE(NULLIF($1::pg_catalog.int4, 0), 2147483647)"), std::string::npos) << given;
	EXPECT_EQ(sql.lock_keys(), "LOCK TABLE concurrency.\"k_jobs\" IN EXCLUSIVE MODE");
}

TEST(KeySql, StatementsQualifyEveryOperator) {
	KeySql sql("jobs");
	for (const std::string &statement : statements(sql)) {
		expect_every_operator_qualified(statement);
	}
}
