#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "common/cron.hpp"

using concurrency::catch_up_cron;
using concurrency::catch_up_every;
using concurrency::count_cron_times;
using concurrency::CronSpec;
using concurrency::FixedOffsetZone;
using concurrency::next_cron_time;
using concurrency::next_every_time;
using concurrency::parse_cron;
using concurrency::prev_cron_time;
using concurrency::ZoneRules;

namespace {

constexpr std::int64_t minute = 60;
constexpr std::int64_t hour = 3600;
constexpr std::int64_t day = 86400;

std::int64_t utc(int year, int month, int mday, int h = 0, int m = 0, int s = 0) {
	std::tm tm{};
	tm.tm_year = year - 1900;
	tm.tm_mon = month - 1;
	tm.tm_mday = mday;
	tm.tm_hour = h;
	tm.tm_min = m;
	tm.tm_sec = s;
	return static_cast<std::int64_t>(timegm(&tm));
}

// A zone of the system's tz database (tzdata), read through glibc: TZ is set
// (and tzset called) before a lookup when it names another zone, and put
// back when the zone goes.
class TzZone final : public ZoneRules {
  public:
	explicit TzZone(std::string name) : name_(std::move(name)) {
		if (const char *old = std::getenv("TZ"))
			saved_ = old;
	}
	~TzZone() override {
		if (saved_)
			setenv("TZ", saved_->c_str(), 1);
		else
			unsetenv("TZ");
		tzset();
	}
	int utc_offset_at(std::int64_t utc_seconds) const override {
		++lookups;
		const char *current = std::getenv("TZ");
		if (current == nullptr || name_ != current) {
			setenv("TZ", name_.c_str(), 1);
			tzset();
		}
		std::time_t t = static_cast<std::time_t>(utc_seconds);
		std::tm tm{};
		localtime_r(&t, &tm);
		return static_cast<int>(tm.tm_gmtoff);
	}
	mutable std::int64_t lookups = 0;

  private:
	std::string name_;
	std::optional<std::string> saved_;
};

CronSpec spec_of(const std::string &text) {
	auto parsed = parse_cron(text);
	EXPECT_TRUE(parsed.spec) << text << ": " << parsed.error;
	EXPECT_EQ(parsed.error, "") << text;
	return parsed.spec.value_or(CronSpec{});
}

std::string error_of(const std::string &text) {
	auto parsed = parse_cron(text);
	EXPECT_FALSE(parsed.spec) << text;
	return parsed.error;
}

template <std::size_t N> std::vector<int> values(const std::bitset<N> &bits) {
	std::vector<int> out;
	for (std::size_t i = 0; i < N; ++i)
		if (bits[i])
			out.push_back(static_cast<int>(i));
	return out;
}

std::vector<int> range(int from, int to, int step = 1) {
	std::vector<int> out;
	for (int v = from; v <= to; v += step)
		out.push_back(v);
	return out;
}

// The due times in (after, up_to], one next_cron_time at a time.
std::vector<std::int64_t> walk(const CronSpec &spec, const ZoneRules &zone, std::int64_t after,
                               std::int64_t up_to) {
	std::vector<std::int64_t> out;
	for (auto t = next_cron_time(spec, zone, after); t && *t <= up_to; t = next_cron_time(spec, zone, *t))
		out.push_back(*t);
	return out;
}

std::vector<std::int64_t> hourly(std::int64_t from, std::int64_t to) {
	std::vector<std::int64_t> out;
	for (std::int64_t t = from; t <= to; t += hour)
		out.push_back(t);
	return out;
}

// The zone's clock, read at every UTC minute from a day before `after` to `up_to`.
struct Readings {
	std::int64_t after;
	std::vector<std::int64_t> utc;
	std::vector<std::int64_t> local;
};

Readings read_clock(const ZoneRules &zone, std::int64_t after, std::int64_t up_to) {
	Readings r{after, {}, {}};
	for (std::int64_t t = after - after % minute - day; t <= up_to; t += minute) {
		r.utc.push_back(t);
		r.local.push_back(t + zone.utc_offset_at(t));
	}
	return r;
}

// The due times in (after, up_to] by definition, from the readings: a
// matching local minute is due at the first instant the clock reads it or
// later. Valid for zones whose offsets and changes are whole minutes.
std::vector<std::int64_t> scan(const CronSpec &spec, const Readings &clock) {
	auto matches = [&](std::int64_t local) {
		std::time_t t = static_cast<std::time_t>(local);
		std::tm tm{};
		gmtime_r(&t, &tm);
		bool dom = spec.days_of_month[static_cast<std::size_t>(tm.tm_mday)];
		bool dow = spec.days_of_week[static_cast<std::size_t>(tm.tm_wday)];
		bool day_ok = spec.dom_star || spec.dow_star ? dom && dow : dom || dow;
		return day_ok && spec.months[static_cast<std::size_t>(tm.tm_mon + 1)] &&
		       spec.hours[static_cast<std::size_t>(tm.tm_hour)] &&
		       spec.minutes[static_cast<std::size_t>(tm.tm_min)];
	};
	std::vector<std::int64_t> out;
	std::int64_t shown = clock.local.front(); // the latest local minute the clock has shown
	for (std::size_t i = 1; i < clock.utc.size(); ++i) {
		bool due = false;
		for (std::int64_t l = shown + minute; l <= clock.local[i]; l += minute)
			due = due || matches(l);
		shown = std::max(shown, clock.local[i]);
		if (due && clock.utc[i] > clock.after)
			out.push_back(clock.utc[i]);
	}
	return out;
}

} // namespace

