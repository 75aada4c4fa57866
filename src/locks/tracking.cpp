// Hold counts of the named locks of this backend, and the function behind
// the view concurrency.my_locks.
#include <algorithm>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "locks/tracking.hpp"
#include "pg/datum.hpp"
#include "pg/srf.hpp"

extern "C" {
#include "access/htup_details.h"
#include "access/xact.h"
}

namespace concurrency::locks {

namespace {

struct HeldKey {
	AdvisoryTag tag;
	bool shared;
	friend bool operator==(const HeldKey &a, const HeldKey &b) {
		return a.tag == b.tag && a.shared == b.shared;
	}
};

struct HeldKeyHash {
	std::size_t operator()(const HeldKey &k) const noexcept {
		std::uint64_t h = (static_cast<std::uint64_t>(k.tag.high) << 32) | k.tag.low;
		h ^= (static_cast<std::uint64_t>(k.tag.klass) << 1 | (k.shared ? 1 : 0)) * 0x9E3779B97F4A7C15ULL;
		return std::hash<std::uint64_t>{}(h);
	}
};

struct Held {
	std::string name;
	std::optional<std::int64_t> resource;
	std::int64_t session_count = 0;
	// Transaction-level holds per subtransaction that took them: a rollback to
	// savepoint releases exactly those of the subtransactions it ends.
	std::vector<std::pair<SubTransactionId, std::int64_t>> xact_counts;

	std::int64_t xact_total() const {
		std::int64_t total = 0;
		for (const auto &entry : xact_counts)
			total += entry.second;
		return total;
	}
};

// On the C++ heap, not in a memory context, for the reason given at the
// registry's cache (src/locks/registry.cpp); bounded by what the backend
// holds, plus at most keep_entries released entries kept for reuse.
std::unordered_map<HeldKey, Held, HeldKeyHash> held;
// Entries that got transaction-level holds in the current transaction, so that
// the callbacks visit only those (unordered_map keeps element addresses
// stable; entries are erased only by sweep(), at transaction end, after this
// list is emptied).
std::vector<Held *> touched;
// Entries whose counts fell to zero stay for reuse (no allocation on the next
// lock of the same name), up to this many in all; beyond, they are swept.
constexpr std::size_t keep_entries = 64;
bool sweep_wanted = false;

// The callbacks below run inside PostgreSQL's transaction machinery: they are
// noexcept and allocate nothing (erasing from the map and the vectors frees,
// never allocates), so no C++ exception can reach PostgreSQL's frames.
void sweep() noexcept {
	sweep_wanted = false;
	if (held.size() <= keep_entries)
		return;
	for (auto it = held.begin(); it != held.end();) {
		if (it->second.session_count == 0 && it->second.xact_counts.empty())
			it = held.erase(it);
		else
			++it;
	}
}

void at_transaction_end(XactEvent event, void *) noexcept {
	switch (event) {
	case XACT_EVENT_COMMIT:
	case XACT_EVENT_PARALLEL_COMMIT:
	case XACT_EVENT_ABORT:
	case XACT_EVENT_PARALLEL_ABORT:
	case XACT_EVENT_PREPARE:
		for (Held *h : touched) {
			h->xact_counts.clear(); // keeps its capacity
			if (h->session_count == 0)
				sweep_wanted = true;
		}
		touched.clear();
		if (sweep_wanted)
			sweep();
		break;
	default:
		break;
	}
}

void at_subtransaction_end(SubXactEvent event, SubTransactionId sub, SubTransactionId parent,
                           void *) noexcept {
	if (event == SUBXACT_EVENT_ABORT_SUB) {
		// The lock manager releases what the subtransaction took.
		for (Held *h : touched) {
			auto &counts = h->xact_counts;
			for (auto it = counts.begin(); it != counts.end();)
				it = it->first == sub ? counts.erase(it) : it + 1;
		}
	} else if (event == SUBXACT_EVENT_COMMIT_SUB) {
		// The lock manager hands the subtransaction's locks to its parent:
		// the entry is relabelled, or added to the parent's (no allocation).
		for (Held *h : touched) {
			auto &counts = h->xact_counts;
			auto parent_entry =
			    std::find_if(counts.begin(), counts.end(), [&](const auto &c) { return c.first == parent; });
			auto sub_entry =
			    std::find_if(counts.begin(), counts.end(), [&](const auto &c) { return c.first == sub; });
			if (sub_entry == counts.end())
				continue;
			if (parent_entry == counts.end()) {
				sub_entry->first = parent;
			} else {
				parent_entry->second += sub_entry->second;
				counts.erase(sub_entry);
			}
		}
	}
}

} // namespace

void track_acquired(const AdvisoryTag &tag, bool shared, Level level, bool newly, std::string_view name,
                    std::optional<std::int64_t> resource) {
	Held &h = held[HeldKey{tag, shared}];
	if (newly) {
		// Nothing held it before this call, at any level: whatever we had
		// counted was released behind our back (pg_advisory_unlock_all & co).
		h.session_count = 0;
		h.xact_counts.clear();
	}
	if (h.name != name)
		h.name.assign(name.data(), name.size());
	h.resource = resource;
	if (level == Level::session) {
		++h.session_count;
		return;
	}
	SubTransactionId sub = GetCurrentSubTransactionId();
	if (h.xact_counts.empty())
		touched.push_back(&h); // first hold of this transaction
	for (auto &c : h.xact_counts)
		if (c.first == sub) {
			++c.second;
			return;
		}
	h.xact_counts.emplace_back(sub, 1);
}

void track_session_released(const AdvisoryTag &tag, bool shared, bool released) {
	auto it = held.find(HeldKey{tag, shared});
	if (it == held.end())
		return;
	if (!released)
		it->second.session_count = 0; // the lock manager says we hold none
	else if (it->second.session_count > 0)
		--it->second.session_count;
	if (it->second.session_count == 0)
		sweep_wanted = true; // erased at transaction end, if there are many
}

void tracking_init() {
	RegisterXactCallback(at_transaction_end, nullptr);
	RegisterSubXactCallback(at_subtransaction_end, nullptr);
}

} // namespace concurrency::locks

