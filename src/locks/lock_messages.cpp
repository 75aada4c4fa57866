#include "locks/lock_messages.hpp"

#include <fmt/format.h>

#include "locks/lock_keys.hpp"
#include "common/pure.hpp" // last: checks that no PostgreSQL header came before

namespace concurrency::locks {

std::string lock_description(const std::string &name, std::optional<std::int64_t> resource, bool shared) {
	std::string text = fmt::format("{}lock \"{}\"", shared ? "shared " : "", name);
	if (resource)
		text += fmt::format(" on resource {}", *resource);
	return text;
}

namespace {

std::string describe_one(const LockHolder &h) {
	if (!h.pid)
		return "a prepared transaction (see pg_prepared_xacts)";
	std::string who = fmt::format("pid {} (", *h.pid);
	who += h.application.empty() ? std::string("no application name")
	                             : fmt::format("application \"{}\"", h.application);
	if (!h.state) {
		who += ", state not visible to you)";
		return who;
	}
	who += fmt::format(", state \"{}\")", *h.state);
	if (!h.granted)
		who += fmt::format(", waiting for {}", h.mode);
	if (h.seconds) {
		if (h.in_transaction)
			who += fmt::format(", for {} since its transaction started", human_duration(*h.seconds));
		else
			who += fmt::format(
			    ", for {} since its last state change (outside any transaction, so a session-level lock)",
			    human_duration(*h.seconds));
	}
	return who;
}

std::string join(const std::vector<LockHolder> &holders, bool granted) {
	std::string text;
	for (const auto &h : holders) {
		if (h.granted != granted)
			continue;
		if (!text.empty())
			text += "; ";
		text += describe_one(h);
	}
	return text;
}

} // namespace

std::string describe_holders(const std::vector<LockHolder> &holders, std::size_t total) {
	std::string held = join(holders, true);
	std::string queued = join(holders, false);
	std::string text;
	if (!held.empty())
		text = "Held by " + held;
	if (!queued.empty())
		text += (text.empty() ? "Not held in a conflicting mode, but queued ahead of this request: "
		                      : ". Queued ahead of this request: ") +
		        queued;
	if (text.empty())
		return "No session holds it any more.";
	if (total > holders.size())
		text += fmt::format("; and {} more", total - holders.size());
	return text + ".";
}

bool held_by_idle_session(const std::vector<LockHolder> &holders) {
	for (const auto &h : holders)
		if (h.granted && h.state && *h.state == "idle")
			return true;
	return false;
}

} // namespace concurrency::locks
