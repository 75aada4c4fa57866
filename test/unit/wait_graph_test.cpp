#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "diagnostics/wait_graph.hpp"

using namespace concurrency::diagnostics;
using Edges = std::vector<std::pair<std::uint32_t, std::uint32_t>>;

namespace {

// PostgreSQL's table-lock conflict table (lock.c, LockConflicts), by mode:
// 1 AccessShare 2 RowShare 3 RowExclusive 4 ShareUpdateExclusive 5 Share
// 6 ShareRowExclusive 7 Exclusive 8 AccessExclusive.
enum Mode { AccessShare = 1, RowShare, RowExclusive, ShareUpdateExclusive, Share, ShareRowExclusive, Exclusive,
	        AccessExclusive };
constexpr LockMask bits(std::initializer_list<int> modes) {
	LockMask m = 0;
	for (int mode : modes)
		m |= mode_bit(mode);
	return m;
}
const LockMask conflicts[] = {
    0,
    bits({AccessExclusive}),
    bits({Exclusive, AccessExclusive}),
    bits({Share, ShareRowExclusive, Exclusive, AccessExclusive}),
    bits({ShareUpdateExclusive, Share, ShareRowExclusive, Exclusive, AccessExclusive}),
    bits({RowExclusive, ShareUpdateExclusive, ShareRowExclusive, Exclusive, AccessExclusive}),
    bits({RowExclusive, ShareUpdateExclusive, Share, ShareRowExclusive, Exclusive, AccessExclusive}),
    bits({RowShare, RowExclusive, ShareUpdateExclusive, Share, ShareRowExclusive, Exclusive, AccessExclusive}),
    bits({AccessShare, RowShare, RowExclusive, ShareUpdateExclusive, Share, ShareRowExclusive, Exclusive,
          AccessExclusive}),
};

LockEntry holder(std::uint32_t session, LockMask held) { return {session, held, 0, none}; }
LockEntry queued(std::uint32_t session, int mode, std::uint32_t pos, LockMask held = 0) {
	return {session, held, mode, pos};
}

std::vector<BlockEdge> edges_of(const std::vector<LockEntry> &entries) {
	return derive_edges({AwaitedLock{0, entries.size(), conflicts, 8}}, entries);
}

struct Brief {
	std::uint32_t waiter, blocker;
	bool hard;
	bool operator==(const Brief &o) const { return waiter == o.waiter && blocker == o.blocker && hard == o.hard; }
};
std::vector<Brief> brief(const std::vector<BlockEdge> &edges) {
	std::vector<Brief> out;
	for (const auto &e : edges)
		out.push_back({e.waiter, e.blocker, e.hard});
	return out;
}
std::ostream &operator<<(std::ostream &os, const Brief &b) {
	return os << b.waiter << "->" << b.blocker << (b.hard ? " hard" : " soft");
}

} // namespace

// The seed scenario: an open transaction read the table (AccessShare held),
// ALTER TABLE waits for AccessExclusive, a SELECT queues behind the ALTER.
TEST(DeriveEdges, DdlLockQueue) {
	auto edges = edges_of({holder(0, mode_bit(AccessShare)), queued(1, AccessExclusive, 0),
	                       queued(2, AccessShare, 1)});
	EXPECT_EQ(brief(edges), (std::vector<Brief>{{1, 0, true}, {2, 1, false}}));
	EXPECT_EQ(edges[0].conflicting_held, mode_bit(AccessShare));
	EXPECT_EQ(edges[0].waiting_mode, AccessExclusive);
	EXPECT_EQ(edges[1].blocker_wait_mode, AccessExclusive);
	EXPECT_EQ(edges[1].waiting_mode, AccessShare);
}

// The ALTER (1) is in the readers' way only by its queued request: cancelling
// it frees them. The open transaction (0) holds what the ALTER needs: not so.
TEST(BlocksOnlyByQueue, TheWaitingDdlNotTheHolder) {
	auto edges = edges_of({holder(0, mode_bit(AccessShare)), queued(1, AccessExclusive, 0),
	                       queued(2, AccessShare, 1), queued(3, AccessShare, 2)});
	EXPECT_EQ(blocks_only_by_queue(4, edges), (std::vector<bool>{false, true, false, false}));
}

