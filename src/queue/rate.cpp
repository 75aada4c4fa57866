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

TimestampTz shifted(TimestampTz at, const Interval &period, bool forward) {
	Interval p = period;
	return pg::guard([&] {
		return DatumGetTimestampTz(
		    DirectFunctionCall2(forward ? timestamptz_pl_interval : timestamptz_mi_interval,
		                        TimestampTzGetDatum(at), IntervalPGetDatum(&p)));
	});
}

Datum int4_array(const int32 *values, int n) {
	std::vector<Datum> elems(values, values + n);
	for (int i = 0; i < n; ++i)
		elems[static_cast<std::size_t>(i)] = Int32GetDatum(values[i]);
	return pg::guard(
	    [&] { return PointerGetDatum(construct_array(elems.data(), n, INT4OID, 4, true, TYPALIGN_INT)); });
}

} // namespace

std::vector<int32> take_rate_slots(Queue &q, int32 wanted, TimestampTz now) {
	RateSql sql(q.name());
	// cannot overflow: create_queue and alter_queue bound rate_period
	TimestampTz free_before = shifted(now, q.info().rate_period, false);
	std::vector<int32> slots;
	static const Oid lock_types[2] = {TIMESTAMPTZOID, INT4OID};
	Datum lock_values[2] = {TimestampTzGetDatum(free_before), Int32GetDatum(wanted)};
	uint64 n =
	    q.run_internal("rate_lock", sql.lock_free(), 2, lock_types, lock_values, nullptr, Access::owner);
	if (n == 0)
		return slots;
	std::vector<int32> locked;
	for (uint64 i = 0; i < n; ++i) {
		bool isnull = false;
		locked.push_back(DatumGetInt32(pg::column(static_cast<int>(i), 1, &isnull)));
	}
	// Checked again on the latest state: the first statement's snapshot is
	// older than its locks, and may have seen a slot free that a claim
	// committed since has used.
	static const Oid check_types[2] = {INT4ARRAYOID, TIMESTAMPTZOID};
	Datum check_values[2] = {int4_array(locked.data(), static_cast<int>(locked.size())),
	                         TimestampTzGetDatum(free_before)};
	n = q.run_internal("rate_recheck", sql.recheck(), 2, check_types, check_values, nullptr,
	                   Access::owner_latest);
	for (uint64 i = 0; i < n; ++i) {
		bool isnull = false;
		slots.push_back(DatumGetInt32(pg::column(static_cast<int>(i), 1, &isnull)));
	}
	return slots;
}

void use_rate_slots(Queue &q, const std::vector<int32> &slots, std::size_t used, TimestampTz now) {
	if (used == 0)
		return;
	static const Oid types[2] = {INT4ARRAYOID, TIMESTAMPTZOID};
	Datum values[2] = {int4_array(slots.data(), static_cast<int>(std::min(used, slots.size()))),
	                   TimestampTzGetDatum(now)};
	q.run_internal("rate_use", RateSql(q.name()).use(), 2, types, values, nullptr, Access::owner);
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
	if (opens <= now)
		return std::nullopt;
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
