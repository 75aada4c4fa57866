// Module entry: the magic block, _PG_init, and the version function.
//
// _PG_init calls each capability's init() (declared in its room's init.hpp);
// a capability with nothing to register at start-up has no init. The
// background host comes last: the rooms add their tenants to it.
#include "bgworker/host.hpp"
#include "citus/init.hpp"
#include "diagnostics/init.hpp"
#include "locks/init.hpp"
#include "queue/init/init.hpp"
#include "pg/datum.hpp"

#ifndef CONCURRENCY_EXT_VERSION
#define CONCURRENCY_EXT_VERSION "0.4.0"
#endif

extern "C" {
#ifdef PG_MODULE_MAGIC_EXT
PG_MODULE_MAGIC_EXT(.name = "concurrency_ext", .version = CONCURRENCY_EXT_VERSION);
#else
PG_MODULE_MAGIC;
#endif
PGDLLEXPORT void _PG_init(void);
}

extern "C" void _PG_init(void) {
	concurrency::locks::init();
	concurrency::queue::init(); // the wing's rooms, the distributed one last
	concurrency::diagnostics::init();
	concurrency::citus::init();
	concurrency::bgworker::init(); // last: the rooms have added their tenants
}

// concurrency.version() — the version of the loaded module.
CONCURRENCY_FUNCTION(concurrency_version) {
	return concurrency::pg::text_datum(CONCURRENCY_EXT_VERSION);
}
