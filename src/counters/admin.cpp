// create_counter, alter_counter, compact_counter, drop_counter, and the
// permissions (grant_counter, revoke_counter).
//
// A counter's slots get their ranges here: slot k > 0 gets trunc(min/n) as
// its floor and trunc(max/n) as its ceiling, slot 0 the rest, so that the
// floors sum to min_value and the ceilings to max_value exactly (NULL where
// there is no bound). alter_counter and compact_counter lock the counter's
// row and then every slot in ascending order (waiting for the transactions
// that hold them, as a withdrawal near its bound does), and lay the total out
// again: without bounds all in slot 0; with one bound the room above the
// floors (below the ceilings) spread evenly; with both, slots filled in
// ascending order. The total is the same before and after, to the unit.
#include <string>

#include <fmt/format.h>

#include "common/sql_text.hpp"
#include "counters/counter.hpp"
#include "counters/numeric_arg.hpp"
#include "pg/datum.hpp"
#include "pg/spi.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "utils/acl.h"
}

namespace concurrency::counters {

namespace {

int slots_arg(FunctionCallInfo fcinfo, int n, SourceLocation at = SourceLocation::current()) {
	int slots = pg::int32_arg(fcinfo, n, "slots", at);
	if (slots < 1 || slots > max_slots)
		throw Error(
		    sqlstate::invalid_parameter_value, fmt::format("slots must be between 1 and {}", max_slots),
		    fmt::format("slots is {}.", slots),
		    "16 slots let 16 transactions change the counter at once; more help only with more writers.", at);
	return slots;
}

// Lays the counter's `total` out over slots 0 .. slots-1 (which exist) and
// sets each slot's floor and ceiling.
void lay_out(const std::string &name, int slots, Datum total) {
	static const Oid types[3] = {TEXTOID, INT4OID, NUMERICOID};
	SPIPlanPtr plan = pg::prepared_plan(
	    "counters:lay-out",
	    "WITH p AS ("
	    "  SELECT $2::integer AS n, $3::numeric AS t, c.min_value AS m, c.max_value AS x, "
	    "         trunc(c.min_value / $2) AS fm, trunc(c.max_value / $2) AS fx "
	    "    FROM concurrency.counter AS c WHERE c.name = $1), "
	    "r AS ("
	    "  SELECT g.k, p.*, "
	    "         CASE WHEN p.m IS NULL THEN NULL WHEN g.k = 0 THEN p.m - (p.n - 1) * p.fm ELSE p.fm END AS "
	    "lo, "
	    "         CASE WHEN p.x IS NULL THEN NULL WHEN g.k = 0 THEN p.x - (p.n - 1) * p.fx ELSE p.fx END AS "
	    "hi "
	    "    FROM p, generate_series(0, p.n - 1) AS g(k)), "
	    "v AS ("
	    "  SELECT r.k, r.lo, r.hi, CASE "
	    "    WHEN r.m IS NULL AND r.x IS NULL THEN CASE WHEN r.k = 0 THEN r.t ELSE 0 END "
	    "    WHEN r.x IS NULL THEN CASE WHEN r.k = 0 "
	    "      THEN r.t - (r.n - 1) * (r.fm + trunc((r.t - r.m) / r.n)) "
	    "      ELSE r.lo + trunc((r.t - r.m) / r.n) END "
	    "    WHEN r.m IS NULL THEN CASE WHEN r.k = 0 "
	    "      THEN r.t - (r.n - 1) * (r.fx - trunc((r.x - r.t) / r.n)) "
	    "      ELSE r.hi - trunc((r.x - r.t) / r.n) END "
	    "    ELSE r.lo + LEAST(r.hi - r.lo, GREATEST(0, (r.t - r.m) - CASE WHEN r.k = 0 THEN 0 "
	    "      ELSE (r.x - r.m) - (r.n - 1) * (r.fx - r.fm) + (r.k - 1) * (r.fx - r.fm) END)) "
	    "    END AS v FROM r) "
	    "UPDATE concurrency.counter_slot AS s SET floor = v.lo, ceiling = v.hi, value = v.v "
	    "  FROM v WHERE s.counter = $1 AND s.slot = v.k",
	    3, types);
	Datum values[3] = {pg::text_datum(name), Int32GetDatum(slots), total};
	pg::execute(plan, values, nullptr, false, 0, pg::Visibility::latest);
}

// Creates slots 0 .. slots-1 that are missing, deletes those above, and
// records the number.
void set_slots(const std::string &name, int slots) {
	static const Oid types[2] = {TEXTOID, INT4OID};
	Datum values[2] = {pg::text_datum(name), Int32GetDatum(slots)};
	pg::execute(pg::prepared_plan("counters:drop-slots",
	                              "DELETE FROM concurrency.counter_slot WHERE counter = $1 AND slot >= $2", 2,
	                              types),
	            values, nullptr, false, 0, pg::Visibility::latest);
	pg::execute(pg::prepared_plan("counters:add-slots",
	                              "INSERT INTO concurrency.counter_slot (counter, slot) "
	                              "SELECT $1, k FROM generate_series(0, $2 - 1) AS k ON CONFLICT DO NOTHING",
	                              2, types),
	            values, nullptr, false, 0, pg::Visibility::latest);
	pg::execute(pg::prepared_plan("counters:set-slots",
	                              "UPDATE concurrency.counter SET slots = $2 WHERE name = $1", 2, types),
	            values, nullptr, false, 0, pg::Visibility::latest);
}

// alter_counter and compact_counter: every slot locked in ascending order,
// then the total laid out over `slots` slots.
void reshape(const std::string &name, std::optional<int> new_slots, const char *function) {
	Oid user = pg::guard([] { return GetUserId(); });
	pg::spi_connect();
	{
		AsExtensionOwner as_owner;
		Counter c = open_counter(name, user, Need::own, function, true);
		static const Oid types[1] = {TEXTOID};
		Datum values[1] = {pg::text_datum(name)};
		pg::execute(pg::prepared_plan("counters:lock-all",
		                              "SELECT slot FROM concurrency.counter_slot WHERE counter = $1 "
		                              "ORDER BY slot FOR NO KEY UPDATE",
		                              1, types, CURSOR_OPT_GENERIC_PLAN),
		            values, nullptr, false, 0, pg::Visibility::latest);
		pg::execute(pg::prepared_plan("counters:total",
		                              "SELECT COALESCE(sum(value), 0) FROM concurrency.counter_slot "
		                              "WHERE counter = $1",
		                              1, types),
		            values, nullptr, true, 0, pg::Visibility::latest);
		bool isnull = false;
		Datum total = pg::column(0, 1, &isnull);
		int slots = new_slots.value_or(c.slots);
		set_slots(name, slots);
		lay_out(name, slots, total);
	}
	pg::spi_finish();
}

// grant_counter and revoke_counter.
void change_permission(FunctionCallInfo fcinfo, bool grant) {
	std::string name = pg::text_arg(fcinfo, 0, "counter");
	pg::require_arg(fcinfo, 1, "role");
	std::string role = pg::guard([&] { return NameStr(*PG_GETARG_NAME(1)); });
	std::string permission = pg::text_arg(fcinfo, 2, "permission");
	if (permission != "use" && permission != "read")
		throw Error(sqlstate::invalid_parameter_value,
		            fmt::format("unknown counter permission \"{}\"", permission), "",
		            "The permissions are use (add and read) and read.");
	bool is_public = role == "public";
	Oid grantee = is_public ? InvalidOid : pg::guard([&] { return get_role_oid(role.c_str(), true); });
	if (!is_public && !OidIsValid(grantee))
		throw Error(sqlstate::undefined_object, fmt::format("role \"{}\" does not exist", role));
	const char *function = grant ? "grant_counter" : "revoke_counter";
	Oid user = pg::guard([] { return GetUserId(); });
	pg::spi_connect();
	{
		AsExtensionOwner as_owner;
		open_counter(name, user, Need::own, function, true);
		static const Oid types[3] = {TEXTOID, OIDOID, TEXTOID};
		Datum values[3] = {pg::text_datum(name), ObjectIdGetDatum(grantee), pg::text_datum(permission)};
		SPIPlanPtr plan =
		    grant ? pg::prepared_plan(
		                "counters:grant",
		                "INSERT INTO concurrency.counter_permission (counter, grantee, permission) "
		                "VALUES ($1, $2::regrole, $3) ON CONFLICT DO NOTHING",
		                3, types)
		          : pg::prepared_plan("counters:revoke",
		                              "DELETE FROM concurrency.counter_permission WHERE counter = $1 "
		                              "AND grantee::oid = $2 AND permission = $3",
		                              3, types);
		pg::execute(plan, values, nullptr, false, 0, pg::Visibility::latest);
	}
	pg::spi_finish();
}

} // namespace

} // namespace concurrency::counters

