// dequeue's claim without the executor (see claim_direct.hpp). Everything
// here is plain PostgreSQL C, called inside pg::guard: no C++ object with a
// destructor lives in these functions.
#include "queue/lifecycle/claim_direct.hpp"

#include <cstdio>
#include <cstring>
#include <string_view>

#include "pg/guard.hpp"
#include "pg/relation.hpp"
#include "queue/queue.hpp"
#include "pg/datum.hpp"
#include "queue/queue_sql.hpp"

extern "C" {
#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/nbtree.h"
#include "access/relscan.h"
#include "access/skey.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/pg_am.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/sequence.h"
#include "common/int.h"
#include "executor/executor.h"
#include "executor/instrument.h"
#include "executor/tuptable.h"
#include "nodes/execnodes.h"
#include "optimizer/optimizer.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
}

namespace concurrency::queue {

namespace {

constexpr int max_indexes = 32;

struct DirectIndex {
	Oid oid;
	IndexInfo *info; // with its predicate and expressions prepared (ii_PredicateState, ii_ExpressionsState)
	bool unchanged;  // no key column is one that a claim writes: the executor's indexUnchanged hint
};

// The columns a claim reads or writes.
struct Columns {
	AttrNumber id, lease_token, run_at, lease_expires_at, lease_extended_to, enqueued_at, priority, attempt,
	    state, worker, payload, concurrency_key;
};

} // namespace

// Per backend and queue, in a memory context of its own; rebuilt after every
// invalidation of the queue's cache entry (an index added or dropped sends
// one, so the list of indexes is never stale while the entry is valid).
struct DirectClaim {
	MemoryContext cxt;
	bool usable;
	Columns col;
	int ready; // position of the ready index in indexes
	// position of the fair index (alter_queue(…, fair => true))
	// in indexes, -1 without one; the collation of its key column
	int fair;
	Oid fair_collation;
	// its three columns' btree comparison functions (BTORDER_PROC), for the
	// row-comparison scan key: (-(priority::int8), run_at, id)
	RegProcedure order_procs[3];
	int nindexes;
	DirectIndex indexes[max_indexes];
	ExprContext *econtext;
	Datum leased; // the text 'leased'
};

namespace {

AttrNumber column_number(TupleDesc desc, const char *name, Oid type, bool nullable_written) {
	for (int i = 0; i < desc->natts; ++i) {
		Form_pg_attribute attr = TupleDescAttr(desc, i);
		if (attr->attisdropped || std::strcmp(NameStr(attr->attname), name) != 0)
			continue;
		// a column the claim may set to NULL must not have gained NOT NULL
		if (attr->atttypid != type || (nullable_written && attr->attnotnull))
			return InvalidAttrNumber;
		return attr->attnum;
	}
	return InvalidAttrNumber;
}

bool written_by_claim(const Columns &c, AttrNumber a) {
	return a == c.state || a == c.attempt || a == c.lease_token || a == c.lease_expires_at ||
	       a == c.lease_extended_to || a == c.worker;
}

// Whether the claim can be done here for this table, and what it needs.
bool describe(DirectClaim *d, Relation heap, Oid ready_index, Oid fair_index) {
	Form_pg_class rel = heap->rd_rel;
	if (rel->relkind != RELKIND_RELATION || rel->relam != HEAP_TABLE_AM_OID || rel->relhastriggers ||
	    rel->relhasrules || rel->relrowsecurity)
		return false;
	TupleDesc desc = RelationGetDescr(heap);
	if ((desc->constr && desc->constr->num_check > 0) || pg::has_generated_columns(desc))
		return false;
	Columns &c = d->col;
	c.id = column_number(desc, "id", INT8OID, false);
	c.lease_token = column_number(desc, "lease_token", INT8OID, false);
	c.run_at = column_number(desc, "run_at", TIMESTAMPTZOID, false);
	c.lease_expires_at = column_number(desc, "lease_expires_at", TIMESTAMPTZOID, false);
	c.lease_extended_to = column_number(desc, "lease_extended_to", TIMESTAMPTZOID, true);
	c.enqueued_at = column_number(desc, "enqueued_at", TIMESTAMPTZOID, false);
	c.priority = column_number(desc, "priority", INT4OID, false);
	c.attempt = column_number(desc, "attempt", INT4OID, false);
	c.state = column_number(desc, "state", TEXTOID, false);
	c.worker = column_number(desc, "worker", TEXTOID, true);
	c.payload = column_number(desc, "payload", JSONBOID, false);
	c.concurrency_key = column_number(desc, "concurrency_key", TEXTOID, false);
	for (AttrNumber a :
	     {c.id, c.lease_token, c.run_at, c.lease_expires_at, c.lease_extended_to, c.enqueued_at, c.priority,
	      c.attempt, c.state, c.worker, c.payload, c.concurrency_key})
		if (a == InvalidAttrNumber)
			return false;

	List *oids = RelationGetIndexList(heap);
	if (list_length(oids) > max_indexes)
		return false;
	d->ready = -1;
	d->fair = -1;
	ListCell *lc;
	foreach (lc, oids) {
		Oid oid = lfirst_oid(lc);
		Relation irel = index_open(oid, RowExclusiveLock);
		IndexInfo *ii = BuildIndexInfo(irel);
		bool plain_btree = irel->rd_rel->relam == BTREE_AM_OID && irel->rd_index->indimmediate &&
		                   ii->ii_ExclusionOps == nullptr;
		bool is_ready = oid == ready_index;
		// the ready index: (-(priority::int8), run_at, id), as create_queue makes it
		if (is_ready && (ii->ii_NumIndexKeyAttrs != 3 || ii->ii_IndexAttrNumbers[0] != 0 ||
		                 ii->ii_IndexAttrNumbers[1] != c.run_at || ii->ii_IndexAttrNumbers[2] != c.id ||
		                 TupleDescAttr(RelationGetDescr(irel), 0)->atttypid != INT8OID))
			plain_btree = false;
		// the fair index: (concurrency_key NULLS FIRST, …), as alter_queue makes it
		bool is_fair = OidIsValid(fair_index) && oid == fair_index;
		if (is_fair && (ii->ii_NumIndexKeyAttrs < 1 || ii->ii_IndexAttrNumbers[0] != c.concurrency_key ||
		                (irel->rd_indoption[0] & INDOPTION_NULLS_FIRST) == 0 ||
		                (irel->rd_indoption[0] & INDOPTION_DESC) != 0))
			is_fair = false;
		if (is_fair)
			d->fair_collation = irel->rd_indcollation[0];
		if (plain_btree && is_ready) {
			const Oid types[3] = {INT8OID, TIMESTAMPTZOID, INT8OID};
			for (int k = 0; k < 3; ++k) {
				d->order_procs[k] = get_opfamily_proc(irel->rd_opfamily[k], types[k], types[k], BTORDER_PROC);
				if (!RegProcedureIsValid(d->order_procs[k]))
					plain_btree = false;
			}
		}
		index_close(irel, NoLock);
		if (!plain_btree)
			return false;
		if (is_ready)
			d->ready = d->nindexes;
		if (is_fair && plain_btree)
			d->fair = d->nindexes;
		if (ii->ii_Predicate != NIL)
			ii->ii_PredicateState = ExecInitQual(
			    reinterpret_cast<List *>(expression_planner(reinterpret_cast<Expr *>(ii->ii_Predicate))),
			    nullptr);
		bool unchanged = ii->ii_Expressions == NIL;
		if (ii->ii_Expressions != NIL) {
			List *states = NIL;
			ListCell *e;
			foreach (e, ii->ii_Expressions)
				states = lappend(states,
				                 ExecInitExpr(expression_planner(static_cast<Expr *>(lfirst(e))), nullptr));
			ii->ii_ExpressionsState = states;
		}
		for (int k = 0; k < ii->ii_NumIndexKeyAttrs; ++k)
			if (written_by_claim(c, ii->ii_IndexAttrNumbers[k]))
				unchanged = false;
		d->indexes[d->nindexes++] = DirectIndex{oid, ii, unchanged};
	}
	if (d->ready < 0)
		return false;
	d->econtext = CreateStandaloneExprContext();
	d->leased = CStringGetTextDatum("leased");
	return true;
}

DirectClaim *direct_of(QueueInfo &info, Relation heap) {
	if (info.direct)
		return info.direct;
	MemoryContext cxt =
	    AllocSetContextCreate(TopMemoryContext, "concurrency_ext claim", ALLOCSET_SMALL_SIZES);
	auto *d = static_cast<DirectClaim *>(MemoryContextAllocZero(cxt, sizeof(DirectClaim)));
	d->cxt = cxt;
	info.direct = d; // freed by forget_direct, also if describe fails half-way
	MemoryContext caller = MemoryContextSwitchTo(cxt);
	d->usable = describe(d, heap, info.ready_index, info.fair_index);
	MemoryContextSwitchTo(caller);
	return d;
}

bool text_is(Datum value, const char *expected) {
	text *t = DatumGetTextPP(value);
	std::size_t n = std::strlen(expected);
	return VARSIZE_ANY_EXHDR(t) == n && std::memcmp(VARDATA_ANY(t), expected, n) == 0;
}

// The row's place in claim order: (-(priority::int8), run_at, id).
ClaimKey key_of(TupleTableSlot *slot, const Columns &c) {
	bool isnull;
	return ClaimKey{-static_cast<int64>(DatumGetInt32(slot_getattr(slot, c.priority, &isnull))),
	                DatumGetTimestampTz(slot_getattr(slot, c.run_at, &isnull)),
	                DatumGetInt64(slot_getattr(slot, c.id, &isnull))};
}

bool is_ready(TupleTableSlot *slot, const Columns &c) {
	bool isnull;
	Datum state = slot_getattr(slot, c.state, &isnull);
	return !isnull && text_is(state, "ready");
}

// FormIndexDatum, with the expressions prepared once (describe) and run in
// the claim's own expression context.
void index_datums(IndexInfo *ii, TupleTableSlot *slot, ExprContext *econtext, Datum *values, bool *isnull) {
	ListCell *expr = list_head(ii->ii_ExpressionsState);
	for (int i = 0; i < ii->ii_NumIndexAttrs; ++i) {
		AttrNumber keycol = ii->ii_IndexAttrNumbers[i];
		if (keycol < 0)
			values[i] = slot_getsysattr(slot, keycol, &isnull[i]);
		else if (keycol != 0)
			values[i] = slot_getattr(slot, keycol, &isnull[i]);
		else {
			values[i] =
			    ExecEvalExprSwitchContext(static_cast<ExprState *>(lfirst(expr)), econtext, &isnull[i]);
			expr = lnext(ii->ii_ExpressionsState, expr);
		}
	}
}

} // namespace

void forget_direct(QueueInfo &info) {
	if (!info.direct)
		return;
	MemoryContext cxt = info.direct->cxt;
	info.direct = nullptr;
	MemoryContextDelete(cxt);
}

namespace {

// One claim's relations, snapshot and output, between open_run and close_run.
struct Run {
	DirectClaim *d;
	Relation heap;
	Relation irels[max_indexes];
	Snapshot snapshot;
	CommandId cid;
	TupleDesc desc;
	TupleTableSlot *seen, *locked, *written;
	Datum *values;
	bool *nulls;
	ClaimedTask *out;
	int n, capacity, wanted;
	TimestampTz expires;
	Oid token_sequence;
	bool shard;
	int64 group;
	Datum worker;
	bool worker_null;
	// the concurrency_key of the task take() leased last (null: none)
	Datum last_key;
	bool last_key_null;
	// take() passed over a row changed since the snapshot
	bool changed;
};

// Opens the table and its indexes for a claim of up to `wanted` tasks; false,
// having done nothing, where the statement must run instead.
bool open_run(Run &r, QueueInfo &info, TimestampTz now, int32 wanted, const Interval &lease, Datum worker,
              bool worker_null) {
	// the statement raises what a read-only transaction or a standby says
	// to a write (25006), and handles the snapshot of REPEATABLE READ and
	// SERIALIZABLE (a serialization failure for a task changed since)
	if (XactReadOnly || IsolationUsesXactSnapshot())
		return false;
	r.token_sequence = info.token_sequence;
	r.shard = info.shard_id != 0;
	r.group = info.shard_group;
	// as a statement of the calling query would: see what this transaction
	// did so far (the complete before it, in a worker's loop)
	CommandCounterIncrement();
	r.heap = table_open(info.relid, RowExclusiveLock);
	// the lock let in the invalidations that came before it: an entry that is
	// no longer valid may describe indexes that changed
	if (!info.valid) {
		table_close(r.heap, NoLock);
		return false;
	}
	r.d = direct_of(info, r.heap);
	if (!r.d->usable) {
		table_close(r.heap, NoLock);
		return false;
	}
	for (int i = 0; i < r.d->nindexes; ++i)
		r.irels[i] = index_open(r.d->indexes[i].oid, RowExclusiveLock);

	PushActiveSnapshot(GetTransactionSnapshot());
	r.snapshot = GetActiveSnapshot();
	r.cid = GetCurrentCommandId(true);
	r.desc = RelationGetDescr(r.heap);
	r.seen = table_slot_create(r.heap, nullptr);
	r.locked = table_slot_create(r.heap, nullptr);
	r.written = MakeSingleTupleTableSlot(r.desc, &TTSOpsHeapTuple);
	r.values = static_cast<Datum *>(palloc(r.desc->natts * sizeof(Datum)));
	r.nulls = static_cast<bool *>(palloc(r.desc->natts * sizeof(bool)));
	r.wanted = wanted;
	r.capacity = wanted < 16 ? wanted : 16;
	r.out = static_cast<ClaimedTask *>(palloc(r.capacity * sizeof(ClaimedTask)));
	r.n = 0;
	r.expires = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval, TimestampTzGetDatum(now),
	                                                    IntervalPGetDatum(const_cast<Interval *>(&lease))));
	r.worker = worker;
	r.worker_null = worker_null;
	r.last_key = Datum(0);
	r.last_key_null = true;
	r.changed = false;
	return true;
}

