// Queue admin and settings (src/sql/21_queue_lifecycle.sql; the catalog and
// its trigger in src/sql/20_queue.sql):
// create_queue, alter_queue, drop_queue, pause_queue, resume_queue, and the
// trigger that makes every backend read a queue's settings again.
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "citus/node.hpp"
#include "common/sql_text.hpp"
#include "pg/relation.hpp"
#include "queue/graphs/dependencies.hpp"
#include "queue/distribution.hpp"
#include "queue/flow/fair.hpp"
#include "queue/flow/keys.hpp"
#include "queue/flow/keys_sql.hpp"
#include "queue/permissions.hpp"
#include "queue/lifecycle/names.hpp"
#include "queue/relation_names.hpp"
#include "queue/queue.hpp"
#include "queue/flow/rate.hpp"
#include "queue/time/schedule_runner.hpp"
#include "queue/time/stats_history.hpp"
#include "queue/lifecycle/stats_sql.hpp"
#include "queue/time/wait.hpp"

extern "C" {
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "utils/acl.h"
#include "utils/inval.h"
#include "miscadmin.h"
#include "utils/lsyscache.h"
}

using namespace concurrency;
using namespace concurrency::queue;

namespace {

std::string interval_text(const Interval &value) {
	return pg::guard([&] {
		return DatumGetCString(
		    DirectFunctionCall1(interval_out, IntervalPGetDatum(const_cast<Interval *>(&value))));
	});
}

// A rate limit given to create_queue or alter_queue: rate_limit and
// rate_period, or key_rate_limit and key_rate_period.
struct RateArgs {
	const char *limit_name;
	const char *period_name;
	// the limit given (its nullopt inside: 0, remove the limit)
	std::optional<std::optional<int32>> limit;
	std::optional<Interval> period;
	bool given() const { return limit || period; }
};

// The settings of create_queue and alter_queue, from arguments 1..5.
// Missing arguments (a 0.1.0 declaration calling this module) count as NULL.
struct QueueSettings {
	std::optional<Interval> lease;
	std::optional<int32> max_attempts;
	// set: given; its value NULL (nullopt inside): remove the setting
	std::optional<std::optional<Interval>> retain;
	std::optional<std::optional<int32>> key_limit;
	std::optional<std::optional<int32>> max_leased;
	RateArgs rate{"rate_limit", "rate_period", {}, {}};
	RateArgs key_rate{"key_rate_limit", "key_rate_period", {}, {}};
};

// A limit: 0 removes it (nullopt), negative is refused.
std::optional<std::optional<int32>> limit_arg(FunctionCallInfo fcinfo, int n, const char *argname) {
	if (arg_null(fcinfo, n))
		return std::nullopt;
	int32 value = PG_GETARG_INT32(n);
	if (value < 0)
		throw Error(sqlstate::invalid_parameter_value, fmt::format("{} must not be negative", argname),
		            fmt::format("It is {}.", value), fmt::format("Use {} => 0 for no limit.", argname));
	return value == 0 ? std::optional<int32>() : std::optional<int32>(value);
}

constexpr int max_retain_years = 100;
// max_leased is enforced with one slot row per lease (keys.cpp): a bound keeps
// create_queue and alter_queue from writing millions of them.
constexpr int32 max_leased_limit = 10000;
// rate_limit likewise (one slot row per claim of a window: rate.hpp)
constexpr int32 rate_limit_limit = 10000;

// The longest interval a setting may have: `years` years (22023 beyond; an
// infinite interval too).
void check_at_most_years(const Interval &value, int years, const char *argname) {
	Interval longest{};
	longest.month = years * MONTHS_PER_YEAR;
	bool too_long = pg::guard([&] {
		return DatumGetBool(DirectFunctionCall2(
		    interval_gt, IntervalPGetDatum(const_cast<Interval *>(&value)), IntervalPGetDatum(&longest)));
	});
	if (too_long)
		throw Error(sqlstate::invalid_parameter_value, fmt::format("{} is too long", argname),
		            fmt::format("It is {}; at most {} years are allowed.", interval_text(value), years));
}

// A rate limit from argument n (the limit) and n + 1 (its period).
void rate_args(FunctionCallInfo fcinfo, int n, RateArgs &r) {
	if (PG_NARGS() <= n)
		return; // an older declaration without it
	r.limit = limit_arg(fcinfo, n, r.limit_name);
	if (r.limit && *r.limit && **r.limit > rate_limit_limit)
		throw Error(sqlstate::invalid_parameter_value, fmt::format("{} is too large", r.limit_name),
		            fmt::format("It is {}; at most {} claims per {} are allowed.", **r.limit,
		                        rate_limit_limit, r.period_name),
		            fmt::format("Use a shorter {} (100 per second rather than 360000 per hour), or {} => 0 "
		                        "for no limit.",
		                        r.period_name, r.limit_name));
	if (!arg_null(fcinfo, n + 1)) {
		r.period = queue::positive_interval_arg(fcinfo, n + 1, r.period_name);
		// a claim computes now - period (as purge does with retain)
		check_at_most_years(*r.period, max_retain_years, r.period_name);
	}
	if (r.period && r.limit && !*r.limit)
		throw Error(sqlstate::invalid_parameter_value,
		            fmt::format("{} cannot be given with {} => 0", r.period_name, r.limit_name),
		            fmt::format("{} => 0 removes the queue's limit, and its period with it.", r.limit_name));
}

// `rate_arg`: the argument number of rate_limit (rate_period follows it);
// `key_rate_arg` that of key_rate_limit (key_rate_period follows it).
QueueSettings settings_args(FunctionCallInfo fcinfo, int rate_arg, int key_rate_arg) {
	QueueSettings s;
	if (!arg_null(fcinfo, 1))
		s.lease = queue::positive_interval_arg(fcinfo, 1, "lease");
	if (!arg_null(fcinfo, 2)) {
		s.max_attempts = PG_GETARG_INT32(2);
		if (*s.max_attempts < 1)
			throw Error(sqlstate::invalid_parameter_value, "max_attempts must be at least 1");
	}
	if (!arg_null(fcinfo, 3)) {
		Interval value = *PG_GETARG_INTERVAL_P(3);
		Interval zero{};
		int cmp = pg::guard([&] {
			return DatumGetInt32(
			    DirectFunctionCall2(interval_cmp, IntervalPGetDatum(&value), IntervalPGetDatum(&zero)));
		});
		if (cmp < 0)
			throw Error(sqlstate::invalid_parameter_value, "retain must not be negative",
			            fmt::format("It is {}.", interval_text(value)),
			            "Use retain => '0' to retain no tasks.");
		// purge computes now - retain: a bound keeps that far from the range
		// of timestamptz (and refuses an infinite interval)
		check_at_most_years(value, max_retain_years, "retain");
		s.retain = cmp == 0 ? std::optional<Interval>() : std::optional<Interval>(value);
	}
	s.key_limit = limit_arg(fcinfo, 4, "key_limit");
	s.max_leased = limit_arg(fcinfo, 5, "max_leased");
	if (s.max_leased && *s.max_leased && **s.max_leased > max_leased_limit)
		throw Error(sqlstate::invalid_parameter_value, "max_leased is too large",
		            fmt::format("It is {}; at most {} tasks of a queue can be leased at once under a limit.",
		                        **s.max_leased, max_leased_limit),
		            "Use max_leased => 0 for no limit.");
	rate_args(fcinfo, rate_arg, s.rate);
	rate_args(fcinfo, key_rate_arg, s.key_rate);
	return s;
}

// The rate limit that a queue has after create_queue or alter_queue (with the
// queue's present limit `had_limit`, 0: none): 22023 for a limit without a
// period or a period without a limit. Returns the limit (0: none).
int32 rate_limit_after(const RateArgs &r, int32 had_limit) {
	int32 limit = r.limit ? r.limit->value_or(0) : had_limit;
	if (limit > 0 && !r.period && had_limit == 0)
		throw Error(sqlstate::invalid_parameter_value,
		            fmt::format("{} needs {}", r.limit_name, r.period_name),
		            fmt::format("{} => {} counts claims in a period of time, and none is given.",
		                        r.limit_name, limit),
		            fmt::format("Give both, e.g. {} => 100, {} => '1 minute'.", r.limit_name, r.period_name));
	if (limit == 0 && r.period)
		throw Error(sqlstate::invalid_parameter_value,
		            fmt::format("{} needs {}", r.period_name, r.limit_name),
		            fmt::format("The queue has no {} for {} to apply to.", r.limit_name, r.period_name),
		            fmt::format("Give both, e.g. {} => 100, {} => '1 minute'.", r.limit_name, r.period_name));
	return limit;
}

// Writes a queue's rate limit into the catalog (`statement`:
// catalog_sql::set_rate or set_key_rate): `limit` when given (0: none, and
// no period), the period when given (else the queue's).
void set_rate(const char *statement, const std::string &queue, const RateArgs &r, int32 limit) {
	Interval p = r.period.value_or(Interval{});
	static const Oid types[4] = {TEXTOID, BOOLOID, INT4OID, INTERVALOID};
	Datum values[4] = {pg::text_datum(queue), BoolGetDatum(r.limit.has_value()), Int32GetDatum(limit),
	                   IntervalPGetDatum(&p)};
	char nulls[4] = {' ', ' ', limit > 0 ? ' ' : 'n', r.period ? ' ' : 'n'};
	pg::execute(statement, 4, types, values, nulls);
}

// Parameters $2..$6 of the catalog statements: lease, max_attempts, retain,
// key_limit, max_leased; a setting not given is NULL.
struct SettingsParams {
	Datum values[5];
	char nulls[5];
	Interval lease, retain;
	explicit SettingsParams(const QueueSettings &s) : lease(s.lease.value_or(Interval{})), retain{} {
		bool retain_given = s.retain && *s.retain;
		if (retain_given)
			retain = **s.retain;
		values[0] = IntervalPGetDatum(&lease);
		values[1] = Int32GetDatum(s.max_attempts.value_or(0));
		values[2] = IntervalPGetDatum(&retain);
		values[3] = Int32GetDatum(s.key_limit && *s.key_limit ? **s.key_limit : 0);
		values[4] = Int32GetDatum(s.max_leased && *s.max_leased ? **s.max_leased : 0);
		nulls[0] = s.lease ? ' ' : 'n';
		nulls[1] = s.max_attempts ? ' ' : 'n';
		nulls[2] = retain_given ? ' ' : 'n';
		nulls[3] = s.key_limit && *s.key_limit ? ' ' : 'n';
		nulls[4] = s.max_leased && *s.max_leased ? ' ' : 'n';
	}
	SettingsParams(const SettingsParams &) = delete;
};

} // namespace

