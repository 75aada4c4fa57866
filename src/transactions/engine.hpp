// The engine behind run_transaction and run_ddl: runs statements in
// transactions of its own, one attempt after another, each attempt in an
// internal subtransaction of a fresh transaction that is committed when the
// attempt succeeds and rolled back when it fails; between attempts it waits
// as the policy says. What is retried, what an attempt takes before its
// statements, what is reported and when to give up are the policy's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "pg/xact.hpp"

namespace concurrency::transactions {

enum class Outcome { done, failed, gave_up };

class Policy {
  public:
	virtual ~Policy() = default;

	// In each attempt's fresh transaction, before anything runs in it:
	// settings that must come first (isolation level, lock_timeout).
	virtual void begin_attempt(int attempt) = 0;

	// In the attempt's subtransaction, before the statements. False: the way
	// is not clear, the attempt is rolled back without running them.
	virtual bool prepare(int attempt) = 0;

	// Whether an error with this SQLSTATE is retried.
	virtual bool retryable(const char *sqlstate) const = 0;

	// After a failed attempt (error null: prepare() declined), in a new
	// transaction that the engine commits afterwards: reports it and returns
	// the wait before the next attempt, or nothing to give up.
	virtual std::optional<std::int64_t> after_failure(int attempt, const ErrorData *error) = 0;

	// The end of the run (error: the attempt's error, null when done), in a
	// transaction that the engine commits before it returns or raises.
	virtual void finish(Outcome outcome, int attempts, const ErrorData *error) = 0;

	// Raises the error that ends a run the policy gave up on (after finish
	// and its commit); `error` is the last attempt's, if it had one.
	[[noreturn]] virtual void give_up(int attempts, ErrorData *error) = 0;
};

// Runs `statements` (one or several, parsed beforehand by the caller) under
// `policy`. `procedure` names the caller in messages. Raises 25001 unless the
// procedure was called outside a transaction block. Before the first attempt
// it commits the calling transaction (as a COMMIT in a procedure would), so
// that every attempt starts a transaction of its own.
void run_attempts(FunctionCallInfo fcinfo, const char *procedure, const std::string &statements,
                  Policy &policy);

// 25001 unless the procedure may commit; call before doing anything else.
void require_nonatomic(FunctionCallInfo fcinfo, const char *procedure);

// The raw parse trees of `statements` (a List of RawStmt, in the current
// memory context): a syntax error is raised as PostgreSQL raises it, before
// anything runs; no statement at all raises 22023.
List *parse_statements(const std::string &statements);

// Replaces the DETAIL of `error` with `detail`, followed by the old one.
void prepend_detail(ErrorData *error, const std::string &detail);

} // namespace concurrency::transactions
