// Surviving a PostgreSQL error: run the calls that may raise it inside an
// internal subtransaction, as PL/pgSQL's EXCEPTION blocks do.
//
// PostgreSQL's contract is that a caught ERROR is either re-thrown or its
// (sub)transaction rolled back: only the rollback releases what the failed
// code acquired (locks, buffer pins, memory, lock-wait state) and resets the
// state an error leaves behind. pg::guard alone re-throws; where the caller
// must carry on after an error (a lock wait that timed out, to report who
// holds the lock), use pg::in_subtransaction. It costs a subtransaction
// (no xid unless f writes), so keep it to the paths that wait anyway.
#pragma once

#include "pg/guard.hpp"

namespace concurrency::pg {

// What BeginInternalSubTransaction changes and the caller gets back.
struct SubtransactionScope {
	MemoryContext context;
	ResourceOwner owner;
};

SubtransactionScope begin_subtransaction();
void commit_subtransaction(const SubtransactionScope &scope);
void rollback_subtransaction(const SubtransactionScope &scope);

// Runs f, C++ code that calls PostgreSQL through guard(), in a
// subtransaction. When f returns, the subtransaction is committed into the
// current one (what f took stays taken) and f's result returned; when f
// throws (a PgException from guard, or any C++ exception), the subtransaction
// is rolled back and the exception passed on: the caller may then carry on.
template <typename F> auto in_subtransaction(F &&f) -> decltype(f()) {
	SubtransactionScope scope = begin_subtransaction();
	try {
		if constexpr (std::is_void_v<decltype(f())>) {
			f();
			commit_subtransaction(scope);
		} else {
			auto result = f();
			commit_subtransaction(scope);
			return result;
		}
	} catch (...) {
		rollback_subtransaction(scope);
		throw;
	}
}

} // namespace concurrency::pg