using namespace concurrency;

// concurrency.create_counter(name, slots, min_value, max_value)
CONCURRENCY_FUNCTION(concurrency_create_counter) {
	std::string name = counters::counter_name_arg(fcinfo, 0);
	int slots = counters::slots_arg(fcinfo, 1);
	auto min_value = counters::nullable_finite_numeric_arg(fcinfo, 2, "min_value");
	auto max_value = counters::nullable_finite_numeric_arg(fcinfo, 3, "max_value");
	if (min_value && max_value && counters::numeric_compare(*min_value, *max_value) > 0)
		throw Error(sqlstate::invalid_parameter_value, "min_value must not be greater than max_value");
	if ((min_value && counters::numeric_sign(*min_value) > 0) ||
	    (max_value && counters::numeric_sign(*max_value) < 0))
		throw Error(sqlstate::invalid_parameter_value,
		            "a counter starts at 0, which must be within its bounds",
		            "min_value must be at most 0 and max_value at least 0.",
		            "Create it with min_value 0 and add the starting amount with concurrency.counter_add.");
	Oid user = pg::guard([] { return GetUserId(); });
	pg::spi_connect();
	{
		counters::AsExtensionOwner as_owner;
		static const Oid types[5] = {TEXTOID, INT4OID, NUMERICOID, NUMERICOID, OIDOID};
		Datum values[5] = {pg::text_datum(name), Int32GetDatum(slots), min_value.value_or(0),
		                   max_value.value_or(0), ObjectIdGetDatum(user)};
		char nulls[6] = "     ";
		if (!min_value)
			nulls[2] = 'n';
		if (!max_value)
			nulls[3] = 'n';
		uint64 rows = pg::execute(
		    pg::prepared_plan("counters:create",
		                      "INSERT INTO concurrency.counter (name, slots, min_value, max_value, owner) "
		                      "VALUES ($1, $2, $3, $4, $5::regrole) ON CONFLICT (name) DO NOTHING",
		                      5, types),
		    values, nulls, false, 0, pg::Visibility::latest);
		if (rows == 0)
			throw Error(sqlstate::duplicate_object, fmt::format("counter \"{}\" already exists", name), "",
			            "Drop it first with concurrency.drop_counter, or change its slots with "
			            "concurrency.alter_counter.");
		counters::set_slots(name, slots);
		counters::lay_out(name, slots, counters::numeric_zero());
	}
	pg::spi_finish();
	PG_RETURN_VOID();
}