// A waiter that also holds a mode others need blocks them hard: cancelling
// its statement ends its transaction and frees them too, but it is not a mere
// place in the queue (its transaction's work would be lost).
TEST(BlocksOnlyByQueue, AWaiterThatHoldsIsNotQueueOnly) {
	auto edges =
	    edges_of({holder(0, mode_bit(AccessShare)), queued(1, AccessExclusive, 0, mode_bit(AccessShare)),
	              queued(2, AccessExclusive, 1)});
	EXPECT_EQ(blocks_only_by_queue(3, edges), (std::vector<bool>{false, false, false}));
	// soft on one lock, hard on another: not queue-only
	std::vector<BlockEdge> mixed = {BlockEdge{2, 1, 0, AccessShare, false, 0, AccessExclusive},
	                                BlockEdge{3, 1, 1, RowExclusive, true, mode_bit(Exclusive), 0}};
	EXPECT_EQ(blocks_only_by_queue(4, mixed), (std::vector<bool>{false, false, false, false}));
	// out-of-range ids are ignored
	EXPECT_EQ(blocks_only_by_queue(2, {BlockEdge{0, 7, 0, AccessShare, false, 0, AccessExclusive}}),
	          (std::vector<bool>{false, false}));
}

TEST(DeriveEdges, OnlyConflictingHoldersAndOnlyWaitersAhead) {
	// 0 holds RowExclusive; 1 waits Share (conflicts with 0); 2 waits
	// RowExclusive (conflicts with 1's queued Share, not with 0); 3 waits
	// AccessShare (conflicts with nobody: a SELECT would not even queue, but
	// the rule is the rule).
	auto edges = edges_of({holder(0, mode_bit(RowExclusive)), queued(1, Share, 0), queued(2, RowExclusive, 1),
	                       queued(3, AccessShare, 2)});
	EXPECT_EQ(brief(edges), (std::vector<Brief>{{1, 0, true}, {2, 1, false}}));
	// a waiter behind does not block one ahead: 1 is not blocked by 2
}

TEST(DeriveEdges, HoldingBeatsQueuing) {
	// 1 holds AccessShare and waits for AccessExclusive (a lock upgrade), 2
	// waits for AccessExclusive behind it: 1 blocks 2 by what it holds (hard),
	// not merely by being queued ahead; 1 itself waits on 0's AccessShare.
	auto edges = edges_of({holder(0, mode_bit(AccessShare)), queued(1, AccessExclusive, 0, mode_bit(AccessShare)),
	                       queued(2, AccessExclusive, 1)});
	EXPECT_EQ(brief(edges), (std::vector<Brief>{{1, 0, true}, {2, 0, true}, {2, 1, true}}));
}

TEST(DeriveEdges, LockGroupIsOneSessionAndNeverBlocksItself) {
	// session 5 is a leader with a worker: both hold AccessShare; session 7
	// waits for AccessExclusive; session 5's worker also queues for
	// AccessExclusive ahead of 7 (two raw edges 7 -> 5 merge into one, hard).
	auto edges = edges_of({holder(5, mode_bit(AccessShare)), queued(5, AccessExclusive, 0, mode_bit(AccessShare)),
	                       queued(7, AccessExclusive, 1)});
	ASSERT_EQ(brief(edges), (std::vector<Brief>{{7, 5, true}}));
	EXPECT_EQ(edges[0].conflicting_held, mode_bit(AccessShare));
	EXPECT_EQ(edges[0].blocker_wait_mode, 0); // the hard reason wins; the queued request is not a soft one
}