// ---- Parsing ----

TEST(CronParse, AllStars) {
	CronSpec s = spec_of("* * * * *");
	EXPECT_EQ(s.minutes.count(), 60u);
	EXPECT_EQ(s.hours.count(), 24u);
	EXPECT_EQ(values(s.days_of_month), range(1, 31));
	EXPECT_EQ(values(s.months), range(1, 12));
	EXPECT_EQ(values(s.days_of_week), range(0, 6));
	EXPECT_TRUE(s.dom_star);
	EXPECT_TRUE(s.dow_star);
}

TEST(CronParse, ListsRangesAndSteps) {
	EXPECT_EQ(values(spec_of("1,5 * * * *").minutes), (std::vector<int>{1, 5}));
	EXPECT_EQ(values(spec_of("1-5 * * * *").minutes), range(1, 5));
	EXPECT_EQ(values(spec_of("*/15 * * * *").minutes), (std::vector<int>{0, 15, 30, 45}));
	EXPECT_EQ(values(spec_of("10-40/5 * * * *").minutes), range(10, 40, 5));
	EXPECT_EQ(values(spec_of("5/10 * * * *").minutes), (std::vector<int>{5, 15, 25, 35, 45, 55}));
	EXPECT_EQ(values(spec_of("1-5/2,30,45-47 * * * *").minutes), (std::vector<int>{1, 3, 5, 30, 45, 46, 47}));
	EXPECT_EQ(values(spec_of("0 */7 * * *").hours), (std::vector<int>{0, 7, 14, 21}));
	EXPECT_EQ(values(spec_of("0 9-17 * * *").hours), range(9, 17));
	EXPECT_EQ(values(spec_of("0 0 */10 * *").days_of_month), (std::vector<int>{1, 11, 21, 31}));
	EXPECT_EQ(values(spec_of("0 0 31 * *").days_of_month), (std::vector<int>{31}));
	EXPECT_EQ(values(spec_of("0 0 1 */3 *").months), (std::vector<int>{1, 4, 7, 10}));
	EXPECT_EQ(values(spec_of("0 0 * * */2").days_of_week), (std::vector<int>{0, 2, 4, 6}));
	EXPECT_EQ(values(spec_of("59 23 * * *").minutes), (std::vector<int>{59}));
	// a step past the last value leaves only the first
	EXPECT_EQ(values(spec_of("*/60 * * * *").minutes), (std::vector<int>{0}));
	// any whitespace separates, around and between
	EXPECT_EQ(values(spec_of("  0\t12 \n *  * *  ").hours), (std::vector<int>{12}));
}

TEST(CronParse, MonthAndDayNamesInAnyCase) {
	EXPECT_EQ(values(spec_of("0 0 1 jan,MAR,Dec *").months), (std::vector<int>{1, 3, 12}));
	EXPECT_EQ(values(spec_of("0 0 1 jun-aug *").months), (std::vector<int>{6, 7, 8}));
	EXPECT_EQ(values(spec_of("0 0 1 feb/4 *").months), (std::vector<int>{2, 6, 10}));
	EXPECT_EQ(values(spec_of("0 0 1 JaN-mAr/2 *").months), (std::vector<int>{1, 3}));
	EXPECT_EQ(values(spec_of("0 0 * * MON-fri").days_of_week), range(1, 5));
	EXPECT_EQ(values(spec_of("0 0 * * sun,Wed,SAT").days_of_week), (std::vector<int>{0, 3, 6}));
	// names and numbers mix
	EXPECT_EQ(values(spec_of("0 0 * * 1,wed-5").days_of_week), (std::vector<int>{1, 3, 4, 5}));
}

TEST(CronParse, SevenIsSunday) {
	EXPECT_EQ(values(spec_of("0 0 * * 7").days_of_week), (std::vector<int>{0}));
	EXPECT_EQ(values(spec_of("0 0 * * 0").days_of_week), (std::vector<int>{0}));
	EXPECT_EQ(values(spec_of("0 0 * * 0,7").days_of_week), (std::vector<int>{0}));
	EXPECT_EQ(values(spec_of("0 0 * * 5-7").days_of_week), (std::vector<int>{0, 5, 6}));
	// a range may end at Sunday written 0 or sun
	EXPECT_EQ(values(spec_of("0 0 * * fri-sun").days_of_week), (std::vector<int>{0, 5, 6}));
	EXPECT_EQ(values(spec_of("0 0 * * 6-0").days_of_week), (std::vector<int>{0, 6}));
	EXPECT_EQ(values(spec_of("0 0 * * 0-7").days_of_week), range(0, 6));
}

TEST(CronParse, Macros) {
	auto same = [](const std::string &macro, const std::string &fields) {
		CronSpec a = spec_of(macro), b = spec_of(fields);
		EXPECT_EQ(a.minutes, b.minutes) << macro;
		EXPECT_EQ(a.hours, b.hours) << macro;
		EXPECT_EQ(a.days_of_month, b.days_of_month) << macro;
		EXPECT_EQ(a.months, b.months) << macro;
		EXPECT_EQ(a.days_of_week, b.days_of_week) << macro;
		EXPECT_EQ(a.dom_star, b.dom_star) << macro;
		EXPECT_EQ(a.dow_star, b.dow_star) << macro;
	};
	same("@hourly", "0 * * * *");
	same("@daily", "0 0 * * *");
	same("@midnight", "0 0 * * *");
	same("@weekly", "0 0 * * 0");
	same("@monthly", "0 0 1 * *");
	same("@yearly", "0 0 1 1 *");
	same("@annually", "0 0 1 1 *");
	same("  @DAILY\t", "0 0 * * *");
	same("@Weekly", "0 0 * * sun");
}

