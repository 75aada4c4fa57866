#include "pg/xact.hpp"

extern "C" {
#include "access/xact.h"
#include "nodes/parsenodes.h"
#include "storage/latch.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
#if PG_VERSION_NUM >= 150000
#include "common/pg_prng.h"
#endif
}

namespace concurrency::pg {

bool nonatomic_call(FunctionCallInfo fcinfo) {
	return fcinfo->context && IsA(fcinfo->context, CallContext) &&
	       !castNode(CallContext, fcinfo->context)->atomic;
}

void spi_connect_nonatomic() {
	int rc = guard([] { return SPI_connect_ext(SPI_OPT_NONATOMIC); });
	if (rc != SPI_OK_CONNECT)
		throw Error(sqlstate::internal_error, "SPI_connect_ext failed");
}

void spi_finish_nonatomic() {
	int rc = guard([] { return SPI_finish(); });
	if (rc != SPI_OK_FINISH)
		throw Error(sqlstate::internal_error, "SPI_finish failed");
}

ErrorData *spi_commit() {
	try {
		guard([] {
			SPI_commit();
#if PG_VERSION_NUM < 150000
			SPI_start_transaction();
#endif
		});
	} catch (const PgException &e) {
		// _SPI_commit caught it, rolled the failed transaction back and
		// started a new one before rethrowing: only the report is left.
		return e.data();
	}
	return nullptr;
}

void spi_rollback() {
	guard([] {
		SPI_rollback();
#if PG_VERSION_NUM < 150000
		SPI_start_transaction();
#endif
	});
}

namespace detail {

SubtransactionScope begin_subtransaction() {
	SubtransactionScope scope{CurrentMemoryContext, CurrentResourceOwner};
	guard([&] {
		BeginInternalSubTransaction(nullptr);
		// run the body in the caller's memory context, as PL/pgSQL does
		MemoryContextSwitchTo(scope.context);
	});
	return scope;
}

void release_subtransaction(const SubtransactionScope &scope) {
	guard([&] {
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(scope.context);
		CurrentResourceOwner = scope.owner;
	});
}

void rollback_subtransaction(const SubtransactionScope &scope) {
	guard([&] {
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(scope.context);
		CurrentResourceOwner = scope.owner;
	});
}

} // namespace detail

void sleep_interruptible(std::int64_t micros) {
	TimestampTz end = GetCurrentTimestamp() + micros;
	guard([&] {
		for (;;) {
			CHECK_FOR_INTERRUPTS();
			TimestampTz now = GetCurrentTimestamp();
			if (now >= end)
				break;
			long ms = static_cast<long>((end - now + 999) / 1000);
			(void)WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
	});
}

double random_unit() {
#if PG_VERSION_NUM >= 150000
	return pg_prng_double(&pg_global_prng_state);
#else
	return static_cast<double>(random()) / (static_cast<double>(MAX_RANDOM_VALUE) + 1.0);
#endif
}

SqlState sqlstate_of(const ErrorData *edata) {
	SqlState s{};
	const char *code = unpack_sql_state(edata ? edata->sqlerrcode : ERRCODE_INTERNAL_ERROR);
	for (int i = 0; i < 5; ++i)
		s.code[i] = code[i];
	s.code[5] = '\0';
	return s;
}

} // namespace concurrency::pg
