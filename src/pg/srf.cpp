#include "pg/srf.hpp"

namespace concurrency::pg {

ResultSet materialize(FunctionCallInfo fcinfo, Oid scalar_type) {
	auto *rsinfo = reinterpret_cast<ReturnSetInfo *>(fcinfo->resultinfo);
	if (!rsinfo || !IsA(rsinfo, ReturnSetInfo) || !(rsinfo->allowedModes & SFRM_Materialize))
		throw Error(sqlstate::feature_not_supported,
		            "set-valued function called in context that cannot accept a set");
	return guard([&] {
		MemoryContext old = MemoryContextSwitchTo(rsinfo->econtext->ecxt_per_query_memory);
		TupleDesc desc;
		if (OidIsValid(scalar_type)) {
			desc = CreateTemplateTupleDesc(1);
			TupleDescInitEntry(desc, 1, "value", scalar_type, -1, 0);
		} else if (rsinfo->expectedDesc) {
			// what the caller expects (a function scan passes it): saves
			// building the row type from pg_proc on every call
			desc = CreateTupleDescCopy(rsinfo->expectedDesc);
		} else {
			if (get_call_result_type(fcinfo, nullptr, &desc) != TYPEFUNC_COMPOSITE)
				elog(ERROR, "return type must be a row type");
			desc = CreateTupleDescCopy(desc);
		}
		Tuplestorestate *store =
		    tuplestore_begin_heap((rsinfo->allowedModes & SFRM_Materialize_Random) != 0, false, work_mem);
		rsinfo->returnMode = SFRM_Materialize;
		rsinfo->setResult = store;
		rsinfo->setDesc = desc;
		MemoryContextSwitchTo(old);
		return ResultSet{store, desc, nullptr};
	});
}

void add_row(ResultSet rows, const Datum *values, const bool *nulls) {
	guard([&] {
		tuplestore_putvalues(rows.store, rows.desc, const_cast<Datum *>(values), const_cast<bool *>(nulls));
	});
	if (rows.tap)
		(*rows.tap)(values, nulls);
}

} // namespace concurrency::pg