// concurrency.drop_counter(name)
CONCURRENCY_FUNCTION(concurrency_drop_counter) {
	std::string name = counters::counter_name_arg(fcinfo, 0);
	Oid user = pg::guard([] { return GetUserId(); });
	pg::spi_connect();
	{
		counters::AsExtensionOwner as_owner;
		counters::open_counter(name, user, counters::Need::own, "drop_counter", true);
		static const Oid types[1] = {TEXTOID};
		Datum values[1] = {pg::text_datum(name)};
		pg::execute(
		    pg::prepared_plan("counters:drop", "DELETE FROM concurrency.counter WHERE name = $1", 1, types),
		    values, nullptr, false, 0, pg::Visibility::latest);
	}
	pg::spi_finish();
	PG_RETURN_VOID();
}

// concurrency.alter_counter(name, slots)
CONCURRENCY_FUNCTION(concurrency_alter_counter) {
	std::string name = counters::counter_name_arg(fcinfo, 0);
	int slots = counters::slots_arg(fcinfo, 1);
	counters::reshape(name, slots, "alter_counter");
	PG_RETURN_VOID();
}

// concurrency.compact_counter(name)
CONCURRENCY_FUNCTION(concurrency_compact_counter) {
	std::string name = counters::counter_name_arg(fcinfo, 0);
	counters::reshape(name, std::nullopt, "compact_counter");
	PG_RETURN_VOID();
}

// concurrency.grant_counter(counter, role, permission)
CONCURRENCY_FUNCTION(concurrency_grant_counter) {
	counters::change_permission(fcinfo, true);
	PG_RETURN_VOID();
}

// concurrency.revoke_counter(counter, role, permission)
CONCURRENCY_FUNCTION(concurrency_revoke_counter) {
	counters::change_permission(fcinfo, false);
	PG_RETURN_VOID();
}
