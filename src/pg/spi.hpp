// SPI helpers: plans prepared once per backend and kept (SPI_keepplan), the
// one way to execute a statement, and the one way to read its result columns.
// SPI failures become C++ exceptions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "pg/guard.hpp"

namespace concurrency::pg {

// The plan for `key`, preparing `sql` the first time it is asked for in this
// backend. The plan cache revalidates it after DDL on what it references.
// `cursor_options` go to SPI_prepare_cursor: CURSOR_OPT_GENERIC_PLAN makes
// the plan cache use one generic plan instead of re-planning (a custom plan)
// on every execution. Call between SPI_connect and SPI_finish.
SPIPlanPtr prepared_plan(const char *key, const char *sql, int nargs, const Oid *argtypes,
                         int cursor_options = 0);

// Drops every kept plan whose key starts with `prefix` (e.g. a dropped queue).
void forget_plans(const char *prefix);

// SPI_connect / SPI_finish through the guard.
void spi_connect();
void spi_finish();

// What a statement sees.
enum class Visibility {
	current, // the transaction's, as any statement of the calling query
	latest,  // a fresh one: what is committed now (and this transaction's own
	         // changes), whatever the isolation level
};

// Runs a kept plan; throws Error on an SPI failure code. Returns SPI_processed;
// the rows are in SPI_tuptable (read them with column() and friends).
uint64 execute(SPIPlanPtr plan, const Datum *values, const char *nulls, bool read_only, long count = 0,
               Visibility visibility = Visibility::current);
// Runs a one-off statement (parsed and planned for this one execution: for
// statements whose text changes, such as DDL naming a queue's table).
uint64 execute(const std::string &sql, int nargs = 0, const Oid *types = nullptr,
               const Datum *values = nullptr, const char *nulls = nullptr, bool read_only = false);

// Column `col` (from 1) of row `row` (from 0) of the last result, SPI_tuptable.
Datum column(uint64 row, int col, bool *isnull);
// The same converted; nothing for NULL.
std::optional<std::string> text_column(uint64 row, int col);
template <typename T> std::optional<T> column_as(uint64 row, int col); // bool, int32, int64, double
// A bigint column, 0 for NULL.
inline std::int64_t int64_column(uint64 row, int col) {
	return column_as<std::int64_t>(row, col).value_or(0);
}

} // namespace concurrency::pg
