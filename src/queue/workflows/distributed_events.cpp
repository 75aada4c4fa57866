// Durable workflows on distributed queues: the event tables made Citus
// distributed tables, by event name and co-located, when the first queue is
// distributed (src/sql/80_queue_workflows.sql declares the functions;
// docs/workflows.md, "Distributed queues").
#include <string>

#include "citus/node.hpp"
#include "pg/spi.hpp"

extern "C" {
#include "commands/trigger.h"
}

namespace concurrency::queue {
namespace {

// Makes concurrency.event and concurrency.event_wait distributed tables (a
// no-op where they are already, or on a server that is not a Citus
// coordinator). SPI connected.
void distribute_event_tables() {
	if (citus::local_role().role != citus::Role::coordinator)
		return;
	if (pg::execute("SELECT FROM pg_catalog.pg_dist_partition"
	                " WHERE logicalrelid OPERATOR(pg_catalog.=) 'concurrency.event'::pg_catalog.regclass",
	                0, nullptr, nullptr, nullptr, false) > 0)
		return;
	pg::execute("SELECT create_distributed_table('concurrency.event', 'name')");
	pg::execute("SELECT create_distributed_table('concurrency.event_wait', 'event',"
	            " colocate_with => 'concurrency.event')");
}

} // namespace
} // namespace concurrency::queue

using namespace concurrency;

// concurrency_internal.distribute_events() — makes the event tables Citus
// distributed tables (a no-op where they are already). SECURITY DEFINER:
// runs as the extension's owner, who owns them; on the coordinator.
CONCURRENCY_FUNCTION(concurrency_distribute_events) {
	pg::spi_connect();
	queue::distribute_event_tables();
	pg::spi_finish();
	PG_RETURN_VOID();
}

// concurrency_internal.distributed_queue_added() — the deferred trigger of
// concurrency.distributed_queue: the first queue distributed distributes the
// event tables, when its transaction commits (in the update from 0.3.0
// Citus runs the update on the other nodes after this one, and the tables
// must exist there before they are distributed). SECURITY DEFINER, as
// distribute_events.
CONCURRENCY_FUNCTION(concurrency_distributed_queue_added) {
	if (!CALLED_AS_TRIGGER(fcinfo))
		throw Error(sqlstate::trigger_protocol_violated,
		            "concurrency_internal.distributed_queue_added() is a trigger function");
	pg::spi_connect();
	queue::distribute_event_tables();
	pg::spi_finish();
	return PointerGetDatum(nullptr);
}
