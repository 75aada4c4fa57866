// The subsystem registry: the backend-local cache used by every lock call,
// register_subsystem / unregister_subsystem, and the statement trigger that
// turns registry changes into relcache invalidations.
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "pg/invalidation.hpp"
#include "locks/lock_keys.hpp"
#include "common/names.hpp"
#include "common/sql_text.hpp"
#include "locks/registry.hpp"
#include "pg/datum.hpp"
#include "pg/spi.hpp"
#include "pg/srf.hpp"

extern "C" {
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "storage/lmgr.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
}

namespace concurrency::locks {

namespace {

// The cache. Flipped to invalid by the relcache callback; reloaded on the next
// lookup. Plain globals: the callback may run at any invalidation point and
// only touches these two.
//
// Why C++ containers on the C++ heap, outside any memory context (so that
// pg_backend_memory_contexts does not show them): a container in a memory
// context needs an allocator that turns palloc's ERROR (a longjmp through the
// container's frames) into std::bad_alloc, and so would every std::string in
// it. The cache is small and bounded instead: at most one entry per
// registered subsystem (65,520 slots, 63-byte names), replaced whole on
// reload, never grown per call (bench/soak.sh measures a backend's memory
// under sustained load).
bool cache_valid = false;
Oid registry_relid = InvalidOid;
std::unordered_map<std::string, Subsystem> cache;
std::vector<SubsystemKey> listed; // the same rows, for registered_subsystems()
std::string lookup_buffer;        // reused, so that a hit allocates nothing

void registry_changed(Datum, Oid relid) noexcept {
	if (relid == InvalidOid || relid == registry_relid)
		cache_valid = false;
}

Oid registry_oid() {
	Oid rel =
	    pg::guard([] { return get_relname_relid("subsystem", get_namespace_oid("concurrency", false)); });
	if (!OidIsValid(rel))
		throw Error(
		    sqlstate::undefined_table, "the registry table concurrency.subsystem does not exist", "",
		    "Reinstall the extension: DROP EXTENSION concurrency_ext; CREATE EXTENSION concurrency_ext;");
	return rel;
}

// Every statement on the registry reads the latest committed state
// (pg::Visibility::latest), whatever the isolation level of the calling
// transaction: a REPEATABLE READ snapshot taken before a registration must
// neither hide it from the cache (which would then stay stale until the next
// change) nor let register_subsystem miss a row that a concurrent
// registration committed while we waited for the lock.
uint64 execute_on_latest(SPIPlanPtr plan, const Datum *values, const char *nulls, bool read_only) {
	return pg::execute(plan, values, nulls, read_only, 0, pg::Visibility::latest);
}

void reload_cache() {
	// Valid from here on: an invalidation that arrives while we read (the
	// table lock taken by the query processes pending ones) flips it back, and
	// the next lookup reads again.
	cache_valid = true;
	try {
		registry_relid = registry_oid();
		std::unordered_map<std::string, Subsystem> fresh;
		std::vector<SubsystemKey> fresh_list;
		pg::spi_connect();
		SPIPlanPtr plan = pg::prepared_plan(
		    "locks:registry", "SELECT name, key, slot, xact_only FROM concurrency.subsystem", 0, nullptr);
		uint64 n = execute_on_latest(plan, nullptr, nullptr, true);
		for (uint64 i = 0; i < n; ++i) {
			Subsystem s;
			s.key = pg::int64_column(i, 2);
			s.slot = pg::column_as<std::int32_t>(i, 3).value_or(0);
			s.xact_only = pg::column_as<bool>(i, 4).value_or(false);
			std::string name = pg::text_column(i, 1).value_or("");
			fresh_list.push_back(SubsystemKey{name, s.key, s.slot});
			fresh.emplace(std::move(name), s);
		}
		pg::spi_finish();
		cache.swap(fresh);
		listed.swap(fresh_list);
	} catch (...) {
		cache_valid = false;
		throw;
	}
}

[[noreturn]] void throw_invalid_name(std::string_view name) {
	auto problem = name_problem(name, max_subsystem_name_bytes);
	std::string detail = problem ? *problem + "." : std::string();
	if (!detail.empty() && detail[0] >= 'a' && detail[0] <= 'z')
		detail[0] = static_cast<char>(detail[0] - 'a' + 'A');
	throw Error(sqlstate::invalid_parameter_value, "invalid subsystem name", detail,
	            "A subsystem name is 1 to 63 bytes long, without whitespace or control characters.");
}

void check_name(std::string_view name) {
	if (name_problem(name, max_subsystem_name_bytes))
		throw_invalid_name(name);
}

const Subsystem *find_cached(std::string_view name) {
	if (!cache_valid)
		reload_cache();
	lookup_buffer.assign(name.data(), name.size());
	auto it = cache.find(lookup_buffer);
	return it == cache.end() ? nullptr : &it->second;
}

} // namespace

void registry_init() {
	pg::register_relcache_callback(registry_changed, (Datum)0);
}

const std::vector<SubsystemKey> &registered_subsystems() {
	if (!cache_valid)
		reload_cache();
	return listed;
}

const Subsystem &lookup_subsystem(std::string_view name) {
	// Longer than any registrable name: no need to look (nor to copy it).
	if (name.size() > max_subsystem_name_bytes)
		throw_invalid_name(name);
	if (const Subsystem *s = find_cached(name))
		return *s;
	// A miss: take in registry changes committed since this transaction began
	// (the cache is otherwise refreshed at transaction start), then look again.
	pg::guard([] { AcceptInvalidationMessages(); });
	if (const Subsystem *s = find_cached(name))
		return *s;
	check_name(name);
	std::string quoted(name);
	throw Error(sqlstate::undefined_object, fmt::format("subsystem \"{}\" is not registered", quoted), "",
	            fmt::format("Register it first: SELECT concurrency.register_subsystem({}, <key>);",
	                        quote_literal(quoted)));
}

} // namespace concurrency::locks