void close_run(Run &r, ClaimedTask **tasks, int *count) {
	ExecDropSingleTupleTableSlot(r.written);
	ExecDropSingleTupleTableSlot(r.locked);
	ExecDropSingleTupleTableSlot(r.seen);
	PopActiveSnapshot();
	for (int i = 0; i < r.d->nindexes; ++i)
		index_close(r.irels[i], NoLock);
	table_close(r.heap, NoLock);
	*tasks = r.out;
	*count = r.n;
}

// Leases the task in r.seen (found by an index scan) if it is ready and no
// other transaction holds it, then writes it as the claim statement writes
// it, with its index entries. Whether it was leased. A row changed since the
// snapshot (another claim committed meanwhile, mostly) is passed over
// unlocked, and r.changed set: the caller scans again under a fresh
// snapshot, which sees its newest version. (The executor's FOR UPDATE locks
// such a row in its newest version and then rechecks it; a row that no
// longer qualifies stays locked to the end of the transaction. A waiting
// dequeue whose look claimed nothing else slept holding that lock, and the
// complete of the task by the worker that had claimed it waited out the
// whole wait.)
bool take(Run &r) {
	const Columns &c = r.d->col;
	if (!is_ready(r.seen, c))
		return false;
	TM_FailureData failure;
	ItemPointerData tid = r.seen->tts_tid;
	TM_Result result = table_tuple_lock(r.heap, &tid, r.snapshot, r.locked, r.cid, LockTupleExclusive,
	                                    LockWaitSkip, 0, &failure);
	if (result == TM_Updated)
		r.changed = true;
	// as the executor's SKIP LOCKED: a row another transaction holds, or
	// one deleted or changed by this command or later, is passed over
	if (result != TM_Ok)
		return false;

	bool should_free = false;
	HeapTuple old = ExecFetchSlotHeapTuple(r.locked, false, &should_free);
	Datum *values = r.values;
	bool *nulls = r.nulls;
	heap_deform_tuple(old, r.desc, values, nulls);
	int32 attempt;
	if (pg_add_s32_overflow(DatumGetInt32(values[c.attempt - 1]), 1, &attempt))
		ereport(ERROR, (errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE), errmsg("integer out of range")));
	// on a shard of a distributed queue, the node's group in the low
	// bits (QueueSql::new_token): no other node makes the same token
	int64 token = nextval_internal(r.token_sequence, true);
	if (r.shard)
		token = token * 1024 + r.group;
	values[c.state - 1] = r.d->leased;
	values[c.attempt - 1] = Int32GetDatum(attempt);
	values[c.lease_token - 1] = Int64GetDatum(token);
	nulls[c.lease_token - 1] = false;
	values[c.lease_expires_at - 1] = TimestampTzGetDatum(r.expires);
	nulls[c.lease_expires_at - 1] = false;
	values[c.lease_extended_to - 1] = Datum(0);
	nulls[c.lease_extended_to - 1] = true;
	values[c.worker - 1] = r.worker_null ? Datum(0) : r.worker;
	nulls[c.worker - 1] = r.worker_null;
	HeapTuple tuple = heap_form_tuple(r.desc, values, nulls);
	ItemPointerData target = r.locked->tts_tid;
	// (no summarizing index: describe refuses them)
	bool new_entries = pg::update_heap_tuple(r.heap, &target, tuple);
	if (should_free)
		heap_freetuple(old);
	ExecStoreHeapTuple(tuple, r.written, false);
	if (new_entries) {
		ExprContext *econtext = r.d->econtext;
		econtext->ecxt_scantuple = r.written;
		for (int i = 0; i < r.d->nindexes; ++i) {
			IndexInfo *ii = r.d->indexes[i].info;
			if (!ii->ii_ReadyForInserts)
				continue; // being built concurrently: not yet
			if (ii->ii_PredicateState && !ExecQual(ii->ii_PredicateState, econtext))
				continue;
			Datum key[INDEX_MAX_KEYS];
			bool key_null[INDEX_MAX_KEYS];
			index_datums(ii, r.written, econtext, key, key_null);
			index_insert(r.irels[i], key, key_null, &tuple->t_self, r.heap,
			             ii->ii_Unique ? UNIQUE_CHECK_YES : UNIQUE_CHECK_NO, r.d->indexes[i].unchanged, ii);
		}
		ResetExprContext(econtext);
	}

	if (r.n == r.capacity) {
		r.capacity = r.capacity * 2 < r.wanted ? r.capacity * 2 : r.wanted;
		r.out = static_cast<ClaimedTask *>(repalloc(r.out, r.capacity * sizeof(ClaimedTask)));
	}
	ClaimedTask &task = r.out[r.n++];
	const AttrNumber returned[6] = {c.id,      c.lease_token, c.attempt,
	                                c.payload, c.enqueued_at, c.lease_expires_at};
	for (int k = 0; k < 6; ++k)
		task.cols[k] = slot_getattr(r.written, returned[k], &task.isnull[k]);
	task.key = key_of(r.written, c);
	r.last_key = slot_getattr(r.written, c.concurrency_key, &r.last_key_null);
	ExecClearTuple(r.written); // the tuple itself stays: the returned values point into it
	return true;
}

