// Transaction control from C++, for procedures that commit (run_transaction,
// run_ddl): a non-atomic SPI connection, COMMIT and ROLLBACK through it, an
// internal subtransaction around an attempt, and an interruptible sleep.
//
// PostgreSQL's error contract holds throughout: an error caught here is
// either rethrown or its (sub)transaction is rolled back. in_subtransaction()
// rolls back the subtransaction an error came from (the pattern of
// PL/pgSQL's exception blocks); spi_commit() returns a commit-time error
// only after SPI has rolled that transaction back and started a new one.
#pragma once

#include <cstdint>
#include <exception>

#include "pg/guard.hpp"

namespace concurrency::pg {

// True when the function runs as a procedure called outside a transaction
// block (CALL at top level, or from a procedure that was), so that it may
// commit: fcinfo->context is a CallContext with atomic = false.
bool nonatomic_call(FunctionCallInfo fcinfo);

// SPI_connect_ext(SPI_OPT_NONATOMIC) and SPI_finish. Unlike spi_connect(),
// the search_path is not pinned: the connection runs the caller's statements
// (internal SQL inside it opens its own spi_connect()).
void spi_connect_nonatomic();
void spi_finish_nonatomic();

// COMMIT, then a new transaction at once (SPI_commit; SPI_start_transaction
// where PostgreSQL still needs it). nullptr on success; otherwise the error
// that COMMIT raised (a serialization failure at commit, a deferred
// constraint), copied into the caller's memory context: SPI has already
// rolled that transaction back and started a new one.
ErrorData *spi_commit();

// ROLLBACK, then a new transaction.
void spi_rollback();

// Runs `body` in an internal subtransaction. nullptr when it succeeded (the
// subtransaction is released, its work part of the transaction); otherwise
// the PostgreSQL error it raised, copied into the caller's memory context,
// with the subtransaction rolled back. A C++ error from `body` rolls the
// subtransaction back and propagates.
template <typename F> ErrorData *in_subtransaction(F &&body);

// Waits `micros`, waking for interrupts (a cancel or terminate ends the wait
// with the usual error) and for postmaster death.
void sleep_interruptible(std::int64_t micros);

// A uniform value in [0, 1) from the backend's random source.
double random_unit();

// The SQLSTATE of an error, as five characters.
struct SqlState {
	char code[6];
};
SqlState sqlstate_of(const ErrorData *edata);

namespace detail {
struct SubtransactionScope {
	MemoryContext context;
	ResourceOwner owner;
};
SubtransactionScope begin_subtransaction();
void release_subtransaction(const SubtransactionScope &scope);
void rollback_subtransaction(const SubtransactionScope &scope);
} // namespace detail

template <typename F> ErrorData *in_subtransaction(F &&body) {
	detail::SubtransactionScope scope = detail::begin_subtransaction();
	ErrorData *error = nullptr;
	std::exception_ptr cpp_error;
	try {
		body();
	} catch (const PgException &e) {
		error = e.data();
	} catch (...) {
		cpp_error = std::current_exception();
	}
	// outside the handlers: rolling back may itself raise (through the guard)
	if (!error && !cpp_error) {
		detail::release_subtransaction(scope);
		return nullptr;
	}
	detail::rollback_subtransaction(scope);
	if (cpp_error)
		std::rethrow_exception(cpp_error);
	return error;
}

} // namespace concurrency::pg