TEST(DeriveEdges, SeveralLocksAndBadInputIgnored) {
	std::vector<LockEntry> entries = {holder(0, mode_bit(Exclusive)), queued(1, RowShare, 0),
	                                  holder(2, mode_bit(AccessShare)), queued(3, AccessExclusive, 0),
	                                  queued(4, 42, 1), queued(5, -1, 2)};
	std::vector<AwaitedLock> locks = {{0, 2, conflicts, 8}, {2, 4, conflicts, 8}, {6, 5, conflicts, 8},
	                                  {0, 0, nullptr, 8}};
	auto edges = derive_edges(locks, entries);
	EXPECT_EQ(brief(edges), (std::vector<Brief>{{1, 0, true}, {3, 2, true}}));
	EXPECT_EQ(edges[1].lock, 1u);
}

TEST(StrongestMode, PicksHighest) {
	EXPECT_EQ(strongest_mode(0), 0);
	EXPECT_EQ(strongest_mode(bits({AccessShare, RowExclusive})), RowExclusive);
}

// --- the graph ---------------------------------------------------------

namespace {

// Brute force: who reaches whom, by BFS from every node.
std::vector<std::vector<bool>> reachability(std::size_t n, const Edges &edges) {
	std::vector<std::vector<std::uint32_t>> out(n);
	for (auto [w, b] : edges)
		if (w != b)
			out[w].push_back(b);
	std::vector<std::vector<bool>> reach(n, std::vector<bool>(n, false));
	for (std::uint32_t s = 0; s < n; ++s) {
		std::vector<std::uint32_t> q = out[s];
		for (std::size_t i = 0; i < q.size(); ++i) {
			std::uint32_t v = q[i];
			if (reach[s][v])
				continue;
			reach[s][v] = true;
			for (auto b : out[v])
				if (!reach[s][b])
					q.push_back(b);
		}
	}
	return reach;
}

// The invariants every placement must satisfy, whatever the graph.
void check_invariants(const WaitGraph &g, const Edges &edges) {
	const std::size_t n = g.size();
	auto reach = reachability(n, edges);
	std::vector<std::uint32_t> seen(n, 0);
	for (std::uint32_t v : g.tree_order())
		++seen[v];
	for (std::uint32_t v = 0; v < n; ++v) {
		SCOPED_TRACE(v);
		const auto &node = g.node(v);
		EXPECT_EQ(seen[v], 1u) << "every node exactly once in tree order";
		EXPECT_EQ(node.in_cycle, static_cast<bool>(reach[v][v]));
		std::uint32_t total = 0;
		for (std::uint32_t u = 0; u < n; ++u)
			total += (u != v && reach[u][v]);
		EXPECT_EQ(node.blocks_total, total);
		EXPECT_EQ(node.blocks_direct, g.waiters(v).size());
		auto blockers = g.blocked_by(v);
		if (node.parent == none) {
			EXPECT_EQ(node.depth, 0u);
			EXPECT_EQ(node.root, v);
			EXPECT_TRUE(blockers.empty() || node.in_cycle) << "only a cycle can put a waiting node at the root";
		} else {
			EXPECT_TRUE(std::binary_search(blockers.begin(), blockers.end(), node.parent));
			EXPECT_EQ(node.depth, g.node(node.parent).depth + 1);
			EXPECT_EQ(node.root, g.node(node.parent).root);
		}
		auto p = g.path(v);
		ASSERT_EQ(p.size(), node.depth + 1);
		EXPECT_EQ(p.front(), node.root);
		EXPECT_EQ(p.back(), v);
		if (!node.in_cycle && !blockers.empty()) {
			// longest chain: no blocker is deeper than the chosen parent
			for (auto b : blockers)
				EXPECT_LE(g.node(b).depth, g.node(node.parent).depth);
		}
	}
	// a parent comes before its children in tree order
	std::vector<std::size_t> pos(n);
	auto order = g.tree_order();
	for (std::size_t i = 0; i < order.size(); ++i)
		pos[order[i]] = i;
	for (std::uint32_t v = 0; v < n; ++v)
		if (g.node(v).parent != none)
			EXPECT_LT(pos[g.node(v).parent], pos[v]);
}

} // namespace

TEST(WaitGraph, Empty) {
	WaitGraph g(0, {});
	EXPECT_EQ(g.size(), 0u);
	EXPECT_TRUE(g.roots().empty());
	EXPECT_TRUE(g.tree_order().empty());
}