TEST(CronParse, StarFlagsFollowTheFieldsFirstCharacter) {
	CronSpec both = spec_of("0 0 1,15 * mon");
	EXPECT_FALSE(both.dom_star);
	EXPECT_FALSE(both.dow_star);
	CronSpec stepped = spec_of("0 0 */2 * mon"); // restricted days, but written from '*'
	EXPECT_TRUE(stepped.dom_star);
	EXPECT_FALSE(stepped.dow_star);
	CronSpec dow_only = spec_of("0 0 * * 1-5");
	EXPECT_TRUE(dow_only.dom_star);
	EXPECT_FALSE(dow_only.dow_star);
	CronSpec dom_range = spec_of("0 0 1-31 * */1"); // every day, but not '*'
	EXPECT_FALSE(dom_range.dom_star);
	EXPECT_TRUE(dom_range.dow_star);
}

TEST(CronParse, ErrorsNameTheField) {
	const std::pair<const char *, const char *> cases[] = {
	    {"", "expected 5 fields, got 0"},
	    {"   ", "expected 5 fields, got 0"},
	    {"* * * *", "expected 5 fields, got 4"},
	    {"0 * * * * *", "expected 5 fields, got 6"},
	    {"61 * * * *", "minute field: 61 is out of range 0-59"},
	    {"60 * * * *", "minute field: 60 is out of range 0-59"},
	    {"99999999999 * * * *", "minute field: 99999999999 is out of range 0-59"},
	    {"0 24 * * *", "hour field: 24 is out of range 0-23"},
	    {"0 0 0 * *", "day-of-month field: 0 is out of range 1-31"},
	    {"0 0 32 * *", "day-of-month field: 32 is out of range 1-31"},
	    {"0 0 * 0 *", "month field: 0 is out of range 1-12"},
	    {"0 0 * 13 *", "month field: 13 is out of range 1-12"},
	    {"0 0 * * 8", "day-of-week field: 8 is out of range 0-7"},
	    {"0 0 * * fri2", "day-of-week field: unknown name \"fri2\""},
	    {"0 0 * * friday", "day-of-week field: unknown name \"friday\""},
	    {"0 0 * * jan", "day-of-week field: unknown name \"jan\""},
	    {"0 0 * foo *", "month field: unknown name \"foo\""},
	    {"0 0 * mon *", "month field: unknown name \"mon\""},
	    {"abc * * * *", "minute field: \"abc\" is not a number"},
	    {"0 noon * * *", "hour field: \"noon\" is not a number"},
	    {"0 0 1st * *", "day-of-month field: \"1st\" is not a number"},
	    {"1,,2 * * * *", "minute field: empty list item"},
	    {"1, * * * *", "minute field: empty list item"},
	    {"0 ,1 * * *", "hour field: empty list item"},
	    {"*/0 * * * *", "minute field: step 0 is out of range 1-60"},
	    {"*/61 * * * *", "minute field: step 61 is out of range 1-60"},
	    {"0 */25 * * *", "hour field: step 25 is out of range 1-24"},
	    {"0 0 * */13 *", "month field: step 13 is out of range 1-12"},
	    {"0 0 * * */8", "day-of-week field: step 8 is out of range 1-7"},
	    {"*/x * * * *", "minute field: bad step \"x\" in \"*/x\""},
	    {"*/ * * * *", "minute field: bad step \"\" in \"*/\""},
	    {"0 0 * * 1/2/3", "day-of-week field: bad step \"2/3\" in \"1/2/3\""},
	    {"5-2 * * * *", "minute field: range \"5-2\" runs backwards"},
	    {"0 0 * dec-jan *", "month field: range \"dec-jan\" runs backwards"},
	    {"0 0 * * sat-mon", "day-of-week field: range \"sat-mon\" runs backwards"},
	    {"-5 * * * *", "minute field: bad item \"-5\" (expected *, N or N-M, each optionally /STEP)"},
	    {"5- * * * *", "minute field: bad item \"5-\" (expected *, N or N-M, each optionally /STEP)"},
	    {"1-2-3 * * * *", "minute field: bad item \"1-2-3\" (expected *, N or N-M, each optionally /STEP)"},
	    {"*-5 * * * *", "minute field: bad item \"*-5\" (expected *, N or N-M, each optionally /STEP)"},
	    {"/5 * * * *", "minute field: bad item \"/5\" (expected *, N or N-M, each optionally /STEP)"},
	    {"0 0 ** * *", "day-of-month field: bad item \"**\" (expected *, N or N-M, each optionally /STEP)"},
	    {"0 0 * * \xc3\xa9",
	     "day-of-week field: bad item \"\xc3\xa9\" (expected *, N or N-M, each optionally /STEP)"},
	    {"0 0 1-40 * *", "day-of-month field: 40 is out of range 1-31"},
	    {"@reboot", "unknown macro \"@reboot\" (known: @hourly, @daily, @midnight, @weekly, @monthly, "
	                "@yearly, @annually)"},
	    {"@",
	     "unknown macro \"@\" (known: @hourly, @daily, @midnight, @weekly, @monthly, @yearly, @annually)"},
	    {"@daily 1",
	     "a macro stands alone: expected 5 fields or one macro, got 2 words starting with \"@daily\""},
	};
	for (const auto &[text, message] : cases)
		EXPECT_EQ(error_of(text), message) << text;
	// the first bad field is the one reported
	EXPECT_EQ(error_of("99 99 * * *"), "minute field: 99 is out of range 0-59");
}

