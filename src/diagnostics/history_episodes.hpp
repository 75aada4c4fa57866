// Lock-wait episodes, as pure C++ (no PostgreSQL headers): the logic behind
// concurrency.lock_history, unit-tested without a server.
//
// The sampler feeds one Sample per interval: the sessions of one lock-manager
// snapshot, the locks they wait for, and the waits-for edges. An *episode* is
// one root blocker (a session that waits for nobody, or the lowest session of
// a wait cycle) blocking at least one session, from the first sample that saw
// it to the last one. A root is a session identity, not a pid: a pid reused by
// a new backend (another start time) is another root, so a new episode.
// When a root is no longer seen blocking, its episode ends: `released` when
// the session still exists, `root_exited` when it is gone.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "diagnostics/wait_graph.hpp"

namespace concurrency::diagnostics {

// A heavyweight lock tag (PostgreSQL's LOCKTAG, field by field).
struct HistoryLockKey {
	std::uint32_t field1 = 0, field2 = 0, field3 = 0;
	std::uint16_t field4 = 0;
	std::uint8_t type = 0, method = 0;

	friend bool operator==(const HistoryLockKey &a, const HistoryLockKey &b) {
		return a.field1 == b.field1 && a.field2 == b.field2 && a.field3 == b.field3 && a.field4 == b.field4 &&
		       a.type == b.type && a.method == b.method;
	}
};

// Who a root is: a backend's pid and start time (microseconds; 0 when not
// known), or for a prepared transaction pid 0 and its xid.
struct RootKey {
	int pid = 0;
	std::int64_t identity = 0;

	friend bool operator<(const RootKey &a, const RootKey &b) {
		return a.pid != b.pid ? a.pid < b.pid : a.identity < b.identity;
	}
	friend bool operator==(const RootKey &a, const RootKey &b) {
		return a.pid == b.pid && a.identity == b.identity;
	}
};

// One session of a sample.
struct SampledSession {
	RootKey key;
	std::int64_t waiting_since = 0; // microseconds; 0 when it does not wait or it is not known
	std::uint32_t lock = none;      // index into Sample::locks of the lock it waits for
};

// One lock-manager snapshot, as the tracker needs it. Times in microseconds.
struct Sample {
	std::int64_t at = 0;     // when it was taken
	std::int64_t period = 0; // how long it stands for (the time since the previous sample)
	std::vector<SampledSession> sessions;
	std::vector<HistoryLockKey> locks;
	std::vector<std::pair<std::uint32_t, std::uint32_t>> edges; // (waiter, blocker), session indexes
};

enum class EndedBy : std::uint8_t { none = 0, released = 1, root_exited = 2 };

struct Episode {
	std::uint64_t id = 0;
	RootKey root;
	std::int64_t started_at = 0, last_seen = 0; // first and last sample that saw it
	std::uint32_t waiters = 0;                  // blocked now (directly or transitively)
	std::uint32_t max_waiters = 0, max_depth = 0;
	std::int64_t longest_wait = 0; // microseconds
	double waiter_seconds = 0;     // sum over samples of waiters * period
	bool in_cycle = false;         // the root was seen on a wait cycle (a deadlock)
	EndedBy ended_by = EndedBy::none;
	// Locks waited on, with how many waiter-samples each, the most first.
	std::vector<std::pair<HistoryLockKey, std::uint64_t>> objects;
	std::vector<int> waiter_pids; // distinct pids seen waiting in it, first seen first
	// Of the latest sample that saw it (indexes into its Sample::sessions):
	// the root, and the sessions in its tree, the longest waiting first.
	std::uint32_t root_session = none;
	std::vector<std::uint32_t> waiter_sessions;
	// Free for the caller (where it keeps the episode); the tracker keeps it.
	std::uint32_t slot = none;

	std::int64_t duration() const { return last_seen - started_at; }
};

class EpisodeTracker {
  public:
	static constexpr std::size_t max_objects = 16;     // locks counted per episode
	static constexpr std::size_t max_waiter_pids = 16; // pids kept per episode

	explicit EpisodeTracker(std::uint64_t next_id = 1) : next_id_(next_id) {}

	struct Changes {
		std::vector<Episode *> ongoing; // started or seen again in this sample
		std::vector<Episode> ended;     // ended by this sample (ended_by set)
	};

	// Takes in one sample. `alive(root)`: whether that session still exists
	// (decides released or root_exited for the episodes that end).
	Changes observe(const Sample &sample, const std::function<bool(const RootKey &)> &alive);

	// lock_history_reset() cleared the episodes below `floor`: the ongoing
	// ones among them are forgotten, so a root still blocking at the next
	// sample starts a new episode.
	void forget_below(std::uint64_t floor);

	// Takes up an ongoing episode recorded by an earlier run of the sampler.
	void adopt(const Episode &episode);

	std::size_t active() const { return active_.size(); }
	std::uint64_t next_id() const { return next_id_; }
	void set_next_id(std::uint64_t id) { next_id_ = id; }

  private:
	std::map<RootKey, Episode>::iterator find(const RootKey &key);

	std::map<RootKey, Episode> active_;
	std::uint64_t next_id_;
};

// The `n` locks waited on most in an episode.
std::vector<HistoryLockKey> top_objects(const Episode &episode, std::size_t n);

} // namespace concurrency::diagnostics
