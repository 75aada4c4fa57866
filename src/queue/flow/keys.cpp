// Keyed concurrency and queue-wide limits: admission under a key's lock,
// release of keys, and lease slots (see queue/keys_sql.hpp for the design).
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/sql_text.hpp"
#include "queue/flow/keys.hpp"
#include "queue/time/wait.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "utils/array.h"
#include "utils/builtins.h"
}

namespace concurrency::queue {

KeySql key_sql(const Queue &q) {
	if (!q.on_shard())
		return KeySql(q.name());
	return KeySql(q.name(), q.sql(), q.side_table_placement(q.info().key_relname, "the key table"));
}

namespace {

// Locks the row of `key` in the key table (adding it first if missing), as
// the queue's owner: the side tables need no GRANTs. `sql`: key_sql(q).
void lock_key(Queue &q, const KeySql &sql, const std::string &key) {
	static const Oid types[1] = {TEXTOID};
	Datum values[1] = {pg::text_datum(key)};
	for (int round = 0; round < 3; ++round) {
		if (q.run_internal("key_lock", sql.lock_key(), 1, types, values, nullptr, Access::owner) == 1)
			return;
		q.run_internal("key_add", sql.add_key(), 1, types, values, nullptr, Access::owner);
	}
	throw Error(sqlstate::internal_error, fmt::format("could not lock concurrency key \"{}\"", key));
}

} // namespace

uint64 enqueue_keyed(Queue &q, const Datum *values, const char *nulls) {
	Datum key = values[5];
	const KeySql sql = key_sql(q);
	lock_key(q, sql, std::string(pg::guard([&] { return TextDatumGetCString(key); })));
	static const Oid types[7] = {TIMESTAMPTZOID, JSONBOID, TIMESTAMPTZOID, INT4OID,
	                             TEXTOID,        TEXTOID,  TEXTOID};
	Datum all[7];
	char all_nulls[7];
	for (int i = 0; i < 6; ++i) {
		all[i] = values[i];
		all_nulls[i] = nulls[i];
	}
	all[6] = pg::text_datum(q.name());
	all_nulls[6] = ' ';
	return q.run_internal("enqueue_keyed", sql.enqueue(QueueSql::dedupe_holder()), 7, types, all, all_nulls,
	                      Access::latest);
}

void lock_keys(Queue &q, std::vector<std::string> keys) {
	std::sort(keys.begin(), keys.end());
	keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
	const KeySql sql = key_sql(q);
	for (const std::string &key : keys)
		lock_key(q, sql, key);
}

void release_keys(Queue &q, std::vector<std::string> keys, TimestampTz now) {
	if (keys.empty() || q.info().key_limit <= 0)
		return;
	std::sort(keys.begin(), keys.end());
	keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
	const KeySql sql = key_sql(q);
	static const Oid types[3] = {TEXTOID, TEXTOID, TIMESTAMPTZOID};
	for (const std::string &key : keys) {
		lock_key(q, sql, key);
		Datum values[3] = {pg::text_datum(key), pg::text_datum(q.name()), TimestampTzGetDatum(now)};
		// a key none of whose tasks is left to admit may have no task left
		// at all: its row goes, so that the key table holds the keys in use
		uint64 admitted = q.run_internal("key_admit", sql.admit(), 3, types, values, nullptr, Access::latest);
		if (admitted == 0)
			q.run_internal("key_forget", sql.forget_key(), 1, types, values, nullptr, Access::latest);
		note_claimable(q.name(), admitted); // the key's next tasks wake waiters at commit
	}
}

std::optional<std::string> key_column(int row, int col) {
	bool isnull = false;
	Datum d = column(row, col, &isnull);
	if (isnull)
		return std::nullopt;
	return std::string(pg::guard([&] { return TextDatumGetCString(d); }));
}

std::vector<std::string> keys_of_rows(Queue &q, uint64 n, int col) {
	std::vector<std::string> keys;
	if (q.info().key_limit > 0)
		for (uint64 i = 0; i < n; ++i)
			if (auto key = key_column(static_cast<int>(i), col))
				keys.push_back(*key);
	return keys;
}

std::vector<int32> take_slots(Queue &q, int32 wanted) {
	const KeySql sql = key_sql(q);
	std::vector<int32> slots;
	static const Oid lock_types[1] = {INT4OID};
	Datum lock_values[1] = {Int32GetDatum(wanted)};
	uint64 n = q.run_internal("slots_lock", sql.lock_free_slots(), 1, lock_types, lock_values, nullptr,
	                          Access::owner);
	if (n == 0)
		return slots;
	std::vector<Datum> locked;
	for (uint64 i = 0; i < n; ++i) {
		bool isnull = false;
		locked.push_back(column(static_cast<int>(i), 1, &isnull));
	}
	// Checked again on the latest state: the first statement's snapshot is
	// older than its locks, and may have seen a slot free that a claim
	// committed since has taken.
	Datum array = pg::guard([&] {
		return PointerGetDatum(
		    construct_array(locked.data(), static_cast<int>(locked.size()), INT4OID, 4, true, TYPALIGN_INT));
	});
	static const Oid check_types[1] = {INT4ARRAYOID};
	n = q.run_internal("slots_recheck", sql.recheck_slots(), 1, check_types, &array, nullptr,
	                   Access::owner_latest);
	for (uint64 i = 0; i < n; ++i) {
		bool isnull = false;
		slots.push_back(DatumGetInt32(column(static_cast<int>(i), 1, &isnull)));
	}
	return slots;
}

void fill_slots(Queue &q, const std::vector<int32> &slots, const std::vector<int64> &task_ids,
                const std::vector<int64> &lease_tokens) {
	if (task_ids.empty())
		return;
	int n = static_cast<int>(task_ids.size());
	std::vector<Datum> s(slots.begin(), slots.begin() + n), ids, tokens;
	for (int i = 0; i < n; ++i) {
		s[i] = Int32GetDatum(slots[i]);
		ids.push_back(Int64GetDatum(task_ids[i]));
		tokens.push_back(Int64GetDatum(lease_tokens[i]));
	}
	Datum values[3];
	pg::guard([&] {
		values[0] = PointerGetDatum(construct_array(s.data(), n, INT4OID, 4, true, TYPALIGN_INT));
		values[1] =
		    PointerGetDatum(construct_array(ids.data(), n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		values[2] =
		    PointerGetDatum(construct_array(tokens.data(), n, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	});
	static const Oid types[3] = {INT4ARRAYOID, INT8ARRAYOID, INT8ARRAYOID};
	q.run_internal("slots_fill", key_sql(q).fill_slots(), 3, types, values, nullptr, Access::owner);
}

void apply_limits(Queue &q, TimestampTz now, bool key_limit_changed, std::optional<int32> max_leased) {
	const KeySql sql = key_sql(q);
	if (key_limit_changed) {
		// every key at once: no enqueue or release of a key runs meanwhile
		// (they lock their key's row first)
		q.run_internal("keys_lock_all", sql.lock_keys(), 0, nullptr, nullptr, nullptr, Access::owner);
		static const Oid types[2] = {TEXTOID, TIMESTAMPTZOID};
		Datum values[2] = {pg::text_datum(q.name()), TimestampTzGetDatum(now)};
		q.run_internal("keys_rebalance", sql.rebalance(), 2, types, values, nullptr, Access::latest);
	}
	if (max_leased) {
		static const Oid types[1] = {INT4OID};
		Datum values[1] = {Int32GetDatum(*max_leased)};
		q.run_internal("slots_resize", sql.resize_slots(), 1, types, values, nullptr, Access::owner);
	}
}

} // namespace concurrency::queue