// ---- Due times in UTC ----

TEST(CronNext, IsStrictlyAfterAndOnMinuteBoundaries) {
	FixedOffsetZone z;
	CronSpec every_minute = spec_of("* * * * *");
	EXPECT_EQ(next_cron_time(every_minute, z, utc(2026, 5, 4, 12, 0)), utc(2026, 5, 4, 12, 1));
	EXPECT_EQ(next_cron_time(every_minute, z, utc(2026, 5, 4, 12, 0, 30)), utc(2026, 5, 4, 12, 1));
	EXPECT_EQ(next_cron_time(every_minute, z, utc(2026, 5, 4, 12, 0) - 1), utc(2026, 5, 4, 12, 0));
	CronSpec quarter = spec_of("*/15 * * * *");
	EXPECT_EQ(next_cron_time(quarter, z, utc(2026, 5, 4, 12, 7)), utc(2026, 5, 4, 12, 15));
	EXPECT_EQ(next_cron_time(quarter, z, utc(2026, 5, 4, 12, 45)), utc(2026, 5, 4, 13, 0));
	EXPECT_EQ(next_cron_time(quarter, z, utc(2026, 5, 4, 23, 50)), utc(2026, 5, 5, 0, 0));
}

TEST(CronNext, CrossesMonthAndYearEnds) {
	FixedOffsetZone z;
	EXPECT_EQ(next_cron_time(spec_of("0 0 1 1 *"), z, utc(2025, 12, 31, 23, 59, 59)), utc(2026, 1, 1));
	EXPECT_EQ(next_cron_time(spec_of("@yearly"), z, utc(2026, 1, 1)), utc(2027, 1, 1));
	EXPECT_EQ(next_cron_time(spec_of("59 23 31 12 *"), z, utc(2026, 12, 31, 23, 59)),
	          utc(2027, 12, 31, 23, 59));
	// the 31st skips the months without one
	CronSpec last_day = spec_of("0 12 31 * *");
	EXPECT_EQ(next_cron_time(last_day, z, utc(2026, 3, 31, 12, 0)), utc(2026, 5, 31, 12, 0));
	EXPECT_EQ(next_cron_time(last_day, z, utc(2026, 8, 31, 12, 0)), utc(2026, 10, 31, 12, 0));
	EXPECT_EQ(next_cron_time(spec_of("@monthly"), z, utc(2026, 12, 15)), utc(2027, 1, 1));
	EXPECT_EQ(next_cron_time(spec_of("0 0 * jun *"), z, utc(2026, 6, 30, 0, 0)), utc(2027, 6, 1));
}

TEST(CronNext, LeapDays) {
	FixedOffsetZone z;
	CronSpec leap = spec_of("0 0 29 2 *");
	EXPECT_EQ(next_cron_time(leap, z, utc(2026, 3, 1)), utc(2028, 2, 29));
	EXPECT_EQ(next_cron_time(leap, z, utc(2028, 2, 29)), utc(2032, 2, 29));
	// 2100 is no leap year: eight years from 2096 to 2104
	EXPECT_EQ(next_cron_time(leap, z, utc(2096, 3, 1)), utc(2104, 2, 29));
	// 2000 is one
	EXPECT_EQ(next_cron_time(leap, z, utc(1997, 1, 1)), utc(2000, 2, 29));
	EXPECT_EQ(next_cron_time(spec_of("0 0 * 2 *"), z, utc(2028, 2, 28, 12)), utc(2028, 2, 29));
	EXPECT_EQ(next_cron_time(spec_of("0 0 * 2 *"), z, utc(2026, 2, 28, 12)), utc(2027, 2, 1));
	EXPECT_EQ(prev_cron_time(leap, z, utc(2027, 6, 1)), utc(2024, 2, 29));
}

TEST(CronNext, ImpossibleDaysGiveNothing) {
	FixedOffsetZone z;
	for (const char *text : {"0 0 30 2 *", "0 0 31 2 *", "0 0 31 4,6,9,11 *", "* * 30,31 feb *"}) {
		CronSpec s = spec_of(text);
		EXPECT_EQ(next_cron_time(s, z, utc(2026, 1, 1)), std::nullopt) << text;
		EXPECT_EQ(prev_cron_time(s, z, utc(2026, 1, 1)), std::nullopt) << text;
		EXPECT_EQ(count_cron_times(s, z, utc(2026, 1, 1), utc(2036, 1, 1)), 0) << text;
	}
	// rare but possible: February 1 on a Monday (AND, as day-of-month starts with '*')
	EXPECT_EQ(next_cron_time(spec_of("0 0 */28 feb mon"), z, utc(2021, 2, 2)), utc(2027, 2, 1));
}

