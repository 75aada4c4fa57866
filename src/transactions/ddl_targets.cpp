// Which relations each kind of DDL statement locks, and how: the lock levels
// are PostgreSQL's own (AlterTableGetLockLevel for ALTER TABLE, the levels
// DefineIndex, CreateTrigger, RemoveRelations, ExecuteTruncate and
// DefineRelation take). Raw parse trees only: no catalog access here.
#include "transactions/ddl_targets.hpp"

extern "C" {
#include "commands/tablecmds.h"
#include "nodes/parsenodes.h"
#include "nodes/pg_list.h"
#include "nodes/value.h"
#include "catalog/namespace.h"
}

namespace concurrency::transactions {

namespace {

class Collector {
  public:
	explicit Collector(DdlPlan &plan) : plan_(plan) {}

	void add(const RangeVar *rv, LOCKMODE mode, bool drop_index = false) {
		if (!rv || !rv->relname)
			return;
		DdlTarget t;
		t.schema = rv->schemaname ? rv->schemaname : "";
		t.name = rv->relname;
		t.mode = mode;
		t.drop_index = drop_index;
		plan_.targets.push_back(std::move(t));
	}

	// The referenced table of a foreign key, in a constraint list
	void foreign_keys(List *elements) {
		ListCell *lc;
		foreach (lc, elements) {
			Node *n = static_cast<Node *>(lfirst(lc));
			if (IsA(n, Constraint))
				foreign_key(castNode(Constraint, n));
			else if (IsA(n, ColumnDef))
				foreign_keys(castNode(ColumnDef, n)->constraints);
		}
	}

	void foreign_key(const Constraint *c) {
		if (c->contype == CONSTR_FOREIGN)
			add(c->pktable, ShareRowExclusiveLock);
	}

	// true when every lock of the statement is known
	bool statement(Node *stmt) {
		switch (nodeTag(stmt)) {
		case T_AlterTableStmt: {
			auto *s = castNode(AlterTableStmt, stmt);
			add(s->relation, AlterTableGetLockLevel(s->cmds));
			ListCell *lc;
			foreach (lc, s->cmds) {
				auto *cmd = castNode(AlterTableCmd, lfirst(lc));
				if (!cmd->def)
					continue;
				if (IsA(cmd->def, Constraint))
					foreign_key(castNode(Constraint, cmd->def));
				else if (IsA(cmd->def, ColumnDef))
					foreign_keys(castNode(ColumnDef, cmd->def)->constraints);
				else if (IsA(cmd->def, PartitionCmd))
					add(castNode(PartitionCmd, cmd->def)->name, AccessExclusiveLock);
			}
			return true;
		}
		case T_IndexStmt: {
			auto *s = castNode(IndexStmt, stmt);
			add(s->relation, s->concurrent ? ShareUpdateExclusiveLock : ShareLock);
			return true;
		}
		case T_CreateTrigStmt: {
			auto *s = castNode(CreateTrigStmt, stmt);
			add(s->relation, ShareRowExclusiveLock);
			add(s->constrrel, ShareRowExclusiveLock);
			return true;
		}
		case T_RenameStmt: {
			auto *s = castNode(RenameStmt, stmt);
			if (!s->relation)
				return false;
			add(s->relation, AccessExclusiveLock);
			return true;
		}
		case T_DropStmt: {
			auto *s = castNode(DropStmt, stmt);
			switch (s->removeType) {
			case OBJECT_TABLE:
			case OBJECT_INDEX:
			case OBJECT_VIEW:
			case OBJECT_MATVIEW:
			case OBJECT_SEQUENCE:
			case OBJECT_FOREIGN_TABLE: {
				ListCell *lc;
				foreach (lc, s->objects)
					add(makeRangeVarFromNameList(castNode(List, lfirst(lc))),
					    s->concurrent ? ShareUpdateExclusiveLock : AccessExclusiveLock,
					    s->removeType == OBJECT_INDEX);
				return true;
			}
			default:
				return false;
			}
		}
		case T_TruncateStmt: {
			ListCell *lc;
			foreach (lc, castNode(TruncateStmt, stmt)->relations)
				add(castNode(RangeVar, lfirst(lc)), AccessExclusiveLock);
			return true;
		}
		case T_LockStmt: {
			auto *s = castNode(LockStmt, stmt);
			ListCell *lc;
			foreach (lc, s->relations)
				add(castNode(RangeVar, lfirst(lc)), s->mode);
			return true;
		}
		case T_CreateStmt: {
			auto *s = castNode(CreateStmt, stmt);
			ListCell *lc;
			foreach (lc, s->inhRelations)
				add(castNode(RangeVar, lfirst(lc)),
				    s->partbound ? AccessExclusiveLock : ShareUpdateExclusiveLock);
			foreign_keys(s->tableElts);
			foreign_keys(s->constraints);
			return true;
		}
		case T_ClusterStmt: {
			auto *s = castNode(ClusterStmt, stmt);
			if (!s->relation)
				return false;
			add(s->relation, AccessExclusiveLock);
			return true;
		}
		default:
			return false;
		}
	}

  private:
	DdlPlan &plan_;
};

} // namespace

DdlPlan ddl_plan(List *parsed) {
	DdlPlan plan;
	pg::guard([&] {
		Collector collect(plan);
		ListCell *lc;
		foreach (lc, parsed) {
			++plan.statements;
			if (collect.statement(castNode(RawStmt, lfirst(lc))->stmt))
				++plan.covered;
		}
	});
	return plan;
}

} // namespace concurrency::transactions
