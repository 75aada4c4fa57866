#include "common/sql_text.hpp"
#include "common/pure.hpp" // last: checks that no PostgreSQL header came before

namespace concurrency {

std::string quote_ident(std::string_view ident) {
	std::string out;
	out.reserve(ident.size() + 2);
	out.push_back('"');
	for (char c : ident) {
		if (c == '"')
			out.push_back('"');
		out.push_back(c);
	}
	out.push_back('"');
	return out;
}

std::string quote_literal(std::string_view text) {
	std::string out;
	out.reserve(text.size() + 3);
	if (text.find('\\') != std::string_view::npos)
		out.push_back('E');
	out.push_back('\'');
	for (char c : text) {
		if (c == '\'' || c == '\\')
			out.push_back(c);
		out.push_back(c);
	}
	out.push_back('\'');
	return out;
}

} // namespace concurrency