TEST(CronNext, DayOfMonthOrDayOfWeek) {
	FixedOffsetZone z;
	// 2026-01-01 is a Thursday. Both fields restricted: the 13th OR any Friday.
	EXPECT_EQ(walk(spec_of("0 0 13 * fri"), z, utc(2026, 1, 1), utc(2026, 2, 1)),
	          (std::vector<std::int64_t>{utc(2026, 1, 2), utc(2026, 1, 9), utc(2026, 1, 13), utc(2026, 1, 16),
	                                     utc(2026, 1, 23), utc(2026, 1, 30)}));
	// day-of-month written from '*': odd days AND Fridays
	EXPECT_EQ(
	    walk(spec_of("0 0 */2 * fri"), z, utc(2026, 1, 1), utc(2026, 3, 1)),
	    (std::vector<std::int64_t>{utc(2026, 1, 9), utc(2026, 1, 23), utc(2026, 2, 13), utc(2026, 2, 27)}));
	// day-of-week '*': the 13th only
	EXPECT_EQ(walk(spec_of("0 0 13 * *"), z, utc(2026, 1, 1), utc(2026, 3, 1)),
	          (std::vector<std::int64_t>{utc(2026, 1, 13), utc(2026, 2, 13)}));
	// 7 is Sunday: 2026-01-04
	EXPECT_EQ(next_cron_time(spec_of("0 0 * * 7"), z, utc(2026, 1, 1)), utc(2026, 1, 4));
	EXPECT_EQ(next_cron_time(spec_of("@weekly"), z, utc(2026, 1, 1)), utc(2026, 1, 4));
	EXPECT_EQ(next_cron_time(spec_of("30 8 * * mon-fri"), z, utc(2026, 1, 2, 9)), utc(2026, 1, 5, 8, 30));
}

TEST(CronNext, PrevIsAtOrBefore) {
	FixedOffsetZone z;
	CronSpec quarter = spec_of("*/15 * * * *");
	EXPECT_EQ(prev_cron_time(quarter, z, utc(2026, 5, 4, 12, 7)), utc(2026, 5, 4, 12, 0));
	EXPECT_EQ(prev_cron_time(quarter, z, utc(2026, 5, 4, 12, 15)), utc(2026, 5, 4, 12, 15));
	EXPECT_EQ(prev_cron_time(quarter, z, utc(2026, 5, 4, 12, 15) - 1), utc(2026, 5, 4, 12, 0));
	EXPECT_EQ(prev_cron_time(spec_of("@yearly"), z, utc(2026, 1, 1) - 1), utc(2025, 1, 1));
	EXPECT_EQ(prev_cron_time(spec_of("0 12 31 * *"), z, utc(2026, 5, 1)), utc(2026, 3, 31, 12));
}

TEST(CronNext, FixedOffsets) {
	TzZone kolkata("Asia/Kolkata"); // +05:30 all year
	FixedOffsetZone plus_530(5 * 3600 + 1800);
	CronSpec nine = spec_of("0 9 * * *");
	for (const ZoneRules *z :
	     {static_cast<const ZoneRules *>(&kolkata), static_cast<const ZoneRules *>(&plus_530)}) {
		EXPECT_EQ(next_cron_time(nine, *z, utc(2026, 6, 1)), utc(2026, 6, 1, 3, 30));
		EXPECT_EQ(next_cron_time(nine, *z, utc(2026, 6, 1, 3, 30)), utc(2026, 6, 2, 3, 30));
		EXPECT_EQ(count_cron_times(nine, *z, utc(2026, 1, 1), utc(2027, 1, 1)), 365);
	}
	// local midnight is the previous UTC day
	EXPECT_EQ(next_cron_time(spec_of("0 0 1 * *"), kolkata, utc(2026, 6, 1)), utc(2026, 6, 30, 18, 30));
	FixedOffsetZone minus_10(-10 * 3600);
	EXPECT_EQ(next_cron_time(spec_of("0 20 31 12 *"), minus_10, utc(2026, 6, 1)), utc(2027, 1, 1, 6, 0));
}

// ---- Daylight saving time ----

TEST(CronDst, BerlinSpringForwardRunsOnceAfterTheGap) {
	TzZone berlin("Europe/Berlin"); // 2026-03-29 02:00 CET -> 03:00 CEST, at 01:00 UTC
	CronSpec s = spec_of("30 2 * * *");
	EXPECT_EQ(walk(s, berlin, utc(2026, 3, 28), utc(2026, 3, 31)),
	          (std::vector<std::int64_t>{utc(2026, 3, 28, 1, 30), utc(2026, 3, 29, 1, 0),
	                                     utc(2026, 3, 30, 0, 30)}));
	// every minute of the gap hour, and 03:00 itself, are one run at 03:00 CEST
	CronSpec gap_hour = spec_of("*/15 2,3 * * *");
	EXPECT_EQ(walk(gap_hour, berlin, utc(2026, 3, 29), utc(2026, 3, 29, 2)),
	          (std::vector<std::int64_t>{utc(2026, 3, 29, 1, 0), utc(2026, 3, 29, 1, 15),
	                                     utc(2026, 3, 29, 1, 30), utc(2026, 3, 29, 1, 45)}));
	// hourly: the day has 23 hours and 23 runs, one each UTC hour
	CronSpec every_hour = spec_of("0 * * * *");
	EXPECT_EQ(walk(every_hour, berlin, utc(2026, 3, 28, 23) - 1, utc(2026, 3, 29, 22) - 1),
	          hourly(utc(2026, 3, 28, 23), utc(2026, 3, 29, 21)));
	EXPECT_EQ(count_cron_times(every_hour, berlin, utc(2026, 3, 28, 23) - 1, utc(2026, 3, 29, 22) - 1), 23);
	EXPECT_EQ(prev_cron_time(s, berlin, utc(2026, 3, 29, 1, 30)), utc(2026, 3, 29, 1, 0));
	EXPECT_EQ(prev_cron_time(s, berlin, utc(2026, 3, 29, 1, 0) - 1), utc(2026, 3, 28, 1, 30));
}

