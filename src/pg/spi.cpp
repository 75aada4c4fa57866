#include <cstring>

#include <fmt/format.h>

#include "pg/spi.hpp"

extern "C" {
#include "utils/guc.h"
#include "utils/hsearch.h"
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
		ctl.hcxt = TopMemoryContext;
		plan_table = guard([&] { return hash_create("concurrency_ext plans", 64, &ctl, HASH_ELEM | HASH_STRINGS | HASH_CONTEXT); });
	}
	return plan_table;
}

void check_key(const char *key) {
	if (std::strlen(key) >= plan_key_bytes)
		throw Error(sqlstate::internal_error, fmt::format("plan key too long: {}", key));
}

} // namespace

SPIPlanPtr prepared_plan(const char *key, const char *sql, int nargs, const Oid *argtypes, int cursor_options) {
	check_key(key);
	HTAB *table = plans();
	bool found = false;
	auto *entry = static_cast<PlanEntry *>(guard([&] { return hash_search(table, key, HASH_FIND, &found); }));
	if (entry)
		return entry->plan;
	SPIPlanPtr plan =
	    guard([&] { return SPI_prepare_cursor(sql, nargs, const_cast<Oid *>(argtypes), cursor_options); });
	if (!plan)
		throw Error(sqlstate::internal_error, fmt::format("SPI_prepare failed: {}", SPI_result_code_string(SPI_result)),
		            sql);
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
		throw Error(sqlstate::internal_error, fmt::format("SPI_connect failed: {}", SPI_result_code_string(rc)));
	int level = guard([] {
		int nest = NewGUCNestLevel();
		set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET, PGC_S_SESSION, GUC_ACTION_SAVE, true, 0,
		                  false);
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
		throw Error(sqlstate::internal_error, fmt::format("SPI_finish failed: {}", SPI_result_code_string(rc)));
}

uint64 spi_execute_plan(SPIPlanPtr plan, const Datum *values, const char *nulls, bool read_only, long count) {
	int rc = guard([&] { return SPI_execute_plan(plan, const_cast<Datum *>(values), nulls, read_only, count); });
	if (rc < 0)
		throw Error(sqlstate::internal_error, fmt::format("SPI_execute_plan failed: {}", SPI_result_code_string(rc)));
	return SPI_processed;
}

} // namespace concurrency::pg