// How many times a claim scans with a fresh snapshot while rows changed
// since the last one were passed over (see take) and its batch is not full;
// a row that keeps changing is left to the caller's next look.
constexpr int passes = 4;

// A fresh snapshot for the claim's next scan (the active one replaced).
void fresh_snapshot(Run &r) {
	PopActiveSnapshot();
	PushActiveSnapshot(GetTransactionSnapshot());
	r.snapshot = GetActiveSnapshot();
}

// Shared buffers this backend has read so far, found in the buffer cache or
// not.
uint64 buffers_read() {
	return static_cast<uint64>(pgBufferUsage.shared_blks_hit + pgBufferUsage.shared_blks_read);
}

bool claim(QueueInfo &info, TimestampTz now, int32 wanted, const Interval &lease, Datum worker,
           bool worker_null, const ClaimKey &start, ClaimedTask **tasks, int *count, uint64 *scanned) {
	*tasks = nullptr;
	*count = 0;
	Run r;
	if (!open_run(r, info, now, wanted, lease, worker, worker_null))
		return false;
	const DirectClaim *d = r.d;
	// (-(priority::int8), run_at, id) >= start, the claim statement's row
	// comparison, as one btree row-comparison key: its members carry the
	// columns' 3-way comparison functions, as the executor builds it
	// (ExecIndexBuildScanKeys), so that the scan starts at `start`
	ScanKeyData members[3];
	ScanKeyEntryInitialize(&members[0], SK_ROW_MEMBER, 1, BTGreaterEqualStrategyNumber, INT8OID, InvalidOid,
	                       d->order_procs[0], Int64GetDatum(start.neg_priority));
	ScanKeyEntryInitialize(&members[1], SK_ROW_MEMBER, 2, BTGreaterEqualStrategyNumber, TIMESTAMPTZOID,
	                       InvalidOid, d->order_procs[1], TimestampTzGetDatum(start.run_at));
	ScanKeyEntryInitialize(&members[2], SK_ROW_MEMBER | SK_ROW_END, 3, BTGreaterEqualStrategyNumber, INT8OID,
	                       InvalidOid, d->order_procs[2], Int64GetDatum(start.id));
	ScanKeyData row;
	ScanKeyEntryInitialize(&row, SK_ROW_HEADER, 1, BTGreaterEqualStrategyNumber, InvalidOid, InvalidOid,
	                       InvalidOid, PointerGetDatum(members));
	// Rows changed since the snapshot are passed over unlocked (see take);
	// where the batch is not full then, the scan runs again under a fresh
	// snapshot, which sees their newest versions (the rows an earlier pass
	// leased it passes over: this command changed them).
	for (int pass = 1;; ++pass) {
		r.changed = false;
		IndexScanDesc scan = pg::begin_index_scan(r.heap, r.irels[d->ready], r.snapshot, 1);
		index_rescan(scan, &row, 1, nullptr, 0);
		// (the scan's reads alone: take's writes read buffers too)
		for (;;) {
			uint64 before = buffers_read();
			bool found = r.n < wanted && index_getnext_slot(scan, ForwardScanDirection, r.seen);
			*scanned += buffers_read() - before;
			if (!found)
				break;
			take(r);
		}
		index_endscan(scan);
		if (!r.changed || r.n >= wanted || pass == passes)
			break;
		fresh_snapshot(r);
	}
	close_run(r, tasks, count);
	return true;
}

