#include "diagnostics/wait_graph.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include <fmt/format.h>
#include "common/pure.hpp"  // last: checks that no PostgreSQL header came before

namespace concurrency::diagnostics {

int strongest_mode(LockMask mask) {
	int mode = 0;
	for (int m = 1; m < 32; ++m)
		if (mask & mode_bit(m))
			mode = m;
	return mode;
}

std::vector<BlockEdge> derive_edges(const std::vector<AwaitedLock> &locks, const std::vector<LockEntry> &entries) {
	// pg_blocking_pids compares each waiter with every PROCLOCK of its lock:
	// O(waiters * entries), 90,000 steps for 300 sessions queued behind one
	// ALTER. The same edges come from the holders (few) plus, per requested
	// mode, the queue ahead of the waiter: O(holders + edges) per waiter.
	std::vector<BlockEdge> raw;
	std::vector<std::uint32_t> holders;
	std::vector<std::pair<std::uint32_t, std::uint32_t>> queued[32]; // per mode: (queue_pos, entry), in queue order
	for (std::size_t l = 0; l < locks.size(); ++l) {
		const AwaitedLock &lock = locks[l];
		if (!lock.conflicts || lock.first > entries.size() || lock.count > entries.size() - lock.first)
			continue;
		auto valid_mode = [&](int m) { return m >= 1 && m <= lock.max_mode && m < 32; };
		const LockEntry *begin = entries.data() + lock.first;
		holders.clear();
		for (auto &q : queued)
			q.clear();
		for (std::uint32_t i = 0; i < lock.count; ++i) {
			if (begin[i].hold_mask != 0)
				holders.push_back(i);
			if (valid_mode(begin[i].wait_mode) && begin[i].queue_pos != none)
				queued[begin[i].wait_mode].emplace_back(begin[i].queue_pos, i);
		}
		for (auto &q : queued)
			std::sort(q.begin(), q.end());

		for (std::uint32_t i = 0; i < lock.count; ++i) {
			const LockEntry &waiter = begin[i];
			if (!valid_mode(waiter.wait_mode))
				continue;
			const LockMask conflict = lock.conflicts[waiter.wait_mode];
			auto edge_to = [&](const LockEntry &other) {
				BlockEdge edge;
				edge.waiter = waiter.session;
				edge.blocker = other.session;
				edge.lock = static_cast<std::uint32_t>(l);
				edge.waiting_mode = waiter.wait_mode;
				return edge;
			};
			// hard: holds a conflicting mode (a process never blocks itself,
			// nor does its own lock group)
			for (std::uint32_t j : holders) {
				const LockEntry &other = begin[j];
				if (j == i || other.session == waiter.session || !(conflict & other.hold_mask))
					continue;
				BlockEdge edge = edge_to(other);
				edge.hard = true;
				edge.conflicting_held = conflict & other.hold_mask;
				raw.push_back(edge);
			}
			// soft: queued ahead with a conflicting request, holding nothing that conflicts
			if (waiter.queue_pos == none)
				continue;
			for (int m = 1; m <= lock.max_mode && m < 32; ++m) {
				if (!(conflict & mode_bit(m)))
					continue;
				for (const auto &[pos, j] : queued[m]) {
					if (pos >= waiter.queue_pos)
						break;
					const LockEntry &other = begin[j];
					if (j == i || other.session == waiter.session || (conflict & other.hold_mask))
						continue;
					BlockEdge edge = edge_to(other);
					edge.hard = false;
					edge.blocker_wait_mode = m;
					raw.push_back(edge);
				}
			}
		}
	}
	auto key = [](const BlockEdge &e) { return std::make_tuple(e.waiter, e.lock, e.blocker); };
	std::sort(raw.begin(), raw.end(), [&](const BlockEdge &a, const BlockEdge &b) { return key(a) < key(b); });
	// Members of one lock group on either side make several raw edges of one
	// session edge: merge them.
	std::vector<BlockEdge> edges;
	for (const BlockEdge &e : raw) {
		if (!edges.empty() && key(edges.back()) == key(e)) {
			BlockEdge &m = edges.back();
			m.hard = m.hard || e.hard;
			m.conflicting_held |= e.conflicting_held;
			m.waiting_mode = std::max(m.waiting_mode, e.waiting_mode);
			m.blocker_wait_mode = std::max(m.blocker_wait_mode, e.blocker_wait_mode);
		} else {
			edges.push_back(e);
		}
	}
	return edges;
}

std::vector<bool> blocks_only_by_queue(std::size_t session_count, const std::vector<BlockEdge> &edges) {
	std::vector<bool> soft_only(session_count, false), hard(session_count, false);
	for (const auto &e : edges) {
		if (e.blocker >= session_count)
			continue;
		if (e.hard)
			hard[e.blocker] = true;
		else
			soft_only[e.blocker] = true;
	}
	for (std::size_t s = 0; s < session_count; ++s)
		soft_only[s] = soft_only[s] && !hard[s];
	return soft_only;
}

WaitGraph::WaitGraph(std::size_t node_count,
                     const std::vector<std::pair<std::uint32_t, std::uint32_t>> &edges) {
	if (node_count >= none)
		throw std::invalid_argument("wait graph: too many nodes");
	nodes_.resize(node_count);
	for (const auto &[w, b] : edges)
		if (w >= node_count || b >= node_count)
			throw std::invalid_argument("wait graph: edge " + std::to_string(w) + " -> " + std::to_string(b) +
			                            " names a node beyond " + std::to_string(node_count));
	build_adjacency(edges);
	find_cycles();
	place();
	count_blocked();
}

void WaitGraph::build_adjacency(const std::vector<std::pair<std::uint32_t, std::uint32_t>> &edges) {
	const std::size_t n = nodes_.size();
	std::vector<std::pair<std::uint32_t, std::uint32_t>> sorted;
	sorted.reserve(edges.size());
	for (const auto &e : edges)
		if (e.first != e.second)
			sorted.push_back(e);
	std::sort(sorted.begin(), sorted.end());
	sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());

