// Checks shared by the unit tests of the SQL text of the queue statements.
#pragma once

#include <string>

#include <gtest/gtest.h>

// The SPI layer pins search_path, and the statements do not rely on it: an
// operator written bare would resolve through any path it ran under. Every
// operator is OPERATOR(pg_catalog.…), count and min are pg_catalog's; "=" is
// left only as the assignment of SET and ON CONFLICT … WHERE.
inline void expect_every_operator_qualified(const std::string &statement) {
	std::string stripped = statement;
	for (std::size_t at; (at = stripped.find("OPERATOR(pg_catalog.")) != std::string::npos;)
		stripped.erase(at, stripped.find(')', at) - at + 1);
	for (const char *bare : {" < ", " > ", " <= ", " >= ", " <> ", " != ", " + ", " - ", " || "})
		EXPECT_EQ(stripped.find(bare), std::string::npos) << "bare" << bare << "in:\n" << statement;
	for (std::size_t at = 0; (at = stripped.find(" = ", at)) != std::string::npos; ++at) {
		std::size_t line = stripped.rfind('\n', at);
		std::string before = stripped.substr(line == std::string::npos ? 0 : line + 1, at - line);
		EXPECT_EQ(before.find("WHERE"), std::string::npos) << "bare = in:\n" << statement;
	}
	EXPECT_EQ(stripped.find(" count("), std::string::npos) << statement;
	EXPECT_EQ(stripped.find(" min("), std::string::npos) << statement;
}
