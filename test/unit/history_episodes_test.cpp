#include <cstdint>
#include <set>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "diagnostics/history_episodes.hpp"

using namespace concurrency::diagnostics;

namespace {

constexpr std::int64_t ms = 1000; // microseconds

// A sample builder: sessions by pid (identity = pid * 10 unless given),
// edges by pid.
struct S {
	Sample sample;
	explicit S(std::int64_t at_ms, std::int64_t period_ms = 100) {
		sample.at = at_ms * ms;
		sample.period = period_ms * ms;
	}
	std::uint32_t index(int pid, std::int64_t identity = -1) {
		if (identity < 0)
			identity = pid * 10;
		for (std::uint32_t i = 0; i < sample.sessions.size(); ++i)
			if (sample.sessions[i].key.pid == pid)
				return i;
		SampledSession s;
		s.key = RootKey{pid, identity};
		sample.sessions.push_back(s);
		return static_cast<std::uint32_t>(sample.sessions.size() - 1);
	}
	std::uint32_t lock(std::uint32_t relid) {
		HistoryLockKey k;
		k.field1 = 5;
		k.field2 = relid;
		for (std::uint32_t i = 0; i < sample.locks.size(); ++i)
			if (sample.locks[i] == k)
				return i;
		sample.locks.push_back(k);
		return static_cast<std::uint32_t>(sample.locks.size() - 1);
	}
	// `waiter` waits (since `since_ms`, on relation `relid`) for `blocker`
	S &wait(int waiter, int blocker, std::uint32_t relid = 100, std::int64_t since_ms = 0) {
		std::uint32_t b = index(blocker);
		std::uint32_t w = index(waiter);
		sample.sessions[w].lock = lock(relid);
		if (since_ms > 0)
			sample.sessions[w].waiting_since = since_ms * ms;
		sample.edges.emplace_back(w, b);
		return *this;
	}
	// a pid with another identity (a reused pid)
	S &reused(int pid, std::int64_t identity) {
		index(pid, identity);
		return *this;
	}
};

struct Alive {
	std::set<std::pair<int, std::int64_t>> live;
	bool operator()(const RootKey &k) const { return live.count({k.pid, k.identity}) > 0; }
};

std::function<bool(const RootKey &)> all_alive = [](const RootKey &) { return true; };

} // namespace

TEST(HistoryEpisodes, NothingBlockedNoEpisode) {
	EpisodeTracker t;
	S s(0);
	s.index(1);
	s.index(2);
	auto c = t.observe(s.sample, all_alive);
	EXPECT_TRUE(c.ongoing.empty());
	EXPECT_TRUE(c.ended.empty());
	EXPECT_EQ(t.active(), 0u);
}

TEST(HistoryEpisodes, OneRootQueueBehindDdl) {
	// 10 idle in transaction; 20 (ALTER) waits for it; 30, 40 queue behind 20
	EpisodeTracker t;
	S a(1000);
	a.wait(20, 10, 100, 900);
	auto c = t.observe(a.sample, all_alive);
	ASSERT_EQ(c.ongoing.size(), 1u);
	const std::uint64_t id = c.ongoing[0]->id;
	EXPECT_EQ(c.ongoing[0]->root.pid, 10);
	EXPECT_EQ(c.ongoing[0]->max_waiters, 1u);

	S b(1100);
	b.wait(20, 10, 100, 900).wait(30, 20, 100, 1050).wait(40, 20, 100, 1060);
	c = t.observe(b.sample, all_alive);
	ASSERT_EQ(c.ongoing.size(), 1u);
	const Episode &e = *c.ongoing[0];
	EXPECT_EQ(e.id, id);
	EXPECT_EQ(e.waiters, 3u);
	EXPECT_EQ(e.max_waiters, 3u);
	EXPECT_EQ(e.max_depth, 2u);
	EXPECT_EQ(e.longest_wait, 200 * ms);
	EXPECT_EQ(e.started_at, 1000 * ms);
	EXPECT_EQ(e.last_seen, 1100 * ms);
	EXPECT_DOUBLE_EQ(e.waiter_seconds, 0.1 * 1 + 0.1 * 3);
	EXPECT_EQ(e.waiter_pids, (std::vector<int>{20, 30, 40}));
	ASSERT_EQ(e.objects.size(), 1u);
	EXPECT_EQ(e.objects[0].first.field2, 100u);
	EXPECT_EQ(e.objects[0].second, 4u); // waiter-samples
	// the longest waiting first
	ASSERT_EQ(e.waiter_sessions.size(), 3u);
	EXPECT_EQ(b.sample.sessions[e.waiter_sessions[0]].key.pid, 20);
	EXPECT_EQ(b.sample.sessions[e.root_session].key.pid, 10);

	// the root commits: the waiters go on (or not), nobody is blocked
	S d(1200);
	d.index(10);
	c = t.observe(d.sample, all_alive);
	EXPECT_TRUE(c.ongoing.empty());
	ASSERT_EQ(c.ended.size(), 1u);
	EXPECT_EQ(c.ended[0].id, id);
	EXPECT_EQ(c.ended[0].ended_by, EndedBy::released);
	EXPECT_EQ(c.ended[0].duration(), 100 * ms);
	EXPECT_EQ(c.ended[0].max_waiters, 3u);
	EXPECT_EQ(t.active(), 0u);
}