	out_start_.assign(n + 1, 0);
	in_start_.assign(n + 1, 0);
	for (const auto &[w, b] : sorted) {
		++out_start_[w + 1];
		++in_start_[b + 1];
	}
	for (std::size_t v = 0; v < n; ++v) {
		out_start_[v + 1] += out_start_[v];
		in_start_[v + 1] += in_start_[v];
	}
	out_.resize(sorted.size());
	in_.resize(sorted.size());
	std::vector<std::uint32_t> out_fill(out_start_.begin(), out_start_.end() - 1);
	std::vector<std::uint32_t> in_fill(in_start_.begin(), in_start_.end() - 1);
	// sorted by (waiter, blocker): blockers come out ascending per waiter, and
	// waiters ascending per blocker
	for (const auto &[w, b] : sorted) {
		out_[out_fill[w]++] = b;
		in_[in_fill[b]++] = w;
	}
	for (std::size_t v = 0; v < n; ++v)
		nodes_[v].blocks_direct = in_start_[v + 1] - in_start_[v];
}

// Tarjan's strongly connected components, iteratively. A component is numbered
// when it is complete, and that happens only after every component it reaches
// (its blockers) is complete: blockers get the smaller numbers.
void WaitGraph::find_cycles() {
	const std::size_t n = nodes_.size();
	std::vector<std::uint32_t> index(n, none), low(n, 0);
	std::vector<bool> on_stack(n, false);
	std::vector<std::uint32_t> stack;
	std::vector<std::pair<std::uint32_t, std::uint32_t>> frames; // (node, next out-edge)
	component_.assign(n, none);
	std::uint32_t next_index = 0, components = 0;

	auto visit = [&](std::uint32_t v) {
		index[v] = low[v] = next_index++;
		stack.push_back(v);
		on_stack[v] = true;
		frames.emplace_back(v, out_start_[v]);
	};
	for (std::uint32_t s = 0; s < n; ++s) {
		if (index[s] != none)
			continue;
		visit(s);
		while (!frames.empty()) {
			auto &[v, next] = frames.back();
			if (next < out_start_[v + 1]) {
				std::uint32_t w = out_[next++];
				if (index[w] == none)
					visit(w); // invalidates v/next: re-read at the top
				else if (on_stack[w])
					low[v] = std::min(low[v], index[w]);
				continue;
			}
			std::uint32_t done = v;
			frames.pop_back();
			if (low[done] == index[done]) {
				std::uint32_t w;
				do {
					w = stack.back();
					stack.pop_back();
					on_stack[w] = false;
					component_[w] = components;
				} while (w != done);
				++components;
			}
			if (!frames.empty()) {
				std::uint32_t parent = frames.back().first;
				low[parent] = std::min(low[parent], low[done]);
			}
		}
	}

	member_start_.assign(components + 1, 0);
	for (std::uint32_t v = 0; v < n; ++v)
		++member_start_[component_[v] + 1];
	for (std::uint32_t c = 0; c < components; ++c)
		member_start_[c + 1] += member_start_[c];
	members_.resize(n);
	std::vector<std::uint32_t> fill(member_start_.begin(), member_start_.end() - 1);
	for (std::uint32_t v = 0; v < n; ++v) // ascending within each component
		members_[fill[component_[v]]++] = v;
	for (std::uint32_t c = 0; c < components; ++c)
		if (member_start_[c + 1] - member_start_[c] > 1)
			for (std::uint32_t i = member_start_[c]; i < member_start_[c + 1]; ++i)
				nodes_[members_[i]].in_cycle = true;
}

