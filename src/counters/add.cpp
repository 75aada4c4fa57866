// counter_add and counter_value: the hot path.
//
// counter_add(name, delta) changes slots that nobody holds whenever it can.
// It tries, in this order, holding nothing of its own while it waits:
//   1. one free slot where the delta fits between the slot's floor and
//      ceiling, taken without waiting (SKIP LOCKED), starting at a slot that
//      depends on the backend's pid, so that writers start on different rows;
//   then, for a delta away from every bound (a deposit on a counter without
//   max_value, a withdrawal on one without min_value):
//   2. its start slot, waiting for its holder;
//   for a delta towards a bound:
//   2. the free slots together, in ascending order, without waiting (in a
//      subtransaction, rolled back when they cannot take it all);
//   3. one busy slot that takes it alone as of committed data, waiting for
//      its holder (and checking again once it has it);
//   4. every slot, locked in ascending order (waiting for their holders: one
//      order, so two such calls never deadlock), and then, as of committed
//      data, the delta gathered from the slots in ascending order, or 23514
//      when all of them together cannot take it, nothing changed.
// The stages that do not wait run in a subtransaction rolled back when they
// add nothing, so that a stale lock of theirs is not held into a wait (see
// without_stale_locks). Stages 1-3 are tried up to four times (a slot waited for may have changed)
// before stage 4. Stage 1 first runs without reading the catalog: the
// permission check, the free slot and the add in one statement.
// Each slot stays within [floor, ceiling], the floors sum to min_value and
// the ceilings to max_value: the total never crosses a bound.
// A statement that picks its slot with LIMIT 1 picks it in a MATERIALIZED
// CTE, run once per execution, and updates that one slot. As a subquery in
// FROM, the planner may put it on the inner side of a nested loop over the
// counter's slots (it does when the statistics say one slot per counter) and
// rescan it for each slot: each rescan locked and returned another slot (the
// one just updated is skipped), and the delta went into several slots.
#include <functional>
#include <string>

#include <fmt/format.h>

#include "common/sql_text.hpp"
#include "counters/counter.hpp"
#include "counters/numeric_arg.hpp"
#include "pg/datum.hpp"
#include "pg/spi.hpp"
#include "pg/xact.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "utils/datum.h"
#include "utils/fmgrprotos.h"
}

