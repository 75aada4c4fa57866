// The module's background process (the host): one background worker, started
// by a preloaded module and connected to no database, whose loop serves its
// tenants — the lock-wait history's sampler (diagnostics/), the schedule
// launcher and the notifier launcher (queue/). Each room adds its tenant from
// _PG_init while the module is being preloaded; extension.cpp calls init()
// last, which registers the host when there is a tenant.
//
// A tenant's failure is logged under its name ("<name> failed: <message>", at
// most once a minute per tenant) and stops neither the host nor the other
// tenants; a tenant whose start failed is started again ten seconds later.
#pragma once

#include "pg/postgres.hpp"

namespace concurrency::bgworker {

struct Tenant {
	const char *name; // in the log and in error messages
	// Once, when the host starts (again after a failed start). May throw.
	void (*start)();
	// At every wake-up of the host. Returns how long the host may sleep
	// before it must call again, in milliseconds (-1: until its latch is set).
	// May throw; the host then releases the LWLocks the tenant held.
	long (*tick)();
	// When the host exits. Must not throw.
	void (*stop)() noexcept;
};

// From _PG_init, while preloading: adds a tenant (at most eight).
void add_tenant(const Tenant &tenant);

// From _PG_init, after every room's init: registers the host when preloading.
void init();

} // namespace concurrency::bgworker
