// The relations a run_ddl call will lock, read from the statements' raw
// parse trees before anything runs, so that it can take those locks first
// without queueing. What is covered (and what is not) is listed in
// docs/migrations.md; a statement whose locks are not known in advance
// still runs, its waits bounded by lock_timeout.
#pragma once

#include <string>
#include <vector>

#include "pg/guard.hpp"

extern "C" {
#include "storage/lockdefs.h"
}

namespace concurrency::transactions {

// A relation by the name the statements use (resolved with the caller's
// search_path at each attempt, so that a relation created by an earlier
// statement of the same call is simply not there yet).
struct DdlTarget {
	std::string schema; // empty: by search_path
	std::string name;
	LOCKMODE mode = AccessExclusiveLock;
	bool drop_index = false; // DROP INDEX also locks the index's table
};

struct DdlPlan {
	std::vector<DdlTarget> targets;
	int statements = 0;
	int covered = 0; // statements whose locks are all known
};

// From the List of RawStmt that parse_statements() returned.
DdlPlan ddl_plan(List *parsed);

} // namespace concurrency::transactions