namespace concurrency::counters {

namespace {

// The common case in one statement: the caller may use the counter, and a
// free slot takes the delta (stage 1 without reading the catalog first).
// 1 row, or 0 for anything else (no such counter, no permission, no free
// slot that fits), which the full path then sorts out.
uint64 add_fast(const std::string &name, Oid user, Datum delta) {
	// The same statement twice: first from the start slot upwards, in the
	// primary key's order (the index scan stops at the first free slot: one
	// row read in the common case); then, when every slot from there up is
	// held, all slots from the start slot round.
	static const char *text =
	    "WITH t AS MATERIALIZED (SELECT f.slot FROM concurrency.counter_slot AS f "
	    "        JOIN concurrency.counter AS c ON c.name = f.counter "
	    "      WHERE f.counter = $1 AND {} "
	    "        AND (f.floor IS NULL OR f.value + $2 >= f.floor) "
	    "        AND (f.ceiling IS NULL OR f.value + $2 <= f.ceiling) "
	    "        AND (pg_has_role($4, c.owner::oid, 'USAGE') "
	    "             OR EXISTS (SELECT FROM concurrency.counter_permission AS p "
	    "                         WHERE p.counter = c.name AND p.permission = 'use' "
	    "                           AND (p.grantee::oid = 0 OR pg_has_role($4, p.grantee::oid, 'USAGE')))) "
	    "      ORDER BY {} LIMIT 1 "
	    "      FOR NO KEY UPDATE OF f SKIP LOCKED) "
	    "UPDATE concurrency.counter_slot AS s SET value = s.value + $2 "
	    "FROM t WHERE s.counter = $1 AND s.slot = t.slot";
	static const std::string upwards = fmt::format(fmt::runtime(text), "f.slot >= $3 % c.slots", "f.slot");
	static const std::string round =
	    fmt::format(fmt::runtime(text), "true", "(f.slot + 1048576 - $3 % c.slots) % 1048576");
	static const Oid types[4] = {TEXTOID, NUMERICOID, INT4OID, OIDOID};
	Datum values[4] = {pg::text_datum(name), delta, Int32GetDatum(MyProcPid), ObjectIdGetDatum(user)};
	SPIPlanPtr plan =
	    pg::prepared_plan("counters:add-fast-up", upwards.c_str(), 4, types, CURSOR_OPT_GENERIC_PLAN);
	if (pg::execute(plan, values, nullptr, false, 0, pg::Visibility::latest) == 1)
		return 1;
	plan = pg::prepared_plan("counters:add-fast", round.c_str(), 4, types, CURSOR_OPT_GENERIC_PLAN);
	return pg::execute(plan, values, nullptr, false, 0, pg::Visibility::latest);
}

// Takes a free slot where the delta fits, and adds it there. 1 row, or 0 when
// every slot that could take it is held by another transaction.
uint64 add_on_free_slot(const Counter &c, Datum delta) {
	static const Oid types[3] = {TEXTOID, NUMERICOID, INT4OID};
	SPIPlanPtr plan =
	    pg::prepared_plan("counters:add-free",
	                      "WITH t AS MATERIALIZED (SELECT f.slot FROM concurrency.counter_slot AS f "
	                      "      WHERE f.counter = $1 AND (f.floor IS NULL OR f.value + $2 >= f.floor) "
	                      "        AND (f.ceiling IS NULL OR f.value + $2 <= f.ceiling) "
	                      "      ORDER BY (f.slot + $3) % 1048576 LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED) "
	                      "UPDATE concurrency.counter_slot AS s SET value = s.value + $2 "
	                      "FROM t WHERE s.counter = $1 AND s.slot = t.slot",
	                      3, types, CURSOR_OPT_GENERIC_PLAN);
	// The start: slots ordered from (pid mod slots) upwards, wrapping round.
	int start = static_cast<int>(MyProcPid % c.slots);
	int shift = 1048576 - start; // (slot + shift) mod 2^20 puts `start` first
	Datum values[3] = {pg::text_datum(c.name), delta, Int32GetDatum(shift)};
	return pg::execute(plan, values, nullptr, false, 0, pg::Visibility::latest);
}

// Every slot busy, the delta away from the bounds: wait for the start slot.
uint64 add_on_start_slot(const Counter &c, Datum delta) {
	static const Oid types[3] = {TEXTOID, NUMERICOID, INT4OID};
	SPIPlanPtr plan = pg::prepared_plan("counters:add-wait",
	                                    "UPDATE concurrency.counter_slot SET value = value + $2 "
	                                    "WHERE counter = $1 AND slot = $3",
	                                    3, types, CURSOR_OPT_GENERIC_PLAN);
	Datum values[3] = {pg::text_datum(c.name), delta, Int32GetDatum(static_cast<int>(MyProcPid % c.slots))};
	return pg::execute(plan, values, nullptr, false, 0, pg::Visibility::latest);
}

// The plan's order: slots from (pid mod slots) upwards, wrapping round.
int spread_shift(const Counter &c) {
	return 1048576 - static_cast<int>(MyProcPid % c.slots);
}

// Rolls stage 2's subtransaction back: the free slots cannot take it all.
struct NotEnoughFree {};

// Stage 2: the free slots with room, one at a time in ascending order, each
// giving what it can, until the delta is placed; false (and nothing changed,
// nothing held) when they cannot take it all.
bool gather_free(const Counter &c, Datum delta) {
	static const Oid types[4] = {TEXTOID, NUMERICOID, NUMERICOID, INT4OID};
	SPIPlanPtr plan = pg::prepared_plan(
	    "counters:gather-free",
	    "WITH t AS MATERIALIZED (SELECT f.slot, LEAST(CASE WHEN $2 < 0 THEN f.value - f.floor "
	    "ELSE f.ceiling - f.value END, $3) AS take "
	    "        FROM concurrency.counter_slot AS f "
	    "       WHERE f.counter = $1 AND f.slot > $4 "
	    "         AND CASE WHEN $2 < 0 THEN f.value > f.floor ELSE f.value < f.ceiling END "
	    "       ORDER BY f.slot LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED) "
	    "UPDATE concurrency.counter_slot AS s SET value = s.value + sign($2) * t.take "
	    "FROM t WHERE s.counter = $1 AND s.slot = t.slot "
	    "RETURNING s.slot, $3 - t.take",
	    4, types, CURSOR_OPT_GENERIC_PLAN);
	Datum remaining = pg::guard([&] { return DirectFunctionCall1(numeric_abs, delta); });
	bool placed = false;
	ErrorData *error = nullptr;
	try {
		error = pg::in_subtransaction([&] {
			int after = -1;
			for (;;) {
				Datum values[4] = {pg::text_datum(c.name), delta, remaining, Int32GetDatum(after)};
				if (pg::execute(plan, values, nullptr, false, 0, pg::Visibility::latest) == 0)
					throw NotEnoughFree{};
				after = pg::column_as<std::int32_t>(0, 1).value_or(c.slots);
				bool isnull = false;
				Datum left = pg::column(0, 2, &isnull);
				remaining = pg::guard([&] { return datumCopy(left, false, -1); });
				if (numeric_sign(remaining) <= 0)
					return;
			}
		});
		placed = error == nullptr;
	} catch (const NotEnoughFree &) {
		placed = false;
	}
	if (error)
		throw pg::PgException(error);
	return placed;
}

// Stage 3: the first busy slot (in this backend's order) that takes the
// delta alone as of committed data, waiting for its holder; 0 rows when it
// no longer does once we have it, or no slot does.
uint64 add_on_busy_slot(const Counter &c, Datum delta) {
	static const Oid types[3] = {TEXTOID, NUMERICOID, INT4OID};
	SPIPlanPtr plan =
	    pg::prepared_plan("counters:add-busy",
	                      "WITH t AS MATERIALIZED (SELECT f.slot FROM concurrency.counter_slot AS f "
	                      "      WHERE f.counter = $1 AND (f.floor IS NULL OR f.value + $2 >= f.floor) "
	                      "        AND (f.ceiling IS NULL OR f.value + $2 <= f.ceiling) "
	                      "      ORDER BY (f.slot + $3) % 1048576 LIMIT 1) "
	                      "UPDATE concurrency.counter_slot AS s SET value = s.value + $2 "
	                      "FROM t WHERE s.counter = $1 AND s.slot = t.slot "
	                      "  AND (s.floor IS NULL OR s.value + $2 >= s.floor) AND (s.ceiling IS NULL OR "
	                      "s.value + $2 <= s.ceiling)",
	                      3, types, CURSOR_OPT_GENERIC_PLAN);
	Datum values[3] = {pg::text_datum(c.name), delta, Int32GetDatum(spread_shift(c))};
	// An UPDATE that waited for a row and then finds it no longer matches
	// keeps the row locked (READ COMMITTED locks the newest version before it
	// checks it again). The subtransaction, rolled back then, lets it go: the
	// next stage must hold nothing while it waits.
	uint64 rows = 0;
	ErrorData *error = nullptr;
	try {
		error = pg::in_subtransaction([&] {
			rows = pg::execute(plan, values, nullptr, false, 0, pg::Visibility::latest);
			if (rows == 0)
				throw NotEnoughFree{};
		});
	} catch (const NotEnoughFree &) {
		rows = 0;
	}
	if (error)
		throw pg::PgException(error);
	return rows;
}

// Locks every slot of the counter in ascending order, waiting for holders.
void lock_all_slots(const Counter &c) {
	static const Oid types[1] = {TEXTOID};
	SPIPlanPtr plan = pg::prepared_plan("counters:lock-all",
	                                    "SELECT slot FROM concurrency.counter_slot WHERE counter = $1 "
	                                    "ORDER BY slot FOR NO KEY UPDATE",
	                                    1, types, CURSOR_OPT_GENERIC_PLAN);
	Datum values[1] = {pg::text_datum(c.name)};
	pg::execute(plan, values, nullptr, false, 0, pg::Visibility::latest);
}

// With every slot held: spreads the delta over the slots' room in ascending
// order, if their room together takes it. The rows changed (0: it does not fit).
uint64 gather(const Counter &c, Datum delta) {
	static const Oid types[2] = {TEXTOID, NUMERICOID};
	SPIPlanPtr plan = pg::prepared_plan(
	    "counters:gather",
	    "WITH room AS ("
	    "  SELECT slot, CASE WHEN $2 < 0 THEN value - floor ELSE ceiling - value END AS room "
	    "    FROM concurrency.counter_slot WHERE counter = $1), "
	    "share AS ("
	    "  SELECT slot, LEAST(room, GREATEST(0, abs($2) - COALESCE(sum(room) OVER ("
	    "           ORDER BY slot ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), 0))) AS take, "
	    "         sum(room) OVER () AS total_room "
	    "    FROM room) "
	    "UPDATE concurrency.counter_slot AS s SET value = s.value + sign($2) * share.take "
	    "  FROM share WHERE s.counter = $1 AND s.slot = share.slot "
	    "   AND share.take > 0 AND share.total_room >= abs($2)",
	    2, types, CURSOR_OPT_GENERIC_PLAN);
	Datum values[2] = {pg::text_datum(c.name), delta};
	return pg::execute(plan, values, nullptr, false, 0, pg::Visibility::latest);
}

[[noreturn]] void bound_crossed(const Counter &c, Datum delta, bool downwards) {
	static const Oid types[2] = {TEXTOID, NUMERICOID};
	SPIPlanPtr plan = pg::prepared_plan(
	    "counters:bound-detail",
	    "SELECT (SELECT sum(value) FROM concurrency.counter_slot WHERE counter = $1)::text, "
	    "$2::text, min_value::text, max_value::text "
	    "FROM concurrency.counter WHERE name = $1",
	    2, types);
	Datum values[2] = {pg::text_datum(c.name), delta};
	pg::execute(plan, values, nullptr, true, 0, pg::Visibility::latest);
	std::string value = pg::text_column(0, 1).value_or("?");
	std::string d = pg::text_column(0, 2).value_or("?");
	std::string bound = pg::text_column(0, downwards ? 3 : 4).value_or("?");
	throw Error(sqlstate::check_violation,
	            fmt::format("counter \"{}\" would go {} its {}", c.name, downwards ? "below" : "above",
	                        downwards ? "min_value" : "max_value"),
	            fmt::format("The counter holds {} (as committed, with this transaction's own changes); "
	                        "adding {} would cross the {} {}.",
	                        value, d, downwards ? "min_value" : "max_value", bound),
	            "Nothing was changed. Add a smaller amount, or retry once the counter has room.");
}

// Runs a stage that never waits (its statement locks with SKIP LOCKED) in a
// subtransaction, kept when it added the delta (1 row) and rolled back
// otherwise. A row that SKIP LOCKED locked and then found changed by a
// commit since the statement's snapshot, no longer fitting, stays locked by
// the statement even though it is skipped: rolled back with the
// subtransaction, it is let go, so that the stages that wait hold nothing
// (two calls each holding a slot the other waits for would deadlock).
uint64 without_stale_locks(const std::function<uint64()> &stage) {
	uint64 rows = 0;
	ErrorData *error = nullptr;
	try {
		error = pg::in_subtransaction([&] {
			rows = stage();
			if (rows == 0)
				throw NotEnoughFree{};
		});
	} catch (const NotEnoughFree &) {
		rows = 0;
	}
	if (error)
		throw pg::PgException(error);
	return rows;
}

} // namespace

} // namespace concurrency::counters

