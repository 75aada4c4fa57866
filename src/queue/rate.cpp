// Rate limits: the slots a claim takes and uses, and the slot table that
// create_queue and alter_queue keep (see queue/rate_sql.hpp).
#include "queue/rate.hpp"

#include "pg/datum.hpp"
#include "pg/guard.hpp"
#include "pg/spi.hpp"
#include "queue/rate_sql.hpp"

extern "C" {
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "utils/lsyscache.h"
#include "utils/array.h"
#include "utils/timestamp.h"
}

namespace concurrency::queue {

namespace {

// How soon a waiter held back by slots that claims in flight have locked
// looks again (rate_window_opens).
constexpr int64 rate_relook_us = 10'000;

TimestampTz shifted(TimestampTz at, const Interval &period, bool forward) {
	Interval p = period;
	return pg::guard([&] {
		return DatumGetTimestampTz(
		    DirectFunctionCall2(forward ? timestamptz_pl_interval : timestamptz_mi_interval,
		                        TimestampTzGetDatum(at), IntervalPGetDatum(&p)));
	});
}

} // namespace

std::vector<Datum> take_rate_slots(Queue &q, int32 wanted, TimestampTz now) {
	// cannot overflow: create_queue and alter_queue bound rate_period
	TimestampTz free_before = shifted(now, q.info().rate_period, false);
	static const Oid types[3] = {TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID};
	Datum values[3] = {TimestampTzGetDatum(free_before), Int32GetDatum(wanted), TimestampTzGetDatum(now)};
	uint64 n =
	    q.run_internal("rate_take", RateSql(q.name()).take(), 3, types, values, nullptr, Access::owner);
	std::vector<Datum> taken;
	for (uint64 i = 0; i < n; ++i) {
		bool isnull = false;
		taken.push_back(pg::column(static_cast<int>(i), 1, &isnull));
	}
	return taken;
}

void give_back_rate_slots(Queue &q, const std::vector<Datum> &taken, std::size_t used) {
	if (used >= taken.size())
		return;
	int n = static_cast<int>(taken.size() - used);
	Datum slots = pg::guard([&] {
		return PointerGetDatum(
		    construct_array(const_cast<Datum *>(taken.data()) + used, n, INT4OID, 4, true, TYPALIGN_INT));
	});
	static const Oid types[1] = {INT4ARRAYOID};
	q.run_internal("rate_give_back", RateSql(q.name()).give_back(), 1, types, &slots, nullptr, Access::owner);
}

std::optional<TimestampTz> rate_window_opens(Queue &q, TimestampTz now) {
	if (q.info().rate_limit <= 0)
		return std::nullopt;
	uint64 n = q.run_internal("rate_oldest", RateSql(q.name()).oldest_use(), 0, nullptr, nullptr, nullptr,
	                          Access::owner_latest);
	bool isnull = true;
	Datum oldest = n == 1 ? pg::column(0, 1, &isnull) : Datum(0);
	if (isnull)
		return std::nullopt;
	TimestampTz opens = shifted(DatumGetTimestampTz(oldest), q.info().rate_period, true);
	// a slot free by its time but locked by a claim in flight (which may
	// give it back at its commit, waking nobody): look again soon
	if (opens <= now)
		return now + rate_relook_us;
	return opens;
}

void apply_rate_limit(std::string_view queue, int32 rate_limit, std::string_view owner) {
	RateSql sql(queue);
	bool exists = pg::guard([&] {
		return OidIsValid(
		    get_relname_relid(rate_table_name(queue).c_str(), get_namespace_oid("concurrency", false)));
	});
	if (rate_limit <= 0) {
		if (exists)
			pg::execute(sql.drop_table());
		return;
	}
	if (!exists) {
		pg::execute(sql.create_table());
		pg::execute(sql.alter_owner(owner));
	}
	static const Oid types[1] = {INT4OID};
	Datum values[1] = {Int32GetDatum(rate_limit)};
	pg::execute(sql.resize(), 1, types, values);
}

} // namespace concurrency::queue
