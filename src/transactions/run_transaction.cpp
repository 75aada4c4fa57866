// CALL concurrency.run_transaction(statements, isolation, max_attempts): the
// statements in a transaction of their own at that isolation level, run
// again after a serialization failure (40001) or a deadlock (40P01), with a
// jittered, growing wait between attempts; every other error at once.
#include <string>

#include <fmt/format.h>

#include "locks/lock_keys.hpp"
#include "pg/datum.hpp"
#include "transactions/engine.hpp"
#include "transactions/policy.hpp"

extern "C" {
#include "utils/guc.h"
}

namespace concurrency::transactions {

namespace {

class RetryOnConflict final : public Policy {
  public:
	RetryOnConflict(std::string isolation, int max_attempts)
	    : isolation_(std::move(isolation)), max_attempts_(max_attempts) {}

	void begin_attempt(int) override {
		// what SET TRANSACTION ISOLATION LEVEL does, before the first snapshot
		pg::guard([&] {
			(void)set_config_option("transaction_isolation", isolation_.c_str(), PGC_USERSET, PGC_S_SESSION,
			                        GUC_ACTION_SET, true, 0, false);
		});
	}

	bool prepare(int) override { return true; }

	bool retryable(const char *sqlstate) const override { return transaction_retryable(sqlstate); }

	std::optional<std::int64_t> after_failure(int attempt, const ErrorData *error) override {
		if (attempt >= max_attempts_)
			return std::nullopt;
		std::int64_t wait = backoff_delay_us(attempt, pg::random_unit(), transaction_backoff());
		std::string message =
		    fmt::format("run_transaction: attempt {} of {} failed with SQLSTATE {}, retrying", attempt,
		                max_attempts_, pg::sqlstate_of(error).code);
		std::string detail = fmt::format("Waiting {} before attempt {}. The error was: {}",
		                                 locks::human_duration(static_cast<double>(wait) / 1e6), attempt + 1,
		                                 error->message ? error->message : "");
		pg::guard([&] {
			ereport(NOTICE,
			        (errmsg_internal("%s", message.c_str()), errdetail_internal("%s", detail.c_str())));
		});
		return wait;
	}

	void finish(Outcome, int, const ErrorData *) override {}

	[[noreturn]] void give_up(int attempts, ErrorData *error) override {
		prepend_detail(error,
		               fmt::format("run_transaction gave up after {} attempt{}, each failed with a "
		                           "serialization failure or a deadlock; this is the last one's error.",
		                           attempts, attempts == 1 ? "" : "s"));
		throw pg::PgException(error);
	}

  private:
	std::string isolation_;
	int max_attempts_;
};

} // namespace

} // namespace concurrency::transactions

using namespace concurrency;
using namespace concurrency::transactions;

CONCURRENCY_FUNCTION(concurrency_run_transaction) {
	std::string statements = pg::text_arg(fcinfo, 0, "statements");
	std::string isolation_text = pg::text_arg(fcinfo, 1, "isolation");
	pg::require_arg(fcinfo, 2, "max_attempts");
	int max_attempts = PG_GETARG_INT32(2);
	std::optional<std::string> isolation = isolation_setting(isolation_text);
	if (!isolation)
		throw Error(sqlstate::invalid_parameter_value,
		            fmt::format("unknown isolation level \"{}\"", isolation_text), "",
		            "Use 'read committed', 'repeatable read' or 'serializable'.");
	if (max_attempts < 1)
		throw Error(sqlstate::invalid_parameter_value, "max_attempts must be at least 1");
	require_nonatomic(fcinfo, "concurrency.run_transaction");
	parse_statements(statements);
	RetryOnConflict policy(*isolation, max_attempts);
	run_attempts(fcinfo, "concurrency.run_transaction", statements, policy);
	PG_RETURN_VOID();
}