TEST(CronDst, BerlinFallBackRunsTheFirstTimeOnly) {
	TzZone berlin("Europe/Berlin"); // 2026-10-25 03:00 CEST -> 02:00 CET, at 01:00 UTC
	CronSpec s = spec_of("30 2 * * *");
	// 02:30 CEST is 00:30 UTC; 02:30 CET (01:30 UTC) does not run again
	EXPECT_EQ(walk(s, berlin, utc(2026, 10, 24, 12), utc(2026, 10, 27)),
	          (std::vector<std::int64_t>{utc(2026, 10, 25, 0, 30), utc(2026, 10, 26, 1, 30)}));
	// hourly: the day has 25 hours and 24 runs, none at the second 02:00 (01:00 UTC)
	CronSpec every_hour = spec_of("0 * * * *");
	std::vector<std::int64_t> expected = hourly(utc(2026, 10, 24, 22), utc(2026, 10, 25, 0));
	for (std::int64_t t : hourly(utc(2026, 10, 25, 2), utc(2026, 10, 25, 22)))
		expected.push_back(t);
	EXPECT_EQ(walk(every_hour, berlin, utc(2026, 10, 24, 22) - 1, utc(2026, 10, 25, 23) - 1), expected);
	EXPECT_EQ(count_cron_times(every_hour, berlin, utc(2026, 10, 24, 22) - 1, utc(2026, 10, 25, 23) - 1), 24);
	// asked during the repeated hour, the next run is after it: 03:00 CET
	CronSpec ten = spec_of("*/10 * * * *");
	EXPECT_EQ(next_cron_time(ten, berlin, utc(2026, 10, 25, 0, 50)), utc(2026, 10, 25, 2, 0));
	EXPECT_EQ(next_cron_time(ten, berlin, utc(2026, 10, 25, 1, 5)), utc(2026, 10, 25, 2, 0));
	EXPECT_EQ(prev_cron_time(ten, berlin, utc(2026, 10, 25, 1, 30)), utc(2026, 10, 25, 0, 50));
	EXPECT_EQ(prev_cron_time(s, berlin, utc(2026, 10, 26, 1, 29)), utc(2026, 10, 25, 0, 30));
}

TEST(CronDst, BerlinYearOfMinutes) {
	TzZone berlin("Europe/Berlin");
	// every UTC minute of 2026 but the 60 of the repeated hour in October
	EXPECT_EQ(count_cron_times(spec_of("* * * * *"), berlin, utc(2026, 1, 1), utc(2027, 1, 1)), 525600 - 60);
	EXPECT_EQ(count_cron_times(spec_of("@daily"), berlin, utc(2026, 1, 1), utc(2027, 1, 1)), 365);
}

TEST(CronDst, NewYork) {
	TzZone ny("America/New_York"); // 2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01 02:00 EDT -> 01:00 EST
	CronSpec s = spec_of("30 2 * * *");
	EXPECT_EQ(
	    walk(s, ny, utc(2026, 3, 7), utc(2026, 3, 10)),
	    (std::vector<std::int64_t>{utc(2026, 3, 7, 7, 30), utc(2026, 3, 8, 7, 0), utc(2026, 3, 9, 6, 30)}));
	CronSpec one_thirty = spec_of("30 1 * * *");
	EXPECT_EQ(walk(one_thirty, ny, utc(2026, 10, 31), utc(2026, 11, 3)),
	          (std::vector<std::int64_t>{utc(2026, 10, 31, 5, 30), utc(2026, 11, 1, 5, 30),
	                                     utc(2026, 11, 2, 6, 30)}));
	// a year of hours from local midnight: 8760 less the repeated one
	EXPECT_EQ(count_cron_times(spec_of("@hourly"), ny, utc(2026, 1, 1, 5) - 1, utc(2027, 1, 1, 5) - 1), 8759);
}

TEST(CronDst, LordHoweHalfHourShift) {
	TzZone lord_howe("Australia/Lord_Howe");
	// 2026-04-05 02:00 +11 -> 01:30 +10:30 (at 15:00 UTC on the 4th): 01:30-01:59 twice
	CronSpec quarter = spec_of("*/15 * * * *");
	EXPECT_EQ(walk(quarter, lord_howe, utc(2026, 4, 4, 14, 20), utc(2026, 4, 4, 15, 50)),
	          (std::vector<std::int64_t>{utc(2026, 4, 4, 14, 30), utc(2026, 4, 4, 14, 45),
	                                     utc(2026, 4, 4, 15, 30), utc(2026, 4, 4, 15, 45)}));
	EXPECT_EQ(walk(spec_of("45 1 * * *"), lord_howe, utc(2026, 4, 4), utc(2026, 4, 6)),
	          (std::vector<std::int64_t>{utc(2026, 4, 4, 14, 45), utc(2026, 4, 5, 15, 15)}));
	// 2026-10-04 02:00 +10:30 -> 02:30 +11 (at 15:30 UTC on the 3rd): 02:00 and 02:15 run at 02:30
	EXPECT_EQ(walk(quarter, lord_howe, utc(2026, 10, 3, 15, 0), utc(2026, 10, 3, 16, 0)),
	          (std::vector<std::int64_t>{utc(2026, 10, 3, 15, 15), utc(2026, 10, 3, 15, 30),
	                                     utc(2026, 10, 3, 15, 45), utc(2026, 10, 3, 16, 0)}));
	EXPECT_EQ(next_cron_time(spec_of("15 2 * * *"), lord_howe, utc(2026, 10, 3)), utc(2026, 10, 3, 15, 30));
	// 35040 quarter hours in 2026, less the two of the repeated half hour
	EXPECT_EQ(count_cron_times(quarter, lord_howe, utc(2026, 1, 1), utc(2027, 1, 1)), 35040 - 2);
}

