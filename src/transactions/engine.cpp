// The attempt loop shared by run_transaction and run_ddl (see engine.hpp).
#include <fmt/format.h>

#include "transactions/engine.hpp"

extern "C" {
#include "nodes/parsenodes.h"
#include "parser/parser.h"
}

namespace concurrency::transactions {

namespace {

[[noreturn]] void transaction_control() {
	throw Error(sqlstate::invalid_transaction_termination, "statements must not control the transaction",
	            "Each attempt runs in a transaction of its own, committed when it succeeds.",
	            "Remove BEGIN, COMMIT, ROLLBACK and SAVEPOINT from the statements.");
}

// Runs the caller's statements in the current (sub)transaction, with the
// caller's search_path and privileges, discarding their results.
void execute(const std::string &statements) {
	int rc = pg::guard([&] { return SPI_execute(statements.c_str(), false, 0); });
	if (rc < 0) // SPI_ERROR_TRANSACTION cannot happen: parse_statements refused those
		throw Error(sqlstate::internal_error,
		            fmt::format("SPI_execute failed: {}", SPI_result_code_string(rc)));
}

// Commits the run's bookkeeping transaction; a failure here is raised.
void commit_or_raise() {
	if (ErrorData *error = pg::spi_commit())
		throw pg::PgException(error);
}

} // namespace

void require_nonatomic(FunctionCallInfo fcinfo, const char *procedure) {
	if (!pg::nonatomic_call(fcinfo))
		throw Error(
		    sqlstate::active_sql_transaction,
		    fmt::format("{} cannot run inside a transaction block", procedure),
		    "Each attempt runs in a transaction of its own and commits.",
		    fmt::format("Use CALL {} outside BEGIN … COMMIT (with autocommit on), and not from a function.",
		                procedure));
}

namespace {
// A syntax error points into the statements, not into the CALL: report its
// position as an internal query, as SPI does for the statements it runs.
void statements_error_callback(void *arg) {
	int position = geterrposition();
	if (position > 0) {
		errposition(0);
		internalerrposition(position);
		internalerrquery(static_cast<const char *>(arg));
	}
}
} // namespace

List *parse_statements(const std::string &statements) {
	List *parsed = pg::guard([&] {
		ErrorContextCallback callback;
		callback.callback = statements_error_callback;
		callback.arg = const_cast<char *>(statements.c_str());
		callback.previous = error_context_stack;
		error_context_stack = &callback;
		List *trees = raw_parser(statements.c_str(), RAW_PARSE_DEFAULT);
		error_context_stack = callback.previous;
		return trees;
	});
	if (parsed == NIL)
		throw Error(sqlstate::invalid_parameter_value, "statements must contain at least one statement");
	ListCell *lc;
	foreach (lc, parsed)
		if (IsA(castNode(RawStmt, lfirst(lc))->stmt, TransactionStmt))
			transaction_control();
	return parsed;
}

void prepend_detail(ErrorData *error, const std::string &detail) {
	std::string text = detail;
	if (error->detail && error->detail[0])
		text += fmt::format("\n{}", error->detail);
	pg::guard([&] { error->detail = pstrdup(text.c_str()); });
}

void run_attempts(FunctionCallInfo fcinfo, const char *procedure, const std::string &statements,
                  Policy &policy) {
	require_nonatomic(fcinfo, procedure);
	pg::spi_connect_nonatomic();
	commit_or_raise(); // a transaction of our own from the first attempt on

	for (int attempt = 1;; ++attempt) {
		policy.begin_attempt(attempt);
		bool ran = false;
		ErrorData *error = pg::in_subtransaction([&] {
			if (policy.prepare(attempt)) {
				execute(statements);
				ran = true;
			}
		});
		if (!error && ran) {
			error = pg::spi_commit(); // a failure at commit leaves it rolled back
			if (!error) {
				policy.finish(Outcome::done, attempt, nullptr);
				commit_or_raise();
				pg::spi_finish_nonatomic();
				return;
			}
		} else {
			pg::spi_rollback();
		}

		if (error && !policy.retryable(pg::sqlstate_of(error).code)) {
			policy.finish(Outcome::failed, attempt, error);
			commit_or_raise();
			throw pg::PgException(error); // unchanged
		}
		std::optional<std::int64_t> wait = policy.after_failure(attempt, error);
		if (!wait) {
			policy.finish(Outcome::gave_up, attempt, error);
			commit_or_raise();
			policy.give_up(attempt, error);
		}
		commit_or_raise();
		if (error)
			pg::guard([&] { FreeErrorData(error); });
		pg::sleep_interruptible(*wait);
	}
}

} // namespace concurrency::transactions
