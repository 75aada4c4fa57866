// Rate limits: the slots a claim takes and uses, and the slot table that
// create_queue and alter_queue keep (see queue/rate_sql.hpp).
#include "queue/flow/rate.hpp"

#include <algorithm>
#include <type_traits>

#include "pg/datum.hpp"
#include "pg/guard.hpp"
#include "pg/relation.hpp"
#include "pg/spi.hpp"

extern "C" {
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_index.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "nodes/execnodes.h"
#include "miscadmin.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/lsyscache.h"
#include "utils/array.h"
#include "utils/timestamp.h"
}

namespace concurrency::queue {

KeyRateSql key_rate_sql(const Queue &q) {
	if (!q.on_shard())
		return KeyRateSql(q.name());
	return KeyRateSql(q.name(), q.side_table_placement(q.info().key_rate_relname, "the key rate table"));
}

namespace {

// How soon a waiter held back by slots that claims in flight have locked
// looks again (rate_window_opens).
constexpr int64 rate_relook_us = 10'000;
// How much older than the period the slots that the purge forgets are.
constexpr int64 forget_margin_us = 3'600'000'000;

// The rate table's slots taken without the executor, as the statement
// (RateSql::take) takes them: the slots after the one this backend took last
// looked up by their key while they are free, then the table read in its
// physical order; each slot last used at or before `free_before` (of the
// `limit` slots) locked FOR UPDATE SKIP LOCKED and
// checked again in its newest version, its used_at set to `now` (a heap-only
// update where the page has room: no index covers used_at). Up to `wanted`
// slot numbers into `out` and their used_at before into `before`; -1,
// having done nothing, where the statement must
// run (a transaction that keeps one snapshot or writes nothing, or a table
// that is not as create_queue made it). Plain PostgreSQL C: inside pg::guard.
int take_directly(Oid relid, TimestampTz free_before, int32 wanted, int32 limit, TimestampTz now, Datum *out,
                  Datum *before) {
	if (XactReadOnly || IsolationUsesXactSnapshot())
		return -1;
	CommandCounterIncrement();
	Relation heap = table_open(relid, RowExclusiveLock);
	Form_pg_class rel = heap->rd_rel;
	TupleDesc desc = RelationGetDescr(heap);
	List *indexes = RelationGetIndexList(heap);
	if (rel->relkind != RELKIND_RELATION || rel->relam != HEAP_TABLE_AM_OID || rel->relhastriggers ||
	    rel->relhasrules || rel->relrowsecurity || desc->natts != 2 ||
	    (desc->constr && desc->constr->num_check > 0) || pg::has_generated_columns(desc) ||
	    TupleDescAttr(desc, 0)->atttypid != INT4OID || TupleDescAttr(desc, 1)->atttypid != TIMESTAMPTZOID ||
	    TupleDescAttr(desc, 0)->attisdropped || TupleDescAttr(desc, 1)->attisdropped ||
	    list_length(indexes) != 1) {
		table_close(heap, NoLock);
		return -1;
	}
	Relation index = index_open(linitial_oid(indexes), RowExclusiveLock);
	// the primary key on slot, as create_queue makes it (its IndexInfo is
	// built only for an update that is not heap-only)
	Form_pg_index key = index->rd_index;
	if (index->rd_rel->relam != BTREE_AM_OID || key->indnatts != 1 || key->indkey.values[0] != 1 ||
	    !key->indimmediate || !heap_attisnull(index->rd_indextuple, Anum_pg_index_indpred, nullptr) ||
	    !heap_attisnull(index->rd_indextuple, Anum_pg_index_indexprs, nullptr)) {
		index_close(index, NoLock);
		table_close(heap, NoLock);
		return -1;
	}
	PushActiveSnapshot(GetTransactionSnapshot());
	Snapshot snapshot = GetActiveSnapshot();
	CommandId cid = GetCurrentCommandId(true);
	TupleTableSlot *seen = table_slot_create(heap, nullptr);
	TupleTableSlot *locked = table_slot_create(heap, nullptr);
	IndexInfo *ii = nullptr;
	int n = 0;
	// Takes the slot whose version `seen` holds if it is free: false where
	// it is in use, held by another claim, or changed by this command.
	auto take = [&]() {
		bool isnull = false;
		if (DatumGetTimestampTz(slot_getattr(seen, 2, &isnull)) > free_before || isnull)
			return false;
		TM_FailureData failure;
		ItemPointerData tid = seen->tts_tid;
		TM_Result result = table_tuple_lock(heap, &tid, snapshot, locked, cid, LockTupleExclusive,
		                                    LockWaitSkip, TUPLE_LOCK_FLAG_FIND_LAST_VERSION, &failure);
		if (result != TM_Ok)
			return false;
		// used meanwhile by a claim that committed: skipped (it stays
		// locked, as the statement leaves it)
		Datum used_at = slot_getattr(locked, 2, &isnull);
		if (failure.traversed && (DatumGetTimestampTz(used_at) > free_before || isnull))
			return false;
		Datum values[2] = {slot_getattr(locked, 1, &isnull), TimestampTzGetDatum(now)};
		bool nulls[2] = {false, false};
		HeapTuple tuple = heap_form_tuple(desc, values, nulls);
		ItemPointerData target = locked->tts_tid;
		if (pg::update_heap_tuple(heap, &target, tuple)) {
			if (!ii)
				ii = BuildIndexInfo(index);
			Datum entry[1] = {values[0]};
			bool entry_null[1] = {false};
			index_insert(index, entry, entry_null, &tuple->t_self, heap, UNIQUE_CHECK_YES, true, ii);
		}
		out[n] = values[0];
		before[n++] = used_at;
		heap_freetuple(tuple);
		return true;
	};
	// First the slots after the one this backend took last, one probe of
	// the key each, while they are free: the slots are used in turn, so the
	// next one is the likeliest to be free, and a probe costs a fraction of
	// a scan of the table, whose page holds the versions that the slots'
	// updates leave until they are pruned.
	static uint32 turn = static_cast<uint32>(MyProcPid);
	IndexScanDesc probe = pg::begin_index_scan(heap, index, snapshot, 1);
	for (bool free = true; free && n < wanted;) {
		int32 slot = static_cast<int32>(turn++ % static_cast<uint32>(limit)) + 1;
		ScanKeyData entry;
		ScanKeyInit(&entry, 1, BTEqualStrategyNumber, F_INT4EQ, Int32GetDatum(slot));
		index_rescan(probe, &entry, 1, nullptr, 0);
		free = index_getnext_slot(probe, ForwardScanDirection, seen) && take();
	}
	index_endscan(probe);
	// Then the table in its order (not page at a time: a page-mode scan
	// checks the visibility of every version on the page when it reads it).
	if (n < wanted) {
		TableScanDesc scan = heap->rd_tableam->scan_begin(heap, snapshot, 0, nullptr, nullptr,
		                                                  static_cast<uint32>(SO_TYPE_SEQSCAN));
		while (n < wanted && table_scan_getnextslot(scan, ForwardScanDirection, seen))
			take();
		table_endscan(scan);
	}
	ExecDropSingleTupleTableSlot(locked);
	ExecDropSingleTupleTableSlot(seen);
	PopActiveSnapshot();
	index_close(index, NoLock);
	table_close(heap, NoLock);
	return n;
}

} // namespace

TimestampTz shifted(TimestampTz at, const Interval &period, bool forward) {
	Interval p = period;
	return pg::guard([&] {
		return DatumGetTimestampTz(
		    DirectFunctionCall2(forward ? timestamptz_pl_interval : timestamptz_mi_interval,
		                        TimestampTzGetDatum(at), IntervalPGetDatum(&p)));
	});
}

RateSlots take_rate_slots(Queue &q, int32 wanted, TimestampTz now, bool directly) {
	// never more than the queue has slots (a batch may ask for 2^31 - 1)
	wanted = std::min(wanted, q.info().rate_limit);
	// cannot overflow: create_queue and alter_queue bound rate_period
	TimestampTz free_before = shifted(now, q.info().rate_period, false);
	// With Citus loaded a table may keep its rows in shards: the statement.
	static const bool citus =
	    pg::guard([] { return GetConfigOption("citus.version", true, false) != nullptr; });
	if (directly && !citus) {
		std::string table = rate_table_name(q.name());
		RateSlots taken{std::vector<Datum>(static_cast<std::size_t>(wanted)),
		                std::vector<Datum>(static_cast<std::size_t>(wanted))};
		int n = pg::guard([&] {
			Oid relid = get_relname_relid(table.c_str(), get_namespace_oid("concurrency", false));
			return OidIsValid(relid) ? take_directly(relid, free_before, wanted, q.info().rate_limit, now,
			                                         taken.slots.data(), taken.before.data())
			                         : -1;
		});
		if (n >= 0) {
			taken.slots.resize(static_cast<std::size_t>(n));
			taken.before.resize(static_cast<std::size_t>(n));
			return taken;
		}
	}
	static const Oid types[3] = {TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID};
	Datum values[3] = {TimestampTzGetDatum(free_before), Int32GetDatum(wanted), TimestampTzGetDatum(now)};
	uint64 n =
	    q.run_internal("rate_take", RateSql(q.name()).take(), 3, types, values, nullptr, Access::owner);
	RateSlots taken;
	for (uint64 i = 0; i < n; ++i) {
		bool isnull = false;
		taken.slots.push_back(pg::column(static_cast<int>(i), 1, &isnull));
		taken.before.push_back(pg::column(static_cast<int>(i), 2, &isnull));
	}
	return taken;
}

void give_back_rate_slots(Queue &q, const RateSlots &taken, std::size_t used) {
	if (used >= taken.size())
		return;
	int n = static_cast<int>(taken.size() - used);
	Datum values[2];
	pg::guard([&] {
		values[0] = PointerGetDatum(construct_array(const_cast<Datum *>(taken.slots.data()) + used, n,
		                                            INT4OID, 4, true, TYPALIGN_INT));
		values[1] = PointerGetDatum(construct_array(const_cast<Datum *>(taken.before.data()) + used, n,
		                                            TIMESTAMPTZOID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	});
	static const Oid types[2] = {INT4ARRAYOID, TIMESTAMPTZARRAYOID};
	q.run_internal("rate_give_back", RateSql(q.name()).give_back(), 2, types, values, nullptr, Access::owner);
}

std::optional<TimestampTz> rate_window_opens(Queue &q, TimestampTz now) {
	if (q.info().rate_limit <= 0)
		return std::nullopt;
	uint64 n = q.run_internal("rate_oldest", RateSql(q.name()).oldest_use(), 0, nullptr, nullptr, nullptr,
	                          Access::owner_latest);
	bool isnull = true;
	Datum oldest = n == 1 ? pg::column(0, 1, &isnull) : Datum(0);
	if (isnull)
		return std::nullopt;
	TimestampTz opens = shifted(DatumGetTimestampTz(oldest), q.info().rate_period, true);
	// a slot free by its time but locked by a claim in flight (which may
	// give it back at its commit, waking nobody): look again soon
	if (opens <= now)
		return now + rate_relook_us;
	return opens;
}

std::optional<KeyRateSlot> take_key_rate_slot(Queue &q, const std::string &key, TimestampTz now) {
	TimestampTz free_before = shifted(now, q.info().key_rate_period, false);
	static const Oid types[4] = {TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT4OID};
	Datum values[4] = {pg::text_datum(key), TimestampTzGetDatum(free_before), TimestampTzGetDatum(now),
	                   Int32GetDatum(q.info().key_rate_limit)};
	uint64 n =
	    q.run_internal("key_rate_take", key_rate_sql(q).take(), 4, types, values, nullptr, Access::owner);
	if (n == 0)
		return std::nullopt;
	bool isnull = false;
	int32 slot = DatumGetInt32(pg::column(0, 1, &isnull));
	return KeyRateSlot{slot, DatumGetTimestampTz(pg::column(0, 2, &isnull))};
}

void give_back_key_rate_slot(Queue &q, const std::string &key, const KeyRateSlot &slot) {
	static const Oid types[3] = {TEXTOID, INT4OID, TIMESTAMPTZOID};
	Datum values[3] = {pg::text_datum(key), Int32GetDatum(slot.slot), TimestampTzGetDatum(slot.before)};
	q.run_internal("key_rate_give_back", key_rate_sql(q).give_back(), 3, types, values, nullptr,
	               Access::owner);
}

TimestampTz key_rate_window_opens(Queue &q, const std::string &key, TimestampTz now) {
	static const Oid types[1] = {TEXTOID};
	Datum values[1] = {pg::text_datum(key)};
	q.run_internal("key_rate_oldest", key_rate_sql(q).oldest_use(), 1, types, values, nullptr,
	               Access::owner_latest);
	bool isnull = true;
	Datum oldest = pg::column(0, 1, &isnull);
	bool count_null = true;
	int64 slots = DatumGetInt64(pg::column(0, 2, &count_null));
	// fewer slots than the limit, or the oldest free by its time: held by
	// claims in flight (which may give it back at their commit)
	if (isnull || slots < q.info().key_rate_limit)
		return now + rate_relook_us;
	TimestampTz opens = shifted(DatumGetTimestampTz(oldest), q.info().key_rate_period, true);
	return opens <= now ? now + rate_relook_us : opens;
}

void forget_old_key_rate_slots(Queue &q, TimestampTz now, int32 chunk) {
	// an hour more than the period: a claim judges a slot by the time its
	// call began, which may be behind this one's clock; a slot forgotten
	// within its window would let such a claim make it again and use it
	// twice in one window
	TimestampTz free_before = shifted(now, q.info().key_rate_period, false) - forget_margin_us;
	static const Oid types[2] = {TIMESTAMPTZOID, INT4OID};
	Datum values[2] = {TimestampTzGetDatum(free_before), Int32GetDatum(chunk)};
	q.run_internal("key_rate_forget", key_rate_sql(q).forget_old(), 2, types, values, nullptr, Access::owner);
}

namespace {

// A slot table after its limit was set (0: none): dropped, or created for
// `owner` where missing, then resized to `limit` slots.
template <class Sql>
void apply_slot_limit(const Sql &sql, const std::string &table, int32 limit, std::string_view owner) {
	bool exists = pg::guard([&] {
		return OidIsValid(get_relname_relid(table.c_str(), get_namespace_oid("concurrency", false)));
	});
	if (limit <= 0) {
		if (exists)
			pg::execute(sql.drop_table());
		return;
	}
	if (!exists) {
		pg::execute(sql.create_table(naming_of_new_relations()));
		pg::execute(sql.alter_owner(owner));
	}
	static const Oid types[1] = {INT4OID};
	Datum values[1] = {Int32GetDatum(limit)};
	if constexpr (std::is_same_v<Sql, RateSql>)
		pg::execute(sql.layout(true));
	pg::execute(sql.resize(), 1, types, values);
	if constexpr (std::is_same_v<Sql, RateSql>)
		pg::execute(sql.layout(false));
}

} // namespace

void apply_rate_limit(std::string_view queue, int32 rate_limit, std::string_view owner) {
	apply_slot_limit(RateSql(queue), rate_table_name(queue), rate_limit, owner);
}

void apply_key_rate_limit(std::string_view queue, int32 key_rate_limit, std::string_view owner) {
	apply_slot_limit(KeyRateSql(queue), key_rate_table_name(queue), key_rate_limit, owner);
}

} // namespace concurrency::queue