// concurrency.create_queue(queue, lease, max_attempts, retain, key_limit,
// max_leased, distributed, rate_limit, rate_period) — SECURITY DEFINER: runs
// as the extension owner;
// the table it creates belongs to the caller. distributed => true then makes
// the queue distributed (distribute_queue, on a Citus coordinator only) in
// the same statement; false leaves an existing queue as it is.
CONCURRENCY_FUNCTION(concurrency_create_queue) {
	std::string name = queue::queue_name_arg(fcinfo);
	pg::require_arg(fcinfo, 1, "lease");
	pg::require_arg(fcinfo, 2, "max_attempts");
	QueueSettings settings = settings_args(fcinfo, 7, 9);
	bool distributed = false; // a 0.1.0 declaration has no such argument
	if (PG_NARGS() > 6) {
		pg::require_arg(fcinfo, 6, "distributed");
		distributed = PG_GETARG_BOOL(6);
	}
	int32 rate_limit = rate_limit_after(settings.rate, 0);
	int32 key_rate_limit = rate_limit_after(settings.key_rate, 0);
	if (distributed && key_rate_limit > 0 && rate_limit > 0)
		queue::refuse_key_rate_distributed(name);
	if (distributed)
		distribution().require_coordinator(name);

	Oid caller = pg::guard([] { return GetOuterUserId(); });
	std::string caller_name = pg::guard([&] { return GetUserNameFromId(caller, false); });
	QueueSql sql(name);

	pg::spi_connect();
	SettingsParams params(settings);
	Interval rate_period = settings.rate.period.value_or(Interval{});
	Interval key_rate_period = settings.key_rate.period.value_or(Interval{});
	static const Oid insert_types[11] = {TEXTOID, INTERVALOID, INT4OID,     INTERVALOID, INT4OID,    INT4OID,
	                                     TEXTOID, INT4OID,     INTERVALOID, INT4OID,     INTERVALOID};
	Datum insert_values[11] = {pg::text_datum(name),
	                           params.values[0],
	                           params.values[1],
	                           params.values[2],
	                           params.values[3],
	                           params.values[4],
	                           pg::text_datum(caller_name),
	                           Int32GetDatum(rate_limit),
	                           IntervalPGetDatum(&rate_period),
	                           Int32GetDatum(key_rate_limit),
	                           IntervalPGetDatum(&key_rate_period)};
	char insert_nulls[11] = {' ',
	                         ' ',
	                         ' ',
	                         params.nulls[2],
	                         params.nulls[3],
	                         params.nulls[4],
	                         ' ',
	                         rate_limit > 0 ? ' ' : 'n',
	                         rate_limit > 0 ? ' ' : 'n',
	                         key_rate_limit > 0 ? ' ' : 'n',
	                         key_rate_limit > 0 ? ' ' : 'n'};
	uint64 inserted = execute(catalog_sql::insert, 7, insert_types, insert_values, insert_nulls);
	if (inserted == 1 && rate_limit > 0)
		set_rate(catalog_sql::set_rate, name, settings.rate, rate_limit);
	if (inserted == 1 && key_rate_limit > 0)
		set_rate(catalog_sql::set_key_rate, name, settings.key_rate, key_rate_limit);
	if (inserted == 0) {
		// It exists (or another session has just created it: ON CONFLICT waited
		// for that one to commit). Same settings: nothing to do.
		uint64 same = execute(catalog_sql::compare_settings, 11, insert_types, insert_values, insert_nulls);
		bool isnull = false;
		if (same == 1 && !DatumGetBool(queue::column(0, 1, &isnull))) {
			std::string existing =
			    pg::guard([&] { return TextDatumGetCString(queue::column(0, 2, &isnull)); });
			std::string asked = pg::guard([&] { return TextDatumGetCString(queue::column(0, 3, &isnull)); });
			throw Error(sqlstate::duplicate_object,
			            fmt::format("queue \"{}\" already exists with other settings", name),
			            fmt::format("It has {}; this call asked for {}.", existing, asked),
			            "Change the settings of an existing queue with concurrency.alter_queue().");
		}
		// Same settings. Only a queue whose table was dropped by hand is
		// missing its table: create it again.
		if (OidIsValid(queue::queue_relid(name))) {
			if (distributed)
				distribution().distribute(name);
			pg::spi_finish();
			PG_RETURN_VOID();
		}
	}
	Naming naming = queue::naming_of_new_relations();
	refuse_names_of_other_queues(name, naming, rate_limit > 0, key_rate_limit > 0);
	KeySql keys(name);
	execute(sql.create_table(naming));
	execute(StatsSql(name).create_index(naming));
	// side tables left by a queue table dropped by hand go with it
	std::string key_table = key_table_name(name);
	bool leftovers = pg::guard([&] {
		return OidIsValid(get_relname_relid(key_table.c_str(), get_namespace_oid("concurrency", false)));
	});
	if (leftovers) {
		execute(keys.drop_tables());
		queue::apply_rate_limit(name, 0, ""); // its rate slots
		queue::apply_key_rate_limit(name, 0, "");
	}
	execute(keys.create_tables(naming));
	clear_permissions(name);
	if (caller != pg::guard([] { return GetUserId(); })) {
		execute(sql.alter_owner(caller_name));
		execute(keys.alter_owner(caller_name));
	}
	if (settings.max_leased && *settings.max_leased) {
		static const Oid slot_types[1] = {INT4OID};
		Datum slots[1] = {Int32GetDatum(**settings.max_leased)};
		execute(keys.resize_slots(), 1, slot_types, slots);
	}
	if (rate_limit > 0)
		queue::apply_rate_limit(name, rate_limit, caller_name);
	if (key_rate_limit > 0) { // its slot table, and the index its claims walk
		queue::apply_key_rate_limit(name, key_rate_limit, caller_name);
		execute(sql.create_fair_index(naming));
	}
	queue::forget_queue(name);
	if (distributed)
		distribution().distribute(name);
	pg::spi_finish();
	PG_RETURN_VOID();
}

