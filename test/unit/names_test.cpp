#include <string>

#include <gtest/gtest.h>

#include "common/names.hpp"
#include "common/sql_text.hpp"

using concurrency::name_problem;

TEST(NameRules, AcceptsOrdinaryAndHostileLookingNames) {
	EXPECT_FALSE(name_problem("outbox_relay", 63));
	EXPECT_FALSE(name_problem("a", 63));
	EXPECT_FALSE(name_problem("x\";DROP/**/TABLE/**/t;--", 63));
	EXPECT_FALSE(name_problem("ñandú-çà", 63));
	EXPECT_FALSE(name_problem(std::string(63, 'a'), 63));
}

TEST(NameRules, RejectsEmptyAndTooLong) {
	EXPECT_TRUE(name_problem("", 63));
	EXPECT_TRUE(name_problem(std::string(64, 'a'), 63));
	EXPECT_TRUE(name_problem(std::string(49, 'a'), 48));
	EXPECT_FALSE(name_problem(std::string(48, 'a'), 48));
}

TEST(NameRules, RejectsWhitespaceAndControls) {
	for (const std::string &bad : std::initializer_list<std::string>{
	         "a b", "a\tb", "a\nb", "a\rb", std::string("a\0b", 3), "a\x7f", "\x1b[31m",
	         "a\xc2\xa0"
	         "b",
	         "a\xe2\x80\x83"
	         "b",
	         "a\xe3\x80\x80"
	         "b",
	         "a\xc2\x85"})
		EXPECT_TRUE(name_problem(bad, 63)) << bad;
}

TEST(NameRules, MessageSaysWhy) {
	EXPECT_NE(name_problem(std::string(70, 'a'), 63)->find("70 bytes"), std::string::npos);
	EXPECT_NE(name_problem("a b", 63)->find("whitespace"), std::string::npos);
}

TEST(SqlText, QuoteIdentAlwaysQuotesAndDoublesQuotes) {
	EXPECT_EQ(concurrency::quote_ident("q_jobs"), "\"q_jobs\"");
	EXPECT_EQ(concurrency::quote_ident("a\"b"), "\"a\"\"b\"");
	EXPECT_EQ(concurrency::quote_ident("Robert'); DROP TABLE students;--"),
	          "\"Robert'); DROP TABLE students;--\"");
}

TEST(SqlText, QuoteLiteral) {
	EXPECT_EQ(concurrency::quote_literal("it's"), "'it''s'");
	EXPECT_EQ(concurrency::quote_literal("a\\b"), "E'a\\\\b'");
}
