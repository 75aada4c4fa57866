// SPI helpers: plans prepared once per backend and kept (SPI_keepplan), and
// small wrappers that turn SPI failures into C++ exceptions.
#pragma once

#include "pg/guard.hpp"

namespace concurrency::pg {

// The plan for `key`, preparing `sql` the first time it is asked for in this
// backend. The plan cache revalidates it after DDL on what it references.
// `cursor_options` go to SPI_prepare_cursor: CURSOR_OPT_GENERIC_PLAN makes
// the plan cache use one generic plan instead of re-planning (a custom plan)
// on every execution. Call between SPI_connect and SPI_finish.
SPIPlanPtr prepared_plan(const char *key, const char *sql, int nargs, const Oid *argtypes, int cursor_options = 0);

// Drops every kept plan whose key starts with `prefix` (e.g. a dropped queue).
void forget_plans(const char *prefix);

// SPI_connect / SPI_finish through the guard.
void spi_connect();
void spi_finish();

// Runs a kept plan; throws Error on an SPI failure code. Returns SPI_processed.
uint64 spi_execute_plan(SPIPlanPtr plan, const Datum *values, const char *nulls, bool read_only, long count = 0);

} // namespace concurrency::pg