// The fair claim (fair.hpp): each task is the first one, in the fair index's
// order, after the rotation's position that take() leases — the first ready
// task of the next key with one that no other claim holds — and the position
// moves to its key; at the index's end the rotation starts again from its
// beginning, and a look from there that leases nothing ends the claim.
// `*from`, `*key` (a text datum, after_key): the position, moved.
bool claim_fair(QueueInfo &info, TimestampTz now, int32 wanted, const Interval &lease, Datum worker,
                bool worker_null, FairFrom *from, Datum *key, ClaimedTask **tasks, int *count) {
	*tasks = nullptr;
	*count = 0;
	Run r;
	if (!open_run(r, info, now, wanted, lease, worker, worker_null))
		return false;
	if (r.d->fair < 0) { // the index is gone (fair turned off meanwhile)
		close_run(r, tasks, count);
		return false;
	}
	Relation index = r.irels[r.d->fair];
	// rows changed since the snapshot: as in claim
	for (int pass = 1;; ++pass) {
		r.changed = false;
		// from the beginning: no key; after the tasks without a key: IS NOT NULL;
		// after a key: concurrency_key > key, in the index's collation
		IndexScanDesc all = pg::begin_index_scan(r.heap, index, r.snapshot, 0);
		IndexScanDesc after = pg::begin_index_scan(r.heap, index, r.snapshot, 1);
		bool from_start = *from == FairFrom::start;
		while (r.n < wanted) {
			IndexScanDesc scan = all;
			if (*from == FairFrom::start) {
				index_rescan(all, nullptr, 0, nullptr, 0);
			} else {
				ScanKeyData bound;
				if (*from == FairFrom::after_null)
					ScanKeyEntryInitialize(&bound, SK_ISNULL | SK_SEARCHNOTNULL, 1, InvalidStrategy,
					                       InvalidOid, InvalidOid, InvalidOid, Datum(0));
				else
					ScanKeyEntryInitialize(&bound, 0, 1, BTGreaterStrategyNumber, InvalidOid,
					                       r.d->fair_collation, F_TEXT_GT, *key);
				index_rescan(after, &bound, 1, nullptr, 0);
				scan = after;
			}
			bool leased = false;
			while (!leased && index_getnext_slot(scan, ForwardScanDirection, r.seen))
				leased = take(r);
			if (!leased) {
				if (from_start)
					break;
				*from = FairFrom::start;
				from_start = true;
				continue;
			}
			*from = r.last_key_null ? FairFrom::after_null : FairFrom::after_key;
			*key = r.last_key; // the leased row stays in memory (take)
		}
		index_endscan(after);
		index_endscan(all);
		if (!r.changed || r.n >= wanted || pass == passes)
			break;
		fresh_snapshot(r);
	}
	close_run(r, tasks, count);
	return true;
}

} // namespace

