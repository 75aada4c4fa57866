#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "sql_checks.hpp"

#include "common/names.hpp"
#include "queue/queue_sql.hpp"

using concurrency::max_queue_name_bytes;
using concurrency::queue::derived_name;
using concurrency::queue::FairFrom;
using concurrency::queue::queue_channel;
using concurrency::queue::queue_table_name;
using concurrency::queue::QueueSql;
using concurrency::queue::QueueTable;
using concurrency::queue::Role;
using concurrency::queue::ShardPlacement;

namespace {

// Every statement a queue runs against its table, in the order of queue_sql.hpp.
std::vector<std::string> every_statement(const QueueSql &sql) {
	return {sql.enqueue(),
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
	        sql.next_due(),
	        sql.claim_fair(FairFrom::start),
	        sql.claim_fair(FairFrom::after_null),
	        sql.claim_fair(FairFrom::after_key),
	        sql.next_open_key(FairFrom::start, "concurrency.\"rk_jobs\""),
	        sql.next_open_key(FairFrom::after_key, "concurrency.\"rk_jobs\""),
	        sql.claim_of_key(true),
	        sql.claim_of_key(false)};
}

} // namespace

TEST(QueueSql, DerivedNamesFitPostgresIdentifiers) {
	std::string longest(max_queue_name_bytes, 'x');
	EXPECT_LE(queue_table_name(longest).size(), 63u);
	EXPECT_LE(queue_channel(longest).size(), 63u);
	// every index and the sequence (relation_names_test checks them all,
	// both namings), and the names the update scripts of 0.2.0 gave for a
	// moment (q_<queue>_state_check, q_<queue>_dedupe_new)
	EXPECT_LE(derived_name(QueueTable::tasks, longest, Role::scheduled).size(), 63u);
	for (const char *suffix : {"state_check", "dedupe_new"})
		EXPECT_LE(fmt::format("q_{}_{}", longest, suffix).size(), 63u) << suffix;
	EXPECT_EQ(queue_table_name("jobs"), "q_jobs");
	EXPECT_EQ(queue_channel("jobs"), "concurrency_jobs");
}

TEST(QueueSql, QuotesTheTableEverywhere) {
	QueueSql sql("jobs");
	EXPECT_EQ(sql.table(), "concurrency.\"q_jobs\"");
	std::vector<std::string> statements = every_statement(sql);
	statements.push_back(sql.create_table(concurrency::queue::Naming::role_first));
	statements.push_back(sql.drop_table());
	for (const std::string &statement : statements) {
		EXPECT_NE(statement.find("concurrency.\"q_jobs\""), std::string::npos) << statement;
		EXPECT_EQ(statement.find("concurrency.q_jobs"), std::string::npos) << statement;
	}
}

TEST(QueueSql, HostileNameStaysInsideItsQuotes) {
	const std::string hostile = "x\";DROP/**/TABLE/**/t;--";
	QueueSql sql(hostile);
	EXPECT_EQ(sql.table(), "concurrency.\"q_x\"\";DROP/**/TABLE/**/t;--\"");
	std::string ddl = sql.create_table(concurrency::queue::Naming::role_first);
	EXPECT_NE(ddl.find("CREATE INDEX \"ready_q_x\"\";DROP/**/TABLE/**/t;--\""), std::string::npos) << ddl;
	EXPECT_NE(ddl.find("(SEQUENCE NAME concurrency.\"id_seq_q_x\"\";DROP/**/TABLE/**/t;--\")"),
	          std::string::npos)
	    << ddl;
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
	EXPECT_NE(tricky.create_table(concurrency::queue::Naming::role_first)
	              .find("IS E'tasks of the concurrency_ext queue a''b\\\\c'"),
	          std::string::npos)
	    << tricky.create_table(concurrency::queue::Naming::role_first);
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
	EXPECT_NE(sql.create_table(concurrency::queue::Naming::role_first)
	              .find("ON concurrency.\"q_jobs\" (" + order + ") WHERE state = 'ready'"),
	          std::string::npos)
	    << sql.create_table(concurrency::queue::Naming::role_first);
	EXPECT_NE(sql.wake().find("FOR UPDATE SKIP LOCKED"), std::string::npos);
}

