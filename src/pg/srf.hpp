// Set-returning functions in materialize mode: the result set is a
// tuplestore that the caller reads after the function returns.
#pragma once

#include "pg/guard.hpp"

extern "C" {
#include "utils/tuplestore.h"
}

namespace concurrency::pg {

struct ResultSet {
	Tuplestorestate *store;
	TupleDesc desc;
};

// Starts the function's result set: its declared row type, or one column of
// `scalar_type` for SETOF a scalar. 0A000 when the caller cannot take a set.
// Create it before SPI_connect: it lives in the per-query memory context.
ResultSet materialize(FunctionCallInfo fcinfo, Oid scalar_type = InvalidOid);

// Appends a row (values are copied).
void add_row(ResultSet rows, const Datum *values, const bool *nulls);

} // namespace concurrency::pg
