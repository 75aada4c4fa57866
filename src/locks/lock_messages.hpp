// Texts of the named-lock errors (pure C++): who holds a lock that could not
// be obtained in time, and how that lock is called.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace concurrency::locks {

// A session that holds (or waits ahead of us for) a lock, as pg_locks and
// pg_stat_activity show it.
struct LockHolder {
	std::optional<int> pid;           // none: a prepared transaction holds it
	std::string application;          // application_name
	std::optional<std::string> state; // none: not visible to the caller
	bool in_transaction = false;      // duration counted from xact_start, else state_change
	std::optional<double> seconds;    // how long, as above; none when not visible
	bool granted = true;              // false: queued ahead of the request
	std::string mode;                 // ExclusiveLock, ShareLock
};

// 'lock "relay"', 'shared lock "booking" on resource -42'
std::string lock_description(const std::string &name, std::optional<std::int64_t> resource, bool shared);

// The DETAIL of a timeout: every holder with pid, application, state and how
// long (saying whether that counts from its transaction start or from its
// last state change). `total` is how many there are in all (more than
// `holders` when the list was cut short).
std::string describe_holders(const std::vector<LockHolder> &holders, std::size_t total);

// True when a granted holder is idle outside any transaction: a session-level
// lock, likely left behind by a connection pool.
bool held_by_idle_session(const std::vector<LockHolder> &holders);

} // namespace concurrency::locks
