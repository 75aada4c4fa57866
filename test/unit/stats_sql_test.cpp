#include <string>

#include <gtest/gtest.h>

#include "sql_checks.hpp"

#include "common/names.hpp"
#include "queue/queue_sql.hpp"
#include "queue/lifecycle/stats_sql.hpp"

using concurrency::max_queue_name_bytes;
using concurrency::queue::derived_name;
using concurrency::queue::QueueSql;
using concurrency::queue::QueueTable;
using concurrency::queue::Role;
using concurrency::queue::StatsSql;

namespace {
std::size_t occurrences(const std::string &text, const std::string &what) {
	std::size_t n = 0;
	for (std::size_t at = 0; (at = text.find(what, at)) != std::string::npos; at += what.size())
		++n;
	return n;
}
} // namespace

TEST(StatsSql, StatementsQualifyEveryOperator) {
	expect_every_operator_qualified(StatsSql("jobs").stats());
}

TEST(StatsSql, EveryCountReadsOnlyThePartialIndexOfItsState) {
	// Each subquery's WHERE starts with the predicate of one partial index
	// (so that the planner may scan that index alone), and no subquery reads
	// the table without one: one FROM per count group, each followed by a
	// state condition.
	std::string stats = StatsSql("jobs").stats();
	const std::string table = "FROM concurrency.\"q_jobs\" WHERE ";
	EXPECT_EQ(occurrences(stats, "FROM concurrency.\"q_jobs\""), occurrences(stats, table)) << stats;
	for (const char *predicate :
	     {"state OPERATOR(pg_catalog.=) 'ready')",
	      "state OPERATOR(pg_catalog.=) 'scheduled' AND run_at OPERATOR(pg_catalog.>) $1",
	      "state OPERATOR(pg_catalog.=) 'scheduled' AND run_at OPERATOR(pg_catalog.<=) $1",
	      "state OPERATOR(pg_catalog.=) 'leased')", "state OPERATOR(pg_catalog.=) 'dead')",
	      "state OPERATOR(pg_catalog.=) ANY ('{done,cancelled}'::pg_catalog.text[]))",
	      "concurrency_key IS NOT NULL AND state OPERATOR(pg_catalog.=) 'blocked'",
	      "state OPERATOR(pg_catalog.=) 'waiting')"})
		EXPECT_NE(stats.find(table + predicate), std::string::npos) << predicate << " in:\n" << stats;
	EXPECT_EQ(occurrences(stats, table), 8u) << stats;
	// the finished tasks' predicate is the one of the table's index
	EXPECT_NE(QueueSql("jobs")
	              .create_table(concurrency::queue::Naming::role_first)
	              .find("WHERE state OPERATOR(pg_catalog.=) ANY ('{done,cancelled}'::pg_catalog.text[])"),
	          std::string::npos);
	// and the waiting tasks' (dependencies) the one of the waiting index
	EXPECT_NE(QueueSql("jobs")
	              .create_table(concurrency::queue::Naming::role_first)
	              .find("(id) WHERE state = 'waiting'"),
	          std::string::npos);
}

TEST(StatsSql, DeadIndexNameFitsAndHostileNameStaysInsideItsQuotes) {
	EXPECT_LE(derived_name(QueueTable::tasks, std::string(max_queue_name_bytes, 'x'), Role::dead).size(),
	          63u);
	StatsSql sql("a\"; DROP TABLE t; --");
	EXPECT_EQ(sql.create_index(concurrency::queue::Naming::role_first),
	          "CREATE INDEX \"dead_q_a\"\"; DROP TABLE t; --\" ON concurrency.\"q_a\"\"; DROP TABLE t; --\" "
	          "(id) WHERE state = 'dead'");
	EXPECT_NE(sql.stats().find("FROM concurrency.\"q_a\"\"; DROP TABLE t; --\" WHERE"), std::string::npos);
}
