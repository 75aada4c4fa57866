#include <cstring>
#include <type_traits>

#include <fmt/format.h>

#include "pg/spi.hpp"

extern "C" {
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/snapmgr.h"
}

namespace concurrency::pg {

namespace {

constexpr int plan_key_bytes = 160;

struct PlanEntry {
	char key[plan_key_bytes]; // hash key: must come first
	SPIPlanPtr plan;
};

HTAB *plan_table = nullptr;

HTAB *plans() {
	if (!plan_table) {
		HASHCTL ctl;
		std::memset(&ctl, 0, sizeof ctl);
		ctl.keysize = plan_key_bytes;
		ctl.entrysize = sizeof(PlanEntry);
		// A context of its own, so that pg_backend_memory_contexts shows the
		// table (the kept plans are CachedPlan contexts of their own).
		plan_table = guard([&] {
			ctl.hcxt = AllocSetContextCreate(TopMemoryContext, "concurrency_ext plans", ALLOCSET_SMALL_SIZES);
			return hash_create("concurrency_ext plans", 64, &ctl, HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
		});
	}
	return plan_table;
}

void check_key(const char *key) {
	if (std::strlen(key) >= plan_key_bytes)
		throw Error(sqlstate::internal_error, fmt::format("plan key too long: {}", key));
}

} // namespace

SPIPlanPtr prepared_plan(const char *key, const char *sql, int nargs, const Oid *argtypes,
                         int cursor_options) {
	check_key(key);
	HTAB *table = plans();
	bool found = false;
	auto *entry = static_cast<PlanEntry *>(guard([&] { return hash_search(table, key, HASH_FIND, &found); }));
	if (entry)
		return entry->plan;
	SPIPlanPtr plan =
	    guard([&] { return SPI_prepare_cursor(sql, nargs, const_cast<Oid *>(argtypes), cursor_options); });
	if (!plan)
		throw Error(sqlstate::internal_error,
		            fmt::format("SPI_prepare failed: {}", SPI_result_code_string(SPI_result)), sql);
	guard([&] { SPI_keepplan(plan); });
	entry = static_cast<PlanEntry *>(guard([&] { return hash_search(table, key, HASH_ENTER, &found); }));
	entry->plan = plan;
	return plan;
}

void forget_plans(const char *prefix) {
	if (!plan_table)
		return;
	std::size_t n = std::strlen(prefix);
	HASH_SEQ_STATUS status;
	hash_seq_init(&status, plan_table);
	while (auto *entry = static_cast<PlanEntry *>(hash_seq_search(&status))) {
		if (std::strncmp(entry->key, prefix, n) == 0) {
			SPI_freeplan(entry->plan);
			hash_search(plan_table, entry->key, HASH_REMOVE, nullptr);
		}
	}
}

// Every statement the extension runs through SPI is parsed, planned and
// executed with search_path = pg_catalog, pg_temp, whatever the caller's
// search_path: a function or operator that a caller placed earlier in the
// path (evil.=(text, text), evil.now()) must not change what we do. The plan
// cache replans when the search_path differs from the one a plan was made
// with, so the path is pinned for the execution too, not only for prepare.
// GUC nest levels of the connections open now; an error unwinds GUC levels
// (transaction or subtransaction abort) without spi_finish, so entries at or
// above a fresh level are stale and dropped.
namespace {
constexpr int max_spi_depth = 64;
int guc_levels[max_spi_depth];
int spi_depth = 0;
} // namespace

void spi_connect() {
	int rc = guard([] { return SPI_connect(); });
	if (rc != SPI_OK_CONNECT)
		throw Error(sqlstate::internal_error,
		            fmt::format("SPI_connect failed: {}", SPI_result_code_string(rc)));
	int level = guard([] {
		int nest = NewGUCNestLevel();
		set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE,
		                  true, 0, false);
		return nest;
	});
	while (spi_depth > 0 && guc_levels[spi_depth - 1] >= level)
		--spi_depth;
	if (spi_depth == max_spi_depth)
		throw Error(sqlstate::internal_error, "SPI connections nested too deeply in concurrency_ext");
	guc_levels[spi_depth++] = level;
}

void spi_finish() {
	if (spi_depth > 0) {
		int level = guc_levels[--spi_depth];
		guard([&] { AtEOXact_GUC(true, level); });
	}
	int rc = guard([] { return SPI_finish(); });
	if (rc != SPI_OK_FINISH)
		throw Error(sqlstate::internal_error,
		            fmt::format("SPI_finish failed: {}", SPI_result_code_string(rc)));
}

namespace {
uint64 checked(int rc, const char *what, const char *sql = nullptr) {
	if (rc < 0)
		throw Error(sqlstate::internal_error, fmt::format("{} failed: {}", what, SPI_result_code_string(rc)),
		            sql ? sql : "");
	return SPI_processed;
}
} // namespace

uint64 execute(SPIPlanPtr plan, const Datum *values, const char *nulls, bool read_only, long count,
               Visibility visibility) {
	auto *args = const_cast<Datum *>(values);
	if (visibility == Visibility::latest)
		return checked(guard([&] {
			               return SPI_execute_snapshot(plan, args, nulls, GetLatestSnapshot(),
			                                           InvalidSnapshot, read_only, true, count);
		               }),
		               "SPI_execute_snapshot");
	return checked(guard([&] { return SPI_execute_plan(plan, args, nulls, read_only, count); }),
	               "SPI_execute_plan");
}

uint64 execute(const std::string &sql, int nargs, const Oid *types, const Datum *values, const char *nulls,
               bool read_only) {
	return checked(guard([&] {
		               return SPI_execute_with_args(sql.c_str(), nargs, const_cast<Oid *>(types),
		                                            const_cast<Datum *>(values), nulls, read_only, 0);
	               }),
	               "SPI_execute", sql.c_str());
}

Datum column(uint64 row, int col, bool *isnull) {
	return guard([&] { return SPI_getbinval(SPI_tuptable->vals[row], SPI_tuptable->tupdesc, col, isnull); });
}

std::optional<std::string> text_column(uint64 row, int col) {
	bool isnull = false;
	Datum d = column(row, col, &isnull);
	if (isnull)
		return std::nullopt;
	text *t = guard([&] { return DatumGetTextPP(d); });
	return std::string(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
}

template <typename T> std::optional<T> column_as(uint64 row, int col) {
	bool isnull = false;
	Datum d = column(row, col, &isnull);
	if (isnull)
		return std::nullopt;
	if constexpr (std::is_same_v<T, bool>)
		return DatumGetBool(d);
	else if constexpr (std::is_same_v<T, std::int32_t>)
		return DatumGetInt32(d);
	else if constexpr (std::is_same_v<T, std::int64_t>)
		return DatumGetInt64(d);
	else
		return DatumGetFloat8(d);
}
template std::optional<bool> column_as<bool>(uint64, int);
template std::optional<std::int32_t> column_as<std::int32_t>(uint64, int);
template std::optional<std::int64_t> column_as<std::int64_t>(uint64, int);
template std::optional<double> column_as<double>(uint64, int);

} // namespace concurrency::pg
