// SQL-callable functions of the lock-wait history: the rows behind the view
// concurrency.lock_history, lock_history_reset() and lock_history_status().
//
// The ring is copied slot by slot (history_shared's seqlock: the sampler is
// never made to wait), then turned into rows in the reader's terms: user and
// database names, lock tags described for the current database, and query
// text, client address, state and transaction start masked by the rules of
// pg_stat_activity (visible to members of pg_read_all_stats or of the
// session's role, "<insufficient privilege>" otherwise).
#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "diagnostics/history_shared.hpp"
#include "diagnostics/lock_describe.hpp"
#include "pg/datum.hpp"
#include "pg/srf.hpp"

extern "C" {
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "mb/pg_wchar.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/inet.h"
#include "utils/timestamp.h"
}

namespace concurrency::diagnostics {

namespace {

// pg_stat_activity's HAS_PGSTAT_PERMISSIONS, remembered per role for one query.
class Visibility {
  public:
	Visibility() : all_(pg::guard([] { return has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS); })) {}
	bool sees(Oid role) {
		if (all_)
			return true;
		auto it = roles_.find(role);
		if (it == roles_.end())
			it = roles_.emplace(role, pg::guard([&] { return has_privs_of_role(GetUserId(), role); })).first;
		return it->second;
	}

  private:
	bool all_;
	std::unordered_map<Oid, bool> roles_;
};

// Raw bytes cut at a byte limit, clipped to whole characters (as
// pgstat_clip_activity does for pg_stat_activity.query).
std::string clipped(const char *raw) {
	int len = static_cast<int>(strnlen(raw, history_root_query_bytes));
	int keep = pg::guard([&] { return pg_mbcliplen(raw, len, len); });
	return std::string(raw, static_cast<std::size_t>(keep));
}

Datum interval_us(int64 us) {
	return pg::guard([&] {
		auto *iv = static_cast<Interval *>(palloc0(sizeof(Interval)));
		iv->time = us;
		return IntervalPGetDatum(iv);
	});
}

Datum text_array(const std::vector<std::string> &items) {
	return pg::guard([&] {
		Datum *elements = static_cast<Datum *>(palloc(sizeof(Datum) * (items.size() + 1)));
		for (std::size_t i = 0; i < items.size(); ++i)
			elements[i] = CStringGetTextDatum(items[i].c_str());
		return PointerGetDatum(
		    construct_array(elements, static_cast<int>(items.size()), TEXTOID, -1, false, TYPALIGN_INT));
	});
}

const char *insufficient_privilege = "<insufficient privilege>";

} // namespace

} // namespace concurrency::diagnostics

using namespace concurrency;
using namespace concurrency::diagnostics;

