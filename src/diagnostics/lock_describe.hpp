// Lock tags in words: the relation's qualified name, the tuple, the
// transaction, or the advisory lock's subsystem name and resource.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "diagnostics/wait_graph.hpp"
#include "pg/guard.hpp"

extern "C" {
#include "storage/lock.h"
}

namespace concurrency::diagnostics {

// Describes lock tags, caching relation names and the subsystem registry for
// its own lifetime (one query). Uses the catalogs and SPI: call it outside
// any LWLock.
class LockDescriber {
  public:
	std::string describe(const LOCKTAG &tag);

  private:
	std::string relation(Oid database, Oid relid);
	std::string database(Oid database);
	const std::vector<SubsystemKey> &registry();

	std::map<std::pair<Oid, Oid>, std::string> relations_;
	std::vector<SubsystemKey> registry_;
	bool registry_loaded_ = false;
};

// pg_locks.locktype for a lock tag type ("relation", "advisory", ...).
const char *lock_type_name(uint16 type);

// The LOCKTAG behind one pg_locks row (locktype, database, relation, page,
// tuple, virtualxid, transactionid, classid, objid, objsubid; NULLs as 0), the
// inverse of pg_lock_status(). False when the locktype is unknown.
struct PgLocksRow {
	const char *locktype = nullptr;
	Oid database = InvalidOid, relation = InvalidOid, classid = InvalidOid, objid = InvalidOid;
	uint32 page = 0;
	uint16 tuple = 0, objsubid = 0;
	const char *virtualxid = nullptr;
	TransactionId transactionid = InvalidTransactionId;
};
bool locktag_from_pg_locks(const PgLocksRow &row, LOCKTAG *tag);

} // namespace concurrency::diagnostics
