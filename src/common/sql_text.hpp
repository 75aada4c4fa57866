// Quoting for SQL built in C++ (pure C++, no PostgreSQL headers).
#pragma once

#include <string>
#include <string_view>

namespace concurrency {

// Always double-quotes, doubling embedded quotes: "a""b". Quoting every
// identifier (instead of only when needed) is always correct and never
// depends on the keyword list of a server version.
std::string quote_ident(std::string_view ident);

// 'it''s' — a standard_conforming_strings literal; backslashes need an E''
// literal, which this returns when the text contains one.
std::string quote_literal(std::string_view text);

} // namespace concurrency
