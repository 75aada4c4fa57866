#include "transactions/policy.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "common/error.hpp"
#include "locks/lock_keys.hpp"
#include "common/pure.hpp" // last: checks that no PostgreSQL header came before

namespace concurrency::transactions {

std::optional<std::string> isolation_setting(std::string_view text) {
	// lower case, runs of white space as one blank, trimmed
	std::string words;
	for (char c : text) {
		if (std::isspace(static_cast<unsigned char>(c))) {
			if (!words.empty() && words.back() != ' ')
				words += ' ';
		} else {
			words += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
		}
	}
	if (!words.empty() && words.back() == ' ')
		words.pop_back();
	for (const char *level : {"read uncommitted", "read committed", "repeatable read", "serializable"})
		if (words == level)
			return words;
	return std::nullopt;
}

bool transaction_retryable(std::string_view code) {
	return code == sqlstate::serialization_failure || code == sqlstate::deadlock_detected;
}

BackoffPolicy transaction_backoff() {
	BackoffPolicy p;
	p.base_us = 10'000;
	p.factor = 2.0;
	p.cap_us = 1'000'000;
	p.jitter = 0.5;
	return p;
}

bool ddl_retryable(std::string_view code) {
	return code == sqlstate::lock_not_available || code == sqlstate::deadlock_detected;
}

BackoffPolicy ddl_backoff(std::int64_t lock_timeout_us) {
	BackoffPolicy p;
	p.base_us = 50'000;
	p.factor = 2.0;
	p.cap_us = std::clamp<std::int64_t>(lock_timeout_us, 50'000, 1'000'000);
	p.jitter = 0.5;
	return p;
}

std::int64_t wait_before_next(std::int64_t delay_us, std::int64_t now_us, std::int64_t deadline_us) {
	std::int64_t left = deadline_us > now_us ? deadline_us - now_us : 0;
	return std::clamp<std::int64_t>(delay_us, 0, left);
}

namespace {

// At most `n` bytes of a query, cut at a character boundary, on one line.
std::string short_query(const std::string &query, std::size_t n = 160) {
	std::string one_line;
	for (char c : query)
		one_line += (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
	if (one_line.size() <= n)
		return one_line;
	std::size_t cut = n;
	while (cut > 0 && (static_cast<unsigned char>(one_line[cut]) & 0xC0) == 0x80)
		--cut; // not inside a UTF-8 sequence
	return one_line.substr(0, cut) + "…";
}

std::string describe_session(const Blocker &b) {
	std::string text = fmt::format("pid {} (", b.pid);
	text += b.application.empty() ? std::string("no application name")
	                              : fmt::format("application \"{}\"", b.application);
	if (!b.state)
		return text + ", state not visible to you)";
	text += fmt::format(", state \"{}\"", *b.state);
	if (b.xact_age_s)
		text += fmt::format(", transaction open for {}", locks::human_duration(*b.xact_age_s));
	if (!b.query.empty())
		text += fmt::format(", query \"{}\"", short_query(b.query));
	return text + ")";
}

} // namespace

std::string describe_blocker(const Blocker &b) {
	return describe_session(b) +
	       fmt::format(" {} {} on {}", b.granted ? "holds" : "waits ahead for", b.mode, b.relation);
}

Approach next_approach(int consecutive_losses, bool anybody_in_the_way, bool all_short_lived) {
	if (!anybody_in_the_way)
		return Approach::queue;
	if (consecutive_losses >= losses_before_queueing && all_short_lived)
		return Approach::queue;
	return Approach::conditional;
}

bool short_lived(const Blocker &b, std::int64_t seen_for_us, std::int64_t long_us) {
	if (b.state && b.state->rfind("idle in transaction", 0) == 0)
		return false;
	std::int64_t age_us = b.xact_age_s ? static_cast<std::int64_t>(*b.xact_age_s * 1e6) : seen_for_us;
	return std::max(age_us, seen_for_us) < long_us;
}

Signal signal_for(const Blocker &b) {
	if (!b.state || b.state->rfind("idle in transaction", 0) == 0)
		return Signal::terminate;
	if (*b.state == "active" || *b.state == "fastpath function call")
		return Signal::cancel;
	return Signal::terminate; // idle outside a transaction yet holding: a session-level lock
}

std::vector<std::size_t> BlockerLog::observe(const std::vector<Blocker> &seen, std::int64_t now_us) {
	for (auto &[pid, e] : entries_)
		e.in_last_look = false;
	std::vector<std::size_t> due;
	for (std::size_t i = 0; i < seen.size(); ++i) {
		const Blocker &b = seen[i];
		auto [it, fresh] = entries_.try_emplace(b.pid);
		Entry &e = it->second;
		if (e.in_last_look) // the same pid twice in one look (two relations)
			continue;
		bool continuing = !fresh && std::any_of(last_look_.begin(), last_look_.end(),
		                                        [&](const Blocker &x) { return x.pid == b.pid; });
		if (!continuing) {
			if (!fresh)
				e.total_us += e.last_seen_us - e.since_us;
			e.since_us = now_us;
		}
		e.last = b;
		e.last_seen_us = now_us;
		e.in_last_look = true;
		if (!e.last_notice_us || now_us - *e.last_notice_us >= notice_interval_us_) {
			e.last_notice_us = now_us;
			due.push_back(i);
		}
	}
	last_look_ = seen;
	return due;
}

std::int64_t BlockerLog::seen_for_us(int pid) const {
	auto it = entries_.find(pid);
	if (it == entries_.end() || !it->second.in_last_look)
		return 0;
	return it->second.last_seen_us - it->second.since_us;
}

bool BlockerLog::all_short_lived(std::int64_t long_us) const {
	return std::all_of(last_look_.begin(), last_look_.end(),
	                   [&](const Blocker &b) { return short_lived(b, seen_for_us(b.pid), long_us); });
}

std::string BlockerLog::longest(std::size_t n) const {
	std::vector<std::pair<std::int64_t, const Entry *>> by_time;
	for (const auto &[pid, e] : entries_)
		by_time.emplace_back(e.total_us + (e.last_seen_us - e.since_us), &e);
	std::stable_sort(by_time.begin(), by_time.end(),
	                 [](const auto &a, const auto &b) { return a.first > b.first; });
	std::string text;
	for (std::size_t i = 0; i < by_time.size() && i < n; ++i) {
		if (!text.empty())
			text += "; ";
		text += fmt::format("{}, in the way for {}", describe_session(by_time[i].second->last),
		                    locks::human_duration(static_cast<double>(by_time[i].first) / 1e6));
	}
	if (by_time.size() > n)
		text += fmt::format("; and {} more", by_time.size() - n);
	return text;
}

std::string give_up_detail(int attempts, double waited_s, const std::string &longest_blockers) {
	std::string text = fmt::format("{} attempt{}, {} waited.", attempts, attempts == 1 ? "" : "s",
	                               locks::human_duration(waited_s));
	if (!longest_blockers.empty())
		text += " In the way longest: " + longest_blockers + ".";
	return text;
}

std::string success_notice(int attempts, double waited_s) {
	return fmt::format("run_ddl: done in {} attempt{}, {} waited", attempts, attempts == 1 ? "" : "s",
	                   locks::human_duration(waited_s));
}

} // namespace concurrency::transactions