TEST(WaitGraph, RejectsEdgesBeyondTheNodes) { EXPECT_THROW(WaitGraph(2, {{0, 2}}), std::invalid_argument); }

TEST(WaitGraph, DdlLockQueueTree) {
	// 0 idle in transaction; 1 ALTER waits on 0; 2..4 SELECTs wait on 1
	Edges e = {{1, 0}, {2, 1}, {3, 1}, {4, 1}};
	WaitGraph g(5, e);
	EXPECT_EQ(g.roots(), (std::vector<std::uint32_t>{0}));
	EXPECT_EQ(g.node(0).blocks_total, 4u);
	EXPECT_EQ(g.node(0).blocks_direct, 1u);
	EXPECT_EQ(g.node(1).blocks_total, 3u);
	EXPECT_EQ(g.node(3).depth, 2u);
	EXPECT_EQ(g.path(3), (std::vector<std::uint32_t>{0, 1, 3}));
	EXPECT_EQ(g.tree_order(), (std::vector<std::uint32_t>{0, 1, 2, 3, 4}));
	check_invariants(g, e);
}

TEST(WaitGraph, SeveralBlockersLongestChainWins) {
	// 4 waits on 0 (a root) and on 3, which is at depth 2: 4 hangs under 3
	Edges e = {{1, 0}, {3, 1}, {4, 0}, {4, 3}, {2, 0}};
	WaitGraph g(5, e);
	EXPECT_EQ(g.node(4).parent, 3u);
	EXPECT_EQ(g.node(4).depth, 3u);
	EXPECT_EQ(g.blocked_by(4), (std::vector<std::uint32_t>{0, 3}));
	EXPECT_EQ(g.node(0).blocks_total, 4u); // 4 counted once
	EXPECT_EQ(g.node(2).parent, 0u);
	check_invariants(g, e);
}

TEST(WaitGraph, TwoRootsWorstFirstAndTiesByLowestId) {
	Edges e = {{1, 0}, {3, 2}, {4, 2}, {5, 1}, {5, 3}};
	WaitGraph g(6, e);
	EXPECT_EQ(g.roots(), (std::vector<std::uint32_t>{2, 0})); // 2 blocks 3 sessions, 0 blocks 2
	EXPECT_EQ(g.node(5).parent, 1u);                          // depth tie between 1 and 3: lowest id
	check_invariants(g, e);
}

TEST(WaitGraph, DeadlockCycleIsMarkedAndRootedOnce) {
	Edges e = {{0, 1}, {1, 0}, {2, 0}};
	WaitGraph g(3, e);
	EXPECT_TRUE(g.node(0).in_cycle);
	EXPECT_TRUE(g.node(1).in_cycle);
	EXPECT_FALSE(g.node(2).in_cycle);
	EXPECT_EQ(g.roots(), (std::vector<std::uint32_t>{0}));
	EXPECT_EQ(g.node(1).parent, 0u);
	EXPECT_EQ(g.node(0).blocks_total, 2u);
	EXPECT_EQ(g.node(1).blocks_total, 2u); // 0 and, through 0, 2
	check_invariants(g, e);
}

TEST(WaitGraph, CycleWaitingOnARootHangsUnderIt) {
	// 1 <-> 2 is a cycle, and 1 also waits on the root 0
	Edges e = {{1, 0}, {1, 2}, {2, 1}, {3, 2}};
	WaitGraph g(4, e);
	EXPECT_EQ(g.roots(), (std::vector<std::uint32_t>{0}));
	EXPECT_EQ(g.node(1).parent, 0u);
	EXPECT_EQ(g.node(2).parent, 1u);
	EXPECT_EQ(g.node(3).depth, 3u);
	EXPECT_EQ(g.node(0).blocks_total, 3u);
	check_invariants(g, e);
}

