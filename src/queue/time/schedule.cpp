// Schedules (src/sql/22_queue_time.sql): schedule, unschedule, the rows
// of the view schedules, and the materializer that dequeue calls.
//
// Exactly once: a due time becomes a task only in a transaction that holds
// the schedule row's lock (FOR UPDATE SKIP LOCKED) and, in the same
// transaction, moves last_due past it. Another worker skips the locked row,
// or, after the commit, sees the new last_due; a rollback takes the tasks
// and the advance back together. No dedupe_key is given to the tasks: the
// row lock already makes them unique, and a key would take names out of the
// users' own key space (a user's task with the same key would swallow a due
// time).
#include "queue/time/schedule.hpp"

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "common/cron.hpp"
#include "pg/srf.hpp"
#include "queue/permissions.hpp"
#include "queue/time/schedule_runner.hpp"
#include "queue/time/wait.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "datatype/timestamp.h"
#include "miscadmin.h"
#include "pgtime.h"
#include "utils/jsonb.h"
}

using namespace concurrency;
using namespace concurrency::queue;

namespace {

// Schedule names: as the table's CHECK says.
constexpr std::size_t max_schedule_name_bytes = 200;
// catch_up: a dequeue enqueues at most this many tasks per schedule.
constexpr int32 max_catch_up = 1000;
// every: at most a century (its due times must stay far inside timestamptz).
constexpr int64 max_every_seconds = int64(36525) * SECS_PER_DAY;
// Schedules materialized per look, so that one dequeue stays short.
constexpr long schedules_per_look = 100;

// Seconds between 1970-01-01 (cron.hpp's epoch) and 2000-01-01 (PostgreSQL's).
constexpr int64 unix_to_postgres = int64(POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * SECS_PER_DAY;

int64 unix_seconds(TimestampTz t) {
	int64 s = t / USECS_PER_SEC;
	if (t % USECS_PER_SEC < 0)
		--s; // floor: the instant's second
	return s + unix_to_postgres;
}

TimestampTz timestamp_of(int64 unix) {
	return (unix - unix_to_postgres) * USECS_PER_SEC;
}

// Due times past this are never reached (year 10000 and later).
constexpr int64 last_unix_second = int64(253402300799);

// A zone of PostgreSQL's tz database, for cron.hpp.
class ServerZone final : public ZoneRules {
  public:
	explicit ServerZone(const pg_tz *tz) : tz_(tz) {}
	int utc_offset_at(std::int64_t utc_seconds) const override {
		pg_time_t t = static_cast<pg_time_t>(utc_seconds);
		const pg_tm *tm = pg_localtime(&t, tz_);
		return tm ? static_cast<int>(tm->tm_gmtoff) : 0;
	}

  private:
	const pg_tz *tz_;
};

// The zone named `name` (22023 if there is none).
const pg_tz *zone_named(const std::string &name) {
	const pg_tz *tz = pg::guard([&] { return static_cast<const pg_tz *>(pg_tzset(name.c_str())); });
	if (!tz)
		throw Error(sqlstate::invalid_parameter_value,
		            fmt::format("time zone \"{}\" is not recognized", name), {},
		            "Use a name of the tz database, such as 'Europe/Berlin' or 'UTC'.");
	return tz;
}

// What a schedule's due times come from: a cron expression read in a zone,
// or every `every` seconds since 1970-01-01 UTC.
struct Timing {
	std::optional<CronSpec> cron;
	int64 every = 0;
	const pg_tz *zone = nullptr;

	// The first due time after `after`; nothing if there is none in range.
	std::optional<int64> next_after(int64 after) const {
		std::optional<int64> next;
		if (cron)
			next = next_cron_time(*cron, ServerZone(zone), after);
		else
			next = next_every_time(0, every, after);
		if (next && *next > last_unix_second)
			return std::nullopt;
		return next;
	}

	CatchUp catch_up(int64 last_due, int64 now, int32 n) const {
		if (cron)
			return catch_up_cron(*cron, ServerZone(zone), last_due, now, n);
		return catch_up_every(0, every, last_due, now, n);
	}
};

CronSpec cron_of(const std::string &text) {
	CronParse parsed = parse_cron(text);
	if (!parsed.spec)
		throw Error(sqlstate::invalid_parameter_value, fmt::format("invalid cron expression \"{}\"", text),
		            fmt::format("The {}.", parsed.error),
		            "Five fields: minute hour day-of-month month day-of-week, or @hourly, @daily, @weekly, "
		            "@monthly, @yearly.");
	return *parsed.spec;
}

// every: whole seconds, at least one, no months (a month has no fixed length).
int64 every_seconds(const Interval &every) {
	if (every.month != 0)
		throw Error(sqlstate::invalid_parameter_value, "every must not contain months or years",
		            "A month has no fixed length.", "Use cron for monthly or yearly schedules.");
	if (every.time % USECS_PER_SEC != 0)
		throw Error(sqlstate::invalid_parameter_value, "every must be a whole number of seconds");
	int64 seconds = int64(every.day) * SECS_PER_DAY + every.time / USECS_PER_SEC;
	if (seconds < 1)
		throw Error(sqlstate::invalid_parameter_value, "every must be at least 1 second");
	if (seconds > max_every_seconds)
		throw Error(sqlstate::invalid_parameter_value, "every must be at most 36525 days");
	return seconds;
}

std::string every_text(int64 seconds) {
	static const struct {
		int64 seconds;
		const char *unit;
	} units[] = {{SECS_PER_DAY, "day"}, {SECS_PER_HOUR, "hour"}, {SECS_PER_MINUTE, "minute"}, {1, "second"}};
	for (const auto &u : units)
		if (seconds % u.seconds == 0)
			return fmt::format("every {} {}{}", seconds / u.seconds, u.unit, seconds == u.seconds ? "" : "s");
	return fmt::format("every {} seconds", seconds);
}

// The owner of concurrency.schedule (the extension's owner), whose rights
// reach the catalog; InvalidOid when the extension in this database predates
// schedules.
Oid catalog_owner(Oid relid) {
	return OidIsValid(relid) ? relation_owner(relid) : InvalidOid;
}

// --- the per-backend cache of each queue's earliest due time ---------------

struct Earliest {
	std::optional<TimestampTz> at;
	std::uint64_t generation = 0;
};

std::unordered_map<std::string, Earliest> &earliest_cache() {
	static std::unordered_map<std::string, Earliest> cache;
	return cache;
}

// Entries read under an older generation of concurrency.schedule are read
// again.
TableGeneration schedule_table("schedule");

std::optional<TimestampTz> earliest_due(Queue &q) {
	std::string key(q.name());
	auto &cache = earliest_cache();
	auto it = cache.find(key);
	if (it != cache.end() && it->second.generation == schedule_table.current())
		return it->second.at;
	std::uint64_t seen =
	    schedule_table.current(); // an invalidation during the read makes the entry stale at once
	Oid schedule_relid = schedule_table.relid();
	std::optional<TimestampTz> at;
	if (OidIsValid(schedule_relid)) {
		AsRole as_catalog_owner(catalog_owner(schedule_relid));
		static const Oid types[1] = {TEXTOID};
		SPIPlanPtr plan = pg::prepared_plan("schedule:earliest",
		                                    "SELECT min(next_run_at) FROM concurrency.schedule "
		                                    "WHERE queue = $1 AND enabled",
		                                    1, types, CURSOR_OPT_GENERIC_PLAN);
		Datum values[1] = {pg::text_datum(key)};
		// committed now (and this transaction's own changes), as the
		// invalidation that made the entry stale says
		if (pg::execute(plan, values, nullptr, true, 1, pg::Visibility::latest) == 1) {
			bool isnull = false;
			Datum d = column(0, 1, &isnull);
			if (!isnull)
				at = DatumGetTimestampTz(d);
		}
	}
	cache[key] = Earliest{at, seen};
	return at;
}

// A due schedule row, as the materializer locked it.
struct DueSchedule {
	std::string name;
	std::optional<std::string> cron;
	int64 every = 0;
	std::string payload;
	std::string time_zone;
	int32 priority = 0;
	std::optional<std::string> concurrency_key;
	int32 catch_up = 1;
	TimestampTz last_due = 0;
};

std::vector<DueSchedule> lock_due(const std::string &queue, TimestampTz now) {
	static const Oid types[2] = {TEXTOID, TIMESTAMPTZOID};
	SPIPlanPtr plan = pg::prepared_plan(
	    "schedule:lock-due",
	    "SELECT name, cron, extract(epoch FROM every)::int8, payload::text, time_zone, priority, "
	    "concurrency_key, catch_up, last_due FROM concurrency.schedule "
	    "WHERE queue = $1 AND enabled AND next_run_at <= $2 "
	    "ORDER BY next_run_at FOR UPDATE SKIP LOCKED",
	    2, types, CURSOR_OPT_GENERIC_PLAN);
	Datum values[2] = {pg::text_datum(queue), TimestampTzGetDatum(now)};
	// the latest committed rows: a row locked here is its newest version, so
	// last_due is what the previous materializer left
	uint64 n = pg::execute(plan, values, nullptr, false, schedules_per_look, pg::Visibility::latest);
	std::vector<DueSchedule> due;
	due.reserve(n);
	for (uint64 i = 0; i < n; ++i) {
		DueSchedule s;
		s.name = pg::text_column(i, 1).value_or("");
		s.cron = pg::text_column(i, 2);
		s.every = pg::column_as<int64>(i, 3).value_or(0);
		s.payload = pg::text_column(i, 4).value_or("{}");
		s.time_zone = pg::text_column(i, 5).value_or("UTC");
		s.priority = pg::column_as<int32>(i, 6).value_or(0);
		s.concurrency_key = pg::text_column(i, 7);
		s.catch_up = pg::column_as<int32>(i, 8).value_or(1);
		bool isnull = false;
		s.last_due = DatumGetTimestampTz(column(i, 9, &isnull));
		due.push_back(std::move(s));
	}
	return due;
}

// Enqueues the task of due time `due` through concurrency.enqueue (which
// routes a distributed queue's task itself). Its id.
int64 enqueue_due(const std::string &queue, const DueSchedule &s, int64 due) {
	static const Oid types[5] = {TEXTOID, TEXTOID, TIMESTAMPTZOID, INT4OID, TEXTOID};
	SPIPlanPtr plan = pg::prepared_plan(
	    "schedule:enqueue",
	    "SELECT concurrency.enqueue($1, $2::jsonb || jsonb_build_object('scheduled_for', "
	    "to_char($3 AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')), NULL::timestamptz, $4, "
	    "NULL::text, $5)",
	    5, types, CURSOR_OPT_GENERIC_PLAN);
	Datum values[5] = {pg::text_datum(queue), pg::text_datum(s.payload),
	                   TimestampTzGetDatum(timestamp_of(due)), Int32GetDatum(s.priority),
	                   s.concurrency_key ? pg::text_datum(*s.concurrency_key) : Datum(0)};
	char nulls[5] = {' ', ' ', ' ', ' ', s.concurrency_key ? ' ' : 'n'};
	if (pg::execute(plan, values, nulls, false) != 1)
		throw Error(sqlstate::internal_error, "concurrency.enqueue returned no row");
	return pg::int64_column(0, 1);
}

void advance(const DueSchedule &s, const CatchUp &done, std::optional<int64> next,
             std::optional<int64> task_id) {
	static const Oid types[6] = {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT8OID, INT8OID};
	SPIPlanPtr plan = pg::prepared_plan(
	    "schedule:advance",
	    "UPDATE concurrency.schedule SET last_due = $2, next_run_at = $3, "
	    "last_run_at = coalesce($4, last_run_at), last_task_id = coalesce($5, last_task_id), "
	    "skipped = skipped + $6 WHERE name = $1",
	    6, types, CURSOR_OPT_GENERIC_PLAN);
	TimestampTz last_due = done.latest ? timestamp_of(*done.latest) : s.last_due;
	Datum values[6] = {pg::text_datum(s.name),
	                   TimestampTzGetDatum(last_due),
	                   TimestampTzGetDatum(next ? timestamp_of(*next) : 0),
	                   TimestampTzGetDatum(done.due.empty() ? 0 : timestamp_of(done.due.back())),
	                   Int64GetDatum(task_id.value_or(0)),
	                   Int64GetDatum(done.skipped)};
	char nulls[6] = {' ', ' ', next ? ' ' : 'n', done.due.empty() ? 'n' : ' ', task_id ? ' ' : 'n', ' '};
	pg::execute(plan, values, nulls, false, 0, pg::Visibility::latest);
}

void disable(const std::string &name) {
	static const Oid types[1] = {TEXTOID};
	SPIPlanPtr plan = pg::prepared_plan(
	    "schedule:disable", "UPDATE concurrency.schedule SET enabled = false WHERE name = $1", 1, types);
	Datum values[1] = {pg::text_datum(name)};
	pg::execute(plan, values, nullptr, false, 0, pg::Visibility::latest);
}

// Schedule names: 1 to 200 bytes, anything else goes.
std::string schedule_name_arg(FunctionCallInfo fcinfo, int n) {
	std::string name = pg::text_arg(fcinfo, n, "name");
	if (name.empty() || name.size() > max_schedule_name_bytes)
		throw Error(sqlstate::invalid_parameter_value, "invalid schedule name",
		            fmt::format("It has {} bytes.", name.size()),
		            fmt::format("A schedule name has 1 to {} bytes.", max_schedule_name_bytes));
	return name;
}

// The queue name of argument n, validated as queue functions do.
std::string queue_arg(FunctionCallInfo fcinfo, int n) {
	std::string name = pg::text_arg(fcinfo, n, "queue");
	if (auto problem = name_problem(name, max_queue_name_bytes))
		throw Error(sqlstate::invalid_parameter_value, "invalid queue name",
		            fmt::format("The {}.", *problem));
	return name;
}

// The queue of schedule `name`, its row locked; nothing if there is none.
std::optional<std::string> lock_schedule(const std::string &name) {
	static const Oid types[1] = {TEXTOID};
	SPIPlanPtr plan = pg::prepared_plan(
	    "schedule:lock", "SELECT queue FROM concurrency.schedule WHERE name = $1 FOR UPDATE", 1, types);
	Datum values[1] = {pg::text_datum(name)};
	if (pg::execute(plan, values, nullptr, false) != 1)
		return std::nullopt;
	return pg::text_column(0, 1);
}

// Raises 42501 unless the caller (outside the SECURITY DEFINER function)
// holds manage on `queue` (42704 when the queue does not exist).
void require_manage(const std::string &queue, const char *function) {
	Oid caller = pg::guard([] { return GetOuterUserId(); });
	Queue q(queue);
	require(q, caller, Permission::manage, function);
}

} // namespace

namespace concurrency::queue {

void schedule_init() {
	schedule_table.start();
}

std::optional<TimestampTz> next_schedule_time(Queue &q) {
	return earliest_due(q);
}

void materialize_due(Queue &q, TimestampTz now) {
	std::optional<TimestampTz> earliest = earliest_due(q);
	if (!earliest || now < *earliest)
		return;
	// a read-only transaction (or a standby) enqueues nothing: the claim
	// that follows says why (25006)
	if (pg::guard([] { return XactReadOnly; }))
		return;
	QuietSchedules quiet; // its writes only move due times later: no runner asked for
	std::string queue(q.name());
	Oid catalog = catalog_owner(schedule_table.relid());
	Oid owner = queue_owner(q);
	std::vector<DueSchedule> due;
	{
		AsRole as_catalog_owner(catalog);
		due = lock_due(queue, now);
	}
	int64 now_s = unix_seconds(now);
	for (const DueSchedule &s : due) {
		Timing timing;
		try {
			if (s.cron)
				timing.cron = cron_of(*s.cron);
			timing.every = s.every;
			timing.zone = zone_named(s.time_zone);
		} catch (const Error &) {
			// a row schedule() would refuse (changed by hand, or a time zone
			// gone from the tz database): disabled, so that it does not fail
			// every dequeue of its queue; schedule() enables it again
			AsRole as_catalog_owner(catalog);
			disable(s.name);
			continue;
		}
		CatchUp done = timing.catch_up(unix_seconds(s.last_due), now_s, s.catch_up);
		std::optional<int64> task_id;
		{
			// the queue's owner holds every permission on it
			AsRole as_queue_owner(owner);
			for (int64 at : done.due)
				task_id = enqueue_due(queue, s, at);
		}
		int64 last = done.latest ? *done.latest : unix_seconds(s.last_due);
		AsRole as_catalog_owner(catalog);
		advance(s, done, timing.next_after(std::max(last, now_s)), task_id);
	}
}

} // namespace concurrency::queue

// concurrency.schedule(name, queue, cron, every, payload, time_zone, priority,
// concurrency_key, catch_up) — SECURITY DEFINER; the caller needs manage on
// the queue (and on the queue of the schedule it replaces).
CONCURRENCY_FUNCTION(concurrency_schedule) {
	std::string name = schedule_name_arg(fcinfo, 0);
	std::string queue = queue_arg(fcinfo, 1);
	bool has_cron = !PG_ARGISNULL(2), has_every = !PG_ARGISNULL(3);
	if (has_cron == has_every)
		throw Error(sqlstate::invalid_parameter_value, "a schedule needs exactly one of cron and every",
		            has_cron ? "Both are given." : "Neither is given.");
	Timing timing;
	std::string cron;
	Interval every{};
	if (has_cron) {
		cron = pg::text_arg(fcinfo, 2, "cron");
		timing.cron = cron_of(cron);
	} else {
		every = *PG_GETARG_INTERVAL_P(3);
		timing.every = every_seconds(every);
	}
	pg::require_arg(fcinfo, 4, "payload");
	Datum payload = PG_GETARG_DATUM(4);
	bool is_object = pg::guard([&] { return JB_ROOT_IS_OBJECT(DatumGetJsonbP(payload)) != 0; });
	if (!is_object)
		throw Error(sqlstate::invalid_parameter_value, "payload must be a JSON object",
		            "Each task's payload is this object with \"scheduled_for\" added.");
	std::string time_zone = pg::text_arg(fcinfo, 5, "time_zone");
	timing.zone = zone_named(time_zone);
	int32 priority = pg::int32_arg(fcinfo, 6, "priority");
	bool has_key = !PG_ARGISNULL(7);
	if (has_key) {
		std::size_t bytes = pg::text_view_arg(fcinfo, 7, "concurrency_key").size();
		if (bytes > max_concurrency_key_bytes)
			throw Error(
			    sqlstate::invalid_parameter_value, "concurrency_key is too long",
			    fmt::format("It has {} bytes; at most {} are allowed.", bytes, max_concurrency_key_bytes));
	}
	int32 catch_up = pg::int32_arg(fcinfo, 8, "catch_up");
	if (catch_up < 1 || catch_up > max_catch_up)
		throw Error(sqlstate::invalid_parameter_value,
		            fmt::format("catch_up must be between 1 and {}", max_catch_up),
		            fmt::format("It is {}.", catch_up));
	TimestampTz now = clock_now();
	int64 now_s = unix_seconds(now);
	std::optional<int64> next = timing.next_after(now_s);
	if (!next)
		throw Error(sqlstate::invalid_parameter_value,
		            fmt::format("cron expression \"{}\" never comes due", cron),
		            "No date matches its day-of-month, month and day-of-week fields.");

	pg::spi_connect();
	require_manage(queue, "schedule");
	// moving a schedule to another queue takes it off the one it was on
	if (auto old = lock_schedule(name); old && *old != queue)
		require_manage(*old, "schedule");
	static const Oid types[11] = {TEXTOID, TEXTOID, TEXTOID, INTERVALOID,    JSONBOID,      TEXTOID,
	                              INT4OID, TEXTOID, INT4OID, TIMESTAMPTZOID, TIMESTAMPTZOID};
	// same settings: nothing changes (the next due time stays); others:
	// replaced, its due times counted from now
	SPIPlanPtr plan = pg::prepared_plan(
	    "schedule:upsert",
	    "INSERT INTO concurrency.schedule AS s (name, queue, cron, every, payload, time_zone, priority, "
	    "concurrency_key, catch_up, last_due, next_run_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, "
	    "$11) "
	    "ON CONFLICT (name) DO UPDATE SET queue = excluded.queue, cron = excluded.cron, every = "
	    "excluded.every, "
	    "payload = excluded.payload, time_zone = excluded.time_zone, priority = excluded.priority, "
	    "concurrency_key = excluded.concurrency_key, catch_up = excluded.catch_up, last_due = "
	    "excluded.last_due, "
	    "next_run_at = excluded.next_run_at, skipped = 0, enabled = true "
	    "WHERE (s.queue, s.cron, s.every, s.payload, s.time_zone, s.priority, s.concurrency_key, s.catch_up, "
	    "s.enabled) IS DISTINCT FROM (excluded.queue, excluded.cron, excluded.every, excluded.payload, "
	    "excluded.time_zone, excluded.priority, excluded.concurrency_key, excluded.catch_up, true)",
	    11, types);
	Datum values[11] = {pg::text_datum(name),
	                    pg::text_datum(queue),
	                    has_cron ? pg::text_datum(cron) : Datum(0),
	                    IntervalPGetDatum(&every),
	                    payload,
	                    pg::text_datum(time_zone),
	                    Int32GetDatum(priority),
	                    has_key ? PG_GETARG_DATUM(7) : Datum(0),
	                    Int32GetDatum(catch_up),
	                    TimestampTzGetDatum(timestamp_of(now_s)),
	                    TimestampTzGetDatum(timestamp_of(*next))};
	char nulls[11] = {
	    ' ', ' ', has_cron ? ' ' : 'n', has_every ? ' ' : 'n', ' ', ' ', ' ', has_key ? ' ' : 'n', ' ',
	    ' ', ' '};
	uint64 changed = pg::execute(plan, values, nulls, false);
	// waiting dequeue calls wake at the commit and sleep again until the
	// new due time, not until the one they knew
	if (changed > 0)
		queue::notify(Queue(queue).name(), static_cast<uint64>(MaxBackends));
	pg::spi_finish();
	PG_RETURN_VOID();
}

// concurrency.unschedule(name) -> whether it existed. SECURITY DEFINER; the
// caller needs manage on the schedule's queue.
CONCURRENCY_FUNCTION(concurrency_unschedule) {
	std::string name = pg::text_arg(fcinfo, 0, "name");
	pg::spi_connect();
	std::optional<std::string> queue = lock_schedule(name);
	if (queue) {
		require_manage(*queue, "unschedule");
		static const Oid types[1] = {TEXTOID};
		SPIPlanPtr plan = pg::prepared_plan("schedule:delete",
		                                    "DELETE FROM concurrency.schedule WHERE name = $1", 1, types);
		Datum values[1] = {pg::text_datum(name)};
		pg::execute(plan, values, nullptr, false);
	}
	pg::spi_finish();
	PG_RETURN_BOOL(queue.has_value());
}

// concurrency.schedule_rows() — the rows of the view concurrency.schedules:
// the schedules on queues the caller (outside this SECURITY DEFINER
// function) may read.
CONCURRENCY_FUNCTION(concurrency_schedule_rows) {
	Oid caller = pg::guard([] { return GetOuterUserId(); });
	pg::ResultSet out = pg::materialize(fcinfo);
	pg::spi_connect();
	SPIPlanPtr plan = pg::prepared_plan(
	    "schedule:rows",
	    "SELECT name, queue, cron, extract(epoch FROM every)::int8, time_zone, next_run_at, last_run_at, "
	    "last_task_id, enabled, skipped FROM concurrency.schedule ORDER BY name",
	    0, nullptr);
	uint64 n = pg::execute(plan, nullptr, nullptr, true);
	struct Row {
		std::string name, queue, spec, time_zone;
		Datum next, last;
		bool next_null, last_null, task_null;
		int64 task;
		bool enabled;
		int64 skipped;
	};
	std::vector<Row> rows;
	rows.reserve(n);
	for (uint64 i = 0; i < n; ++i) {
		Row r{};
		r.name = pg::text_column(i, 1).value_or("");
		r.queue = pg::text_column(i, 2).value_or("");
		auto cron = pg::text_column(i, 3);
		r.spec = cron ? *cron : every_text(pg::column_as<int64>(i, 4).value_or(0));
		r.time_zone = pg::text_column(i, 5).value_or("");
		r.next = column(i, 6, &r.next_null);
		r.last = column(i, 7, &r.last_null);
		Datum task = column(i, 8, &r.task_null);
		r.task = r.task_null ? 0 : DatumGetInt64(task);
		r.enabled = pg::column_as<bool>(i, 9).value_or(false);
		r.skipped = pg::column_as<int64>(i, 10).value_or(0);
		rows.push_back(std::move(r));
	}
	std::unordered_map<std::string, bool> readable;
	for (const Row &r : rows) {
		auto it = readable.find(r.queue);
		if (it == readable.end()) {
			bool may = false;
			if (OidIsValid(queue_relid(r.queue))) {
				Queue q(r.queue);
				may = holds(q, caller, Permission::read);
			}
			it = readable.emplace(r.queue, may).first;
		}
		if (!it->second)
			continue;
		Datum cols[9] = {pg::text_datum(r.name),
		                 pg::text_datum(r.queue),
		                 pg::text_datum(r.spec),
		                 pg::text_datum(r.time_zone),
		                 r.next,
		                 r.last,
		                 Int64GetDatum(r.task),
		                 BoolGetDatum(r.enabled),
		                 Int64GetDatum(r.skipped)};
		bool isnull[9] = {false, false, false, false, r.next_null, r.last_null, r.task_null, false, false};
		pg::add_row(out, cols, isnull);
	}
	pg::spi_finish();
	return Datum(0);
}
