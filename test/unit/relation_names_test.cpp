#include <regex>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "common/sql_text.hpp"
#include "queue/flow/keys_sql.hpp"
#include "queue/flow/rate_sql.hpp"
#include "queue/lifecycle/stats_sql.hpp"
#include "queue/queue_sql.hpp"
#include "queue/relation_names.hpp"

using namespace concurrency::queue;

namespace {

// Every relation that the DDL of a new queue names after CREATE TABLE,
// CREATE [UNIQUE] INDEX [IF NOT EXISTS] or CONSTRAINT (unquoted).
std::set<std::string> created_by(const std::string &ddl) {
	std::set<std::string> names;
	static const std::regex created(
	    R"re((?:CREATE TABLE|CREATE (?:UNIQUE )?INDEX(?: IF NOT EXISTS)?|CONSTRAINT) (?:concurrency\.)?"?([^" (]+))re");
	for (auto m = std::sregex_iterator(ddl.begin(), ddl.end(), created); m != std::sregex_iterator(); ++m)
		names.insert((*m)[1].str());
	return names;
}

} // namespace

TEST(RelationNames, ListWhatTheDdlOfANewQueueCreates) {
	const std::string q = "jobs";
	std::string ddl = QueueSql(q).create_table() + StatsSql(q).create_index() + KeySql(q).create_tables() +
	                  RateSql(q).create_table() + KeyRateSql(q).create_table() +
	                  QueueSql(q).create_fair_index();
	std::vector<std::string> listed = relations_of_new_queue(q, true, true);
	EXPECT_EQ(std::set<std::string>(listed.begin(), listed.end()), created_by(ddl));
}

TEST(RelationNames, RateTablesOnlyWithTheirLimit) {
	std::vector<std::string> plain = relations_of_new_queue("jobs", false, false);
	std::set<std::string> names(plain.begin(), plain.end());
	EXPECT_TRUE(names.count("q_jobs_keyed"));
	EXPECT_FALSE(names.count("r_jobs"));
	EXPECT_FALSE(names.count("rk_jobs"));
	EXPECT_FALSE(names.count("q_jobs_fair"));
}

TEST(RelationNames, QueueOfATable) {
	EXPECT_EQ(queue_of_table("q_jobs_keyed"), "jobs_keyed");
	EXPECT_EQ(queue_of_table("k_jobs"), "jobs");
	EXPECT_EQ(queue_of_table("s_jobs"), "jobs");
	EXPECT_EQ(queue_of_table("r_jobs"), "jobs");
	EXPECT_EQ(queue_of_table("rk_jobs"), "jobs");
	EXPECT_FALSE(queue_of_table("q_"));
	EXPECT_FALSE(queue_of_table("queue"));
}
