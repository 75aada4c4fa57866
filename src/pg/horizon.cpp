#include "pg/horizon.hpp"

#include "pg/guard.hpp"
#include "pg/spi.hpp"

extern "C" {
#include "access/transam.h"
#include "access/xact.h"
#include "catalog/pg_proc.h"
#include "nodes/nodeFuncs.h"
#include "nodes/plannodes.h"
#include "optimizer/optimizer.h"
#include "storage/proc.h"
#include "tcop/pquery.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/portal.h"
#include "utils/snapmgr.h"
}

namespace concurrency::pg {

namespace {

// A function that may read with the statement's snapshot if evaluated after
// the call: all but the built-in immutable ones (they read no table) and
// the clocks (check_functions_in_node's checker).
bool may_read_function(Oid fn, void *) {
	if (fn >= FirstNormalObjectId)
		return true;
	switch (fn) {
	case F_CLOCK_TIMESTAMP:
	case F_NOW:
	case F_STATEMENT_TIMESTAMP:
	case F_TRANSACTION_TIMESTAMP:
		return false;
	default:
		return func_volatile(fn) != PROVOLATILE_IMMUTABLE;
	}
}

// true where `node` may read with the statement's snapshot: a subquery, an
// aggregate or window function, a function may_read_function names.
bool may_read(Node *node, void *context) {
	if (!node)
		return false;
	switch (nodeTag(node)) {
	case T_SubLink:
	case T_SubPlan:
	case T_AlternativeSubPlan:
	case T_Aggref:
	case T_WindowFunc:
	case T_GroupingFunc:
		return true;
	default:
		break;
	}
	if (check_functions_in_node(node, may_read_function, context))
		return true;
#if PG_VERSION_NUM >= 160000
	return expression_tree_walker(node, may_read, context);
#else
	// (the walker's C type before PostgreSQL 16 takes no declared arguments;
	// going through void (*)(void) is the cast that says so)
	return expression_tree_walker(
	    node, reinterpret_cast<bool (*)()>(reinterpret_cast<void (*)(void)>(may_read)), context);
#endif
}

bool body(Oid fn) {
	if (IsTransactionBlock() || XactIsoLevel > XACT_READ_COMMITTED || !ActivePortal ||
	    list_length(ActivePortal->stmts) != 1)
		return false;
	PlannedStmt *stmt = linitial_node(PlannedStmt, ActivePortal->stmts);
	if (stmt->commandType != CMD_SELECT || stmt->hasModifyingCTE || stmt->subplans != NIL ||
	    stmt->rowMarks != NIL || list_length(stmt->rtable) != 1)
		return false;
	if (linitial_node(RangeTblEntry, stmt->rtable)->rtekind != RTE_FUNCTION)
		return false;
	Plan *plan = stmt->planTree;
	if (plan && IsA(plan, Limit)) {
		if (may_read(castNode(Limit, plan)->limitOffset, nullptr) ||
		    may_read(castNode(Limit, plan)->limitCount, nullptr))
			return false;
		plan = plan->lefttree;
	}
	if (!plan || !IsA(plan, FunctionScan) || plan->initPlan != NIL ||
	    may_read(reinterpret_cast<Node *>(plan->targetlist), nullptr) ||
	    may_read(reinterpret_cast<Node *>(plan->qual), nullptr))
		return false;
	// (the plan keeps the call; the statement's range table no longer does)
	List *functions = castNode(FunctionScan, plan)->functions;
	if (list_length(functions) != 1)
		return false;
	Node *call = linitial_node(RangeTblFunction, functions)->funcexpr;
	return call && IsA(call, FuncExpr) && castNode(FuncExpr, call)->funcid == fn;
}

} // namespace

bool only_call_holds_snapshot(Oid fn) {
	if (!guard([&] { return body(fn); }))
		return false;
	// no cursor (DECLARE, or a portal named through the protocol) keeps a
	// snapshot of this transaction (statements' own portals are not listed)
	static const char count_cursors[] = "SELECT pg_catalog.count(*) FROM pg_catalog.pg_cursors";
	if (execute(prepared_plan("horizon:cursors", count_cursors, 0, nullptr), nullptr, nullptr, true) != 1)
		return false;
	bool isnull = true;
	Datum n = guard([&] { return SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull); });
	return !isnull && DatumGetInt64(n) == 0;
}

void stop_holding_horizon() {
	guard([] {
		InvalidateCatalogSnapshot();
		MyProc->xmin = InvalidTransactionId;
	});
}

} // namespace concurrency::pg
