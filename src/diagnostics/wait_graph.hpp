// The wait graph of the lock manager, as pure C++ (no PostgreSQL headers).
//
// Two steps, both unit-tested without a server:
//
//  1. derive_edges(): from a copy of the awaited locks (their PROCLOCKs with
//     hold masks, requested modes and wait-queue positions) and the lock
//     method's conflict table, the edges "waiting session -> session it waits
//     for", exactly as pg_blocking_pids() defines them:
//       hard: the other session holds a mode that conflicts with the request;
//       soft: it holds nothing conflicting but is queued ahead of the waiter
//             with a conflicting request (the lock-queue effect of DDL);
//     members of one lock group (parallel query) are one session, named by
//     their leader, and never block each other.
//
//  2. WaitGraph: roots, placement in a tree ("the blocker on the longest chain
//     from a root"), depth, path, direct and transitive blocked counts and
//     cycles, in O(n + e) plus O(n * e / 64) for the transitive counts, with
//     no recursion (chains of any length are fine).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "locks/lock_keys.hpp"

namespace concurrency::diagnostics {

// A set of lock modes, bit m for mode m (PostgreSQL's LOCKBIT_ON).
using LockMask = std::uint32_t;
constexpr LockMask mode_bit(int mode) { return LockMask{1} << mode; }

inline constexpr std::uint32_t none = UINT32_MAX;

// One PROCLOCK of an awaited lock: a process that holds and/or awaits it.
struct LockEntry {
	std::uint32_t session = 0;  // node id of the process's session (its lock-group leader)
	LockMask hold_mask = 0;     // modes it holds on the lock
	int wait_mode = 0;          // mode it waits for on this lock, 0 when it does not wait here
	std::uint32_t queue_pos = none; // its position in the lock's wait queue when it waits here
};

// A lock somebody waits for: its entries are entries[first, first + count).
struct AwaitedLock {
	std::size_t first = 0;
	std::size_t count = 0;
	const LockMask *conflicts = nullptr; // conflict table of its lock method, indexed by mode
	int max_mode = 0;                    // highest valid mode of that table
};

// One edge: `waiter` waits on lock `lock` and `blocker` stands in its way.
struct BlockEdge {
	std::uint32_t waiter = 0;   // session node id
	std::uint32_t blocker = 0;  // session node id
	std::uint32_t lock = 0;     // index into the AwaitedLock list
	int waiting_mode = 0;       // the mode the waiter requests (strongest, for a lock group)
	bool hard = false;          // the blocker holds a conflicting mode
	LockMask conflicting_held = 0; // the blocker's held modes that conflict (hard edges)
	int blocker_wait_mode = 0;  // the blocker's own queued request on this lock (soft edges)
};

// The edges of pg_blocking_pids(), one per (waiter, lock, blocker), sorted by
// waiter, lock, blocker. Entries with an out-of-range mode are ignored.
std::vector<BlockEdge> derive_edges(const std::vector<AwaitedLock> &locks, const std::vector<LockEntry> &entries);

// The strongest (highest-numbered) mode in a mask, or 0 for an empty mask.
int strongest_mode(LockMask mask);

// Per session 0..session_count-1: true when others wait for it and every one
// of those edges is soft — it is in their way only because its own request is
// queued ahead of theirs, while it holds nothing they need (a DDL waiting in
// the lock queue with readers behind it). Ending its wait (pg_cancel_backend)
// lets them go on as far as it is concerned. False for a session nobody
// waits for, or one that holds a mode someone waits for. Edges with a session
// id >= session_count are ignored.
std::vector<bool> blocks_only_by_queue(std::size_t session_count, const std::vector<BlockEdge> &edges);

// The waits-for graph over sessions 0..n-1 and its tree placement.
//
// Placement: a session that waits for nobody is a root (depth 0). Any other
// session hangs under the blocker with the greatest depth (ties: the lowest
// node id), so it appears once, on its longest chain from a root; blocked_by
// still lists every blocker. Sessions on a cycle (a deadlock not yet broken,
// or a wait cycle through a soft edge) are marked in_cycle; a cycle that waits
// for nobody outside itself is rooted at its lowest node id. Ties are broken by
// node id everywhere, so callers that number sessions by pid get a stable,
// readable result.
class WaitGraph {
public:
	struct Node {
		std::uint32_t parent = none;  // the blocker it is placed under; none for a root
		std::uint32_t root = none;    // the root of its chain (itself for a root)
		std::uint32_t depth = 0;      // 0 for a root
		std::uint32_t blocks_direct = 0; // sessions waiting on it directly
		std::uint32_t blocks_total = 0;  // sessions waiting on it directly or transitively
		bool in_cycle = false;
	};

	// `edges` are (waiter, blocker) pairs; duplicates and self-loops are ignored.
	// Throws std::invalid_argument for an id >= node_count.
	WaitGraph(std::size_t node_count, const std::vector<std::pair<std::uint32_t, std::uint32_t>> &edges);

	std::size_t size() const { return nodes_.size(); }
	const Node &node(std::uint32_t v) const { return nodes_.at(v); }

	// Direct blockers of v, ascending.
	std::vector<std::uint32_t> blocked_by(std::uint32_t v) const;
	// Sessions waiting on v directly, ascending.
	std::vector<std::uint32_t> waiters(std::uint32_t v) const;
	// Node ids from v's root down to v (the root first, v last).
	std::vector<std::uint32_t> path(std::uint32_t v) const;
	// Roots, the worst first: by blocks_total descending, then node id.
	std::vector<std::uint32_t> roots() const;
	// Every node once, in tree order: each root (as in roots()) followed by its
	// subtree depth-first, children by node id. The order for display.
	std::vector<std::uint32_t> tree_order() const;

private:
	void build_adjacency(const std::vector<std::pair<std::uint32_t, std::uint32_t>> &edges);
	void find_cycles();
	void place();
	void count_blocked();

	std::vector<Node> nodes_;
	// Compressed adjacency: blockers of v are out_[out_start_[v] .. out_start_[v+1]),
	// waiters of v are in_[in_start_[v] .. in_start_[v+1]), both ascending.
	std::vector<std::uint32_t> out_start_, out_, in_start_, in_;
	// Strongly connected components, numbered so that a component's blockers
	// (outside it) have smaller numbers; members_ lists each one's nodes ascending.
	std::vector<std::uint32_t> component_, member_start_, members_;
};

// --- advisory locks, readable ------------------------------------------

// The registered subsystems, as the named-locks capability encodes them.
using locks::SubsystemKey;

// "subsystem <name>", "subsystem <name> resource <n>" for registered ones;
// otherwise the raw key as pg_advisory_lock() takes it: "advisory lock <bigint>",
// "advisory lock (<int>, <int>)", or all three fields for other classes
// (e.g. Citus's objsubid 4-15).
std::string describe_advisory(std::uint32_t classid, std::uint32_t objid, std::uint16_t objsubid,
                              const std::vector<SubsystemKey> &registry);

} // namespace concurrency::diagnostics