// concurrency.alter_queue(queue, lease, max_attempts, retain, key_limit,
// max_leased, rate_limit, rate_period, fair) — SECURITY DEFINER; the caller (GetOuterUserId: the current
// role outside the function) needs permission manage on the queue.
// NULL keeps a setting. Every backend reloads the settings at its next
// transaction (the catalog's statement trigger invalidates the queue caches
// when the update commits).
CONCURRENCY_FUNCTION(concurrency_alter_queue) {
	std::string name = queue::queue_name_arg(fcinfo);
	QueueSettings settings = settings_args(fcinfo, 6, 9);
	Oid caller = pg::guard([] { return GetOuterUserId(); });
	QueueSql sql(name);

	pg::spi_connect();
	Oid relid = queue::queue_relid(name);
	if (!OidIsValid(relid))
		throw Error(sqlstate::undefined_object, fmt::format("queue \"{}\" does not exist", name), "",
		            "Create it with concurrency.create_queue().");
	int32 rate_limit = 0, key_rate_limit = 0, had_key_rate_limit = 0;
	bool was_fair = false;
	std::string owner;
	{
		Queue q(name);
		queue::require(q, caller, Permission::manage, "alter_queue");
		rate_limit = rate_limit_after(settings.rate, q.info().rate_limit);
		had_key_rate_limit = q.info().key_rate_limit;
		key_rate_limit = rate_limit_after(settings.key_rate, had_key_rate_limit);
		was_fair = q.info().fair;
		Oid owner_id = q.info().owner;
		owner = pg::guard([&] { return GetUserNameFromId(owner_id, false); });
	}
	// a distributed queue keeps its limits with functions of its own
	// (src/sql/41_queue_distributed.sql)
	bool distributed = distribution().is_distributed(relid);
	// key_rate_limit on a distributed queue: not beside rate_limit (whose
	// claims the coordinator makes)
	if (distributed && key_rate_limit > 0 && rate_limit > 0)
		queue::refuse_key_rate_distributed(name);
	if (distributed)
		distribution().require_coordinator_for(name, "alter_queue");
	// fair => true / false (a 0.2.0 declaration has no such argument)
	std::optional<bool> fair;
	if (PG_NARGS() > 8 && !PG_ARGISNULL(8))
		fair = PG_GETARG_BOOL(8);
	SettingsParams params(settings);
	static const Oid types[9] = {TEXTOID, INTERVALOID, INT4OID, INTERVALOID, INT4OID,
	                             INT4OID, BOOLOID,     BOOLOID, BOOLOID};
	Datum values[9] = {pg::text_datum(name),
	                   params.values[0],
	                   params.values[1],
	                   params.values[2],
	                   params.values[3],
	                   params.values[4],
	                   BoolGetDatum(settings.retain.has_value()),
	                   BoolGetDatum(settings.key_limit.has_value()),
	                   BoolGetDatum(settings.max_leased.has_value())};
	char nulls[9] = {
	    ' ', params.nulls[0], params.nulls[1], params.nulls[2], params.nulls[3], params.nulls[4], ' ', ' ',
	    ' '};
	uint64 updated = execute(catalog_sql::update, 9, types, values, nulls);
	if (updated == 1 && settings.rate.given())
		set_rate(catalog_sql::set_rate, name, settings.rate, rate_limit);
	if (updated == 1 && settings.key_rate.given())
		set_rate(catalog_sql::set_key_rate, name, settings.key_rate, key_rate_limit);
	if (updated == 0)
		throw Error(sqlstate::undefined_object, fmt::format("queue \"{}\" does not exist", name),
		            fmt::format("Table {} exists, but the queue is not in concurrency.queue.", sql.table()));
	if (fair) {
		static const Oid fair_types[2] = {TEXTOID, BOOLOID};
		Datum fair_values[2] = {pg::text_datum(name), BoolGetDatum(*fair)};
		execute(catalog_sql::set_fair, 2, fair_types, fair_values);
	}
	if (fair || settings.key_rate.given()) {
		// the index the fair claim and the claim under key_rate_limit walk,
		// made by the table's owner (and dropped when neither applies any
		// more: other queues' claims do not pay for it); on a distributed
		// queue Citus makes it on every shard
		bool walks_keys = fair.value_or(was_fair) || key_rate_limit > 0;
		Oid owner_id = queue::relation_owner(relid);
		AsRole as_owner(owner_id);
		Oid index = queue::derived_relid(relid, QueueTable::tasks, name, Role::fair);
		if (walks_keys && !OidIsValid(index))
			execute(sql.create_fair_index(queue::naming_of_new_relations()));
		else if (!walks_keys && OidIsValid(index)) {
			// under its name: made before 0.4.0, it is named table first
			const char *index_name =
			    pg::guard([&] { return static_cast<const char *>(get_rel_name(index)); });
			if (index_name)
				execute(QueueSql::drop_fair_index(index_name));
		}
		// the rotation begins again, from the first key
		queue::set_fair_position(name, queue::FairPosition{});
	}
	if (settings.key_limit || settings.max_leased) {
		// the catalog's trigger has invalidated the cache: this sees the new settings
		Queue q(name);
		std::optional<int32> slots;
		if (settings.max_leased)
			slots = settings.max_leased->value_or(0);
		if (distributed)
			distribution().distributed_limits(name, settings.key_limit.has_value(), slots);
		else
			queue::apply_limits(q, clock_now(), settings.key_limit.has_value(), slots);
	}
	if (settings.rate.limit) // the slot table for the new limit (none: dropped)
		queue::apply_rate_limit(name, rate_limit, owner);
	if (settings.key_rate.limit)
		queue::apply_key_rate_limit(name, key_rate_limit, owner);
	if (distributed && key_rate_limit > 0 && had_key_rate_limit == 0) {
		// its new slot table beside the tasks' shards
		AsRole as_owner(queue::relation_owner(relid));
		distribution().distribute_key_rate_slots(name);
	}
	if (distributed) // every node serves it: the new settings on every node
		distribution().sync_catalog(name);
	pg::spi_finish();
	PG_RETURN_VOID();
}