using namespace concurrency;
using namespace concurrency::locks;

// concurrency.register_subsystem(name, key, description, xact_only)
CONCURRENCY_FUNCTION(concurrency_register_subsystem) {
	std::string name = pg::text_arg(fcinfo, 0, "name");
	check_name(name);
	std::int64_t key = pg::int64_arg(fcinfo, 1, "key");
	bool has_description = !PG_ARGISNULL(2);
	std::string description = has_description ? pg::text_arg(fcinfo, 2, "description") : std::string();
	bool has_xact_only = !PG_ARGISNULL(3);
	bool xact_only = has_xact_only && PG_GETARG_BOOL(3);

	// Registrations are serialized by a lock on the table that conflicts with
	// itself and with writes, not with the readers (lock calls, pg_dump); it is
	// held until the transaction ends. What we then read is the latest state.
	Oid relid = registry_oid();
	pg::guard([&] { LockRelationOid(relid, ShareRowExclusiveLock); });

	pg::spi_connect();
	Datum name_datum = pg::text_datum(name);
	Datum key_datum = Int64GetDatum(key);

	const Oid find_types[] = {TEXTOID, INT8OID};
	SPIPlanPtr find = pg::prepared_plan(
	    "locks:find", "SELECT name, key FROM concurrency.subsystem WHERE name = $1 OR key = $2", 2,
	    find_types);
	Datum find_values[] = {name_datum, key_datum};
	uint64 n = execute_on_latest(find, find_values, nullptr, true);
	bool same_name_same_key = false;
	std::optional<std::int64_t> key_of_name;
	std::optional<std::string> owner_of_key;
	for (uint64 i = 0; i < n; ++i) {
		std::string row_name = pg::text_column(i, 1).value_or("");
		std::int64_t row_key = pg::int64_column(i, 2);
		if (row_name == name && row_key == key)
			same_name_same_key = true;
		else if (row_name == name)
			key_of_name = row_key;
		else
			owner_of_key = row_name;
	}
	if (key_of_name)
		throw Error(sqlstate::unique_violation,
		            fmt::format("subsystem \"{}\" is already registered with key {}", name, *key_of_name), "",
		            "A subsystem keeps its key. To move it to another key, unregister it first.");
	if (owner_of_key)
		throw Error(sqlstate::unique_violation,
		            fmt::format("key {} is already used by subsystem \"{}\"", key, *owner_of_key), "",
		            "Each subsystem needs a key of its own: choose another key.");

	Datum description_datum = has_description ? pg::text_datum(description) : (Datum)0;
	if (same_name_same_key) {
		// A migration running again: keep the row, take what was given.
		if (has_description || has_xact_only) {
			const Oid types[] = {TEXTOID, TEXTOID, BOOLOID};
			SPIPlanPtr update =
			    pg::prepared_plan("locks:update",
			                      "UPDATE concurrency.subsystem SET description = coalesce($2, description), "
			                      "xact_only = coalesce($3, xact_only) WHERE name = $1",
			                      3, types);
			Datum values[] = {name_datum, description_datum, BoolGetDatum(xact_only)};
			const char nulls[] = {' ', has_description ? ' ' : 'n', has_xact_only ? ' ' : 'n', '\0'};
			execute_on_latest(update, values, nulls, false);
		}
	} else {
		SPIPlanPtr slots =
		    pg::prepared_plan("locks:slots", "SELECT slot FROM concurrency.subsystem", 0, nullptr);
		uint64 rows = execute_on_latest(slots, nullptr, nullptr, true);
		std::vector<int> used;
		used.reserve(rows);
		for (uint64 i = 0; i < rows; ++i)
			used.push_back(pg::column_as<std::int32_t>(i, 1).value_or(0));
		std::optional<int> slot = lowest_free_slot(std::move(used));
		if (!slot)
			throw Error(
			    sqlstate::program_limit_exceeded, "no free slot for another subsystem",
			    fmt::format("All {} slots ({}–{}) are taken.", max_slot - min_slot + 1, min_slot, max_slot),
			    "Unregister subsystems that are no longer used.");
		const Oid types[] = {TEXTOID, INT8OID, INT4OID, TEXTOID, BOOLOID};
		SPIPlanPtr insert = pg::prepared_plan("locks:insert",
		                                      "INSERT INTO concurrency.subsystem (name, key, slot, "
		                                      "description, xact_only) VALUES ($1, $2, $3, $4, $5)",
		                                      5, types);
		Datum values[] = {name_datum, key_datum, Int32GetDatum(*slot), description_datum,
		                  BoolGetDatum(xact_only)};
		const char nulls[] = {' ', ' ', ' ', has_description ? ' ' : 'n', ' ', '\0'};
		execute_on_latest(insert, values, nulls, false);
	}
	pg::spi_finish();
	PG_RETURN_VOID();
}

