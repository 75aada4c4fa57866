// A counter as its functions see it: the catalog row read for a call, the
// caller's permission on it checked, and the switch to the extension's owner
// for the statements the call then runs on the counter's tables.
//
// The counter functions are SECURITY INVOKER. Each reads the counter's row
// (with the latest snapshot, so that a revoke counts at the next call), checks
// that the calling role holds what the call needs (its owner and superusers
// hold all; 'use' adds and reads; 'read' reads), and then runs its statements
// as the owner of concurrency.counter, in a security-restricted operation:
// the caller needs no privilege on the tables.
#pragma once

#include <string>

#include "pg/guard.hpp"

namespace concurrency::counters {

// The most slots a counter may have (the table's CHECK says the same).
inline constexpr int max_slots = 1024;
// The longest name (characters; the table's CHECK says the same).
inline constexpr int max_name_length = 200;

enum class Need { read, use, own };

struct Counter {
	std::string name;
	int slots = 0;
	bool has_min = false;
	bool has_max = false;
};

// While it lives, the current user is the owner of concurrency.counter, in a
// security-restricted operation; the caller's user and context come back
// when it goes, also when an error unwinds it.
class AsExtensionOwner {
  public:
	AsExtensionOwner();
	~AsExtensionOwner();
	AsExtensionOwner(const AsExtensionOwner &) = delete;
	AsExtensionOwner &operator=(const AsExtensionOwner &) = delete;

  private:
	Oid saved_user_;
	int saved_context_;
};

// The name argument `n`: 22004 for NULL, 22023 for '' or a name too long.
std::string counter_name_arg(FunctionCallInfo fcinfo, int n, SourceLocation at = SourceLocation::current());

// Reads the counter `name` and checks that `user` holds `need` on it: 42704
// when there is no such counter, 42501 when the permission is missing.
// `function` names the call in the message. SPI connected, as the extension
// owner; `lock` takes the catalog row FOR NO KEY UPDATE first (admin calls).
Counter open_counter(const std::string &name, Oid user, Need need, const char *function, bool lock = false);

} // namespace concurrency::counters