TEST(CronDst, AgreesWithAMinuteByMinuteScan) {
	// zones with changes at 02:00 and 03:00, by half an hour, and at midnight
	// (Havana: 00:00 -> 01:00 and 01:00 -> 00:00; Santiago: 24:00 -> 23:00
	// and 00:00 -> 01:00), so that gaps and overlaps meet day boundaries
	const char *zones[] = {"Europe/Berlin",  "America/New_York", "Australia/Lord_Howe",
	                       "America/Havana", "America/Santiago", "Asia/Kolkata"};
	const char *specs[] = {
	    "* * * * *",        "*/7 * * * *", "0,30 * * * *", "30 2 * * *",     "*/15 0-3 * * *",
	    "0 0 * * *",        "59 23 * * *", "30 0 * * 0",   "0 0 8,9,25 * *", "*/20 23,0,1 4,5 * sun",
	    "0 0 1,5,8 3,11 *", "45 1 5 * *"};
	// two days around each change of these zones in 2026, and a plain day
	const std::int64_t windows[][2] = {
	    {utc(2026, 3, 7, 12), utc(2026, 3, 9, 12)},
	    {utc(2026, 3, 28, 12), utc(2026, 3, 30)},
	    {utc(2026, 4, 4), utc(2026, 4, 6)},
	    {utc(2026, 9, 5, 12), utc(2026, 9, 7)},
	    {utc(2026, 10, 3), utc(2026, 10, 5)},
	    {utc(2026, 10, 24, 12), utc(2026, 10, 26)},
	    {utc(2026, 10, 31, 12), utc(2026, 11, 2, 12)},
	    {utc(2026, 6, 1, 7, 13, 5), utc(2026, 6, 2, 3, 1)},
	};
	for (const char *zone_name : zones) {
		TzZone zone(zone_name);
		std::vector<Readings> clocks;
		for (const auto &w : windows)
			clocks.push_back(read_clock(zone, w[0], w[1]));
		for (const char *text : specs) {
			CronSpec s = spec_of(text);
			for (std::size_t i = 0; i < clocks.size(); ++i) {
				const auto &w = windows[i];
				std::vector<std::int64_t> expected = scan(s, clocks[i]);
				std::string where = std::string(zone_name) + " \"" + text + "\" from " + std::to_string(w[0]);
				ASSERT_EQ(walk(s, zone, w[0], w[1]), expected) << where;
				ASSERT_EQ(count_cron_times(s, zone, w[0], w[1]), static_cast<std::int64_t>(expected.size()))
				    << where;
				// backwards, the same due times
				std::vector<std::int64_t> back;
				for (auto t = prev_cron_time(s, zone, w[1]); t && *t > w[0];
				     t = prev_cron_time(s, zone, *t - 1))
					back.insert(back.begin(), *t);
				ASSERT_EQ(back, expected) << where;
			}
		}
	}
}

