// Set-returning functions in materialize mode: the result set is a
// tuplestore that the caller reads after the function returns.
#pragma once

#include <functional>

#include "pg/guard.hpp"

extern "C" {
#include "utils/tuplestore.h"
}

namespace concurrency::pg {

struct ResultSet {
	Tuplestorestate *store;
	TupleDesc desc;
	// Where given, told of each row as it is added (a copy of a result set
	// with a tap of its own sees the rows added through that copy only).
	const std::function<void(const Datum *, const bool *)> *tap = nullptr;
};

// Starts the function's result set: its declared row type, or one column of
// `scalar_type` for SETOF a scalar. 0A000 when the caller cannot take a set.
// Create it before SPI_connect: it lives in the per-query memory context.
ResultSet materialize(FunctionCallInfo fcinfo, Oid scalar_type = InvalidOid);

// Appends a row (values are copied).
void add_row(ResultSet rows, const Datum *values, const bool *nulls);

} // namespace concurrency::pg
