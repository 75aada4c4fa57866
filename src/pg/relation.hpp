// PostgreSQL's table, index and catalog calls that the capabilities make
// without the executor (the queue's direct claim and its due-task probes),
// with the differences between server versions (15 and 18 are tested) kept
// here, as pg_duckdb keeps its pg/ wrappers. Plain PostgreSQL C: call them
// inside pg::guard, like the calls they wrap; they may raise.
#pragma once

#include "pg/postgres.hpp"

extern "C" {
#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relscan.h"
#include "access/transam.h"
#include "catalog/pg_class.h"
#include "storage/procarray.h"
#include "utils/acl.h"
#include "utils/rel.h"
}

namespace concurrency::pg {

// index_beginscan of `index` on `heap` with `nkeys` scan keys and no order-by
// keys (PostgreSQL 18 added the instrumentation argument).
inline IndexScanDesc begin_index_scan(Relation heap, Relation index, Snapshot snapshot, int nkeys) {
#if PG_VERSION_NUM >= 180000
	return index_beginscan(heap, index, snapshot, nullptr, nkeys, 0);
#else
	return index_beginscan(heap, index, snapshot, nkeys, 0);
#endif
}

// simple_heap_update of the tuple at `otid` with `tuple`; whether the new
// version needs index entries (false for a heap-only tuple). Where a table
// has summarizing indexes (BRIN), PostgreSQL 16 and later say so apart: the
// callers refuse such tables.
inline bool update_heap_tuple(Relation heap, ItemPointer otid, HeapTuple tuple) {
#if PG_VERSION_NUM >= 160000
	TU_UpdateIndexes update_indexes = TU_All;
	simple_heap_update(heap, otid, tuple, &update_indexes);
	return update_indexes != TU_None;
#else
	simple_heap_update(heap, otid, tuple);
	return !HeapTupleIsHeapOnly(tuple);
#endif
}

// Whether the table has generated columns (stored; and virtual, since 18).
inline bool has_generated_columns(TupleDesc desc) {
	if (!desc->constr)
		return false;
#if PG_VERSION_NUM >= 180000
	if (desc->constr->has_generated_virtual)
		return true;
#endif
	return desc->constr->has_generated_stored;
}

// Whether `role` owns relation `relid` (or is a superuser).
inline bool owns_relation(Oid relid, Oid role) {
#if PG_VERSION_NUM >= 160000
	return object_ownercheck(RelationRelationId, relid, role);
#else
	return pg_class_ownercheck(relid, role);
#endif
}

// The oldest transaction id that some snapshot may still need, server-wide.
inline TransactionId oldest_nonremovable_xid() {
#if PG_VERSION_NUM >= 140000
	return GetOldestNonRemovableTransactionId(nullptr);
#else
	return GetOldestXmin(nullptr, PROCARRAY_FLAGS_DEFAULT);
#endif
}

} // namespace concurrency::pg
