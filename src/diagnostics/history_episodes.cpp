#include "diagnostics/history_episodes.hpp"

#include <algorithm>
#include <set>
#include <utility>

#include "diagnostics/wait_graph.hpp"
#include "common/pure.hpp" // last: checks that no PostgreSQL header came before

namespace concurrency::diagnostics {

namespace {

// The sessions placed in one root's tree in a sample.
struct Tree {
	std::uint32_t root = none;
	std::uint32_t depth = 0;
	std::int64_t longest_wait = 0;
	std::vector<std::uint32_t> members; // every session in the tree but the root
};

void count_object(Episode &e, const HistoryLockKey &lock) {
	auto it =
	    std::find_if(e.objects.begin(), e.objects.end(), [&](const auto &o) { return o.first == lock; });
	if (it != e.objects.end())
		++it->second;
	else if (e.objects.size() < EpisodeTracker::max_objects)
		e.objects.emplace_back(lock, 1);
}

} // namespace

std::map<RootKey, Episode>::iterator EpisodeTracker::find(const RootKey &key) {
	auto it = active_.find(key);
	if (it != active_.end() || key.pid == 0)
		return it;
	// A backend whose start time was not known at one of the samples (its
	// status entry was being written) is still the same root.
	for (auto c = active_.lower_bound(RootKey{key.pid, INT64_MIN});
	     c != active_.end() && c->first.pid == key.pid; ++c)
		if (c->first.identity == 0 || key.identity == 0)
			return c;
	return active_.end();
}

EpisodeTracker::Changes EpisodeTracker::observe(const Sample &sample,
                                                const std::function<bool(const RootKey &)> &alive) {
	Changes changes;
	const std::size_t n = sample.sessions.size();
	std::vector<std::pair<std::uint32_t, std::uint32_t>> edges;
	edges.reserve(sample.edges.size());
	for (const auto &e : sample.edges)
		if (e.first < n && e.second < n)
			edges.push_back(e);

	std::map<std::uint32_t, Tree> trees;
	if (!edges.empty()) {
		WaitGraph graph(n, edges);
		for (std::uint32_t v = 0; v < n; ++v) {
			const auto &node = graph.node(v);
			if (node.root == none || graph.node(node.root).blocks_total == 0)
				continue;
			Tree &tree = trees[node.root];
			tree.root = node.root;
			if (v != node.root) {
				tree.members.push_back(v);
				tree.depth = std::max(tree.depth, node.depth);
			}
			const SampledSession &s = sample.sessions[v];
			if (s.waiting_since > 0 && sample.at > s.waiting_since)
				tree.longest_wait = std::max(tree.longest_wait, sample.at - s.waiting_since);
		}
		std::set<const Episode *> seen;
		for (auto &[root, tree] : trees) {
			const auto &node = graph.node(root);
			const RootKey &key = sample.sessions[root].key;
			auto it = find(key);
			if (it == active_.end()) {
				Episode fresh;
				fresh.id = next_id_++;
				fresh.root = key;
				fresh.started_at = sample.at;
				it = active_.emplace(key, std::move(fresh)).first;
			} else if (it->first.identity == 0 && key.identity != 0) {
				auto entry = active_.extract(it);
				entry.key() = key;
				entry.mapped().root = key;
				it = active_.insert(std::move(entry)).position;
			}
			Episode &e = it->second;
			e.last_seen = sample.at;
			e.waiters = node.blocks_total;
			e.max_waiters = std::max(e.max_waiters, node.blocks_total);
			e.max_depth = std::max(e.max_depth, tree.depth);
			e.longest_wait = std::max(e.longest_wait, tree.longest_wait);
			e.waiter_seconds +=
			    static_cast<double>(node.blocks_total) * static_cast<double>(sample.period) / 1e6;
			e.in_cycle = e.in_cycle || node.in_cycle;
			for (std::uint32_t v : tree.members) {
				const SampledSession &s = sample.sessions[v];
				if (s.lock < sample.locks.size())
					count_object(e, sample.locks[s.lock]);
				if (e.waiter_pids.size() < max_waiter_pids &&
				    std::find(e.waiter_pids.begin(), e.waiter_pids.end(), s.key.pid) == e.waiter_pids.end())
					e.waiter_pids.push_back(s.key.pid);
			}
			std::stable_sort(e.objects.begin(), e.objects.end(),
			                 [](const auto &a, const auto &b) { return a.second > b.second; });
			e.root_session = root;
			e.waiter_sessions = tree.members;
			auto since = [&](std::uint32_t v) {
				std::int64_t t = sample.sessions[v].waiting_since;
				return t > 0 ? t : INT64_MAX;
			};
			std::stable_sort(e.waiter_sessions.begin(), e.waiter_sessions.end(),
			                 [&](std::uint32_t a, std::uint32_t b) { return since(a) < since(b); });
			seen.insert(&e);
			changes.ongoing.push_back(&e);
		}
		for (auto it = active_.begin(); it != active_.end();) {
			if (seen.count(&it->second)) {
				++it;
				continue;
			}
			Episode ended = std::move(it->second);
			ended.ended_by = alive(ended.root) ? EndedBy::released : EndedBy::root_exited;
			changes.ended.push_back(std::move(ended));
			it = active_.erase(it);
		}
		return changes;
	}
	for (auto &[key, e] : active_) {
		e.ended_by = alive(key) ? EndedBy::released : EndedBy::root_exited;
		changes.ended.push_back(std::move(e));
	}
	active_.clear();
	return changes;
}

void EpisodeTracker::forget_below(std::uint64_t floor) {
	for (auto it = active_.begin(); it != active_.end();)
		it = it->second.id < floor ? active_.erase(it) : std::next(it);
	next_id_ = std::max(next_id_, floor);
}

void EpisodeTracker::adopt(const Episode &episode) {
	Episode e = episode;
	e.ended_by = EndedBy::none;
	active_[e.root] = std::move(e);
	next_id_ = std::max(next_id_, episode.id + 1);
}

std::vector<HistoryLockKey> top_objects(const Episode &episode, std::size_t n) {
	std::vector<HistoryLockKey> out;
	for (std::size_t i = 0; i < episode.objects.size() && i < n; ++i)
		out.push_back(episode.objects[i].first);
	return out;
}

} // namespace concurrency::diagnostics