// concurrency.lock_history_episodes() — the episodes in the ring, oldest first.
CONCURRENCY_FUNCTION(concurrency_lock_history_episodes) {
	HistoryShared &ring = require_history();
	pg::ResultSet out = pg::materialize(fcinfo);

	const uint64 floor = pg_atomic_read_u64(&ring.floor);
	std::vector<HistoryEpisode> episodes;
	HistoryEpisode copy;
	for (uint32 i = 0; i < ring.capacity; ++i)
		if (history_read(ring, i, &copy) && copy.id != 0 && copy.id >= floor)
			episodes.push_back(copy);
	std::sort(episodes.begin(), episodes.end(),
	          [](const HistoryEpisode &a, const HistoryEpisode &b) { return a.id < b.id; });

	Visibility visibility;
	LockDescriber describer;
	for (const HistoryEpisode &e : episodes) {
		const bool visible = visibility.sees(e.root_userid);
		std::vector<std::string> objects;
		for (int k = 0; k < e.n_objects && k < history_max_objects; ++k)
			objects.push_back(describer.describe(e.objects[k]));
		std::vector<std::string> queries;
		for (int k = 0; k < e.n_queries && k < history_max_queries; ++k)
			queries.push_back(visibility.sees(e.query_userid[k]) ? clipped(e.waiting_queries[k])
			                                                     : insufficient_privilege);
		const std::string root_query = visible ? clipped(e.root_query) : insufficient_privilege;
		const TimestampTz end = e.ended_at != 0 ? e.ended_at : e.last_seen;
		Datum duration = interval_us(end - e.started_at);
		Datum longest_wait = interval_us(e.longest_wait);
		Datum objects_array = text_array(objects);
		Datum queries_array = text_array(queries);
		constexpr int columns = 20;
		Datum values[columns];
		bool nulls[columns] = {};
		pg::guard([&] {
			values[0] = Int64GetDatum(static_cast<int64>(e.id));
			char *database = e.database != InvalidOid ? get_database_name(e.database) : nullptr;
			nulls[1] = database == nullptr;
			values[1] = database ? DirectFunctionCall1(namein, CStringGetDatum(database)) : 0;
			values[2] = TimestampTzGetDatum(e.started_at);
			values[3] = TimestampTzGetDatum(e.ended_at);
			nulls[3] = e.ended_at == 0;
			values[4] = duration;
			values[5] = Int32GetDatum(e.root_pid);
			char *user = e.root_userid != InvalidOid ? GetUserNameFromId(e.root_userid, true) : nullptr;
			nulls[6] = user == nullptr;
			values[6] = user ? DirectFunctionCall1(namein, CStringGetDatum(user)) : 0;
			values[7] = CStringGetTextDatum(e.root_application);
			nulls[7] = e.root_pid == 0;
			nulls[8] = !visible || e.root_client_addr[0] == '\0';
			values[8] = nulls[8] ? 0 : DirectFunctionCall1(inet_in, CStringGetDatum(e.root_client_addr));
			nulls[9] = !visible || e.root_state[0] == '\0';
			values[9] = nulls[9] ? 0 : CStringGetTextDatum(e.root_state);
			nulls[10] = e.root_pid == 0;
			values[10] = CStringGetTextDatum(root_query.c_str());
			nulls[11] = !visible || e.root_xact_start == 0;
			values[11] = TimestampTzGetDatum(e.root_xact_start);
			values[12] = Int32GetDatum(e.max_waiters);
			values[13] = Int32GetDatum(e.max_depth);
			values[14] = longest_wait;
			values[15] = Float8GetDatum(e.waiter_seconds);
			values[16] = objects_array;
			values[17] = queries_array;
			const char *ended_by = e.ended_by == 2 ? "root_exited" : e.ended_by == 1 ? "released" : nullptr;
			nulls[18] = ended_by == nullptr;
			values[18] = ended_by ? CStringGetTextDatum(ended_by) : 0;
			values[19] = BoolGetDatum(e.in_cycle);
		});
		pg::add_row(out, values, nulls);
	}
	return (Datum)0;
}

// concurrency.lock_history_reset() — clears the history. Episodes still going
// on start again as new episodes at the next sample.
CONCURRENCY_FUNCTION(concurrency_lock_history_reset) {
	HistoryShared &ring = require_history();
	uint64 next = pg_atomic_read_u64(&ring.next_id);
	uint64 floor = pg_atomic_read_u64(&ring.floor);
	while (floor < next && !pg_atomic_compare_exchange_u64(&ring.floor, &floor, next)) {
	}
	PG_RETURN_VOID();
}

// concurrency.lock_history_status() — whether the sampler runs, and what it costs.
CONCURRENCY_FUNCTION(concurrency_lock_history_status) {
	HistoryShared &ring = require_history();
	pg::ResultSet out = pg::materialize(fcinfo);
	const uint32 pid = pg_atomic_read_u32(&ring.worker_pid);
	const uint64 samples = pg_atomic_read_u64(&ring.samples);
	const uint64 cpu_ns = pg_atomic_read_u64(&ring.sample_cpu_ns);
	const auto last = static_cast<TimestampTz>(pg_atomic_read_u64(&ring.last_sample_at));
	const uint64 next = pg_atomic_read_u64(&ring.next_id);
	const uint64 floor = pg_atomic_read_u64(&ring.floor);
	Datum values[7];
	bool nulls[7] = {};
	values[0] = Int32GetDatum(static_cast<int32>(pid));
	nulls[0] = pid == 0;
	values[1] = Int32GetDatum(history_interval_ms);
	values[2] = Int64GetDatum(static_cast<int64>(samples));
	values[3] = Float8GetDatum(static_cast<double>(cpu_ns) / 1e9);
	values[4] = TimestampTzGetDatum(last);
	nulls[4] = last == 0;
	values[5] = Int64GetDatum(static_cast<int64>(next > floor ? next - floor : 0));
	values[6] = Int32GetDatum(static_cast<int32>(ring.capacity));
	pg::add_row(out, values, nulls);
	return (Datum)0;
}
