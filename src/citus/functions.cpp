// SQL-callable functions of the Citus awareness.
#include "citus/node.hpp"
#include "pg/datum.hpp"

using namespace concurrency;

// concurrency.citus_node_role(): 'none', 'coordinator' or 'worker'.
CONCURRENCY_FUNCTION(concurrency_citus_node_role) {
	switch (citus::local_role().role) {
	case citus::Role::coordinator:
		return pg::text_datum("coordinator");
	case citus::Role::worker:
		return pg::text_datum("worker");
	default:
		return pg::text_datum("none");
	}
}
