// The subsystem registry: the backend-local cache used by every lock call,
// register_subsystem / unregister_subsystem, and the statement trigger that
// turns registry changes into relcache invalidations.
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "locks/lock_keys.hpp"
#include "common/names.hpp"
#include "common/sql_text.hpp"
#include "locks/registry.hpp"
#include "pg/datum.hpp"
#include "pg/spi.hpp"

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
bool cache_valid = false;
Oid registry_relid = InvalidOid;
std::unordered_map<std::string, Subsystem> cache;
std::string lookup_buffer; // reused, so that a hit allocates nothing

void registry_changed(Datum, Oid relid) {
	if (relid == InvalidOid || relid == registry_relid)
		cache_valid = false;
}

Oid registry_oid() {
	return pg::guard([] {
		Oid nsp = get_namespace_oid("concurrency", false);
		Oid rel = get_relname_relid("subsystem", nsp);
		if (!OidIsValid(rel))
			ereport(ERROR, (errcode(ERRCODE_UNDEFINED_TABLE),
			                errmsg("the registry table concurrency.subsystem does not exist"),
			                errhint("Reinstall the extension: DROP EXTENSION concurrency_ext; CREATE EXTENSION concurrency_ext;")));
		return rel;
	});
}

// Runs a kept plan on the latest committed state of the registry, whatever the
// isolation level of the calling transaction: a REPEATABLE READ snapshot
// taken before a registration must neither hide it from the cache (which would
// then stay stale until the next change) nor let register_subsystem miss a
// row that a concurrent registration committed while we waited for the lock.
uint64 execute_on_latest(SPIPlanPtr plan, Datum *values, const char *nulls, bool read_only) {
	int rc = pg::guard([&] {
		return SPI_execute_snapshot(plan, values, nulls, GetLatestSnapshot(), InvalidSnapshot, read_only, true, 0);
	});
	if (rc < 0)
		throw Error(sqlstate::internal_error, fmt::format("SPI_execute_snapshot failed: {}", SPI_result_code_string(rc)));
	return SPI_processed;
}

std::string text_column(HeapTuple tuple, TupleDesc desc, int column) {
	bool isnull = false;
	Datum d = pg::guard([&] { return SPI_getbinval(tuple, desc, column, &isnull); });
	if (isnull)
		return {};
	text *t = pg::guard([&] { return DatumGetTextPP(d); });
	return std::string(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
}

template <typename T> T scalar_column(HeapTuple tuple, TupleDesc desc, int column, T (*convert)(Datum)) {
	bool isnull = false;
	Datum d = pg::guard([&] { return SPI_getbinval(tuple, desc, column, &isnull); });
	return isnull ? T{} : convert(d);
}

std::int64_t datum_int64(Datum d) { return DatumGetInt64(d); }
int datum_int32(Datum d) { return DatumGetInt32(d); }
bool datum_bool(Datum d) { return DatumGetBool(d); }

void reload_cache() {
	// Valid from here on: an invalidation that arrives while we read (the
	// table lock taken by the query processes pending ones) flips it back, and
	// the next lookup reads again.
	cache_valid = true;
	try {
		registry_relid = registry_oid();
		std::unordered_map<std::string, Subsystem> fresh;
		pg::spi_connect();
		SPIPlanPtr plan = pg::prepared_plan(
		    "locks:registry", "SELECT name, key, slot, xact_only FROM concurrency.subsystem", 0, nullptr);
		uint64 n = execute_on_latest(plan, nullptr, nullptr, true);
		for (uint64 i = 0; i < n; ++i) {
			HeapTuple row = SPI_tuptable->vals[i];
			TupleDesc desc = SPI_tuptable->tupdesc;
			Subsystem s;
			s.key = scalar_column(row, desc, 2, datum_int64);
			s.slot = scalar_column(row, desc, 3, datum_int32);
			s.xact_only = scalar_column(row, desc, 4, datum_bool);
			fresh.emplace(text_column(row, desc, 1), s);
		}
		pg::spi_finish();
		cache.swap(fresh);
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

void registry_init() { CacheRegisterRelcacheCallback(registry_changed, (Datum)0); }

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
	pg::require_arg(fcinfo, 1, "key");
	std::int64_t key = PG_GETARG_INT64(1);
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
	    "locks:find", "SELECT name, key FROM concurrency.subsystem WHERE name = $1 OR key = $2", 2, find_types);
	Datum find_values[] = {name_datum, key_datum};
	uint64 n = execute_on_latest(find, find_values, nullptr, true);
	bool same_name_same_key = false;
	std::optional<std::int64_t> key_of_name;
	std::optional<std::string> owner_of_key;
	for (uint64 i = 0; i < n; ++i) {
		std::string row_name = text_column(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		std::int64_t row_key = scalar_column(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2, datum_int64);
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
			SPIPlanPtr update = pg::prepared_plan(
			    "locks:update",
			    "UPDATE concurrency.subsystem SET description = coalesce($2, description), "
			    "xact_only = coalesce($3, xact_only) WHERE name = $1",
			    3, types);
			Datum values[] = {name_datum, description_datum, BoolGetDatum(xact_only)};
			const char nulls[] = {' ', has_description ? ' ' : 'n', has_xact_only ? ' ' : 'n', '\0'};
			execute_on_latest(update, values, nulls, false);
		}
	} else {
		SPIPlanPtr slots = pg::prepared_plan("locks:slots", "SELECT slot FROM concurrency.subsystem", 0, nullptr);
		uint64 rows = execute_on_latest(slots, nullptr, nullptr, true);
		std::vector<int> used;
		used.reserve(rows);
		for (uint64 i = 0; i < rows; ++i)
			used.push_back(scalar_column(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, datum_int32));
		std::optional<int> slot = lowest_free_slot(std::move(used));
		if (!slot)
			throw Error(sqlstate::program_limit_exceeded, "no free slot for another subsystem",
			            fmt::format("All {} slots ({}–{}) are taken.", max_slot - min_slot + 1, min_slot, max_slot),
			            "Unregister subsystems that are no longer used.");
		const Oid types[] = {TEXTOID, INT8OID, INT4OID, TEXTOID, BOOLOID};
		SPIPlanPtr insert = pg::prepared_plan(
		    "locks:insert",
		    "INSERT INTO concurrency.subsystem (name, key, slot, description, xact_only) VALUES ($1, $2, $3, $4, $5)",
		    5, types);
		Datum values[] = {name_datum, key_datum, Int32GetDatum(*slot), description_datum, BoolGetDatum(xact_only)};
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
		throw Error(sqlstate::trigger_protocol_violated, "concurrency.subsystem_changed() is a trigger function");
	auto *trigger = reinterpret_cast<TriggerData *>(fcinfo->context);
	pg::guard([&] { CacheInvalidateRelcache(trigger->tg_relation); });
	return PointerGetDatum(nullptr);
}