namespace {

// pause_queue and resume_queue: sets the catalog's paused flag; true when it
// changed. SECURITY DEFINER; the caller needs permission manage. Every
// backend sees the flag at its next call (the catalog's trigger invalidates
// the queue caches at commit); a resume also wakes the queue's waiting
// dequeue calls on this server at commit, and LISTENers of its channel.
Datum set_paused(FunctionCallInfo fcinfo, bool paused, const char *function) {
	std::string name = queue::queue_name_arg(fcinfo);
	Oid caller = pg::guard([] { return GetOuterUserId(); });

	pg::spi_connect();
	Oid relid = queue::queue_relid(name);
	bool changed = false;
	{
		Queue q(name); // 42704 for a queue that does not exist
		queue::require(q, caller, Permission::manage, function);
		bool distributed = distribution().is_distributed(relid);
		if (distributed)
			distribution().require_coordinator_for(name, function);
		static const Oid types[2] = {TEXTOID, BOOLOID};
		Datum values[2] = {pg::text_datum(name), BoolGetDatum(paused)};
		changed = execute(catalog_sql::set_paused, 2, types, values) == 1;
		if (changed && distributed) // every node serves it: the flag on every node
			distribution().sync_catalog(name);
		if (changed && !paused) {
			queue::notify(q.name(), static_cast<uint64>(MaxBackends));
			schedule_changed_in_transaction(); // its schedules' runner looks again
		}
	}
	pg::spi_finish();
	PG_RETURN_BOOL(changed);
}

} // namespace