TEST(CronNext, SearchesSkipRatherThanStep) {
	TzZone berlin("Europe/Berlin");
	// the next Feb 29 is years away, but a search asks the zone only a few times
	berlin.lookups = 0;
	EXPECT_EQ(next_cron_time(spec_of("0 0 29 2 *"), berlin, utc(2096, 3, 1)), utc(2104, 2, 28, 23));
	EXPECT_LE(berlin.lookups, 10);
	// a year of minutes counted with a few lookups a day, not one a minute
	berlin.lookups = 0;
	EXPECT_EQ(count_cron_times(spec_of("* * * * *"), berlin, utc(2026, 1, 1), utc(2027, 1, 1)), 525600 - 60);
	EXPECT_LT(berlin.lookups, 50'000);
}

TEST(CronNext, OutOfRangeInstantsGiveNothing) {
	FixedOffsetZone z;
	CronSpec s = spec_of("* * * * *");
	EXPECT_EQ(next_cron_time(s, z, std::numeric_limits<std::int64_t>::max()), std::nullopt);
	EXPECT_EQ(prev_cron_time(s, z, std::numeric_limits<std::int64_t>::min()), std::nullopt);
	EXPECT_EQ(count_cron_times(s, z, 0, std::numeric_limits<std::int64_t>::max()), 0);
	// before 1970 works like after
	EXPECT_EQ(next_cron_time(spec_of("0 0 1 1 *"), z, utc(1900, 6, 1)), utc(1901, 1, 1));
}

// ---- every ----

TEST(Every, NextIsStrictlyAfterOnTheAnchorsGrid) {
	EXPECT_EQ(next_every_time(1000, 60, 999), 1000);
	EXPECT_EQ(next_every_time(1000, 60, 0), 1000); // nothing before the anchor
	EXPECT_EQ(next_every_time(1000, 60, 1000), 1060);
	EXPECT_EQ(next_every_time(1000, 60, 1059), 1060);
	EXPECT_EQ(next_every_time(1000, 60, 1060), 1120);
	EXPECT_EQ(next_every_time(-100, 30, -95), -70);
	EXPECT_EQ(next_every_time(utc(2026, 1, 1), day, utc(2026, 7, 4, 12)), utc(2026, 7, 5));
	EXPECT_EQ(next_every_time(0, 0, 10), 11); // every below 1 counts as 1
	EXPECT_EQ(next_every_time(0, -60, 10), 11);
	constexpr std::int64_t max = std::numeric_limits<std::int64_t>::max();
	EXPECT_EQ(next_every_time(0, max / 2, max - 10), max - 1);
	EXPECT_EQ(next_every_time(0, max / 2 + 1, max - 10), max);
	EXPECT_EQ(next_every_time(std::numeric_limits<std::int64_t>::min(), 7, max), max);
}

// ---- Catching up ----

TEST(CatchUp, EveryKeepsTheLatest) {
	auto r = catch_up_every(0, 60, 0, 600, 1);
	EXPECT_EQ(r.due, (std::vector<std::int64_t>{600}));
	EXPECT_EQ(r.skipped, 9);
	EXPECT_EQ(r.latest, 600);
	r = catch_up_every(0, 60, 0, 659, 3);
	EXPECT_EQ(r.due, (std::vector<std::int64_t>{480, 540, 600}));
	EXPECT_EQ(r.skipped, 7);
	r = catch_up_every(0, 60, 0, 600, 100);
	EXPECT_EQ(r.due.size(), 10u);
	EXPECT_EQ(r.due.front(), 60);
	EXPECT_EQ(r.skipped, 0);
	// not due yet
	r = catch_up_every(0, 60, 0, 59, 1);
	EXPECT_TRUE(r.due.empty());
	EXPECT_EQ(r.skipped, 0);
	EXPECT_EQ(r.latest, std::nullopt);
	// the anchor itself is the first due time
	r = catch_up_every(100, 10, 0, 125, 2);
	EXPECT_EQ(r.due, (std::vector<std::int64_t>{110, 120}));
	EXPECT_EQ(r.skipped, 1);
	EXPECT_TRUE(catch_up_every(100, 10, 0, 99, 2).due.empty());
	// catch_up 0 enqueues nothing and skips everything
	r = catch_up_every(0, 60, 0, 600, 0);
	EXPECT_TRUE(r.due.empty());
	EXPECT_EQ(r.skipped, 10);
	EXPECT_EQ(r.latest, 600);
	// ten years down with every = 1 s: constant work, an exact count
	const std::int64_t now = 10 * 365 * day;
	r = catch_up_every(0, 1, 0, now, 2);
	EXPECT_EQ(r.due, (std::vector<std::int64_t>{now - 1, now}));
	EXPECT_EQ(r.skipped, now - 2);
	EXPECT_EQ(r.latest, now);
}

TEST(CatchUp, CronKeepsTheLatest) {
	FixedOffsetZone z;
	CronSpec quarter = spec_of("*/15 * * * *");
	const std::int64_t last = utc(2026, 5, 4, 12), now = utc(2026, 5, 4, 13, 7);
	// due: 12:15, 12:30, 12:45, 13:00
	auto r = catch_up_cron(quarter, z, last, now, 3);
	EXPECT_EQ(r.due, (std::vector<std::int64_t>{utc(2026, 5, 4, 12, 30), utc(2026, 5, 4, 12, 45),
	                                            utc(2026, 5, 4, 13)}));
	EXPECT_EQ(r.skipped, 1);
	EXPECT_EQ(r.latest, utc(2026, 5, 4, 13));
	r = catch_up_cron(quarter, z, last, now, 1);
	EXPECT_EQ(r.due, (std::vector<std::int64_t>{utc(2026, 5, 4, 13)}));
	EXPECT_EQ(r.skipped, 3);
	r = catch_up_cron(quarter, z, last, now, 10);
	EXPECT_EQ(r.due.size(), 4u);
	EXPECT_EQ(r.skipped, 0);
	r = catch_up_cron(quarter, z, last, now, 0);
	EXPECT_TRUE(r.due.empty());
	EXPECT_EQ(r.skipped, 4);
	EXPECT_EQ(r.latest, utc(2026, 5, 4, 13));
	// nothing due yet
	r = catch_up_cron(quarter, z, last, utc(2026, 5, 4, 12, 10), 1);
	EXPECT_TRUE(r.due.empty());
	EXPECT_EQ(r.skipped, 0);
	EXPECT_EQ(r.latest, std::nullopt);
	// a schedule with no due time at all
	r = catch_up_cron(spec_of("0 0 30 2 *"), z, last, now, 1);
	EXPECT_TRUE(r.due.empty());
	EXPECT_EQ(r.latest, std::nullopt);
}

TEST(CatchUp, CronAfterAYearDownCountsExactly) {
	TzZone berlin("Europe/Berlin");
	const std::int64_t last = utc(2026, 1, 1), now = utc(2027, 1, 1);
	berlin.lookups = 0;
	auto r = catch_up_cron(spec_of("* * * * *"), berlin, last, now, 2);
	EXPECT_EQ(r.due, (std::vector<std::int64_t>{now - minute, now}));
	EXPECT_EQ(r.skipped, 525600 - 60 - 2);
	EXPECT_EQ(r.latest, now);
	EXPECT_LT(berlin.lookups, 50'000);
	// across the fall-back night, 02:30 once
	r = catch_up_cron(spec_of("30 2 * * *"), berlin, utc(2026, 10, 24), utc(2026, 10, 26, 12), 5);
	EXPECT_EQ(r.due, (std::vector<std::int64_t>{utc(2026, 10, 24, 0, 30), utc(2026, 10, 25, 0, 30),
	                                            utc(2026, 10, 26, 1, 30)}));
	EXPECT_EQ(r.skipped, 0);
}
