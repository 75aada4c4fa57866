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

extern "C" {
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
}

namespace {

// Citus's execute_command_on_remote_nodes_as_user (exported by citus.so,
// with no SQL declaration of its own in Citus 14): sends a command to every
// other node of the cluster inside this transaction's coordinated
// transaction, so that it commits or aborts with it (two-phase commit).
PGFunction remote_command = nullptr;

} // namespace

// concurrency_internal.distributed_send(command): runs `command` on every
// other node of the Citus cluster as the current user, as part of this
// transaction. For the catalog of distributed queues
// (concurrency_internal.distributed_sync_catalog), which every node must know. Internal: executable by its
// owner only.
CONCURRENCY_FUNCTION(concurrency_distributed_send) {
	pg::require_arg(fcinfo, 0, "command");
	Datum command = PG_GETARG_DATUM(0);
	if (citus::local_role().role == citus::Role::none)
		throw Error(
		    sqlstate::feature_not_supported, "this server is not a Citus node",
		    "concurrency_internal.distributed_send runs a command on the other nodes of a Citus cluster.");
	if (!remote_command)
		remote_command = pg::guard([] {
			return reinterpret_cast<PGFunction>(load_external_function(
			    "$libdir/citus", "execute_command_on_remote_nodes_as_user", true, nullptr));
		});
	pg::guard([&] {
		Datum user = CStringGetTextDatum(GetUserNameFromId(GetUserId(), false));
		DirectFunctionCall2(remote_command, command, user);
	});
	PG_RETURN_VOID();
}