// concurrency.pause_queue(queue) -> whether it was running
CONCURRENCY_FUNCTION(concurrency_pause_queue) {
	return set_paused(fcinfo, true, "pause_queue");
}

// concurrency.resume_queue(queue) -> whether it was paused
CONCURRENCY_FUNCTION(concurrency_resume_queue) {
	return set_paused(fcinfo, false, "resume_queue");
}

// distribute_queue grants the owner of a distributed queue's table USAGE on
// schema concurrency_internal (its routed functions, run as that owner): once
// the role owns no distributed queue's table, the grant is taken back, so
// that nothing of the extension keeps the role from being dropped (Citus
// takes the REVOKE to every node, as it took the GRANT).
static void revoke_routed_usage(Oid owner) {
	// a superuser needs no grant; the schema's owner keeps its own
	if (!OidIsValid(owner) || pg::guard([&] { return superuser_arg(owner); }))
		return;
	// the tables of the other distributed queues (their names: relation_names.hpp)
	std::vector<std::string> queues;
	uint64 n = execute("SELECT queue FROM concurrency.distributed_queue");
	for (uint64 r = 0; r < n; ++r)
		queues.push_back(pg::text_column(r, 1).value_or(""));
	uint64 other = 0;
	for (const std::string &q : queues) {
		Oid relid = queue::queue_relid(q);
		if (OidIsValid(relid) && queue::relation_owner(relid) == owner)
			other = 1;
	}
	static const Oid types[1] = {OIDOID};
	Datum values[1] = {ObjectIdGetDatum(owner)};
	if (other == 0)
		other = execute("SELECT 1 FROM pg_catalog.pg_namespace"
		                " WHERE nspname OPERATOR(pg_catalog.=) 'concurrency_internal'"
		                " AND nspowner OPERATOR(pg_catalog.=) $1",
		                1, types, values);
	if (other == 0) {
		std::string revoke =
		    fmt::format("REVOKE USAGE ON SCHEMA concurrency_internal FROM {}",
		                quote_ident(pg::guard([&] { return GetUserNameFromId(owner, false); })));
		execute(revoke);
		// and on the other nodes, where the catalog's copies granted it
		if (citus::local_role().role == citus::Role::coordinator) {
			static const Oid text_type[1] = {TEXTOID};
			Datum command = pg::text_datum(revoke);
			execute("SELECT concurrency_internal.distributed_send($1)", 1, text_type, &command);
		}
	}
}

