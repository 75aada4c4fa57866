// The SQL of rate limits (docs/queue.md, "Rate limits"): at most rate_limit
// claims of a queue in any window of rate_period. Pure C++ (no PostgreSQL
// headers); identifiers quoted, operators schema-qualified. Unit-tested in
// test/unit/rate_sql_test.cpp.
//
// How the limit is kept: the queue has rate_limit slot rows in its side
// table r_<queue>, each with the time of the last claim made with it. A claim
// first takes slots last used at least rate_period ago and writes its claim
// time into them, in one statement (FOR UPDATE SKIP LOCKED: it never waits;
// in READ COMMITTED a slot used by a claim committed after the statement's
// snapshot is checked again on its latest version and skipped, in REPEATABLE
// READ and SERIALIZABLE that is a serialization failure), then claims at
// most as many tasks as it took slots, and gives back those it did not use
// (marked free: their previous use was at least rate_period ago, so "free"
// is all it said). So one slot serves at most one claim in any window of
// rate_period, and rate_limit slots at most rate_limit claims. The slots' row
// locks end with the claiming transaction.
#pragma once

#include <string>
#include <string_view>

namespace concurrency::queue {

// The side table's name (unquoted): r_<queue>.
std::string rate_table_name(std::string_view queue);

class RateSql {
  public:
	explicit RateSql(std::string_view queue);

	// CREATE TABLE of the slot table and its index; its DROP;
	// ALTER … OWNER TO.
	std::string create_table() const;
	std::string drop_table() const;
	std::string alter_owner(std::string_view role) const;
	// $1 int4 rate_limit: makes the table hold slots 1..rate_limit (new ones
	// never used)
	std::string resize() const;
	// $1 timestamptz free_before (now - rate_period), $2 int4 wanted, $3
	// timestamptz the claim's time -> the slots taken (any free ones: the
	// window holds whichever slots serve it; locked with SKIP LOCKED, now
	// used at $3). used_at is in no index, so that writing it is a HOT
	// update and the small table stays small.
	std::string take() const;
	// $1 int4[] slots: gives back slots taken and not used
	std::string give_back() const;
	// -> the time of the oldest use of a slot (the window opens rate_period
	// after it)
	std::string oldest_use() const;

  private:
	std::string queue_;
	std::string table_;
};

} // namespace concurrency::queue