// Components in increasing number: every blocker outside a component is
// placed before it. Inside a cycle, members that wait on something outside
// are placed first, the others breadth-first under members already placed.
void WaitGraph::place() {
	const std::size_t n = nodes_.size();
	std::vector<bool> placed(n, false);
	const std::uint32_t components = static_cast<std::uint32_t>(member_start_.size()) - 1;

	auto put = [&](std::uint32_t v, std::uint32_t parent) {
		Node &node = nodes_[v];
		node.parent = parent;
		if (parent == none) {
			node.depth = 0;
			node.root = v;
		} else {
			node.depth = nodes_[parent].depth + 1;
			node.root = nodes_[parent].root;
		}
		placed[v] = true;
	};
	// The deepest placed blocker of v (lowest id on ties); with `outside`, only
	// blockers in another component.
	auto deepest_blocker = [&](std::uint32_t v, bool outside) {
		std::uint32_t best = none;
		for (std::uint32_t i = out_start_[v]; i < out_start_[v + 1]; ++i) {
			std::uint32_t b = out_[i];
			if (!placed[b] || (outside && component_[b] == component_[v]))
				continue;
			if (best == none || nodes_[b].depth > nodes_[best].depth)
				best = b; // ascending ids: the first of equal depth wins
		}
		return best;
	};

	std::vector<std::uint32_t> queue;
	for (std::uint32_t c = 0; c < components; ++c) {
		const std::uint32_t first = member_start_[c], last = member_start_[c + 1];
		if (last - first == 1) {
			std::uint32_t v = members_[first];
			put(v, deepest_blocker(v, true));
			continue;
		}
		queue.clear();
		for (std::uint32_t i = first; i < last; ++i) {
			std::uint32_t v = members_[i];
			std::uint32_t b = deepest_blocker(v, true);
			if (b != none) {
				put(v, b);
				queue.push_back(v);
			}
		}
		if (queue.empty()) { // a cycle that waits for nobody outside: its lowest id is the root
			put(members_[first], none);
			queue.push_back(members_[first]);
		}
		for (std::size_t q = 0; q < queue.size(); ++q) {
			std::uint32_t v = queue[q];
			for (std::uint32_t i = in_start_[v]; i < in_start_[v + 1]; ++i) {
				std::uint32_t u = in_[i];
				if (placed[u] || component_[u] != c)
					continue;
				put(u, deepest_blocker(u, false));
				queue.push_back(u);
			}
		}
	}
}

// blocks_total(v): how many other sessions reach v along waits-for edges.
// Reachability is counted per component with bitsets over the waiting
// sessions, in chunks of `chunk_bits` sources, so memory stays at
// components * chunk_bits / 8 bytes however large the graph.
void WaitGraph::count_blocked() {
	const std::size_t n = nodes_.size();
	if (n == 0)
		return;
	const std::uint32_t components = static_cast<std::uint32_t>(member_start_.size()) - 1;
	constexpr std::size_t chunk_bits = 4096;
	const std::size_t bits = std::min(chunk_bits, (n + 63) / 64 * 64);
	const std::size_t words = bits / 64;
	std::vector<std::uint64_t> reach(static_cast<std::size_t>(components) * words);
	std::vector<std::uint64_t> total(components, 0);

	for (std::size_t base = 0; base < n; base += bits) {
		std::fill(reach.begin(), reach.end(), 0);
		for (std::size_t v = base; v < std::min(n, base + bits); ++v)
			reach[component_[v] * words + (v - base) / 64] |= std::uint64_t{1} << ((v - base) % 64);
		// waiters have larger component numbers than their blockers: going down
		// from the largest, a component is complete when it is reached
		for (std::uint32_t c = components; c-- > 0;) {
			const std::uint64_t *from = &reach[c * words];
			std::uint64_t count = 0;
			for (std::size_t w = 0; w < words; ++w)
				count += static_cast<std::uint64_t>(__builtin_popcountll(from[w]));
			total[c] += count;
			for (std::uint32_t i = member_start_[c]; i < member_start_[c + 1]; ++i) {
				std::uint32_t v = members_[i];
				for (std::uint32_t k = out_start_[v]; k < out_start_[v + 1]; ++k) {
					std::uint32_t d = component_[out_[k]];
					if (d == c)
						continue;
					std::uint64_t *to = &reach[d * words];
					for (std::size_t w = 0; w < words; ++w)
						to[w] |= from[w];
				}
			}
		}
	}
	for (std::uint32_t v = 0; v < n; ++v)
		nodes_[v].blocks_total = static_cast<std::uint32_t>(total[component_[v]] - 1);
}

