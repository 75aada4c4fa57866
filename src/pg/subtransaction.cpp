#include "pg/subtransaction.hpp"

extern "C" {
#include "access/xact.h"
#include "utils/resowner.h"
}

namespace concurrency::pg {

SubtransactionScope begin_subtransaction() {
	SubtransactionScope scope{CurrentMemoryContext, CurrentResourceOwner};
	guard([] { BeginInternalSubTransaction(nullptr); });
	// stay in the caller's memory context: what f allocates outlives it
	MemoryContextSwitchTo(scope.context);
	return scope;
}

void commit_subtransaction(const SubtransactionScope &scope) {
	guard([] { ReleaseCurrentSubTransaction(); });
	MemoryContextSwitchTo(scope.context);
	CurrentResourceOwner = scope.owner;
}

void rollback_subtransaction(const SubtransactionScope &scope) {
	guard([] { RollbackAndReleaseCurrentSubTransaction(); });
	MemoryContextSwitchTo(scope.context);
	CurrentResourceOwner = scope.owner;
}

} // namespace concurrency::pg