TEST(QueueSql, FairClaimWalksTheFairIndex) {
	// every scan of the fair claim is in the order of the fair index (keys,
	// the tasks without a key first, then claim order), so that each step of
	// the rotation is one index probe; each key's task is locked SKIP LOCKED
	QueueSql sql("jobs");
	const std::string order = "(OPERATOR(pg_catalog.-) (priority::pg_catalog.int8)), run_at, id";
	EXPECT_EQ(sql.create_fair_index(concurrency::queue::Naming::role_first),
	          "CREATE INDEX IF NOT EXISTS \"fair_q_jobs\" ON concurrency.\"q_jobs\" "
	          "(concurrency_key NULLS FIRST, " +
	              order + ") WHERE state = 'ready'");
	// under the name the index has: made before 0.4.0, table first
	EXPECT_EQ(QueueSql::drop_fair_index("q_jobs_fair"), "DROP INDEX IF EXISTS concurrency.\"q_jobs_fair\"");
	for (FairFrom from : {FairFrom::start, FairFrom::after_null, FairFrom::after_key}) {
		std::string claim = sql.claim_fair(from);
		std::size_t scans = 0, ordered = 0, locked = 0;
		for (std::size_t at = claim.find("FROM concurrency.\"q_jobs\"\n"); at != std::string::npos;
		     at = claim.find("FROM concurrency.\"q_jobs\"\n", at + 1))
			++scans;
		for (std::size_t at = claim.find("ORDER BY concurrency_key NULLS FIRST"); at != std::string::npos;
		     at = claim.find("ORDER BY concurrency_key NULLS FIRST", at + 1))
			++ordered;
		const std::string lock = "ORDER BY concurrency_key NULLS FIRST, " + order +
		                         "\n                            LIMIT 1 FOR UPDATE SKIP LOCKED";
		for (std::size_t at = claim.find(lock); at != std::string::npos; at = claim.find(lock, at + 1))
			++locked;
		EXPECT_EQ(scans, 5u) << claim;
		EXPECT_EQ(ordered, 5u) << claim;
		EXPECT_EQ(locked, 2u) << claim;
		EXPECT_EQ(claim.find("$5") != std::string::npos, from == FairFrom::after_key) << claim;
		EXPECT_EQ(claim.find("concurrency_key IS NOT NULL\n          ORDER BY") != std::string::npos,
		          from == FairFrom::after_null)
		    << claim;
	}
}

TEST(QueueSql, StatementsQualifyEveryOperator) {
	// The SPI layer pins search_path, and the statements do not rely on it:
	// an operator written bare would resolve through any path it ran under.
	for (const std::string &statement : every_statement(QueueSql("jobs")))
		expect_every_operator_qualified(statement);
	for (const std::string &statement :
	     every_statement(QueueSql("jobs", ShardPlacement{"q_jobs_102008", 7, 3, 2})))
		expect_every_operator_qualified(statement);
}

