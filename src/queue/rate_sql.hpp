// The SQL of rate limits (docs/queue.md, "Rate limits"): at most rate_limit
// claims of a queue in any window of rate_period. Pure C++ (no PostgreSQL
// headers); identifiers quoted, operators schema-qualified. Unit-tested in
// test/unit/rate_sql_test.cpp.
//
// How the limit is kept: the queue has rate_limit slot rows in its side
// table r_<queue>, each with the time of the last claim made with it. A claim
// locks slots last used at least rate_period ago (FOR UPDATE SKIP LOCKED:
// it never waits), checks them again on the latest committed state, claims
// at most as many tasks as it holds slots, and writes its claim time into as
// many of them as it claimed tasks. So one slot serves at most one claim in
// any window of rate_period, and rate_limit slots at most rate_limit claims.
// A slot locked and not used is left as it was (its lock ends with the
// claiming transaction).
#pragma once

#include <string>
#include <string_view>

namespace concurrency::queue {

// The side table's name (unquoted): r_<queue>.
std::string rate_table_name(std::string_view queue);

class RateSql {
  public:
	explicit RateSql(std::string_view queue);
	const std::string &table() const { return table_; }

	// CREATE TABLE of the slot table and its index; its DROP;
	// ALTER … OWNER TO.
	std::string create_table() const;
	std::string drop_table() const;
	std::string alter_owner(std::string_view role) const;
	// $1 int4 rate_limit: makes the table hold slots 1..rate_limit (new ones
	// never used)
	std::string resize() const;
	// $1 timestamptz free_before (now - rate_period), $2 int4 wanted -> slot
	// numbers of free slots, oldest use first, locked (SKIP LOCKED)
	std::string lock_free() const;
	// $1 int4[] slots, $2 timestamptz free_before -> those of them still free
	// on the latest snapshot
	std::string recheck() const;
	// $1 int4[] slots, $2 timestamptz claim time
	std::string use() const;
	// -> the time of the oldest use of a slot (the window opens rate_period
	// after it)
	std::string oldest_use() const;

  private:
	std::string queue_;
	std::string table_;
};

} // namespace concurrency::queue