TEST(WaitGraph, DuplicatesAndSelfLoopsIgnored) {
	Edges e = {{1, 0}, {1, 0}, {1, 1}};
	WaitGraph g(2, e);
	EXPECT_EQ(g.blocked_by(1), (std::vector<std::uint32_t>{0}));
	EXPECT_FALSE(g.node(1).in_cycle);
	EXPECT_EQ(g.node(0).blocks_direct, 1u);
}

TEST(WaitGraph, ChainOfTenThousand) {
	const std::uint32_t n = 10000;
	Edges e;
	for (std::uint32_t i = 1; i < n; ++i)
		e.emplace_back(i, i - 1);
	WaitGraph g(n, e);
	EXPECT_EQ(g.roots(), (std::vector<std::uint32_t>{0}));
	for (std::uint32_t i = 0; i < n; ++i) {
		ASSERT_EQ(g.node(i).depth, i);
		ASSERT_EQ(g.node(i).root, 0u);
		ASSERT_EQ(g.node(i).blocks_total, n - 1 - i);
		ASSERT_FALSE(g.node(i).in_cycle);
	}
	auto p = g.path(n - 1);
	ASSERT_EQ(p.size(), n);
	for (std::uint32_t i = 0; i < n; ++i)
		ASSERT_EQ(p[i], i);
	auto order = g.tree_order();
	for (std::uint32_t i = 0; i < n; ++i)
		ASSERT_EQ(order[i], i);
}

TEST(WaitGraph, ChainOfTenThousandNumberedBackwards) {
	// the same chain with the root last: nothing depends on id order
	const std::uint32_t n = 10000;
	Edges e;
	for (std::uint32_t i = 0; i + 1 < n; ++i)
		e.emplace_back(i, i + 1);
	WaitGraph g(n, e);
	EXPECT_EQ(g.roots(), (std::vector<std::uint32_t>{n - 1}));
	EXPECT_EQ(g.node(0).depth, n - 1);
	EXPECT_EQ(g.node(0).blocks_total, 0u);
	EXPECT_EQ(g.node(n - 1).blocks_total, n - 1);
}

TEST(WaitGraph, CycleOfTenThousand) {
	const std::uint32_t n = 10000;
	Edges e;
	for (std::uint32_t i = 0; i < n; ++i)
		e.emplace_back(i, (i + n - 1) % n); // i waits on i-1, 0 waits on n-1
	WaitGraph g(n, e);
	EXPECT_EQ(g.roots(), (std::vector<std::uint32_t>{0}));
	for (std::uint32_t i = 0; i < n; ++i) {
		ASSERT_TRUE(g.node(i).in_cycle);
		ASSERT_EQ(g.node(i).blocks_total, n - 1);
		ASSERT_EQ(g.node(i).depth, i);
	}
}

TEST(WaitGraph, StarOfTenThousandAndAQueueOfDdl) {
	// 10,000 sessions queued behind one waiting ALTER, which waits on an idle
	// transaction; plus 200 ALTERs queued in line (each soft-blocked by every
	// earlier one: 20,000 edges)
	const std::uint32_t n = 10002;
	Edges e = {{1, 0}};
	for (std::uint32_t i = 2; i < n; ++i)
		e.emplace_back(i, 1);
	WaitGraph g(n, e);
	EXPECT_EQ(g.node(0).blocks_total, n - 1);
	EXPECT_EQ(g.node(1).blocks_direct, n - 2);
	EXPECT_EQ(g.node(n - 1).depth, 2u);

	const std::uint32_t m = 201;
	Edges q;
	for (std::uint32_t i = 1; i < m; ++i)
		for (std::uint32_t j = 0; j < i; ++j)
			q.emplace_back(i, j);
	WaitGraph line(m, q);
	for (std::uint32_t i = 0; i < m; ++i) {
		ASSERT_EQ(line.node(i).depth, i); // the longest chain goes through every earlier one
		ASSERT_EQ(line.node(i).blocks_total, m - 1 - i);
	}
	check_invariants(line, q);
}

