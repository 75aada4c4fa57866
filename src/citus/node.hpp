// What this server is in a Citus cluster, as far as the extension needs to
// know: not a Citus node at all, the coordinator (group 0, or a server with
// Citus on which no cluster was formed), or a worker node.
//
// Detected cheaply: whether Citus is loaded at all is fixed for the life of a
// backend (it must be in shared_preload_libraries); the role is read once
// from pg_dist_local_group and kept until a relcache invalidation of that
// table (Citus sends one whenever it changes the local group) or a reset of
// all relcache entries.
#pragma once

#include <cstdint>
#include <string>

#include "pg/postgres.hpp"

namespace concurrency::citus {

enum class Role { none, coordinator, worker };

struct NodeRole {
	Role role = Role::none;
	std::int32_t group = 0; // pg_dist_local_group.groupid (0 on the coordinator)
};

// The role of this server in the current database. Cached per backend.
NodeRole local_role();

// Whether this backend runs statements that another node's Citus sent it
// (its application_name is Citus's "citus_internal gpid=…"): a queue call
// routed here to the node of its shard. Such a call acts on this node's
// shards only and never routes further: Citus refuses a distributed query
// from inside a query on a shard.
bool in_routed_call();

// "host:port" of the coordinator from pg_dist_node, or "" when unknown. Reads
// the catalog on every call: for error messages only.
std::string coordinator_address();

} // namespace concurrency::citus
