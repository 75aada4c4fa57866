#include "citus/node.hpp"
#include "citus/init.hpp"

#include <cstring>

#include "pg/guard.hpp"
#include "pg/invalidation.hpp"
#include "pg/spi.hpp"

extern "C" {
#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/pg_namespace.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
}

namespace concurrency::citus {

namespace {

enum class Loaded { unknown, no, yes };
Loaded citus_loaded = Loaded::unknown; // fixed for the backend's life
bool role_valid = false;
NodeRole cached_role;
Oid local_group_relid = InvalidOid;

void role_changed(Datum, Oid relid) {
	// While no Citus catalog is known (none in this database yet), any
	// relcache reset may be CREATE EXTENSION citus: read again next time.
	if (relid == InvalidOid || relid == local_group_relid || local_group_relid == InvalidOid)
		role_valid = false;
}

// Reads pg_dist_local_group's one row in plain C (no C++ object alive).
NodeRole read_role() {
	NodeRole result;
	Oid relid = get_relname_relid("pg_dist_local_group", PG_CATALOG_NAMESPACE);
	local_group_relid = relid;
	if (!OidIsValid(relid))
		return result; // Citus loaded, but not created in this database
	Relation rel = table_open(relid, AccessShareLock);
	SysScanDesc scan = systable_beginscan(rel, InvalidOid, false, nullptr, 0, nullptr);
	HeapTuple tuple = systable_getnext(scan);
	result.role = Role::coordinator;
	if (HeapTupleIsValid(tuple)) {
		bool isnull = false;
		Datum group = heap_getattr(tuple, 1, RelationGetDescr(rel), &isnull);
		if (!isnull)
			result.group = DatumGetInt32(group);
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	if (result.group != 0)
		result.role = Role::worker;
	return result;
}

} // namespace

void init() {
	pg::register_relcache_callback(role_changed, (Datum)0);
}

NodeRole local_role() {
	if (citus_loaded == Loaded::unknown)
		citus_loaded = pg::guard([] { return GetConfigOption("citus.version", true, false) != nullptr; })
		                   ? Loaded::yes
		                   : Loaded::no;
	if (citus_loaded == Loaded::no)
		return NodeRole{};
	if (!role_valid) {
		cached_role = pg::guard([] { return read_role(); });
		role_valid = true;
	}
	return cached_role;
}

bool in_routed_call() {
	// as Citus itself tells its internal backends (backend_data.c)
	static constexpr char prefix[] = "citus_internal gpid=";
	return local_role().role != Role::none && application_name &&
	       std::strncmp(application_name, prefix, sizeof prefix - 1) == 0;
}

std::string coordinator_address() {
	char buffer[300] = "";
	pg::guard([&] {
		if (SPI_connect() != SPI_OK_CONNECT)
			return;
		if (SPI_execute("SELECT pg_catalog.format('%s:%s', nodename, nodeport) FROM pg_catalog.pg_dist_node"
		                " WHERE groupid OPERATOR(pg_catalog.=) 0 LIMIT 1",
		                true, 1) == SPI_OK_SELECT &&
		    SPI_processed == 1) {
			char *value = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
			if (value)
				strlcpy(buffer, value, sizeof buffer);
		}
		SPI_finish();
	});
	return buffer;
}

} // namespace concurrency::citus