TEST(HistoryEpisodes, RootExited) {
	EpisodeTracker t;
	S a(0);
	a.wait(2, 1);
	t.observe(a.sample, all_alive);
	Alive alive; // nobody: the root was terminated
	S b(100);
	auto c = t.observe(b.sample, std::ref(alive));
	ASSERT_EQ(c.ended.size(), 1u);
	EXPECT_EQ(c.ended[0].ended_by, EndedBy::root_exited);
	EXPECT_EQ(c.ended[0].root.pid, 1);
}

TEST(HistoryEpisodes, EndsWhileOthersGoOn) {
	EpisodeTracker t;
	S a(0);
	a.wait(2, 1, 100).wait(4, 3, 200);
	auto c = t.observe(a.sample, all_alive);
	ASSERT_EQ(c.ongoing.size(), 2u);
	S b(100);
	b.wait(4, 3, 200);
	c = t.observe(b.sample, all_alive);
	ASSERT_EQ(c.ongoing.size(), 1u);
	EXPECT_EQ(c.ongoing[0]->root.pid, 3);
	ASSERT_EQ(c.ended.size(), 1u);
	EXPECT_EQ(c.ended[0].root.pid, 1);
	EXPECT_NE(c.ended[0].id, c.ongoing[0]->id);
}

TEST(HistoryEpisodes, ReusedPidIsANewEpisode) {
	EpisodeTracker t;
	S a(0);
	a.wait(2, 1);
	auto c = t.observe(a.sample, all_alive);
	const std::uint64_t first = c.ongoing[0]->id;
	// pid 1 exited between two samples and a new backend got pid 1, blocking again
	S b(100);
	b.reused(1, 777).wait(2, 1);
	Alive alive;
	alive.live = {{1, 777}, {2, 20}};
	c = t.observe(b.sample, std::ref(alive));
	ASSERT_EQ(c.ongoing.size(), 1u);
	EXPECT_NE(c.ongoing[0]->id, first);
	EXPECT_EQ(c.ongoing[0]->root.identity, 777);
	EXPECT_EQ(c.ongoing[0]->started_at, 100 * ms);
	ASSERT_EQ(c.ended.size(), 1u);
	EXPECT_EQ(c.ended[0].id, first);
	EXPECT_EQ(c.ended[0].ended_by, EndedBy::root_exited);
}

TEST(HistoryEpisodes, UnknownStartTimeIsTheSameRoot) {
	EpisodeTracker t;
	S a(0);
	a.reused(1, 0).wait(2, 1);
	auto c = t.observe(a.sample, all_alive);
	const std::uint64_t id = c.ongoing[0]->id;
	S b(100);
	b.reused(1, 555).wait(2, 1);
	c = t.observe(b.sample, all_alive);
	ASSERT_EQ(c.ongoing.size(), 1u);
	EXPECT_EQ(c.ongoing[0]->id, id);
	EXPECT_EQ(c.ongoing[0]->root.identity, 555);
	EXPECT_TRUE(c.ended.empty());
}

TEST(HistoryEpisodes, DeadlockCycle) {
	EpisodeTracker t;
	S a(0);
	a.wait(7, 5, 100, 1).wait(5, 7, 200, 1);
	auto c = t.observe(a.sample, all_alive);
	ASSERT_EQ(c.ongoing.size(), 1u);
	EXPECT_EQ(c.ongoing[0]->root.pid, 5); // a cycle is rooted at its lowest session
	EXPECT_TRUE(c.ongoing[0]->in_cycle);
	EXPECT_EQ(c.ongoing[0]->max_waiters, 1u);
	// the deadlock detector aborts 7: 5 gets its lock
	S b(100);
	b.index(5);
	c = t.observe(b.sample, all_alive);
	ASSERT_EQ(c.ended.size(), 1u);
	EXPECT_TRUE(c.ended[0].in_cycle);
	EXPECT_EQ(c.ended[0].ended_by, EndedBy::released);
}