std::vector<std::uint32_t> WaitGraph::blocked_by(std::uint32_t v) const {
	(void)nodes_.at(v);
	return {out_.begin() + out_start_[v], out_.begin() + out_start_[v + 1]};
}

std::vector<std::uint32_t> WaitGraph::waiters(std::uint32_t v) const {
	(void)nodes_.at(v);
	return {in_.begin() + in_start_[v], in_.begin() + in_start_[v + 1]};
}

std::vector<std::uint32_t> WaitGraph::path(std::uint32_t v) const {
	std::vector<std::uint32_t> p;
	p.reserve(nodes_.at(v).depth + 1);
	for (std::uint32_t u = v; u != none; u = nodes_[u].parent)
		p.push_back(u);
	std::reverse(p.begin(), p.end());
	return p;
}

std::vector<std::uint32_t> WaitGraph::roots() const {
	std::vector<std::uint32_t> r;
	for (std::uint32_t v = 0; v < nodes_.size(); ++v)
		if (nodes_[v].parent == none)
			r.push_back(v);
	std::stable_sort(r.begin(), r.end(), [&](std::uint32_t a, std::uint32_t b) {
		return nodes_[a].blocks_total > nodes_[b].blocks_total;
	});
	return r;
}

std::vector<std::uint32_t> WaitGraph::tree_order() const {
	const std::size_t n = nodes_.size();
	// children lists, ascending (v ascends in this loop)
	std::vector<std::uint32_t> child_start(n + 1, 0), children(n);
	for (std::uint32_t v = 0; v < n; ++v)
		if (nodes_[v].parent != none)
			++child_start[nodes_[v].parent + 1];
	for (std::size_t v = 0; v < n; ++v)
		child_start[v + 1] += child_start[v];
	std::vector<std::uint32_t> fill(child_start.begin(), child_start.end() - 1);
	for (std::uint32_t v = 0; v < n; ++v)
		if (nodes_[v].parent != none)
			children[fill[nodes_[v].parent]++] = v;

	std::vector<std::uint32_t> order, stack;
	order.reserve(n);
	for (std::uint32_t r : roots()) {
		stack.push_back(r);
		while (!stack.empty()) {
			std::uint32_t v = stack.back();
			stack.pop_back();
			order.push_back(v);
			for (std::uint32_t i = child_start[v + 1]; i-- > child_start[v];) // reversed: smallest popped first
				stack.push_back(children[i]);
		}
	}
	return order;
}

std::string describe_advisory(std::uint32_t classid, std::uint32_t objid, std::uint16_t objsubid,
                              const std::vector<SubsystemKey> &registry) {
	const locks::AdvisoryTag tag{classid, objid, objsubid};
	const locks::NamedLock named = locks::named_lock_of(tag, registry);
	if (named.subsystem)
		return named.resource ? fmt::format("subsystem {} resource {}", named.subsystem->name, *named.resource)
		                      : "subsystem " + named.subsystem->name;
	if (objsubid == locks::int8_advisory_class)
		return fmt::format("advisory lock {}", locks::join_halves(classid, objid));
	if (objsubid == locks::int4_pair_advisory_class)
		return fmt::format("advisory lock ({}, {})", static_cast<std::int32_t>(classid),
		                   static_cast<std::int32_t>(objid));
	return fmt::format("advisory lock classid {} objid {} objsubid {}", classid, objid, objsubid);
}

} // namespace concurrency::diagnostics