TEST(QueueSql, ShardStatementsStayOnTheirShard) {
	// A distributed queue's statements on one shard's table: each names the
	// shard's table, never the distributed table (a statement on it would be
	// planned by Citus across the cluster), and each one that finds tasks
	// filters on the shard's distribution value, so that Citus's shard
	// pruning and the shard's indexes apply.
	QueueSql sql("jobs", ShardPlacement{"q_jobs_102008", 7, 3, 2});
	EXPECT_EQ(sql.table(), "concurrency.\"q_jobs_102008\"");
	const std::string key = "shard_key OPERATOR(pg_catalog.=) 7";
	for (const std::string &statement : every_statement(sql)) {
		EXPECT_NE(statement.find("concurrency.\"q_jobs_102008\""), std::string::npos) << statement;
		EXPECT_EQ(statement.find("concurrency.\"q_jobs\""), std::string::npos) << statement;
	}
	for (const std::string &statement :
	     {sql.wake(), sql.claim(), sql.heartbeat(), sql.heartbeat_many(), sql.complete(), sql.complete_many(),
	      sql.fail_lock(), sql.fail_lock_many(), sql.cancel(true), sql.cancel(false), sql.purge(),
	      sql.task_status(), sql.retry_dead(), sql.release_many(), sql.heartbeat_progress(),
	      sql.dedupe_lookup()})
		EXPECT_NE(statement.find(key), std::string::npos) << statement;
	// a new task carries its id (group 2, position 3 in the low 20 bits) and
	// its shard's value; a lease token carries the group in its low 10 bits
	const std::string id = "(pg_catalog.nextval('concurrency.lease_token'::pg_catalog.regclass) "
	                       "OPERATOR(pg_catalog.*) 1048576 OPERATOR(pg_catalog.+) 2051)";
	for (const std::string &statement : {sql.enqueue(), sql.enqueue_batch(false), sql.enqueue_batch(true)}) {
		EXPECT_NE(statement.find("id, shard_key, "), std::string::npos) << statement;
		EXPECT_NE(statement.find(id + ", 7, "), std::string::npos) << statement;
	}
	EXPECT_NE(sql.claim().find("(pg_catalog.nextval('concurrency.lease_token'::pg_catalog.regclass) "
	                           "OPERATOR(pg_catalog.*) 1024 OPERATOR(pg_catalog.+) 2)"),
	          std::string::npos)
	    << sql.claim();
	// the shard's dedupe index is unique on (shard_key, dedupe_key)
	EXPECT_NE(sql.enqueue().find("ON CONFLICT (shard_key, dedupe_key) WHERE "), std::string::npos)
	    << sql.enqueue();
	// the purge keeps a parent while a child named in its row (on the same
	// shard) is not finished: that look is a probe of the shard's key too
	EXPECT_NE(sql.purge().find("WHERE " + key + " AND c.id OPERATOR(pg_catalog.=) ANY (p.children)"),
	          std::string::npos)
	    << sql.purge();
	// enqueue_graph draws its tasks' ids the same way, and the statements
	// that others build on the shard filter on its value
	EXPECT_NE(sql.draw_shard_ids().find(id + " ORDER BY"), std::string::npos) << sql.draw_shard_ids();
	expect_every_operator_qualified(sql.draw_shard_ids());
	EXPECT_EQ(sql.shard_filter(false), key + " AND ");
	EXPECT_EQ(sql.shard_filter(true), "t." + key + " AND ");
	EXPECT_EQ(sql.shard_key(), std::optional<std::int32_t>(7));
	EXPECT_EQ(QueueSql("jobs").shard_filter(true), "");
	EXPECT_EQ(QueueSql("jobs").shard_key(), std::nullopt);
	// a queue's own table has none of it
	QueueSql local("jobs");
	for (const std::string &statement : every_statement(local))
		EXPECT_EQ(statement.find("shard_key"), std::string::npos) << statement;
}

TEST(QueueSql, DedupeConflictsInferTheUniqueIndex) {
	// ON CONFLICT infers the dedupe index only when its WHERE implies the
	// index's predicate: both are written from one constant
	QueueSql sql("jobs");
	std::string ddl = sql.create_table(concurrency::queue::Naming::role_first);
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
	EXPECT_NE(sql.create_table(concurrency::queue::Naming::role_first).find("(finished_at) WHERE " + states),
	          std::string::npos)
	    << sql.create_table(concurrency::queue::Naming::role_first);
	EXPECT_NE(sql.purge().find("WHERE " + states), std::string::npos) << sql.purge();
	EXPECT_NE(sql.purge().find("FOR UPDATE SKIP LOCKED"), std::string::npos);
}

TEST(QueueSql, KeyRatedClaimWalksKeysInTheFairIndexOrder) {
	QueueSql sql("jobs");
	for (FairFrom from : {FairFrom::start, FairFrom::after_null, FairFrom::after_key}) {
		std::string next = sql.next_open_key(from, "concurrency.\"rk_jobs\"");
		// each step one key in the fair index's order, and the window of the
		// key counted from its slots used after now - key_rate_period ($2)
		EXPECT_NE(next.find("ORDER BY concurrency_key NULLS FIRST LIMIT 1"), std::string::npos) << next;
		EXPECT_NE(
		    next.find("FROM concurrency.\"rk_jobs\" WHERE concurrency_key OPERATOR(pg_catalog.=) nx.k AND "
		              "used_at OPERATOR(pg_catalog.>) $2"),
		    std::string::npos)
		    << next;
		// the walk goes on only past keys whose window is full
		EXPECT_NE(next.find("WHERE keys.used OPERATOR(pg_catalog.>=) $3"), std::string::npos) << next;
		EXPECT_EQ(next.find("$1") != std::string::npos, from == FairFrom::after_key) << next;
	}
	EXPECT_NE(sql.claim_of_key(false).find("concurrency_key OPERATOR(pg_catalog.=) $5"), std::string::npos);
	EXPECT_NE(sql.claim_of_key(true).find("concurrency_key IS NULL"), std::string::npos);
	EXPECT_EQ(sql.claim_of_key(true).find("$5"), std::string::npos);
	for (bool null_key : {true, false})
		EXPECT_NE(sql.claim_of_key(null_key).find("LIMIT 1 FOR UPDATE SKIP LOCKED"), std::string::npos);
}
