// Periodic schedules: five-field cron text, the due times it gives in a time
// zone, the `every` form, and which missed due times to enqueue after a pause.
// Pure C++ (no PostgreSQL headers), unit-tested in test/unit/cron_test.cpp.
//
// Times are whole seconds since 1970-01-01 00:00 UTC. A cron due time is the
// first instant at which the zone's clock reads a matching minute (second 0)
// or later. So a minute skipped by a DST gap runs once, at the end of the gap
// (02:30 on a spring-forward night in Europe/Berlin runs at 03:00 CEST), and
// a minute the clock shows twice runs once, the first time.
#pragma once

#include <bitset>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace concurrency {

struct CronSpec {
	std::bitset<60> minutes;       // 0-59
	std::bitset<24> hours;         // 0-23
	std::bitset<32> days_of_month; // 1-31 (bit 0 unused)
	std::bitset<13> months;        // 1-12 (bit 0 unused)
	std::bitset<7> days_of_week;   // 0-6, 0 = Sunday (7 in the text is Sunday too)
	// Whether the day-of-month / day-of-week field started with '*'. Only when
	// neither did is a day due if EITHER field matches (Vixie cron); otherwise
	// both must match.
	bool dom_star = true;
	bool dow_star = true;
};

// `error` names the field, e.g. "minute field: 61 is out of range 0-59", for
// the SQL layer to raise as 22023; it is empty when `spec` is set.
struct CronParse {
	std::optional<CronSpec> spec;
	std::string error;
};

// Five whitespace-separated fields "minute hour day-of-month month
// day-of-week" (lists, ranges, steps, names jan-dec and sun-sat in any case)
// or one macro: @hourly, @daily, @midnight, @weekly, @monthly, @yearly,
// @annually. A spec whose days never occur (0 0 30 2 *) parses; it simply
// has no due time.
CronParse parse_cron(std::string_view text);

// A time zone, as far as schedules need it: its UTC offset at each instant.
// Local times are derived arithmetically from it, so an adapter needs one
// call (on the server pg_localtime(...)->tm_gmtoff). Assumed, as holds for
// every zone of the tz database: an offset is less than a day, and changes
// at most once within any two days.
struct ZoneRules {
	virtual ~ZoneRules() = default;
	// Seconds east of UTC in effect at the instant.
	virtual int utc_offset_at(std::int64_t utc_seconds) const = 0;
};

// A zone whose offset never changes; UTC by default.
class FixedOffsetZone final : public ZoneRules {
  public:
	explicit FixedOffsetZone(int offset_seconds = 0) : offset_(offset_seconds) {}
	int utc_offset_at(std::int64_t) const override { return offset_; }

  private:
	int offset_;
};

// The functions below answer nothing (or 0, or an empty result) for instants
// beyond ±10^13 s, which is past PostgreSQL's timestamp range.

// The first due time strictly after `after`. Nothing when the spec has no
// due time within 400 years: its days never occur (the Gregorian calendar
// repeats every 400 years, so it never will).
std::optional<std::int64_t> next_cron_time(const CronSpec &spec, const ZoneRules &zone, std::int64_t after);

// The last due time at or before `at_or_before`.
std::optional<std::int64_t> prev_cron_time(const CronSpec &spec, const ZoneRules &zone,
                                           std::int64_t at_or_before);

// How many due times lie in (after, up_to], exactly. The work grows with the
// number of days in between, not with the number of due times.
std::int64_t count_cron_times(const CronSpec &spec, const ZoneRules &zone, std::int64_t after,
                              std::int64_t up_to);

// The `every` form: due times anchor + k * every for k = 0, 1, ...; the first
// strictly after `after`. `every` below 1 counts as 1; a result past the
// int64 range is INT64_MAX.
std::int64_t next_every_time(std::int64_t anchor, std::int64_t every, std::int64_t after);

// What a scheduler enqueues when it looks at a schedule whose last due time
// was `last_due`, at `now`: of the due times in (last_due, now], the latest
// `catch_up` ones (none when catch_up < 1).
struct CatchUp {
	std::vector<std::int64_t> due;      // to enqueue, oldest first
	std::int64_t skipped = 0;           // the other due times in (last_due, now], all older than `due`; exact
	std::optional<std::int64_t> latest; // the latest due time in (last_due, now]: the next last_due
};

// Work: catch_up steps back from now, plus counting the skipped ones (see
// count_cron_times).
CatchUp catch_up_cron(const CronSpec &spec, const ZoneRules &zone, std::int64_t last_due, std::int64_t now,
                      int catch_up);

// Constant work, however many due times were missed.
CatchUp catch_up_every(std::int64_t anchor, std::int64_t every, std::int64_t last_due, std::int64_t now,
                       int catch_up);

} // namespace concurrency
