#include "common/cron.hpp"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <fmt/format.h>
#include "common/pure.hpp" // last: checks that no PostgreSQL header came before

namespace concurrency {

namespace {

constexpr std::int64_t minute_s = 60;
constexpr std::int64_t hour_s = 3600;
constexpr std::int64_t day_s = 86400;
// Past PostgreSQL's timestamps (year 294276 is 9.2e12 s) but far from
// overflowing the local-time arithmetic below.
constexpr std::int64_t max_abs_seconds = 10'000'000'000'000;
// The Gregorian calendar repeats every 400 years, weekdays included: a spec
// with no due day in that many days has none at all.
constexpr std::int64_t cycle_days = 146097;

bool in_range(std::int64_t t) {
	return t >= -max_abs_seconds && t <= max_abs_seconds;
}

std::int64_t floor_div(std::int64_t a, std::int64_t b) {
	std::int64_t q = a / b;
	return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

// ---- Parsing ----

constexpr std::string_view month_names[] = {"jan", "feb", "mar", "apr", "may", "jun",
                                            "jul", "aug", "sep", "oct", "nov", "dec"};
constexpr std::string_view day_names[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};

struct Field {
	std::string_view name;
	int min;
	int max;      // the highest value the text may use (7 for Sunday again)
	int star_max; // where '*' and "N/step" end: day-of-week stops at 6, so that */2 has one Sunday
	const std::string_view *names = nullptr;
	int name_count = 0;
	int first_named = 0; // the value of names[0]
};

constexpr Field fields[] = {
    {"minute", 0, 59, 59},
    {"hour", 0, 23, 23},
    {"day-of-month", 1, 31, 31},
    {"month", 1, 12, 12, month_names, 12, 1},
    {"day-of-week", 0, 7, 6, day_names, 7, 0},
};
constexpr std::size_t field_count = sizeof(fields) / sizeof(fields[0]);

// ASCII only, whatever the locale (the text is SQL input in any encoding).
bool is_digit(char c) {
	return c >= '0' && c <= '9';
}
bool is_alpha(char c) {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool is_space(char c) {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
char to_lower(char c) {
	return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool all_digits(std::string_view s) {
	return !s.empty() && std::all_of(s.begin(), s.end(), is_digit);
}

// Digits to an int, saturating at a value no field accepts, so that a long
// run of digits reads as out of range instead of overflowing.
int digits_value(std::string_view s) {
	int v = 0;
	for (char c : s)
		v = std::min(v * 10 + (c - '0'), 100'000);
	return v;
}

struct ValueParse {
	std::optional<int> value;
	std::string error; // without the field's name
};

// A number or, in the fields that have them, a three-letter name.
ValueParse parse_value(std::string_view token, const Field &f, std::string_view item) {
	if (all_digits(token)) {
		int v = digits_value(token);
		if (v < f.min || v > f.max)
			return {std::nullopt, fmt::format("{} is out of range {}-{}", token, f.min, f.max)};
		return {v, {}};
	}
	bool word = !token.empty() &&
	            std::all_of(token.begin(), token.end(), [](char c) { return is_digit(c) || is_alpha(c); });
	if (!word)
		return {std::nullopt,
		        fmt::format("bad item \"{}\" (expected *, N or N-M, each optionally /STEP)", item)};
	if (f.names == nullptr)
		return {std::nullopt, fmt::format("\"{}\" is not a number", token)};
	std::string lower(token);
	std::transform(lower.begin(), lower.end(), lower.begin(), to_lower);
	for (int i = 0; i < f.name_count; ++i)
		if (f.names[i] == lower)
			return {f.first_named + i, {}};
	return {std::nullopt, fmt::format("unknown name \"{}\"", token)};
}

// One list item: *, N, N-M, each optionally followed by /STEP. Sets its
// values in `bits`; returns why it is wrong, without the field's name.
std::optional<std::string> parse_item(std::string_view item, const Field &f, std::uint64_t &bits) {
	if (item.empty())
		return std::string("empty list item");
	std::string_view base = item;
	int step = 1;
	const std::size_t slash = item.find('/');
	if (slash != std::string_view::npos) {
		base = item.substr(0, slash);
		std::string_view step_text = item.substr(slash + 1);
		if (!all_digits(step_text))
			return fmt::format("bad step \"{}\" in \"{}\"", step_text, item);
		step = digits_value(step_text);
		if (step < 1 || step > f.star_max - f.min + 1)
			return fmt::format("step {} is out of range 1-{}", step_text, f.star_max - f.min + 1);
	}
	int lo = f.min;
	int hi = f.star_max;
	if (base != "*") {
		const std::size_t dash = base.find('-');
		ValueParse first = parse_value(base.substr(0, dash), f, item);
		if (!first.value)
			return first.error;
		lo = *first.value;
		if (dash == std::string_view::npos) {
			// "5/10" runs from 5 to the end of the field
			hi = slash == std::string_view::npos ? lo : std::max(lo, f.star_max);
		} else {
			ValueParse last = parse_value(base.substr(dash + 1), f, item);
			if (!last.value)
				return last.error;
			hi = *last.value;
			// fri-sun: Sunday written 0 or sun ends a day-of-week range as 7
			if (f.names == day_names && hi == 0 && lo > 0)
				hi = 7;
			if (lo > hi)
				return fmt::format("range \"{}\" runs backwards", base);
		}
	}
	for (int v = lo; v <= hi; v += step)
		bits |= std::uint64_t{1} << (f.names == day_names && v == 7 ? 0 : v);
	return std::nullopt;
}

std::optional<std::string> parse_field(std::string_view text, const Field &f, std::uint64_t &bits) {
	std::size_t start = 0;
	for (;;) {
		const std::size_t comma = text.find(',', start);
		std::string_view item = text.substr(start, comma == std::string_view::npos ? comma : comma - start);
		if (auto problem = parse_item(item, f, bits))
			return fmt::format("{} field: {}", f.name, *problem);
		if (comma == std::string_view::npos)
			return std::nullopt;
		start = comma + 1;
	}
}

std::vector<std::string_view> split_words(std::string_view text) {
	std::vector<std::string_view> words;
	std::size_t i = 0;
	while (i < text.size()) {
		while (i < text.size() && is_space(text[i]))
			++i;
		std::size_t start = i;
		while (i < text.size() && !is_space(text[i]))
			++i;
		if (i > start)
			words.push_back(text.substr(start, i - start));
	}
	return words;
}

struct Macro {
	std::string_view name;
	std::string_view fields;
};
constexpr Macro macros[] = {
    {"@hourly", "0 * * * *"},  {"@daily", "0 0 * * *"},  {"@midnight", "0 0 * * *"}, {"@weekly", "0 0 * * 0"},
    {"@monthly", "0 0 1 * *"}, {"@yearly", "0 0 1 1 *"}, {"@annually", "0 0 1 1 *"},
};

// ---- Civil time ----
// Local times are counted like UTC times ("local seconds"): days since
// 1970-01-01 times 86400 plus the seconds of the day, in the proleptic
// Gregorian calendar.

struct Date {
	std::int64_t year;
	int month;
	int day;
};

std::int64_t days_from_civil(std::int64_t year, int month, int day) {
	// Years start in March, so that February's leap day ends them.
	const std::int64_t y = month <= 2 ? year - 1 : year;
	const std::int64_t era = floor_div(y, 400);
	const std::int64_t year_of_era = y - era * 400;
	const int march_based = (month + 9) % 12;
	const std::int64_t day_of_year = (153 * march_based + 2) / 5 + day - 1;
	const std::int64_t day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
	return era * cycle_days + day_of_era - 719468; // 719468: days from 0000-03-01 to 1970-01-01
}

Date civil_from_days(std::int64_t days) {
	const std::int64_t z = days + 719468;
	const std::int64_t era = floor_div(z, cycle_days);
	const std::int64_t day_of_era = z - era * cycle_days;
	const std::int64_t year_of_era =
	    (day_of_era - day_of_era / 1460 + day_of_era / 36524 - day_of_era / 146096) / 365;
	const std::int64_t day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
	const int march_based = static_cast<int>((5 * day_of_year + 2) / 153);
	const int day = static_cast<int>(day_of_year - (153 * march_based + 2) / 5 + 1);
	const int month = march_based < 10 ? march_based + 3 : march_based - 9;
	return {year_of_era + era * 400 + (month <= 2 ? 1 : 0), month, day};
}

int days_in_month(std::int64_t year, int month) {
	static constexpr int lengths[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
	return month == 2 && leap ? 29 : lengths[month - 1];
}

int weekday(std::int64_t days) {
	return static_cast<int>(days - floor_div(days + 4, 7) * 7 + 4);
} // 0 = Sunday

bool day_matches(const CronSpec &spec, const Date &date, std::int64_t days) {
	if (!spec.months[static_cast<std::size_t>(date.month)])
		return false;
	const bool dom = spec.days_of_month[static_cast<std::size_t>(date.day)];
	const bool dow = spec.days_of_week[static_cast<std::size_t>(weekday(days))];
	return spec.dom_star || spec.dow_star ? dom && dow : dom || dow;
}

// The nearest set bit at or after (dir 1) or at or before (dir -1) `from`, or -1.
template <std::size_t N> int seek_bit(const std::bitset<N> &bits, int from, int dir) {
	for (int i = from; i >= 0 && i < static_cast<int>(N); i += dir)
		if (bits[static_cast<std::size_t>(i)])
			return i;
	return -1;
}

// The matching local minute nearest to `local`: at or after it (dir 1) or at
// or before it (dir -1), in local seconds. It skips whole months, days and
// hours that cannot match, so a search costs at most a few steps per day.
std::optional<std::int64_t> seek_local_minute(const CronSpec &spec, std::int64_t local, int dir) {
	const std::int64_t minute_index = dir > 0 ? -floor_div(-local, minute_s) : floor_div(local, minute_s);
	std::int64_t days = floor_div(minute_index, 1440);
	int hour = static_cast<int>(minute_index - days * 1440) / 60;
	int minute = static_cast<int>(minute_index - days * 1440) % 60;
	const std::int64_t limit = days + dir * (cycle_days + 1);
	const int first_hour = dir > 0 ? 0 : 23;
	const int first_minute = dir > 0 ? 0 : 59;
	Date date = civil_from_days(days);
	auto to_day = [&](std::int64_t d) {
		days = d;
		date = civil_from_days(d);
		hour = first_hour;
		minute = first_minute;
	};
	while ((limit - days) * dir > 0) {
		if (!spec.months[static_cast<std::size_t>(date.month)]) {
			// to the first day of the next month, or the last of the previous one
			std::int64_t year = date.year;
			int month = date.month + dir;
			if (month == 13 || month == 0) {
				year += dir;
				month = dir > 0 ? 1 : 12;
			}
			to_day(days_from_civil(year, month, dir > 0 ? 1 : days_in_month(year, month)));
			continue;
		}
		if (!day_matches(spec, date, days)) {
			to_day(days + dir);
			continue;
		}
		const int h = seek_bit(spec.hours, hour, dir);
		if (h < 0) {
			to_day(days + dir);
			continue;
		}
		if (h != hour) {
			hour = h;
			minute = first_minute;
		}
		const int m = seek_bit(spec.minutes, minute, dir);
		if (m >= 0)
			return days * day_s + hour * hour_s + m * minute_s;
		hour += dir;
		minute = first_minute;
		if (hour < 0 || hour > 23)
			to_day(days + dir);
	}
	return std::nullopt;
}

// ---- Time zone ----

// Clamped so that the probes a day away below bracket every instant that matters.
int offset_at(const ZoneRules &zone, std::int64_t t) {
	constexpr int bound = static_cast<int>(day_s) - 1;
	return std::clamp(zone.utc_offset_at(t), -bound, bound);
}

// The first instant in (lo, hi] whose offset is not lo's; lo and hi have
// different offsets, with one change between them.
std::int64_t offset_change(const ZoneRules &zone, std::int64_t lo, std::int64_t hi) {
	const int before = offset_at(zone, lo);
	while (hi - lo > 1) {
		const std::int64_t mid = lo + (hi - lo) / 2;
		(offset_at(zone, mid) == before ? lo : hi) = mid;
	}
	return hi;
}

// The first instant at which the clock reads `local` or later: the instant of
// `local` where it exists once, the first of two in an overlap, the end of
// the gap where the clock jumps over it. Later local times never map to
// earlier instants, which the searches rely on.
std::int64_t first_instant_at(const ZoneRules &zone, std::int64_t local) {
	// With at most one change within two days, the offsets a day before and a
	// day after are the ones in effect on either side of any change near `local`.
	const int before = offset_at(zone, local - day_s);
	const int after = offset_at(zone, local + day_s);
	const std::int64_t at_before = local - before;
	const std::int64_t at_after = local - after;
	if (before == after || offset_at(zone, at_before) == before)
		return at_before; // no change, or `local` is before it (in an overlap: its first time)
	if (offset_at(zone, at_after) == after)
		return at_after;
	// a gap: the clock jumps from before `local` to after it at the change
	return at_after < at_before ? offset_change(zone, at_after, at_before) : at_before;
}

// The latest local time the clock has shown up to instant t. After a fall
// back that is the time it showed before the change, until the clock passes
// it again: local minutes up to it have had their (first) instant already.
std::int64_t latest_local(const ZoneRules &zone, std::int64_t t) {
	const int now = offset_at(zone, t);
	const int day_before = offset_at(zone, t - day_s);
	std::int64_t latest = t + now;
	if (day_before > now)
		latest = std::max(latest, offset_change(zone, t - day_s, t) - 1 + day_before);
	return latest;
}

// Guards against a zone that breaks the assumptions of ZoneRules: however it
// answers, a search ends, and next/prev never return a time on the wrong side.
constexpr int max_inconsistent_steps = 4 * 1440;

// The matching minutes of a day whose clock runs at one offset from
// `day_start`, counted where they fall in (after, up_to].
std::int64_t count_day(const CronSpec &spec, std::int64_t day_start, std::int64_t after, std::int64_t up_to) {
	if (after < day_start && day_start + day_s - minute_s <= up_to)
		return static_cast<std::int64_t>(spec.hours.count() * spec.minutes.count());
	std::int64_t count = 0;
	for (std::size_t h = 0; h < 24; ++h)
		for (std::size_t m = 0; spec.hours[h] && m < 60; ++m) {
			const std::int64_t t =
			    day_start + static_cast<std::int64_t>(h) * hour_s + static_cast<std::int64_t>(m) * minute_s;
			count += spec.minutes[m] && t > after && t <= up_to ? 1 : 0;
		}
	return count;
}

} // namespace

CronParse parse_cron(std::string_view text) {
	std::vector<std::string_view> words = split_words(text);
	if (!words.empty() && words[0].front() == '@') {
		if (words.size() > 1)
			return {std::nullopt, fmt::format("a macro stands alone: expected 5 fields or one macro, got {} "
			                                  "words starting with \"{}\"",
			                                  words.size(), words[0])};
		std::string lower(words[0]);
		std::transform(lower.begin(), lower.end(), lower.begin(), to_lower);
		const Macro *found = nullptr;
		for (const Macro &macro : macros)
			if (macro.name == lower)
				found = &macro;
		if (found == nullptr)
			return {std::nullopt,
			        fmt::format("unknown macro \"{}\" (known: @hourly, @daily, @midnight, @weekly, @monthly, "
			                    "@yearly, @annually)",
			                    words[0])};
		words = split_words(found->fields);
	}
	if (words.size() != field_count)
		return {std::nullopt, fmt::format("expected 5 fields, got {}", words.size())};

	std::uint64_t bits[field_count] = {};
	for (std::size_t i = 0; i < field_count; ++i)
		if (auto problem = parse_field(words[i], fields[i], bits[i]))
			return {std::nullopt, *problem};
	CronSpec spec;
	spec.minutes = std::bitset<60>(bits[0]);
	spec.hours = std::bitset<24>(bits[1]);
	spec.days_of_month = std::bitset<32>(bits[2]);
	spec.months = std::bitset<13>(bits[3]);
	spec.days_of_week = std::bitset<7>(bits[4]);
	spec.dom_star = words[2].front() == '*';
	spec.dow_star = words[4].front() == '*';
	return {spec, {}};
}

std::optional<std::int64_t> next_cron_time(const CronSpec &spec, const ZoneRules &zone, std::int64_t after) {
	if (!in_range(after))
		return std::nullopt;
	// Local minutes up to the latest the clock has shown have had their instant.
	std::int64_t from = latest_local(zone, after) + 1;
	for (int step = 0; step < max_inconsistent_steps; ++step) {
		const std::optional<std::int64_t> local = seek_local_minute(spec, from, 1);
		if (!local)
			return std::nullopt;
		const std::int64_t t = first_instant_at(zone, *local);
		if (t > after)
			return t;
		from = *local + minute_s;
	}
	return std::nullopt;
}

std::optional<std::int64_t> prev_cron_time(const CronSpec &spec, const ZoneRules &zone,
                                           std::int64_t at_or_before) {
	if (!in_range(at_or_before))
		return std::nullopt;
	std::int64_t from = latest_local(zone, at_or_before);
	for (int step = 0; step < max_inconsistent_steps; ++step) {
		const std::optional<std::int64_t> local = seek_local_minute(spec, from, -1);
		if (!local)
			return std::nullopt;
		const std::int64_t t = first_instant_at(zone, *local);
		if (t <= at_or_before)
			return t;
		from = *local - minute_s;
	}
	return std::nullopt;
}

std::int64_t count_cron_times(const CronSpec &spec, const ZoneRules &zone, std::int64_t after,
                              std::int64_t up_to) {
	if (!in_range(after) || !in_range(up_to) || up_to <= after)
		return 0;
	// Due times come in the order of their local minutes, so the days are
	// walked in order; every due time up to `counted_to` has been counted.
	// Local minutes up to latest_local(after) are due at or before `after`,
	// those past latest_local(up_to) after `up_to`.
	std::int64_t count = 0;
	std::int64_t counted_to = after;
	const std::int64_t last_day = floor_div(latest_local(zone, up_to), day_s);
	std::int64_t day = floor_div(latest_local(zone, after), day_s);
	Date date = civil_from_days(day);
	std::optional<std::int64_t> next_start; // the previous day's end, when that is this day's start
	for (; day <= last_day; date = civil_from_days(++day)) {
		if (!day_matches(spec, date, day)) {
			next_start.reset();
			continue;
		}
		const std::int64_t local = day * day_s;
		const std::int64_t start = next_start ? *next_start : first_instant_at(zone, local);
		const std::int64_t end = first_instant_at(zone, local + day_s);
		next_start = end;
		const int offset = offset_at(zone, start);
		if (end - start == day_s && local - start == offset && offset_at(zone, end - 1) == offset) {
			count += count_day(spec, start, counted_to, up_to);
			counted_to = std::max(counted_to, std::min(up_to, end - 1));
		} else {
			// The offset changes today: few days are like this, walk their due
			// times (which may end with the next day's first, at `end`).
			const std::int64_t stop = std::min(up_to, end);
			for (auto t = next_cron_time(spec, zone, counted_to); t && *t <= stop;
			     t = next_cron_time(spec, zone, *t))
				++count;
			counted_to = std::max(counted_to, stop);
		}
	}
	return count;
}

std::int64_t next_every_time(std::int64_t anchor, std::int64_t every, std::int64_t after) {
	every = std::max<std::int64_t>(every, 1);
	if (after < anchor)
		return anchor;
	constexpr std::int64_t saturated = std::numeric_limits<std::int64_t>::max();
	std::int64_t elapsed = 0;
	std::int64_t offset = 0;
	std::int64_t next = 0;
	if (__builtin_sub_overflow(after, anchor, &elapsed) ||
	    __builtin_mul_overflow(elapsed / every + 1, every, &offset) ||
	    __builtin_add_overflow(anchor, offset, &next))
		return saturated;
	return next;
}

CatchUp catch_up_cron(const CronSpec &spec, const ZoneRules &zone, std::int64_t last_due, std::int64_t now,
                      int catch_up) {
	CatchUp result;
	if (!in_range(last_due) || !in_range(now) || now <= last_due)
		return result;
	const std::size_t wanted = static_cast<std::size_t>(std::max(catch_up, 0));
	// Backwards from now, so that the work is the due times kept, not missed.
	std::optional<std::int64_t> t = prev_cron_time(spec, zone, now);
	if (t && *t > last_due)
		result.latest = t;
	for (; t && *t > last_due && result.due.size() < wanted; t = prev_cron_time(spec, zone, *t - 1))
		result.due.push_back(*t);
	std::reverse(result.due.begin(), result.due.end());
	if (t && *t > last_due)
		result.skipped = count_cron_times(spec, zone, last_due, *t);
	return result;
}

CatchUp catch_up_every(std::int64_t anchor, std::int64_t every, std::int64_t last_due, std::int64_t now,
                       int catch_up) {
	CatchUp result;
	if (!in_range(anchor) || !in_range(last_due) || !in_range(now) || now <= last_due || now < anchor)
		return result;
	every = std::max<std::int64_t>(every, 1);
	// due times anchor + k * every for k in [first, last]
	const std::int64_t last = floor_div(now - anchor, every);
	const std::int64_t first = last_due < anchor ? 0 : floor_div(last_due - anchor, every) + 1;
	if (last < first)
		return result;
	const std::int64_t kept = std::min(last - first + 1, static_cast<std::int64_t>(std::max(catch_up, 0)));
	for (std::int64_t k = last - kept + 1; k <= last; ++k)
		result.due.push_back(anchor + k * every);
	result.skipped = last - first + 1 - kept;
	result.latest = anchor + last * every;
	return result;
}

} // namespace concurrency
