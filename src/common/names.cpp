#include "common/names.hpp"

#include <fmt/format.h>
#include "common/pure.hpp" // last: checks that no PostgreSQL header came before

namespace concurrency {

namespace {

// Length in bytes of a UTF-8 encoded space or control character at s[i], or 0.
std::size_t unicode_space_at(std::string_view s, std::size_t i) {
	auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
	std::size_t left = s.size() - i;
	if (left >= 2 && byte(i) == 0xC2 && byte(i + 1) >= 0x80 && byte(i + 1) <= 0xA0)
		return 2; // U+0080–U+009F controls, U+00A0 no-break space
	if (left >= 3 && byte(i) == 0xE2 && byte(i + 1) == 0x80 &&
	    ((byte(i + 2) >= 0x80 && byte(i + 2) <= 0x8B) || byte(i + 2) == 0xA8 || byte(i + 2) == 0xA9 ||
	     byte(i + 2) == 0xAF))
		return 3; // U+2000–U+200B, line/paragraph separators, U+202F
	if (left >= 3 && byte(i) == 0xE2 && byte(i + 1) == 0x81 && byte(i + 2) == 0x9F)
		return 3; // U+205F
	if (left >= 3 && byte(i) == 0xE3 && byte(i + 1) == 0x80 && byte(i + 2) == 0x80)
		return 3; // U+3000
	if (left >= 3 && byte(i) == 0xEF && byte(i + 1) == 0xBB && byte(i + 2) == 0xBF)
		return 3; // U+FEFF
	return 0;
}

} // namespace

std::optional<std::string> name_problem(std::string_view name, std::size_t max_bytes) {
	if (name.empty())
		return std::string("name is empty");
	if (name.size() > max_bytes)
		return fmt::format("name is {} bytes long, at most {} are allowed", name.size(), max_bytes);
	for (std::size_t i = 0; i < name.size(); ++i) {
		unsigned char c = static_cast<unsigned char>(name[i]);
		if (c < 0x20 || c == 0x7F)
			return fmt::format("name contains a control character (byte 0x{:02X} at offset {})", c, i);
		if (c == ' ')
			return fmt::format("name contains whitespace (at offset {})", i);
		if (c >= 0x80 && unicode_space_at(name, i) > 0)
			return fmt::format("name contains a Unicode space or control character (at offset {})", i);
	}
	return std::nullopt;
}

} // namespace concurrency