TEST(HistoryEpisodes, ObjectsMostWaitedFirst) {
	EpisodeTracker t;
	S a(0);
	a.wait(2, 1, 100).wait(3, 1, 200).wait(4, 1, 200);
	auto c = t.observe(a.sample, all_alive);
	auto top = top_objects(*c.ongoing[0], 1);
	ASSERT_EQ(top.size(), 1u);
	EXPECT_EQ(top[0].field2, 200u);
	EXPECT_EQ(top_objects(*c.ongoing[0], 5).size(), 2u);
}

TEST(HistoryEpisodes, BoundedLists) {
	EpisodeTracker t;
	S a(0);
	for (int pid = 2; pid < 100; ++pid)
		a.wait(pid, 1, static_cast<std::uint32_t>(1000 + pid));
	auto c = t.observe(a.sample, all_alive);
	ASSERT_EQ(c.ongoing.size(), 1u);
	EXPECT_EQ(c.ongoing[0]->max_waiters, 98u);
	EXPECT_EQ(c.ongoing[0]->objects.size(), EpisodeTracker::max_objects);
	EXPECT_EQ(c.ongoing[0]->waiter_pids.size(), EpisodeTracker::max_waiter_pids);
	EXPECT_EQ(c.ongoing[0]->waiter_sessions.size(), 98u);
}

TEST(HistoryEpisodes, ForgetBelowStartsAgain) {
	EpisodeTracker t;
	S a(0);
	a.wait(2, 1);
	auto c = t.observe(a.sample, all_alive);
	const std::uint64_t id = c.ongoing[0]->id;
	t.forget_below(id + 1);
	EXPECT_EQ(t.active(), 0u);
	S b(100);
	b.wait(2, 1);
	c = t.observe(b.sample, all_alive);
	ASSERT_EQ(c.ongoing.size(), 1u);
	EXPECT_GT(c.ongoing[0]->id, id);
	EXPECT_EQ(c.ongoing[0]->started_at, 100 * ms);
	EXPECT_TRUE(c.ended.empty());
}

TEST(HistoryEpisodes, AdoptedEpisodeGoesOn) {
	Episode old;
	old.id = 41;
	old.root = RootKey{1, 10};
	old.started_at = 0;
	old.last_seen = 50 * ms;
	old.max_waiters = 5;
	EpisodeTracker t;
	t.adopt(old);
	EXPECT_EQ(t.next_id(), 42u);
	S a(100);
	a.wait(2, 1);
	auto c = t.observe(a.sample, all_alive);
	ASSERT_EQ(c.ongoing.size(), 1u);
	EXPECT_EQ(c.ongoing[0]->id, 41u);
	EXPECT_EQ(c.ongoing[0]->max_waiters, 5u);
	EXPECT_EQ(c.ongoing[0]->duration(), 100 * ms);
}

TEST(HistoryEpisodes, PreparedTransactionsByXid) {
	// two prepared transactions (pid 0) are two roots
	EpisodeTracker t;
	S a(0);
	std::uint32_t p1 = a.index(0, 900);
	a.sample.sessions.push_back(SampledSession{RootKey{0, 901}, 0, none});
	std::uint32_t p2 = 1;
	std::uint32_t w1 = a.index(5), w2 = a.index(6);
	a.sample.edges = {{w1, p1}, {w2, p2}};
	auto c = t.observe(a.sample, all_alive);
	EXPECT_EQ(c.ongoing.size(), 2u);
}

TEST(HistoryEpisodes, IdsIncrease) {
	EpisodeTracker t(100);
	for (int i = 0; i < 5; ++i) {
		S a(i * 200);
		a.wait(2, 1);
		auto c = t.observe(a.sample, all_alive);
		ASSERT_EQ(c.ongoing.size(), 1u);
		EXPECT_EQ(c.ongoing[0]->id, 100u + static_cast<std::uint64_t>(i));
		S b(i * 200 + 100);
		c = t.observe(b.sample, all_alive);
		ASSERT_EQ(c.ended.size(), 1u);
	}
	EXPECT_EQ(t.next_id(), 105u);
}

TEST(HistoryEpisodes, BadIndexesIgnored) {
	EpisodeTracker t;
	S a(0);
	a.index(1);
	a.sample.edges = {{0, 7}, {9, 0}};
	auto c = t.observe(a.sample, all_alive);
	EXPECT_TRUE(c.ongoing.empty());
}
