// Durable sleep (docs/workflows.md, src/sql/80_queue_workflows.sql): sleep_task and
// sleep_task_for hand the task held with a lease back until a time, as
// release(queue, task_id, lease_token, run_at) does: no attempt spent, the
// token fenced off, its steps kept, claimable again at that time. The task
// is handed back by concurrency.release itself, called through the function
// manager, so that its permission check, its lease slots and its routing to
// another node's shard of a distributed queue are release's, and its errors
// (CE001 for a lost lease, 42501, 42704, …) are raised as release raises
// them.
#include <algorithm>

#include "pg/datum.hpp"
#include "pg/guard.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "nodes/makefuncs.h"
#include "nodes/pg_list.h"
#include "nodes/value.h"
#include "parser/parse_func.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
}

using namespace concurrency;

namespace {

// concurrency.release(text, bigint, bigint, timestamptz), looked up at each
// call (a syscache probe), so that an update of the extension is seen at once.
Oid release_function() {
	return pg::guard([] {
		static const Oid types[4] = {TEXTOID, INT8OID, INT8OID, TIMESTAMPTZOID};
		List *name = list_make2(makeString(pstrdup("concurrency")), makeString(pstrdup("release")));
		return LookupFuncName(name, 4, types, false);
	});
}

// The task of the caller's first three arguments (queue, task_id,
// lease_token: NULL ones are release's to refuse) handed back until `until`,
// a finite time; returns when it is claimable again: `until`, or now where
// `until` has passed.
Datum sleep_until(FunctionCallInfo fcinfo, TimestampTz until) {
	Oid release = release_function();
	pg::guard([&] {
		auto *flinfo = static_cast<FmgrInfo *>(palloc0(sizeof(FmgrInfo)));
		fmgr_info(release, flinfo);
		auto *call = static_cast<FunctionCallInfo>(palloc0(SizeForFunctionCallInfo(4)));
		InitFunctionCallInfoData(*call, flinfo, 4, PG_GET_COLLATION(), nullptr, nullptr);
		for (int i = 0; i < 3; ++i)
			call->args[i] = fcinfo->args[i];
		call->args[3].value = TimestampTzGetDatum(until);
		call->args[3].isnull = false;
		(void)FunctionCallInvoke(call);
	});
	PG_RETURN_TIMESTAMPTZ(std::max(until, GetCurrentTimestamp()));
}

void require_finite(TimestampTz until) {
	if (TIMESTAMP_NOT_FINITE(until))
		throw Error(sqlstate::invalid_parameter_value, "until must be a finite time", {},
		            "To wait for something else than time, use await_event.");
}

} // namespace

// concurrency.sleep_task(queue, task_id, lease_token, until) -> when the task
// is claimable again (until, or now for a time that has passed)
CONCURRENCY_FUNCTION(concurrency_sleep_task) {
	if (PG_ARGISNULL(3))
		throw Error(sqlstate::null_value_not_allowed, "until must not be NULL", {},
		            "Pass the time the task is to run again (a time in the past: now).");
	TimestampTz until = PG_GETARG_TIMESTAMPTZ(3);
	require_finite(until);
	return sleep_until(fcinfo, until);
}

// concurrency.sleep_task_for(queue, task_id, lease_token, duration) ->
// sleep_task until now (clock_timestamp()) + duration; a negative duration
// makes the task claimable now
CONCURRENCY_FUNCTION(concurrency_sleep_task_for) {
	if (PG_ARGISNULL(3))
		throw Error(sqlstate::null_value_not_allowed, "duration must not be NULL");
	Datum duration = PG_GETARG_DATUM(3);
	TimestampTz until = pg::guard([&] {
		return DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
		                                               TimestampTzGetDatum(GetCurrentTimestamp()), duration));
	});
	require_finite(until);
	return sleep_until(fcinfo, until);
}
