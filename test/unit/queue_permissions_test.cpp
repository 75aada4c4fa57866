#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "queue/permission_set.hpp"

using namespace concurrency::queue;

TEST(QueuePermissions, WordsAreExactLowerCase) {
	EXPECT_EQ(parse_permission("enqueue"), Permission::enqueue);
	EXPECT_EQ(parse_permission("work"), Permission::work);
	EXPECT_EQ(parse_permission("read"), Permission::read);
	EXPECT_EQ(parse_permission("manage"), Permission::manage);
	for (const char *word : {"Work", "WORK", " work", "work ", "", "all", "owner", "select", "enqueue;"})
		EXPECT_FALSE(parse_permission(word).has_value()) << word;
}

TEST(QueuePermissions, NamesRoundTrip) {
	for (Permission p : {Permission::enqueue, Permission::work, Permission::read, Permission::manage})
		EXPECT_EQ(parse_permission(permission_name(p)), p);
}

TEST(QueuePermissions, ListIsAUnionAndStopsAtTheFirstUnknownWord) {
	auto both = parse_permissions({"work", "read", "work"});
	EXPECT_FALSE(both.unknown);
	EXPECT_EQ(both.mask, mask_of(Permission::work) | mask_of(Permission::read));
	auto bad = parse_permissions({"work", "steal", "also-bad"});
	ASSERT_TRUE(bad.unknown);
	EXPECT_EQ(*bad.unknown, "steal");
	EXPECT_EQ(parse_permissions({}).mask, 0);
}

TEST(QueuePermissions, EachPermissionIsItsOwnBit) {
	PermissionMask seen = 0;
	for (Permission p : {Permission::enqueue, Permission::work, Permission::read, Permission::manage}) {
		EXPECT_EQ(seen & mask_of(p), 0);
		seen |= mask_of(p);
	}
	EXPECT_EQ(seen, all_permissions);
	EXPECT_EQ(permission_names(all_permissions),
	          (std::vector<std::string>{"enqueue", "work", "read", "manage"}));
	EXPECT_EQ(permission_names(mask_of(Permission::manage) | mask_of(Permission::enqueue)),
	          (std::vector<std::string>{"enqueue", "manage"}));
	EXPECT_EQ(permission_choices(), "enqueue, work, read, manage");
}

TEST(QueuePermissions, GrantStatementQuotesEveryValue) {
	EXPECT_EQ(grant_statement("orders", "bob", Permission::work),
	          "SELECT concurrency.grant_queue('orders', 'bob', ARRAY['work']);");
	EXPECT_EQ(grant_statement("x');DROP", "it's", Permission::read),
	          "SELECT concurrency.grant_queue('x'');DROP', 'it''s', ARRAY['read']);");
	EXPECT_EQ(grant_statement("q", "", Permission::enqueue),
	          "SELECT concurrency.grant_queue('q', 'public', ARRAY['enqueue']);");
	// a backslash needs an E'' literal (quote_literal), so the statement stays valid
	EXPECT_EQ(grant_statement("a\\b", "r", Permission::manage),
	          "SELECT concurrency.grant_queue(E'a\\\\b', 'r', ARRAY['manage']);");
}
