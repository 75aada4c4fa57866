// Module entry: PG_MODULE_MAGIC, _PG_init, and the version function.
#include "pg/datum.hpp"

extern "C" {
PG_MODULE_MAGIC;
PGDLLEXPORT void _PG_init(void);
}

#ifndef CONCURRENCY_EXT_VERSION
#define CONCURRENCY_EXT_VERSION "0.2.0"
#endif

namespace concurrency {
// Each capability registers its callbacks (cache invalidation, GUCs) here.
void locks_init();
void queue_init();
void diagnostics_init();
void citus_init();
} // namespace concurrency

extern "C" void _PG_init(void) {
	concurrency::locks_init();
	concurrency::queue_init();
	concurrency::diagnostics_init();
	concurrency::citus_init();
}

// concurrency.version() — the version of the loaded module.
CONCURRENCY_FUNCTION(concurrency_version) {
	return concurrency::pg::text_datum(CONCURRENCY_EXT_VERSION);
}