// concurrency.drop_queue(queue) — SECURITY DEFINER; the caller must own the
// queue's table (superusers do).
CONCURRENCY_FUNCTION(concurrency_drop_queue) {
	std::string name = queue::queue_name_arg(fcinfo);
	Oid caller = pg::guard([] { return GetOuterUserId(); });
	QueueSql sql(name);

	pg::spi_connect();
	Oid relid = queue::queue_relid(name);
	Oid owner = InvalidOid;
	bool distributed = OidIsValid(relid) && distribution().is_distributed(relid);
	if (distributed)
		distribution().require_coordinator_for(name, "drop_queue");
	if (OidIsValid(relid)) {
		if (!pg::guard([&] { return pg::owns_relation(relid, caller); }))
			throw Error(sqlstate::insufficient_privilege, fmt::format("must be owner of queue \"{}\"", name),
			            fmt::format("Only the owner of table {} may drop the queue.", sql.table()));
		owner = queue::relation_owner(relid);
		queue::forget_dependencies(name, queue::clock_now());
		execute(sql.drop_table());
		execute(KeySql(name).drop_tables());
		queue::apply_rate_limit(name, 0, ""); // its rate slots
		queue::apply_key_rate_limit(name, 0, "");
	}
	static const Oid types[1] = {TEXTOID};
	Datum values[1] = {pg::text_datum(name)};
	uint64 deleted = execute(catalog_sql::remove, 1, types, values);
	if (!OidIsValid(relid) && deleted == 0)
		throw Error(sqlstate::undefined_object, fmt::format("queue \"{}\" does not exist", name));
	if (distributed) { // gone from every node's catalog too
		distribution().sync_catalog(name);
		revoke_routed_usage(owner);
	}
	queue::forget_queue(name);
	pg::spi_finish();
	PG_RETURN_VOID();
}