// concurrency.unregister_subsystem(name)
CONCURRENCY_FUNCTION(concurrency_unregister_subsystem) {
	std::string name = pg::text_arg(fcinfo, 0, "name");
	Oid relid = registry_oid();
	pg::guard([&] { LockRelationOid(relid, ShareRowExclusiveLock); });
	pg::spi_connect();
	const Oid types[] = {TEXTOID};
	SPIPlanPtr remove =
	    pg::prepared_plan("locks:delete", "DELETE FROM concurrency.subsystem WHERE name = $1", 1, types);
	Datum values[] = {pg::text_datum(name)};
	uint64 n = execute_on_latest(remove, values, nullptr, false);
	pg::spi_finish();
	PG_RETURN_BOOL(n > 0);
}

// Statement trigger on concurrency.subsystem: plain DML sends no relcache
// invalidation, so the trigger sends one; every backend's name cache drops
// its copy (this backend's at the end of the statement, the others' when the
// transaction commits).
CONCURRENCY_FUNCTION(concurrency_subsystem_changed) {
	if (!CALLED_AS_TRIGGER(fcinfo))
		throw Error(sqlstate::trigger_protocol_violated,
		            "concurrency_internal.subsystem_changed() is a trigger function");
	auto *trigger = reinterpret_cast<TriggerData *>(fcinfo->context);
	pg::guard([&] { CacheInvalidateRelcache(trigger->tg_relation); });
	return PointerGetDatum(nullptr);
}

// concurrency.named_lock(classid, objid, objsubid): the subsystem (and the
// resource) whose lock an advisory lock of pg_locks is; no row when none.
CONCURRENCY_FUNCTION(concurrency_named_lock) {
	pg::ResultSet out = pg::materialize(fcinfo);
	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
		return (Datum)0;
	const AdvisoryTag tag{DatumGetObjectId(PG_GETARG_DATUM(0)), DatumGetObjectId(PG_GETARG_DATUM(1)),
	                      static_cast<std::uint16_t>(PG_GETARG_INT16(2))};
	NamedLock named = named_lock_of(tag, registered_subsystems());
	if (!named.subsystem)
		return (Datum)0;
	Datum values[2] = {pg::text_datum(named.subsystem->name), Int64GetDatum(named.resource.value_or(0))};
	bool nulls[2] = {false, !named.resource};
	pg::add_row(out, values, nulls);
	return (Datum)0;
}
