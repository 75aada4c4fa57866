// Queue permissions: the per-backend cache, the check, grant_queue and
// revoke_queue, and the trigger that tells other backends to reload.
#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "common/sql_text.hpp"
#include "pg/datum.hpp"
#include "queue/permissions.hpp"

extern "C" {
#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
}

namespace concurrency::queue {

namespace {

constexpr const char *permission_table_name = "queue_permission";
// The role whose members hold read on every queue (src/sql/20_queue.sql).
constexpr const char *monitor_role_name = "concurrency_monitor";

struct Grant {
	Oid grantee; // InvalidOid: PUBLIC
	PermissionMask mask;
};

// What this backend knows of one queue's permissions: valid while the
// queue's table is the same one and no change to concurrency.queue_permission
// was announced since it was read.
struct QueueGrants {
	Oid relid = InvalidOid;
	std::uint64_t generation = 0;
	std::vector<Grant> grants;
};

std::unordered_map<std::string, QueueGrants> &cached_grants() {
	static std::unordered_map<std::string, QueueGrants> grants;
	return grants;
}

// Entries read under an older generation of concurrency.queue_permission
// are read again.
TableGeneration permission_table(permission_table_name);

// concurrency.queue_permission; 55000 while the extension's objects are
// older than the module (the package was upgraded, ALTER EXTENSION … UPDATE
// has not run yet).
Oid resolve_permission_table() {
	Oid relid = permission_table.relid();
	if (!OidIsValid(relid))
		throw Error(sqlstate::object_not_in_prerequisite_state,
		            "queue permissions need concurrency_ext 0.2.0's objects",
		            "The module is 0.2.0; the extension's objects in this database are older.",
		            "ALTER EXTENSION concurrency_ext UPDATE");
	return relid;
}

// Reads the permissions of a queue with the latest snapshot, not the
// transaction's: a revoke committed after a REPEATABLE READ transaction
// began must count at its next call, as it does for PostgreSQL's own ACLs.
void load_grants(const std::string &queue, Oid relid, QueueGrants &entry) {
	std::uint64_t seen =
	    permission_table.current(); // an invalidation during the read makes the entry stale at once
	resolve_permission_table();
	static const Oid types[1] = {TEXTOID};
	SPIPlanPtr plan = pg::prepared_plan("queue-permissions:load",
	                                    "SELECT grantee::pg_catalog.oid, permission FROM "
	                                    "concurrency.queue_permission WHERE queue OPERATOR(pg_catalog.=) $1",
	                                    1, types, CURSOR_OPT_GENERIC_PLAN);
	Datum values[1] = {pg::text_datum(queue)};
	uint64 rows = pg::execute(plan, values, nullptr, true, 0, pg::Visibility::latest);
	std::vector<Grant> grants;
	for (uint64 i = 0; i < rows; ++i) {
		bool isnull = false;
		Oid grantee = DatumGetObjectId(pg::column(i, 1, &isnull));
		Datum word_datum = pg::column(i, 2, &isnull);
		std::string word = pg::guard([&] { return TextDatumGetCString(word_datum); });
		auto p = parse_permission(word);
		if (!p)
			continue; // the table's CHECK constraint admits no other word
		auto it =
		    std::find_if(grants.begin(), grants.end(), [&](const Grant &g) { return g.grantee == grantee; });
		if (it == grants.end())
			grants.push_back(Grant{grantee, mask_of(*p)});
		else
			it->mask |= mask_of(*p);
	}
	entry.grants = std::move(grants);
	entry.relid = relid;
	entry.generation = seen;
}

PermissionMask held_by(Queue &q, Oid user, Oid owner) {
	bool all =
	    pg::guard([&] { return user == owner || superuser_arg(user) || has_privs_of_role(user, owner); });
	if (all)
		return all_permissions;
	// Pending invalidations are read now, not only when the call next takes
	// a lock it does not hold yet: a worker inside a long transaction that
	// holds all its locks already must see a revoke too. With nothing
	// pending this is a read of one shared counter.
	pg::guard([] { AcceptInvalidationMessages(); });
	QueueGrants &entry = cached_grants()[std::string(q.name())];
	if (entry.relid != q.info().relid || entry.generation != permission_table.current())
		load_grants(std::string(q.name()), q.info().relid, entry);
	PermissionMask mask = 0;
	for (const Grant &g : entry.grants)
		if ((mask & g.mask) != g.mask &&
		    (!OidIsValid(g.grantee) || pg::guard([&] { return has_privs_of_role(user, g.grantee); })))
			mask |= g.mask;
	// Members of concurrency_monitor (created by CREATE EXTENSION, like
	// pg_monitor for the server's statistics) may read every queue, present
	// and future: what a metrics exporter needs.
	if (!(mask & mask_of(Permission::read)) && pg::guard([&] {
		    Oid monitor = get_role_oid(monitor_role_name, true);
		    return OidIsValid(monitor) && has_privs_of_role(user, monitor);
	    }))
		mask |= mask_of(Permission::read);
	return mask;
}

std::string role_name(Oid role) {
	return pg::guard([&] { return GetUserNameFromId(role, false); });
}

} // namespace

AsRole::AsRole(Oid role) noexcept {
	GetUserIdAndSecContext(&saved_user_, &saved_context_);
	SetUserIdAndSecContext(role,
	                       saved_context_ | SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
}

AsRole::~AsRole() {
	SetUserIdAndSecContext(saved_user_, saved_context_);
}

Oid queue_owner(Queue &q) {
	return relation_owner(q.info().relid);
}

bool holds(Queue &q, Permission p) {
	Oid user = pg::guard([] { return GetUserId(); });
	return (held_by(q, user, queue_owner(q)) & mask_of(p)) != 0;
}

bool holds(Queue &q, Oid role, Permission p) {
	return (held_by(q, role, queue_owner(q)) & mask_of(p)) != 0;
}

void require(Queue &q, Oid role, Permission p, const char *function) {
	if (held_by(q, role, queue_owner(q)) & mask_of(p))
		return;
	std::string name = role_name(role);
	throw Error(
	    sqlstate::insufficient_privilege,
	    fmt::format("role \"{}\" lacks permission {} on queue \"{}\"", name, permission_name(p), q.name()),
	    fmt::format("{} needs permission {}.", function, permission_name(p)),
	    fmt::format("The queue's owner, or a role with permission manage on it, can grant it: {}",
	                grant_statement(q.name(), name, p)));
}

AsRole authorize(Queue &q, Permission p, const char *function) {
	Oid user = pg::guard([] { return GetUserId(); });
	require(q, user, p, function);
	return AsRole(queue_owner(q));
}

void forget_dropped_roles() {
	resolve_permission_table();
	SPIPlanPtr plan = pg::prepared_plan("queue-permissions:dropped-roles",
	                                    "DELETE FROM concurrency.queue_permission AS p "
	                                    "WHERE p.grantee::pg_catalog.oid OPERATOR(pg_catalog.<>) 0 "
	                                    "AND NOT EXISTS (SELECT FROM pg_catalog.pg_roles AS r WHERE r.oid "
	                                    "OPERATOR(pg_catalog.=) p.grantee::pg_catalog.oid)",
	                                    0, nullptr);
	pg::execute(plan, nullptr, nullptr, false);
}

void clear_permissions(const std::string &queue) {
	resolve_permission_table();
	static const Oid types[1] = {TEXTOID};
	SPIPlanPtr plan = pg::prepared_plan(
	    "queue-permissions:clear",
	    "DELETE FROM concurrency.queue_permission WHERE queue OPERATOR(pg_catalog.=) $1", 1, types);
	Datum values[1] = {pg::text_datum(queue)};
	pg::execute(plan, values, nullptr, false);
	forget_dropped_roles();
}

void permissions_init() {
	permission_table.start();
}

namespace {
PermissionHooks permission_hooks; // set by queue/distributed/ at start-up
} // namespace

void set_permission_hooks(const PermissionHooks &hooks) {
	permission_hooks = hooks;
}

} // namespace concurrency::queue

using namespace concurrency;
using concurrency::queue::Permission;
using concurrency::queue::PermissionMask;

namespace {

// The permission words of argument 2: 22004 for NULL or a NULL element,
// 22023 for an empty array or a word that names no permission.
PermissionMask permissions_arg(FunctionCallInfo fcinfo) {
	pg::require_arg(fcinfo, 2, "permissions");
	ArrayType *array = pg::guard([&] { return PG_GETARG_ARRAYTYPE_P(2); });
	Datum *elements = nullptr;
	bool *nulls = nullptr;
	int count = 0;
	pg::guard([&] { deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, &elements, &nulls, &count); });
	std::vector<std::string> words;
	for (int i = 0; i < count; ++i) {
		if (nulls[i])
			throw Error(sqlstate::null_value_not_allowed, "permissions must not contain null",
			            fmt::format("Element {} of the array is null.", i + 1));
		Datum element = elements[i];
		words.emplace_back(pg::guard([&] { return TextDatumGetCString(element); }));
	}
	if (words.empty())
		throw Error(sqlstate::invalid_parameter_value, "permissions must name at least one permission", "",
		            fmt::format("The permissions are {}.", queue::permission_choices()));
	auto parsed = queue::parse_permissions(words);
	if (parsed.unknown)
		throw Error(sqlstate::invalid_parameter_value,
		            fmt::format("unknown queue permission \"{}\"", *parsed.unknown), "",
		            fmt::format("The permissions are {}.", queue::permission_choices()));
	return parsed.mask;
}

// grant_queue and revoke_queue: (queue text, role name, permissions text[]).
// The caller needs manage on the queue (its owner and superusers have it).
// The rows are written as the extension's owner (who owns the permission
// table); read is mirrored as SELECT on the queue's table, granted or
// revoked by the queue's owner.
Datum change_permissions(FunctionCallInfo fcinfo, bool grant) {
	std::string name = queue::queue_name_arg(fcinfo);
	pg::require_arg(fcinfo, 1, "role");
	std::string role = pg::guard([&] { return NameStr(*PG_GETARG_NAME(1)); });
	bool is_public = role == "public";
	Oid grantee = is_public ? InvalidOid : pg::guard([&] { return get_role_oid(role.c_str(), true); });
	if (!is_public && !OidIsValid(grantee))
		throw Error(sqlstate::undefined_object, fmt::format("role \"{}\" does not exist", role));
	PermissionMask mask = permissions_arg(fcinfo);
	const char *function = grant ? "grant_queue" : "revoke_queue";

	pg::spi_connect();
	queue::Queue q(name);
	queue::AsRole as_owner = queue::authorize(q, Permission::manage, function);
	bool distributed =
	    queue::permission_hooks.distributed && queue::permission_hooks.distributed(q, function);
	Oid table = queue::resolve_permission_table();
	{
		queue::AsRole as_extension_owner(queue::relation_owner(table));
		static const Oid types[3] = {TEXTOID, OIDOID, TEXTARRAYOID};
		std::vector<Datum> words;
		for (const std::string &word : queue::permission_names(mask))
			words.push_back(pg::text_datum(word));
		Datum array = pg::guard([&] {
			return PointerGetDatum(construct_array(words.data(), static_cast<int>(words.size()), TEXTOID, -1,
			                                       false, TYPALIGN_INT));
		});
		Datum values[3] = {pg::text_datum(name), ObjectIdGetDatum(grantee), array};
		SPIPlanPtr plan =
		    grant ? pg::prepared_plan("queue-permissions:grant",
		                              "INSERT INTO concurrency.queue_permission (queue, grantee, permission) "
		                              "SELECT $1, $2::pg_catalog.regrole, w FROM pg_catalog.unnest($3) AS w "
		                              "ON CONFLICT DO NOTHING",
		                              3, types)
		          : pg::prepared_plan("queue-permissions:revoke",
		                              "DELETE FROM concurrency.queue_permission "
		                              "WHERE queue OPERATOR(pg_catalog.=) $1 "
		                              "AND grantee::pg_catalog.oid OPERATOR(pg_catalog.=) $2 "
		                              "AND permission OPERATOR(pg_catalog.=) ANY ($3)",
		                              3, types);
		pg::execute(plan, values, nullptr, false);
		queue::forget_dropped_roles();
		if (distributed) // every node checks them
			queue::permission_hooks.sync_catalog(name);
	}
	// read is SELECT on the table too; the owner's own privileges are left alone
	if ((mask & queue::mask_of(Permission::read)) && grantee != queue::queue_owner(q)) {
		std::string who = is_public ? "PUBLIC" : quote_ident(role);
		pg::execute(grant ? fmt::format("GRANT SELECT ON TABLE {} TO {}", q.sql().table(), who)
		                  : fmt::format("REVOKE SELECT ON TABLE {} FROM {}", q.sql().table(), who));
	}
	pg::spi_finish();
	PG_RETURN_VOID();
}

} // namespace

// concurrency.grant_queue(queue, role, permissions)
CONCURRENCY_FUNCTION(concurrency_grant_queue) {
	return change_permissions(fcinfo, true);
}

// concurrency.revoke_queue(queue, role, permissions)
CONCURRENCY_FUNCTION(concurrency_revoke_queue) {
	return change_permissions(fcinfo, false);
}

// Trigger of concurrency.queue_permission (after each statement): every
// backend reads the permissions again at its next queue call (relcache
// invalidations are sent at commit, and at once to this backend).
CONCURRENCY_FUNCTION(concurrency_queue_permission_changed) {
	if (!CALLED_AS_TRIGGER(fcinfo))
		throw Error(sqlstate::trigger_protocol_violated,
		            "concurrency_internal.queue_permission_changed() is a trigger function");
	auto *data = reinterpret_cast<TriggerData *>(fcinfo->context);
	Oid relid = RelationGetRelid(data->tg_relation);
	pg::guard([&] { CacheInvalidateRelcacheByRelid(relid); });
	return PointerGetDatum(nullptr);
}