// concurrency.queue_changed() — statement trigger on concurrency.queue: a
// relcache invalidation of the catalog makes every backend read the settings
// of its cached queues again.
CONCURRENCY_FUNCTION(concurrency_queue_changed) {
	if (!CALLED_AS_TRIGGER(fcinfo))
		throw Error(sqlstate::trigger_protocol_violated,
		            "concurrency_internal.queue_changed() is a trigger function");
	auto *trigger = reinterpret_cast<TriggerData *>(fcinfo->context);
	pg::guard([&] { CacheInvalidateRelcache(trigger->tg_relation); });
	// on concurrency.schedule: the schedule runner looks at this database
	// after the commit (queue/schedule_runner.hpp)
	// a queue created (an insert into concurrency.queue), where queue counts
	// are sampled: a database whose first queue this is gets its sampling
	// started (time/stats_history.hpp), one whose runner is due already
	// nothing
	const char *table = RelationGetRelationName(trigger->tg_relation);
	if (std::strcmp(table, "schedule") == 0)
		queue::schedule_changed_in_transaction();
	else if (std::strcmp(table, "queue") == 0 && TRIGGER_FIRED_BY_INSERT(trigger->tg_event) &&
	         queue::stats_history_enabled())
		queue::runner_wanted_in_transaction();
	return PointerGetDatum(nullptr);
}