TEST(WaitGraph, RandomGraphsAgreeWithBruteForce) {
	std::mt19937 rng(20240601);
	for (int round = 0; round < 300; ++round) {
		std::uint32_t n = 1 + rng() % (round < 250 ? 12 : 150);
		std::uint32_t m = rng() % (3 * n + 1);
		Edges e;
		bool acyclic = round % 2 == 0;
		for (std::uint32_t k = 0; k < m; ++k) {
			std::uint32_t w = rng() % n, b = rng() % n;
			if (acyclic && w <= b)
				continue; // only wait on lower ids: a DAG
			e.emplace_back(w, b);
		}
		SCOPED_TRACE(round);
		WaitGraph g(n, e);
		check_invariants(g, e);
		if (acyclic) {
			// depth is the longest path to a root, by DP in id order
			std::vector<std::uint32_t> longest(n, 0);
			for (std::uint32_t v = 0; v < n; ++v)
				for (auto b : g.blocked_by(v))
					longest[v] = std::max(longest[v], longest[b] + 1);
			for (std::uint32_t v = 0; v < n; ++v)
				ASSERT_EQ(g.node(v).depth, longest[v]);
		}
	}
}

TEST(WaitGraph, TransitiveCountsAcrossBitsetChunks) {
	// more nodes than one 4096-bit chunk, sparse, with cycles
	std::mt19937 rng(7);
	const std::uint32_t n = 5000;
	Edges e;
	for (std::uint32_t k = 0; k < 6000; ++k)
		e.emplace_back(rng() % n, rng() % n);
	WaitGraph g(n, e);
	std::vector<std::vector<std::uint32_t>> in(n);
	for (auto [w, b] : e)
		if (w != b)
			in[b].push_back(w);
	for (std::uint32_t v = 0; v < n; v += 97) { // a sample, by reverse BFS
		std::vector<bool> seen(n, false);
		std::vector<std::uint32_t> q = {v};
		seen[v] = true;
		std::uint32_t count = 0;
		for (std::size_t i = 0; i < q.size(); ++i)
			for (auto u : in[q[i]])
				if (!seen[u]) {
					seen[u] = true;
					++count;
					q.push_back(u);
				}
		ASSERT_EQ(g.node(v).blocks_total, count) << v;
	}
}

TEST(DescribeAdvisory, SubsystemsByNameOthersByRawKey) {
	std::vector<SubsystemKey> registry = {{"outbox_relay", 42, 16}, {"billing", -7, 17}, {"big", INT64_MAX, 65535}};
	EXPECT_EQ(describe_advisory(0, 42, 1, registry), "subsystem outbox_relay");
	// -7 as pg_locks shows it: classid 0xffffffff, objid 0xfffffff9
	EXPECT_EQ(describe_advisory(0xffffffffu, 0xfffffff9u, 1, registry), "subsystem billing");
	EXPECT_EQ(describe_advisory(0x7fffffffu, 0xffffffffu, 1, registry), "subsystem big");
	EXPECT_EQ(describe_advisory(0, 43, 1, registry), "advisory lock 43");
	// resource locks: objsubid = slot, resource = classid << 32 | objid, signed
	EXPECT_EQ(describe_advisory(0, 1001, 16, registry), "subsystem outbox_relay resource 1001");
	EXPECT_EQ(describe_advisory(0xffffffffu, 0xffffffffu, 17, registry), "subsystem billing resource -1");
	EXPECT_EQ(describe_advisory(0x80000000u, 0, 65535, registry), "subsystem big resource -9223372036854775808");
	// the two-int4 form, a slot nobody has, and Citus's classes
	EXPECT_EQ(describe_advisory(0xffffffffu, 5, 2, registry), "advisory lock (-1, 5)");
	EXPECT_EQ(describe_advisory(0, 5, 18, registry), "advisory lock classid 0 objid 5 objsubid 18");
	EXPECT_EQ(describe_advisory(1, 5, 4, registry), "advisory lock classid 1 objid 5 objsubid 4");
	// a subsystem key equal to a resource value is not confused with it
	EXPECT_EQ(describe_advisory(0, 42, 18, registry), "advisory lock classid 0 objid 42 objsubid 18");
	EXPECT_EQ(describe_advisory(0, 42, 1, {}), "advisory lock 42");
}
