#include "queue/permission_set.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/sql_text.hpp"
#include "common/pure.hpp" // last: checks that no PostgreSQL header came before

namespace concurrency::queue {

namespace {
constexpr Permission every_permission[] = {Permission::enqueue, Permission::work, Permission::read,
                                           Permission::manage};
} // namespace

const char *permission_name(Permission p) {
	switch (p) {
	case Permission::enqueue:
		return "enqueue";
	case Permission::work:
		return "work";
	case Permission::read:
		return "read";
	case Permission::manage:
		return "manage";
	}
	return "?";
}

std::optional<Permission> parse_permission(std::string_view word) {
	for (Permission p : every_permission)
		if (word == permission_name(p))
			return p;
	return std::nullopt;
}

ParsedPermissions parse_permissions(const std::vector<std::string> &words) {
	ParsedPermissions parsed;
	for (const std::string &word : words) {
		auto p = parse_permission(word);
		if (!p) {
			parsed.unknown = word;
			return parsed;
		}
		parsed.mask |= mask_of(*p);
	}
	return parsed;
}

std::vector<std::string> permission_names(PermissionMask mask) {
	std::vector<std::string> names;
	for (Permission p : every_permission)
		if (mask & mask_of(p))
			names.emplace_back(permission_name(p));
	return names;
}

std::string permission_choices() {
	return fmt::format("{}", fmt::join(permission_names(all_permissions), ", "));
}

std::string grant_statement(std::string_view queue, std::string_view role, Permission p) {
	return fmt::format("SELECT concurrency.grant_queue({}, {}, ARRAY[{}]);", quote_literal(queue),
	                   role.empty() ? std::string("'public'") : quote_literal(role),
	                   quote_literal(permission_name(p)));
}

} // namespace concurrency::queue
