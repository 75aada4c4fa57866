// The permissions a role may hold on a queue (enqueue, work, read, manage):
// their names, which functions need which, and the text of the messages that
// name them. Pure C++ (no PostgreSQL headers); the checks themselves are in
// queue/permissions.cpp. Unit-tested in test/unit/queue_permissions_test.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace concurrency::queue {

// One bit each, so that what a role holds on a queue is one mask.
enum class Permission : std::uint8_t {
	enqueue = 1, // enqueue, enqueue_batch
	work = 2,    // dequeue, heartbeat, complete, fail (and the payloads of the tasks claimed)
	read = 4,    // task_status, queue_keys, queue_stats counts, SELECT on the queue's table
	manage = 8,  // cancel, retry_dead, purge, alter_queue, grant_queue and revoke_queue
};
using PermissionMask = std::uint8_t;
inline constexpr PermissionMask all_permissions = 1 | 2 | 4 | 8;

constexpr PermissionMask mask_of(Permission p) {
	return static_cast<PermissionMask>(p);
}

// "enqueue", "work", "read", "manage".
const char *permission_name(Permission p);

// The permission a word names (exactly, in lower case), or nothing.
std::optional<Permission> parse_permission(std::string_view word);

// The permissions a list of words names, or the first word that names none.
struct ParsedPermissions {
	PermissionMask mask = 0;
	std::optional<std::string> unknown;
};
ParsedPermissions parse_permissions(const std::vector<std::string> &words);

// The names of the permissions in `mask`, in the order above.
std::vector<std::string> permission_names(PermissionMask mask);

// "enqueue, work, read, manage": for messages that list the choices.
std::string permission_choices();

// The statement that grants `p` on `queue` to `role` (PUBLIC when `role` is
// empty), as the HINT of a refusal shows it: every value quoted as a literal.
std::string grant_statement(std::string_view queue, std::string_view role, Permission p);

} // namespace concurrency::queue
