#include <string>

#include <gtest/gtest.h>

#include "sql_checks.hpp"

#include "common/names.hpp"
#include "queue/queue_sql.hpp"

using concurrency::max_queue_name_bytes;
using concurrency::queue::queue_channel;
using concurrency::queue::queue_index_name;
using concurrency::queue::queue_table_name;
using concurrency::queue::QueueSql;

TEST(QueueSql, DerivedNamesFitPostgresIdentifiers) {
	std::string longest(max_queue_name_bytes, 'x');
	EXPECT_LE(queue_table_name(longest).size(), 63u);
	EXPECT_LE(queue_channel(longest).size(), 63u);
	for (const char *suffix : {"pkey", "ready", "scheduled", "leased", "dedupe", "finished", "state_check",
	                           "id_seq", "dedupe_new"})
		EXPECT_LE(queue_index_name(longest, suffix).size(), 63u) << suffix;
	EXPECT_EQ(queue_table_name("jobs"), "q_jobs");
	EXPECT_EQ(queue_channel("jobs"), "concurrency_jobs");
}

TEST(QueueSql, QuotesTheTableEverywhere) {
	QueueSql sql("jobs");
	EXPECT_EQ(sql.table(), "concurrency.\"q_jobs\"");
	for (const std::string &statement : {sql.enqueue(),
	                                     sql.dedupe_lookup(),
	                                     sql.dedupe_lookup_many(),
	                                     sql.enqueue_batch(false),
	                                     sql.enqueue_batch(true),
	                                     sql.wake(),
	                                     sql.claim(),
	                                     sql.heartbeat(),
	                                     sql.heartbeat_many(),
	                                     sql.complete(),
	                                     sql.complete_retained(),
	                                     sql.complete_many(),
	                                     sql.complete_many_retained(),
	                                     sql.fail_lock(),
	                                     sql.fail_update(),
	                                     sql.fail_lock_many(),
	                                     sql.fail_update_many(),
	                                     sql.cancel(true),
	                                     sql.cancel(false),
	                                     sql.purge(),
	                                     sql.task_status(),
	                                     sql.inspect(),
	                                     sql.retry_dead(),
	                                     sql.create_table(),
	                                     sql.drop_table()}) {
		EXPECT_NE(statement.find("concurrency.\"q_jobs\""), std::string::npos) << statement;
		EXPECT_EQ(statement.find("concurrency.q_jobs"), std::string::npos) << statement;
	}
}

TEST(QueueSql, HostileNameStaysInsideItsQuotes) {
	const std::string hostile = "x\";DROP/**/TABLE/**/t;--";
	QueueSql sql(hostile);
	EXPECT_EQ(sql.table(), "concurrency.\"q_x\"\";DROP/**/TABLE/**/t;--\"");
	std::string ddl = sql.create_table();
	EXPECT_NE(ddl.find("CREATE INDEX \"q_x\"\";DROP/**/TABLE/**/t;--_ready\""), std::string::npos) << ddl;
	// every double quote of the name is doubled: no unbalanced quote in
	// statements that carry no string literal with the name
	for (const std::string &statement : {sql.claim(), sql.wake(), sql.complete(), sql.drop_table()}) {
		std::size_t quotes = 0;
		for (char c : statement)
			quotes += c == '"';
		EXPECT_EQ(quotes % 2, 0u) << statement;
	}
	// the comment is a literal, quoted as one (a quote and a backslash)
	QueueSql tricky("a'b\\c");
	EXPECT_NE(tricky.create_table().find("IS E'tasks of the concurrency_ext queue a''b\\\\c'"),
	          std::string::npos)
	    << tricky.create_table();
	EXPECT_EQ(tricky.alter_owner("r\"x"), "ALTER TABLE concurrency.\"q_a'b\\c\" OWNER TO \"r\"\"x\"");
}

