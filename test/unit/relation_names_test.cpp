#include <algorithm>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/names.hpp"
#include "common/sql_text.hpp"
#include "queue/flow/keys_sql.hpp"
#include "queue/flow/rate_sql.hpp"
#include "queue/lifecycle/stats_sql.hpp"
#include "queue/queue_sql.hpp"
#include "queue/relation_names.hpp"

using namespace concurrency::queue;

namespace {

// Every relation that the DDL of a new queue names after CREATE TABLE,
// CREATE [UNIQUE] INDEX [IF NOT EXISTS], CONSTRAINT or SEQUENCE NAME
// (unquoted).
std::set<std::string> created_by(const std::string &ddl) {
	std::set<std::string> names;
	static const std::regex created(
	    R"re((?:CREATE TABLE|CREATE (?:UNIQUE )?INDEX(?: IF NOT EXISTS)?|CONSTRAINT|SEQUENCE NAME) (?:concurrency\.)?"?([^" (]+))re");
	for (auto m = std::sregex_iterator(ddl.begin(), ddl.end(), created); m != std::sregex_iterator(); ++m)
		names.insert((*m)[1].str());
	return names;
}

constexpr QueueTable tables[] = {QueueTable::tasks, QueueTable::keys, QueueTable::slots, QueueTable::rate,
                                 QueueTable::key_rate};

// The names of a queue's tables, and of the tables' relations of every
// role each has under `naming`.
std::vector<std::string> tables_of(const std::string &queue) {
	std::vector<std::string> names;
	for (QueueTable table : tables)
		names.push_back(table_name(table, queue));
	return names;
}
std::vector<std::string> derived_of(const std::string &queue, Naming naming) {
	std::vector<std::string> names;
	for (QueueTable table : tables)
		for (Role role : all_roles)
			if (has_role(table, role))
				names.push_back(derived_name(table, queue, role, naming));
	return names;
}
std::vector<std::string> names_of(const std::string &queue, Naming naming) {
	std::vector<std::string> names = tables_of(queue);
	for (const std::string &name : derived_of(queue, naming))
		names.push_back(name);
	return names;
}

// Queue names made of up to three of these pieces: the characters and
// words that the names of relations are made of (the tables' prefixes, the
// roles, "_"), and others.
std::vector<std::string> queue_names() {
	std::vector<std::string> pieces = {"_", "a", "q", "k", "s", "r", "rk", "q_", "id", "seq", "jobs"};
	for (Role role : all_roles)
		pieces.push_back(role_word(role));
	std::vector<std::string> names;
	for (const std::string &a : pieces) {
		names.push_back(a);
		for (const std::string &b : pieces) {
			names.push_back(a + b);
			for (const std::string &c : pieces)
				names.push_back(a + b + c);
		}
	}
	std::set<std::string> distinct(names.begin(), names.end());
	return {distinct.begin(), distinct.end()};
}

// The first name that two queues of `queues` share under `naming`, as
// "<name> of <queue> and <queue>"; "" where none.
std::string first_shared_name(const std::vector<std::string> &queues, Naming naming) {
	std::map<std::string, std::string> owner;
	for (const std::string &queue : queues)
		for (const std::string &name : names_of(queue, naming)) {
			auto [at, inserted] = owner.emplace(name, queue);
			if (!inserted && at->second != queue)
				return name + " of " + at->second + " and " + queue;
		}
	return "";
}

} // namespace

TEST(RelationNames, ListWhatTheDdlOfANewQueueCreates) {
	const std::string q = "jobs";
	for (Naming naming : {Naming::role_first, Naming::table_first}) {
		std::string ddl = QueueSql(q).create_table(naming) + StatsSql(q).create_index(naming) +
		                  KeySql(q).create_tables(naming) + RateSql(q).create_table(naming) +
		                  KeyRateSql(q).create_table(naming) + QueueSql(q).create_fair_index(naming);
		std::vector<std::string> listed = relations_of_new_queue(q, naming, true, true);
		EXPECT_EQ(std::set<std::string>(listed.begin(), listed.end()), created_by(ddl));
	}
	// the identity sequence too, named in the DDL (table first, PostgreSQL
	// names it, as 0.3.0's DDL let it)
	EXPECT_TRUE(created_by(QueueSql(q).create_table(Naming::role_first)).count("id_seq_q_jobs"));
	EXPECT_EQ(QueueSql(q).create_table(Naming::table_first).find("SEQUENCE NAME"), std::string::npos);
	EXPECT_NE(QueueSql(q).create_table(Naming::table_first).find("CREATE INDEX \"q_jobs_ready\""),
	          std::string::npos);
}

TEST(RelationNames, RateTablesOnlyWithTheirLimit) {
	std::vector<std::string> plain = relations_of_new_queue("jobs", Naming::role_first, false, false);
	std::set<std::string> names(plain.begin(), plain.end());
	EXPECT_TRUE(names.count("keyed_q_jobs"));
	EXPECT_FALSE(names.count("r_jobs"));
	EXPECT_FALSE(names.count("rk_jobs"));
	EXPECT_FALSE(names.count("fair_q_jobs"));
}

TEST(RelationNames, RoleFirstSinceTableFirstBefore) {
	EXPECT_EQ(derived_name(QueueTable::tasks, "jobs", Role::ready), "ready_q_jobs");
	EXPECT_EQ(derived_name(QueueTable::keys, "jobs", Role::pkey), "pkey_k_jobs");
	EXPECT_EQ(derived_name(QueueTable::tasks, "jobs", Role::id_seq), "id_seq_q_jobs");
	// the names of 0.3.0 and before (an identity sequence as PostgreSQL names
	// it: <table>_<column>_seq)
	EXPECT_EQ(derived_name(QueueTable::tasks, "jobs", Role::keyed, Naming::table_first), "q_jobs_keyed");
	EXPECT_EQ(derived_name(QueueTable::key_rate, "jobs", Role::pkey, Naming::table_first), "rk_jobs_pkey");
	EXPECT_EQ(derived_name(QueueTable::tasks, "jobs", Role::id_seq, Naming::table_first), "q_jobs_id_seq");
	EXPECT_EQ(table_name(QueueTable::slots, "jobs"), "s_jobs");
	EXPECT_EQ(queue_table_name("jobs"), "q_jobs");
	EXPECT_EQ(rate_table_name("jobs"), "r_jobs");
}

TEST(RelationNames, EveryNameFitsPostgresIdentifiers) {
	const std::string longest(concurrency::max_queue_name_bytes, 'x');
	for (Naming naming : {Naming::role_first, Naming::table_first})
		for (const std::string &name : names_of(longest, naming))
			EXPECT_LE(name.size(), 63u) << name;
}

// Why no two queues share a name since 0.4.0: the tables' prefixes are
// prefix-free (so are the tables' names), a role-first name begins with a
// role word and "_" where a table's begins with its prefix, and two
// role-first names of different roles part at the shorter role's end.
TEST(RelationNames, TheWordsThatKeepNamesApart) {
	for (QueueTable a : tables)
		for (QueueTable b : tables) {
			std::string pa = table_prefix(a), pb = table_prefix(b);
			if (a != b)
				EXPECT_NE(pa.substr(0, std::min(pa.size(), pb.size())),
				          pb.substr(0, std::min(pa.size(), pb.size())))
				    << pa << " " << pb;
			EXPECT_EQ(pa.back(), '_');
		}
	for (Role role : all_roles) {
		std::string word = std::string(role_word(role)) + "_";
		for (QueueTable table : tables) {
			std::string prefix = table_prefix(table);
			EXPECT_NE(word.substr(0, prefix.size()), prefix) << word << " " << prefix;
		}
		for (Role other : all_roles)
			if (other != role)
				EXPECT_NE(std::string(role_word(other)).substr(0, word.size()), word)
				    << role_word(other) << " begins with " << word;
	}
}

// The same, tried: queue names made of the pieces of relation names, up to
// three of them (some ten thousand queues, each with all its relations).
TEST(RelationNames, NoTwoQueuesShareANameSince040) {
	std::vector<std::string> queues = queue_names();
	ASSERT_GT(queues.size(), 5000u);
	EXPECT_EQ(first_shared_name(queues, Naming::role_first), "");
	// nor is an index or the sequence of a queue since 0.4.0 named as any
	// relation of a queue made before (their tables are named alike: the
	// tables of a new queue can have the names of an older queue's indexes,
	// which create_queue refuses, naming that queue)
	std::set<std::string> older;
	for (const std::string &queue : queues)
		for (const std::string &name : names_of(queue, Naming::table_first))
			older.insert(name);
	for (const std::string &queue : queues)
		for (const std::string &name : derived_of(queue, Naming::role_first))
			EXPECT_FALSE(older.count(name)) << name << " of " << queue;
	// while before 0.4.0 they did: queue jobs's index q_jobs_keyed was the
	// table of queue jobs_keyed
	EXPECT_NE(first_shared_name(queues, Naming::table_first), "");
	EXPECT_EQ(first_shared_name({"jobs", "jobs_keyed"}, Naming::table_first),
	          "q_jobs_keyed of jobs and jobs_keyed");
	EXPECT_EQ(first_shared_name({"jobs", "jobs_keyed", "a", "a_pkey", "jobs_id_seq"}, Naming::role_first),
	          "");
}

TEST(RelationNames, RoleFirstNameOfAnOlderOne) {
	EXPECT_EQ(role_first_name("q_jobs_keyed", "q_jobs"), "keyed_q_jobs");
	EXPECT_EQ(role_first_name("q_jobs_id_seq", "q_jobs"), "id_seq_q_jobs");
	EXPECT_EQ(role_first_name("k_a_pkey", "k_a"), "pkey_k_a");
	EXPECT_FALSE(role_first_name("q_jobs_keyedx", "q_jobs"));
	EXPECT_FALSE(role_first_name("q_jobs", "q_jobs"));
	EXPECT_FALSE(role_first_name("q_jobsx_ready", "q_jobs"));
}

TEST(RelationNames, WordsOfTheSqlFunction) {
	for (Role role : all_roles)
		EXPECT_EQ(role_of_word(role_word(role)), role);
	EXPECT_FALSE(role_of_word("pkey_"));
	EXPECT_EQ(table_of_word("tasks"), QueueTable::tasks);
	EXPECT_EQ(table_of_word("key_rate"), QueueTable::key_rate);
	EXPECT_FALSE(table_of_word("q"));
	EXPECT_TRUE(has_role(QueueTable::tasks, Role::fair));
	EXPECT_TRUE(has_role(QueueTable::rate, Role::pkey));
	EXPECT_FALSE(has_role(QueueTable::keys, Role::ready));
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
