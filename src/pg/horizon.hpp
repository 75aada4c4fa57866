// A statement that sleeps inside a function holds its snapshot, and with it
// the xmin horizon that vacuum and pruning clean up to, for as long as it
// sleeps. Where nothing can read with that snapshot any more, the sleeper may
// stop holding the horizon back (dequeue(…, wait): queue/lifecycle/claim.cpp).
#pragma once

#include "pg/postgres.hpp"

namespace concurrency::pg {

// Whether the running statement holds its snapshot for nothing but the call
// of function `fn` that is running: a top-level SELECT … FROM fn(…) (maybe
// with a LIMIT), in a transaction of its own (no BEGIN, so no cursor or
// earlier statement of it keeps a snapshot), in READ COMMITTED, with no
// cursor or named portal open, and whose output columns are the function's
// own or built-in immutable expressions of them (a few clock functions
// allowed): nothing evaluated after the call reads a table with the
// statement's snapshot. Every statement the function itself runs takes a
// fresh snapshot. Call while SPI is connected.
bool only_call_holds_snapshot(Oid fn);

// Stops advertising this backend's xmin (as PostgreSQL does when a backend
// holds no snapshot), until the next snapshot is taken; drops the catalog
// snapshot, so that the next catalog access takes a fresh one. Only where
// only_call_holds_snapshot said so.
void stop_holding_horizon();

} // namespace concurrency::pg