bool claim_direct(QueueInfo &info, TimestampTz now, int32 wanted, const Interval &lease, Datum worker,
                  bool worker_null, const ClaimKey &start, ClaimedTask **tasks, int *count, uint64 *scanned) {
	// With Citus, a table may have its rows in shards elsewhere (a
	// reference or distributed table made by hand): only the statement,
	// which Citus plans, would find them. (Citus is loaded at server start.)
	// A shard of a distributed queue on this node (info.shard_id) is a plain
	// table whose rows are all here: claimed directly as a local queue is.
	static const bool citus =
	    pg::guard([] { return GetConfigOption("citus.version", true, false) != nullptr; });
	if (citus && info.shard_id == 0)
		return false;
	if (!claim_relations(info))
		return false; // the statement says what is missing
	return pg::guard(
	    [&] { return claim(info, now, wanted, lease, worker, worker_null, start, tasks, count, scanned); });
}

bool claim_direct_fair(QueueInfo &info, TimestampTz now, int32 wanted, const Interval &lease, Datum worker,
                       bool worker_null, FairPosition &at, ClaimedTask **tasks, int *count) {
	static const bool citus =
	    pg::guard([] { return GetConfigOption("citus.version", true, false) != nullptr; });
	if (citus || !claim_relations(info))
		return false;
	FairFrom from = at.from;
	Datum key = from == FairFrom::after_key ? pg::text_datum(at.key) : Datum(0);
	bool claimed = pg::guard(
	    [&] { return claim_fair(info, now, wanted, lease, worker, worker_null, &from, &key, tasks, count); });
	if (!claimed)
		return false;
	at.from = from;
	if (from == FairFrom::after_key)
		at.key = pg::guard([&] { return TextDatumGetCString(key); });
	return true;
}

} // namespace concurrency::queue