using namespace concurrency;
using namespace concurrency::locks;

namespace {

// One row of concurrency.my_named_locks(), copied out of the map before any
// PostgreSQL call.
struct Row {
	std::string name;
	std::optional<std::int64_t> resource;
	const char *level;
	const char *mode;
	std::int64_t count;
	AdvisoryTag tag;
};

} // namespace

// concurrency.my_named_locks(): name, resource, level, mode, count and the
// lock tag (classid, objid, objsubid as pg_locks shows them) of every named
// lock this backend holds, one row per level.
CONCURRENCY_FUNCTION(concurrency_my_named_locks) {
	pg::ResultSet out = pg::materialize(fcinfo);

	std::vector<Row> rows;
	for (const auto &entry : held) {
		const char *mode = entry.first.shared ? "ShareLock" : "ExclusiveLock";
		if (entry.second.session_count > 0)
			rows.push_back(Row{entry.second.name, entry.second.resource, "session", mode,
			                   entry.second.session_count, entry.first.tag});
		if (std::int64_t total = entry.second.xact_total(); total > 0)
			rows.push_back(
			    Row{entry.second.name, entry.second.resource, "transaction", mode, total, entry.first.tag});
	}

	for (const Row &row : rows) {
		Datum values[8];
		bool nulls[8] = {false, false, false, false, false, false, false, false};
		values[0] = pg::text_datum(row.name);
		if (row.resource)
			values[1] = Int64GetDatum(*row.resource);
		else
			nulls[1] = true;
		values[2] = pg::text_datum(row.level);
		values[3] = pg::text_datum(row.mode);
		values[4] = Int64GetDatum(row.count);
		values[5] = ObjectIdGetDatum(row.tag.high);
		values[6] = ObjectIdGetDatum(row.tag.low);
		values[7] = Int32GetDatum(row.tag.klass);
		pg::add_row(out, values, nulls);
	}
	return (Datum)0;
}