TEST(QueueSql, ClaimUsesTheReadyIndexOrderAndSkipLocked) {
	QueueSql sql("jobs");
	std::string claim = sql.claim();
	const std::string order = "(OPERATOR(pg_catalog.-) (priority::pg_catalog.int8)), run_at, id";
	EXPECT_NE(claim.find("ORDER BY " + order), std::string::npos) << claim;
	EXPECT_NE(claim.find("(" + order + ") OPERATOR(pg_catalog.>=) ($5, $6, $7)"), std::string::npos) << claim;
	EXPECT_NE(claim.find("FOR UPDATE SKIP LOCKED"), std::string::npos);
	// the index is built on the same expression, so that the claim can walk it
	EXPECT_NE(sql.create_table().find("ON concurrency.\"q_jobs\" (" + order + ") WHERE state = 'ready'"),
	          std::string::npos)
	    << sql.create_table();
	EXPECT_NE(sql.wake().find("FOR UPDATE SKIP LOCKED"), std::string::npos);
}

TEST(QueueSql, StatementsQualifyEveryOperator) {
	// The SPI layer pins search_path, and the statements do not rely on it:
	// an operator written bare would resolve through any path it ran under.
	QueueSql sql("jobs");
	for (const std::string &statement : {sql.enqueue(),
	                                     sql.dedupe_lookup(),
	                                     sql.dedupe_lookup_many(),
	                                     sql.enqueue_batch(false),
	                                     sql.enqueue_batch(true),
	                                     sql.wake(),
	                                     sql.claim(),
	                                     sql.heartbeat(),
	                                     sql.heartbeat_many(),
	                                     sql.complete(),
	                                     sql.complete_retained(),
	                                     sql.complete_many(),
	                                     sql.complete_many_retained(),
	                                     sql.fail_lock(),
	                                     sql.fail_update(),
	                                     sql.fail_lock_many(),
	                                     sql.fail_update_many(),
	                                     sql.cancel(true),
	                                     sql.cancel(false),
	                                     sql.purge(),
	                                     sql.task_status(),
	                                     sql.inspect(),
	                                     sql.retry_dead(),
	                                     sql.release_many(),
	                                     sql.heartbeat_progress(),
	                                     sql.heartbeat_many_progress(),
	                                     sql.next_due()}) {
		expect_every_operator_qualified(statement);
	}
}

TEST(QueueSql, DedupeConflictsInferTheUniqueIndex) {
	// ON CONFLICT infers the dedupe index only when its WHERE implies the
	// index's predicate: both are written from one constant
	QueueSql sql("jobs");
	std::string ddl = sql.create_table();
	std::size_t at = ddl.find("(dedupe_key) WHERE ");
	ASSERT_NE(at, std::string::npos) << ddl;
	std::string predicate = ddl.substr(at + 19, ddl.find(';', at) - at - 19);
	EXPECT_NE(predicate.find("'cancelled'"), std::string::npos) << predicate;
	for (const std::string &statement : {sql.enqueue(), sql.enqueue_batch(true)})
		EXPECT_NE(statement.find("ON CONFLICT (dedupe_key) WHERE " + predicate + " DO NOTHING"),
		          std::string::npos)
		    << statement;
	EXPECT_NE(sql.dedupe_lookup().find(predicate), std::string::npos);
	EXPECT_NE(sql.dedupe_lookup_many().find(predicate), std::string::npos);
}

TEST(QueueSql, PurgeWalksTheFinishedIndex) {
	QueueSql sql("jobs");
	const std::string states = "state OPERATOR(pg_catalog.=) ANY ('{done,cancelled}'::pg_catalog.text[])";
	EXPECT_NE(sql.create_table().find("(finished_at) WHERE " + states), std::string::npos)
	    << sql.create_table();
	EXPECT_NE(sql.purge().find("WHERE " + states), std::string::npos) << sql.purge();
	EXPECT_NE(sql.purge().find("FOR UPDATE SKIP LOCKED"), std::string::npos);
}
