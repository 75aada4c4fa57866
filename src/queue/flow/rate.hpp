// Rate limits, the PostgreSQL side (the SQL and how the limit is kept:
// queue/rate_sql.hpp; for users: docs/queue.md, "Rate limits"). Internal to
// src/queue.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "queue/flow/rate_sql.hpp"
#include "queue/queue.hpp"

namespace concurrency::queue {

// The statements of key_rate_limit's slots of `q` (rate_sql.hpp), on the
// queue's table of them or, on a shard, on that table's shard beside it
// (42704 where that is not on this node).
KeyRateSql key_rate_sql(const Queue &q);

// `at` plus `period` (`forward`) or minus it.
TimestampTz shifted(TimestampTz at, const Interval &period, bool forward);

// The slots of a queue's rate_limit that a claim took: their numbers (int4
// Datums) and the time of each one's use before this claim's.
struct RateSlots {
	std::vector<Datum> slots;
	std::vector<Datum> before;
	std::size_t size() const { return slots.size(); }
};

// A queue with rate_limit: takes up to `wanted` slots free at `now` (never
// waiting), writes `now` into them and returns them; give_back_rate_slots
// gives those beyond the first `used` back (the claim found fewer tasks than
// it took slots) with the time of their use before.
// `directly`: without the executor where that applies (as dequeue's claim).
RateSlots take_rate_slots(Queue &q, int32 wanted, TimestampTz now, bool directly);
void give_back_rate_slots(Queue &q, const RateSlots &taken, std::size_t used);

// When a waiter held back by a queue's rate_limit looks again: when its next
// slot becomes free (rate_period after its oldest use), or in 10 ms where a
// slot is free by its time but was locked by a claim in flight; nothing for
// a queue without a limit.
std::optional<TimestampTz> rate_window_opens(Queue &q, TimestampTz now);

// After create_queue or alter_queue set the queue's rate_limit (0: none):
// the slot table holds that many slots, created for the table's owner
// `owner` where it is missing, dropped when the limit is removed (0: also
// drop_queue, and create_queue where a dropped queue's table left it).
void apply_rate_limit(std::string_view queue, int32 rate_limit, std::string_view owner);

// key_rate_limit (rate_sql.hpp, KeyRateSql): a slot of `key` free at `now`,
// taken (locked and used at `now`), or nothing where the key's window is full
// or its free slots are held by claims in flight.
struct KeyRateSlot {
	int32 slot;
	TimestampTz before; // its use before this claim's
};
std::optional<KeyRateSlot> take_key_rate_slot(Queue &q, const std::string &key, TimestampTz now);
// Gives back a slot taken for a claim that found no task of the key.
void give_back_key_rate_slot(Queue &q, const std::string &key, const KeyRateSlot &slot);
// When a claim passed `key` over for want of a slot, the time its window
// opens (rate_period after the oldest use of its slots), or 10 ms from now
// where a slot is free by its time but held by a claim in flight.
TimestampTz key_rate_window_opens(Queue &q, const std::string &key, TimestampTz now);
// Deletes up to `chunk` slot rows of keys whose use is older than the
// period (part of the queue calls' piggy-backed purge).
void forget_old_key_rate_slots(Queue &q, TimestampTz now, int32 chunk);
// After create_queue or alter_queue set the queue's key_rate_limit (0:
// none), as apply_rate_limit does for rate_limit: the table rk_<queue>,
// created for `owner`, slots beyond the limit dropped.
void apply_key_rate_limit(std::string_view queue, int32 key_rate_limit, std::string_view owner);

} // namespace concurrency::queue