using namespace concurrency;
using concurrency::counters::Counter;
using concurrency::counters::Need;

// concurrency.counter_add(name, delta)
CONCURRENCY_FUNCTION(concurrency_counter_add) {
	std::string name = counters::counter_name_arg(fcinfo, 0);
	Datum delta = counters::finite_numeric_arg(fcinfo, 1, "delta");
	int sign = counters::numeric_sign(delta);
	Oid user = pg::guard([] { return GetUserId(); });
	pg::spi_connect();
	{
		counters::AsExtensionOwner as_owner;
		// A slot may go away while we wait for it (alter_counter took the
		// counter to fewer slots): then the call starts again.
		auto fast = [&] { return counters::add_fast(name, user, delta); };
		for (int attempt = 0; sign == 0 || counters::without_stale_locks(fast) == 0; ++attempt) {
			Counter c = counters::open_counter(name, user, Need::use, "counter_add");
			if (sign == 0)
				break;
			if (counters::without_stale_locks([&] { return counters::add_on_free_slot(c, delta); }) == 1)
				break;
			bool towards_bound = (sign < 0 && c.has_min) || (sign > 0 && c.has_max);
			if (!towards_bound) {
				if (counters::add_on_start_slot(c, delta) == 1)
					break;
			} else {
				if (counters::gather_free(c, delta) || counters::add_on_busy_slot(c, delta) == 1)
					break;
				// the slot it waited for changed under it: look again, a few
				// times, before the last resort of holding every slot
				if (attempt < 3)
					continue;
				counters::lock_all_slots(c);
				if (counters::gather(c, delta) > 0)
					break;
				counters::bound_crossed(c, delta, sign < 0);
			}
			if (attempt >= 100)
				throw Error(sqlstate::object_not_in_prerequisite_state,
				            fmt::format("counter \"{}\" kept changing its slots", name),
				            "counter_add found its slot gone 100 times in a row.");
		}
	}
	pg::spi_finish();
	PG_RETURN_VOID();
}

// concurrency.counter_value(name)
CONCURRENCY_FUNCTION(concurrency_counter_value) {
	std::string name = counters::counter_name_arg(fcinfo, 0);
	Oid user = pg::guard([] { return GetUserId(); });
	pg::spi_connect();
	Datum result = 0;
	bool isnull = true;
	{
		counters::AsExtensionOwner as_owner;
		Counter c = counters::open_counter(name, user, Need::read, "counter_value");
		static const Oid types[1] = {TEXTOID};
		SPIPlanPtr plan = pg::prepared_plan("counters:value",
		                                    "SELECT COALESCE(sum(value), 0) FROM concurrency.counter_slot "
		                                    "WHERE counter = $1",
		                                    1, types, CURSOR_OPT_GENERIC_PLAN);
		Datum values[1] = {pg::text_datum(c.name)};
		pg::execute(plan, values, nullptr, true);
		Datum sum = pg::column(0, 1, &isnull);
		// SPI's result goes with spi_finish: copy it out first
		result = pg::guard([&] { return SPI_datumTransfer(sum, false, -1); });
	}
	pg::spi_finish();
	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(result);
}
