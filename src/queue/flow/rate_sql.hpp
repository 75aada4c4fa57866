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
// locks end with the claiming transaction. (dequeue takes them without the
// executor where it can, the same way: rate.cpp, take_directly.)
#pragma once

#include <string>
#include <string_view>

#include "queue/queue_sql.hpp"

namespace concurrency::queue {

// The side table is r_<queue> (rate_table_name: relation_names.hpp).

// What the two slot tables' statements share: the table's name and the
// statements that are the same for both.
class SlotTableSql {
  public:
	std::string drop_table() const;
	std::string alter_owner(std::string_view role) const;

  protected:
	SlotTableSql(std::string_view queue, std::string_view table);
	std::string queue_;
	std::string table_; // quoted, with its schema
};

class RateSql : public SlotTableSql {
  public:
	explicit RateSql(std::string_view queue);

	// CREATE TABLE of the slot table and its index (drop_table, alter_owner:
	// SlotTableSql's)
	std::string create_table(Naming naming) const; // (of its primary key)
	// $1 int4 rate_limit: makes the table hold slots 1..rate_limit (new ones
	// never used)
	std::string resize() const;
	// ALTER TABLE … SET (fillfactor): 50 while resize() adds slots, so that
	// they fill half of each page, then 100, so that a page is pruned of the
	// versions that the slots' (heap-only) updates leave only when it is
	// nearly full, not at each claim's look at it (with any fillfactor under
	// 100, a page half full is due for pruning at every access)
	std::string layout(bool adding) const;
	// $1 timestamptz free_before (now - rate_period), $2 int4 wanted, $3
	// timestamptz the claim's time -> the slots taken (any free ones: the
	// window holds whichever slots serve it; locked with SKIP LOCKED, now
	// used at $3) and the time of each one's use before. used_at is in no
	// index, so that writing it is a HOT update and the small table stays
	// small.
	std::string take() const;
	// $1 int4[] slots, $2 timestamptz[] the time of each one's use before:
	// gives back slots taken and not used. A slot given back keeps that
	// time, never "free": a claim whose clock is behind this one's may see
	// it still in use, and must (the slot served a claim inside its window).
	std::string give_back() const;
	// -> the time of the oldest use of a slot (the window opens rate_period
	// after it)
	std::string oldest_use() const;
};

// The side table of key_rate_limit's slots is rk_<queue>
// (key_rate_table_name: relation_names.hpp).

// key_rate_limit: at most key_rate_limit claims of each concurrency key in
// any window of key_rate_period. The same slots as the queue's, kept per
// key in rk_<queue> (concurrency_key, slot, used_at): a key has up to
// key_rate_limit slot rows, made when its claims need them (slot n + 1 only
// where slots 1..n are all in use), so a key that is claimed rarely has one
// row; the purge deletes rows unused for an hour more than the period (a
// claim judges slots by the time its call began, which may lag another
// backend's clock). The claim of such a queue walks its keys one at a time
// (QueueSql::next_open_key) and takes a slot
// of a key before it claims the key's first ready task (claim_of_key); a key
// without a free slot is passed over.
class KeyRateSql : public SlotTableSql {
  public:
	explicit KeyRateSql(std::string_view queue);
	// The same statements on one shard of a distributed queue (Citus): the
	// slots of its keys in the slot table's shard beside it
	// (`shard.key_rate_relname`), whose rows carry the shard's shard_key.
	KeyRateSql(std::string_view queue, const ShardPlacement &shard);
	// The table (quoted, with its schema) and, on a shard, the condition on
	// its shard_key ("shard_key = <k> AND "; "" otherwise).
	const std::string &table() const { return table_; }
	const std::string &shard_filter() const { return filter_; }

	std::string create_table(Naming naming) const; // (of its primary key)
	// $1 int4 key_rate_limit: drops the slots beyond it
	std::string resize() const;
	// $1 text key, $2 timestamptz free_before (now - key_rate_period), $3
	// timestamptz the claim's time, $4 int4 key_rate_limit -> the slot taken
	// and the time of its use before (-infinity for a new one)
	// (locked, now used at $3): a slot of the key last used at or before $2
	// (SKIP LOCKED, checked again on its latest version), else a new slot
	// after the key's last one while it has fewer than $4; no row when
	// neither is there (or another claim makes the same new slot: each new
	// slot is made under a transaction advisory lock on the table's OID and
	// a hash of key and slot, tried, never waited for, so that no claim
	// waits for another's uncommitted slot)
	std::string take() const;
	// $1 text key, $2 int4 slot, $3 timestamptz: gives back a slot taken and
	// not used, with the time of its use before (never "free": a claim whose
	// clock ran behind this one's could then use it twice in one window)
	std::string give_back() const;
	// $1 text key -> the oldest use of its slots, and how many it has
	std::string oldest_use() const;
	// $1 timestamptz free_before, $2 int4 at most: deletes up to $2 slot
	// rows whose use is older than the period (none that a claim holds)
	std::string forget_old() const;

  private:
	std::string filter_, s_filter_; // "shard_key = <k> AND ", the same on alias s
	std::string column_, value_;    // ", shard_key" and ", <k>" of a new slot
};

} // namespace concurrency::queue
