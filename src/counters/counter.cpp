// The counter's catalog row, the permission check and the switch to the
// extension's owner, shared by every counter function.
#include <string>

#include <fmt/format.h>

#include "common/sql_text.hpp"
#include "counters/counter.hpp"
#include "pg/datum.hpp"
#include "pg/spi.hpp"

extern "C" {
#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "mb/pg_wchar.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
}

namespace concurrency::counters {

namespace {

// The owner of concurrency.counter: the extension's owner.
Oid extension_owner() {
	Oid owner = pg::guard([] {
		Oid nsp = get_namespace_oid("concurrency", false);
		Oid relid = get_relname_relid("counter", nsp);
		if (!OidIsValid(relid))
			return InvalidOid;
		HeapTuple tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
		if (!HeapTupleIsValid(tuple))
			return InvalidOid;
		Oid relowner = reinterpret_cast<Form_pg_class>(GETSTRUCT(tuple))->relowner;
		ReleaseSysCache(tuple);
		return relowner;
	});
	if (!OidIsValid(owner))
		throw Error(sqlstate::object_not_in_prerequisite_state,
		            "counters need concurrency_ext 0.4.0's objects",
		            "The table concurrency.counter does not exist in this database.",
		            "ALTER EXTENSION concurrency_ext UPDATE");
	return owner;
}

const char *need_name(Need need) {
	switch (need) {
	case Need::read:
		return "read";
	case Need::use:
		return "use";
	case Need::own:
		break;
	}
	return "ownership";
}

} // namespace

AsExtensionOwner::AsExtensionOwner() {
	Oid owner = extension_owner();
	GetUserIdAndSecContext(&saved_user_, &saved_context_);
	SetUserIdAndSecContext(owner,
	                       saved_context_ | SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
}

AsExtensionOwner::~AsExtensionOwner() {
	SetUserIdAndSecContext(saved_user_, saved_context_);
}

std::string counter_name_arg(FunctionCallInfo fcinfo, int n, SourceLocation at) {
	std::string name = pg::text_arg(fcinfo, n, "name", at);
	if (name.empty())
		throw Error(sqlstate::invalid_parameter_value, "a counter's name must not be empty", "", "", at);
	std::size_t chars = pg::guard([&] {
		return static_cast<std::size_t>(pg_mbstrlen_with_len(name.data(), static_cast<int>(name.size())));
	});
	if (chars > static_cast<std::size_t>(max_name_length))
		throw Error(sqlstate::invalid_parameter_value,
		            fmt::format("a counter's name must be at most {} characters", max_name_length),
		            fmt::format("The name has {} characters.", chars), "", at);
	return name;
}

Counter open_counter(const std::string &name, Oid user, Need need, const char *function, bool lock) {
	static const Oid types[2] = {TEXTOID, OIDOID};
	// is_owner: the owner, a member of it, or a superuser (pg_has_role
	// answers true for superusers). permitted: a matching permission row.
	static const char *columns =
	    "SELECT c.slots, c.min_value IS NOT NULL, c.max_value IS NOT NULL, "
	    "pg_has_role($2, c.owner::oid, 'USAGE') AS is_owner, "
	    "EXISTS (SELECT FROM concurrency.counter_permission AS p WHERE p.counter = c.name "
	    "AND (p.grantee::oid = 0 OR pg_has_role($2, p.grantee::oid, 'USAGE')) AND p.permission = 'use') AS "
	    "uses, "
	    "EXISTS (SELECT FROM concurrency.counter_permission AS p WHERE p.counter = c.name "
	    "AND (p.grantee::oid = 0 OR pg_has_role($2, p.grantee::oid, 'USAGE')) AND p.permission = 'read') AS "
	    "reads "
	    "FROM concurrency.counter AS c WHERE c.name = $1";
	static const std::string plain = columns;
	static const std::string locked = std::string(columns) + " FOR NO KEY UPDATE OF c";
	SPIPlanPtr plan =
	    lock ? pg::prepared_plan("counters:open-locked", locked.c_str(), 2, types)
	         : pg::prepared_plan("counters:open", plain.c_str(), 2, types, CURSOR_OPT_GENERIC_PLAN);
	Datum values[2] = {pg::text_datum(name), ObjectIdGetDatum(user)};
	uint64 rows = pg::execute(plan, values, nullptr, !lock, 0, pg::Visibility::latest);
	if (rows == 0)
		throw Error(sqlstate::undefined_object, fmt::format("counter \"{}\" does not exist", name), "",
		            fmt::format("Create it with SELECT concurrency.create_counter({}); the view "
		                        "concurrency.counters lists the counters you may read.",
		                        quote_literal(name)));
	Counter c;
	c.name = name;
	c.slots = pg::column_as<std::int32_t>(0, 1).value_or(1);
	c.has_min = pg::column_as<bool>(0, 2).value_or(false);
	c.has_max = pg::column_as<bool>(0, 3).value_or(false);
	bool is_owner = pg::column_as<bool>(0, 4).value_or(false);
	bool uses = pg::column_as<bool>(0, 5).value_or(false);
	bool reads = pg::column_as<bool>(0, 6).value_or(false);
	bool allowed = is_owner || (need == Need::use && uses) || (need == Need::read && (uses || reads));
	if (!allowed) {
		std::string role = pg::guard([&] { return GetUserNameFromId(user, false); });
		throw Error(sqlstate::insufficient_privilege,
		            fmt::format("role \"{}\" lacks {} on counter \"{}\"", role, need_name(need), name),
		            need == Need::own ? fmt::format("{} is for the counter's owner.", function)
		                              : fmt::format("{} needs permission {}.", function, need_name(need)),
		            need == Need::own
		                ? std::string("Ask the counter's owner, or a superuser.")
		                : fmt::format("The counter's owner can grant it: SELECT "
		                              "concurrency.grant_counter({}, {}, '{}');",
		                              quote_literal(name), quote_literal(role), need_name(need)));
	}
	return c;
}

} // namespace concurrency::counters
