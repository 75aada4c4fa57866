// SQL-callable functions of the task queue (src/sql/20_queue.sql).
#include <algorithm>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "common/backoff.hpp"
#include "common/sql_text.hpp"
#include "pg/srf.hpp"
#include "queue/distributed.hpp"
#include "queue/keys.hpp"
#include "queue/keys_sql.hpp"
#include "queue/permissions.hpp"
#include "queue/queue.hpp"
#include "queue/claim_direct.hpp"
#include "queue/stats_sql.hpp"
#include "queue/wait.hpp"

extern "C" {
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "access/detoast.h"
#include "access/xact.h"
#include "commands/trigger.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
}

using namespace concurrency;
using namespace concurrency::queue;

namespace {

// run_at may be NULL (now) or a finite time: 'infinity' would be a task that
// never runs, and either infinity breaks every age computed from it.
void check_run_at(FunctionCallInfo fcinfo, int n) {
	if (!PG_ARGISNULL(n) && TIMESTAMP_NOT_FINITE(PG_GETARG_TIMESTAMPTZ(n)))
		throw Error(sqlstate::invalid_parameter_value, "run_at must be a finite time",
		            "Use NULL to run the task now.");
}

std::string interval_text(const Interval &value) {
	return pg::guard([&] {
		return DatumGetCString(DirectFunctionCall1(interval_out, IntervalPGetDatum(const_cast<Interval *>(&value))));
	});
}


bool owns_relation(Oid relid, Oid role) {
	return pg::guard([&] {
#if PG_VERSION_NUM >= 160000
		return object_ownercheck(RelationRelationId, relid, role);
#else
		return pg_class_ownercheck(relid, role);
#endif
	});
}

// The settings of create_queue and alter_queue, from arguments 1..5.
// Missing arguments (a 0.1.0 declaration calling this module) count as NULL.
struct QueueSettings {
	std::optional<Interval> lease;
	std::optional<int32> max_attempts;
	// set: given; its value NULL (nullopt inside): remove the setting
	std::optional<std::optional<Interval>> retain;
	std::optional<std::optional<int32>> key_limit;
	std::optional<std::optional<int32>> max_leased;
};

bool arg_null(FunctionCallInfo fcinfo, int n) { return PG_NARGS() <= n || PG_ARGISNULL(n); }

// A limit: 0 removes it (nullopt), negative is refused.
std::optional<std::optional<int32>> limit_arg(FunctionCallInfo fcinfo, int n, const char *argname) {
	if (arg_null(fcinfo, n))
		return std::nullopt;
	int32 value = PG_GETARG_INT32(n);
	if (value < 0)
		throw Error(sqlstate::invalid_parameter_value, fmt::format("{} must not be negative", argname),
		            fmt::format("It is {}.", value), fmt::format("Use {} => 0 for no limit.", argname));
	return value == 0 ? std::optional<int32>() : std::optional<int32>(value);
}

constexpr int max_retain_years = 100;
// max_leased is enforced with one slot row per lease (keys.cpp): a bound keeps
// create_queue and alter_queue from writing millions of them.
constexpr int32 max_leased_limit = 10000;

QueueSettings settings_args(FunctionCallInfo fcinfo) {
	QueueSettings s;
	if (!arg_null(fcinfo, 1))
		s.lease = queue::positive_interval_arg(fcinfo, 1, "lease");
	if (!arg_null(fcinfo, 2)) {
		s.max_attempts = PG_GETARG_INT32(2);
		if (*s.max_attempts < 1)
			throw Error(sqlstate::invalid_parameter_value, "max_attempts must be at least 1");
	}
	if (!arg_null(fcinfo, 3)) {
		Interval value = *PG_GETARG_INTERVAL_P(3);
		Interval zero{};
		int cmp = pg::guard([&] {
			return DatumGetInt32(DirectFunctionCall2(interval_cmp, IntervalPGetDatum(&value), IntervalPGetDatum(&zero)));
		});
		if (cmp < 0)
			throw Error(sqlstate::invalid_parameter_value, "retain must not be negative",
			            fmt::format("It is {}.", interval_text(value)), "Use retain => '0' to retain no tasks.");
		// purge computes now - retain: a bound keeps that far from the range
		// of timestamptz (and refuses an infinite interval)
		Interval longest{};
		longest.month = max_retain_years * MONTHS_PER_YEAR;
		bool too_long = pg::guard([&] {
			return DatumGetBool(DirectFunctionCall2(interval_gt, IntervalPGetDatum(&value), IntervalPGetDatum(&longest)));
		});
		if (too_long)
			throw Error(sqlstate::invalid_parameter_value, "retain is too long",
			            fmt::format("It is {}; at most {} years are allowed.", interval_text(value), max_retain_years));
		s.retain = cmp == 0 ? std::optional<Interval>() : std::optional<Interval>(value);
	}
	s.key_limit = limit_arg(fcinfo, 4, "key_limit");
	s.max_leased = limit_arg(fcinfo, 5, "max_leased");
	if (s.max_leased && *s.max_leased && **s.max_leased > max_leased_limit)
		throw Error(sqlstate::invalid_parameter_value, "max_leased is too large",
		            fmt::format("It is {}; at most {} tasks of a queue can be leased at once under a limit.",
		                        **s.max_leased, max_leased_limit),
		            "Use max_leased => 0 for no limit.");
	return s;
}

// Parameters $2..$6 of the catalog statements: lease, max_attempts, retain,
// key_limit, max_leased; a setting not given is NULL.
struct SettingsParams {
	Datum values[5];
	char nulls[5];
	Interval lease, retain;
	explicit SettingsParams(const QueueSettings &s) : lease(s.lease.value_or(Interval{})), retain{} {
		bool retain_given = s.retain && *s.retain;
		if (retain_given)
			retain = **s.retain;
		values[0] = IntervalPGetDatum(&lease);
		values[1] = Int32GetDatum(s.max_attempts.value_or(0));
		values[2] = IntervalPGetDatum(&retain);
		values[3] = Int32GetDatum(s.key_limit && *s.key_limit ? **s.key_limit : 0);
		values[4] = Int32GetDatum(s.max_leased && *s.max_leased ? **s.max_leased : 0);
		nulls[0] = s.lease ? ' ' : 'n';
		nulls[1] = s.max_attempts ? ' ' : 'n';
		nulls[2] = retain_given ? ' ' : 'n';
		nulls[3] = s.key_limit && *s.key_limit ? ' ' : 'n';
		nulls[4] = s.max_leased && *s.max_leased ? ' ' : 'n';
	}
	SettingsParams(const SettingsParams &) = delete;
};

} // namespace

// concurrency.create_queue(queue, lease, max_attempts, retain, key_limit,
// max_leased, distributed) — SECURITY DEFINER: runs as the extension owner;
// the table it creates belongs to the caller. distributed => true then makes
// the queue distributed (distribute_queue, on a Citus coordinator only) in
// the same statement; false leaves an existing queue as it is.
CONCURRENCY_FUNCTION(concurrency_create_queue) {
	std::string name = queue::queue_name_arg(fcinfo);
	pg::require_arg(fcinfo, 1, "lease");
	pg::require_arg(fcinfo, 2, "max_attempts");
	QueueSettings settings = settings_args(fcinfo);
	bool distributed = false; // a 0.1.0 declaration has no such argument
	if (PG_NARGS() > 6) {
		pg::require_arg(fcinfo, 6, "distributed");
		distributed = PG_GETARG_BOOL(6);
	}
	if (distributed)
		queue::require_coordinator(name);

	Oid caller = pg::guard([] { return GetOuterUserId(); });
	std::string caller_name = pg::guard([&] { return GetUserNameFromId(caller, false); });
	QueueSql sql(name);

	pg::spi_connect();
	SettingsParams params(settings);
	static const Oid insert_types[7] = {TEXTOID, INTERVALOID, INT4OID, INTERVALOID, INT4OID, INT4OID, TEXTOID};
	Datum insert_values[7] = {pg::text_datum(name), params.values[0], params.values[1], params.values[2],
	                          params.values[3], params.values[4], pg::text_datum(caller_name)};
	char insert_nulls[7] = {' ', ' ', ' ', params.nulls[2], params.nulls[3], params.nulls[4], ' '};
	uint64 inserted =
	    execute("INSERT INTO concurrency.queue (name, lease, max_attempts, retain, key_limit, max_leased, created_by) "
	            "VALUES ($1, $2, $3, $4, $5, $6, $7::pg_catalog.name) ON CONFLICT (name) DO NOTHING",
	            7, insert_types, insert_values, insert_nulls);
	if (inserted == 0) {
		// It exists (or another session has just created it: ON CONFLICT waited
		// for that one to commit). Same settings: nothing to do.
		uint64 same = execute("SELECT lease = $2 AND max_attempts = $3 AND retain IS NOT DISTINCT FROM $4 "
		                      "AND key_limit IS NOT DISTINCT FROM $5 AND max_leased IS NOT DISTINCT FROM $6, "
		                      "format('lease %s, max_attempts %s, retain %s, key_limit %s, max_leased %s', "
		                      "       lease, max_attempts, coalesce(retain::text, 'none'), "
		                      "       coalesce(key_limit::text, 'none'), coalesce(max_leased::text, 'none')), "
		                      "format('lease %s, max_attempts %s, retain %s, key_limit %s, max_leased %s', "
		                      "       $2, $3, coalesce($4::text, 'none'), "
		                      "       coalesce($5::text, 'none'), coalesce($6::text, 'none')) "
		                      "FROM concurrency.queue WHERE name = $1",
		                      6, insert_types, insert_values, insert_nulls);
		bool isnull = false;
		if (same == 1 && !DatumGetBool(queue::column(0, 1, &isnull))) {
			std::string existing = pg::guard([&] { return TextDatumGetCString(queue::column(0, 2, &isnull)); });
			std::string asked = pg::guard([&] { return TextDatumGetCString(queue::column(0, 3, &isnull)); });
			throw Error(sqlstate::duplicate_object,
			            fmt::format("queue \"{}\" already exists with other settings", name),
			            fmt::format("It has {}; this call asked for {}.", existing, asked),
			            "Change the settings of an existing queue with concurrency.alter_queue().");
		}
		// Same settings. Only a queue whose table was dropped by hand is
		// missing its table: create it again.
		if (OidIsValid(queue::queue_relid(name))) {
			if (distributed)
				queue::distribute(name);
			pg::spi_finish();
			PG_RETURN_VOID();
		}
	}
	KeySql keys(name);
	execute(sql.create_table());
	execute(StatsSql(name).create_index());
	// side tables left by a queue table dropped by hand go with it
	std::string key_table = key_table_name(name);
	bool leftovers = pg::guard([&] {
		return OidIsValid(get_relname_relid(key_table.c_str(), get_namespace_oid("concurrency", false)));
	});
	if (leftovers)
		execute(keys.drop_tables());
	execute(keys.create_tables());
	clear_permissions(name);
	if (caller != pg::guard([] { return GetUserId(); })) {
		execute(sql.alter_owner(caller_name));
		execute(keys.alter_owner(caller_name));
	}
	if (settings.max_leased && *settings.max_leased) {
		static const Oid slot_types[1] = {INT4OID};
		Datum slots[1] = {Int32GetDatum(**settings.max_leased)};
		execute(keys.resize_slots(), 1, slot_types, slots);
	}
	queue::forget_queue(name);
	if (distributed)
		queue::distribute(name);
	pg::spi_finish();
	PG_RETURN_VOID();
}

// concurrency.alter_queue(queue, lease, max_attempts, retain, key_limit,
// max_leased) — SECURITY DEFINER; the caller (GetOuterUserId: the current
// role outside the function) needs permission manage on the queue.
// NULL keeps a setting. Every backend reloads the settings at its next
// transaction (the catalog's statement trigger invalidates the queue caches
// when the update commits).
CONCURRENCY_FUNCTION(concurrency_alter_queue) {
	std::string name = queue::queue_name_arg(fcinfo);
	QueueSettings settings = settings_args(fcinfo);
	Oid caller = pg::guard([] { return GetOuterUserId(); });
	QueueSql sql(name);

	pg::spi_connect();
	Oid relid = queue::queue_relid(name);
	if (!OidIsValid(relid))
		throw Error(sqlstate::undefined_object, fmt::format("queue \"{}\" does not exist", name), "",
		            "Create it with concurrency.create_queue().");
	{
		Queue q(name);
		queue::require(q, caller, Permission::manage, "alter_queue");
	}
	// a distributed queue keeps its limits with functions of its own
	// (src/sql/41_distributed_queue.sql)
	bool distributed = queue::is_distributed(relid);
	SettingsParams params(settings);
	static const Oid types[9] = {TEXTOID, INTERVALOID, INT4OID, INTERVALOID, INT4OID, INT4OID,
	                             BOOLOID, BOOLOID,     BOOLOID};
	Datum values[9] = {pg::text_datum(name),
	                   params.values[0],
	                   params.values[1],
	                   params.values[2],
	                   params.values[3],
	                   params.values[4],
	                   BoolGetDatum(settings.retain.has_value()),
	                   BoolGetDatum(settings.key_limit.has_value()),
	                   BoolGetDatum(settings.max_leased.has_value())};
	char nulls[9] = {' ', params.nulls[0], params.nulls[1], params.nulls[2], params.nulls[3], params.nulls[4],
	                 ' ', ' ', ' '};
	uint64 updated = execute("UPDATE concurrency.queue SET lease = coalesce($2, lease), "
	                         "max_attempts = coalesce($3, max_attempts), "
	                         "retain = CASE WHEN $7 THEN $4 ELSE retain END, "
	                         "key_limit = CASE WHEN $8 THEN $5 ELSE key_limit END, "
	                         "max_leased = CASE WHEN $9 THEN $6 ELSE max_leased END "
	                         "WHERE name = $1",
	                         9, types, values, nulls);
	if (updated == 0)
		throw Error(sqlstate::undefined_object, fmt::format("queue \"{}\" does not exist", name),
		            fmt::format("Table {} exists, but the queue is not in concurrency.queue.", sql.table()));
	if (settings.key_limit || settings.max_leased) {
		// the catalog's trigger has invalidated the cache: this sees the new settings
		Queue q(name);
		std::optional<int32> slots;
		if (settings.max_leased)
			slots = settings.max_leased->value_or(0);
		if (distributed)
			queue::distributed_limits(name, settings.key_limit.has_value(), slots);
		else
			queue::apply_limits(q, clock_now(), settings.key_limit.has_value(), slots);
	}
	pg::spi_finish();
	PG_RETURN_VOID();
}

// concurrency.drop_queue(queue) — SECURITY DEFINER; the caller must own the
// queue's table (superusers do).
CONCURRENCY_FUNCTION(concurrency_drop_queue) {
	std::string name = queue::queue_name_arg(fcinfo);
	Oid caller = pg::guard([] { return GetOuterUserId(); });
	QueueSql sql(name);

	pg::spi_connect();
	Oid relid = queue::queue_relid(name);
	if (OidIsValid(relid)) {
		if (!owns_relation(relid, caller))
			throw Error(sqlstate::insufficient_privilege, fmt::format("must be owner of queue \"{}\"", name),
			            fmt::format("Only the owner of table {} may drop the queue.", sql.table()));
		execute(sql.drop_table());
		execute(KeySql(name).drop_tables());
	}
	static const Oid types[1] = {TEXTOID};
	Datum values[1] = {pg::text_datum(name)};
	uint64 deleted = execute("DELETE FROM concurrency.queue WHERE name = $1", 1, types, values);
	if (!OidIsValid(relid) && deleted == 0)
		throw Error(sqlstate::undefined_object, fmt::format("queue \"{}\" does not exist", name));
	queue::forget_queue(name);
	pg::spi_finish();
	PG_RETURN_VOID();
}

namespace {

const Oid enqueue_types[6] = {TIMESTAMPTZOID, JSONBOID, TIMESTAMPTZOID, INT4OID, TEXTOID, TEXTOID};

// Inserts one task (parameters of QueueSql::enqueue) and returns its id, or
// with a dedupe_key, the id of the task that holds the key. ON CONFLICT waits
// for a concurrent insert (or completion) of the same key to commit or roll
// back; if the holder is gone between the insert and the lookup (purged,
// cancelled, dead), insert again.
std::optional<int64> enqueue_one(Queue &q, const Datum *values, const char *nulls, bool *inserted) {
	bool has_dedupe = nulls[4] != 'n';
	// a task of a key, on a queue that limits its keys: admitted or blocked
	// under the key's lock
	bool keyed = q.info().key_limit > 0 && nulls[5] != 'n';
	for (int round = 0; round < 100; ++round) {
		uint64 n = keyed ? queue::enqueue_keyed(q, values, nulls)
		                 : q.run(QueueStatement::enqueue, 6, enqueue_types, values, nulls);
		if (n == 1) {
			*inserted = true;
			return queue::int64_column(0, 1);
		}
		if (!has_dedupe)
			break;
		static const Oid lookup_types[1] = {TEXTOID};
		if (q.run(QueueStatement::dedupe_lookup, 1, lookup_types, &values[4]) == 1) {
			*inserted = false;
			return queue::int64_column(0, 1);
		}
	}
	return std::nullopt;
}

// The parameters of QueueSql::enqueue and enqueue_batch from the arguments
// of enqueue and enqueue_batch, which have the same order: queue, payload(s),
// run_at, priority, dedupe key(s), concurrency key(s).
void enqueue_params(FunctionCallInfo fcinfo, TimestampTz now, int32 priority, Datum values[6], char nulls[6]) {
	values[0] = TimestampTzGetDatum(now);
	values[1] = PG_GETARG_DATUM(1);
	values[3] = Int32GetDatum(priority);
	nulls[0] = nulls[1] = nulls[3] = ' ';
	for (int n : {2, 4, 5}) {
		nulls[n] = arg_null(fcinfo, n) ? 'n' : ' ';
		values[n] = nulls[n] == 'n' ? Datum(0) : PG_GETARG_DATUM(n);
	}
}

[[noreturn]] void dedupe_holder_vanished(const std::string &queue) {
	throw Error(sqlstate::serialization_failure, fmt::format("could not enqueue into queue \"{}\"", queue),
	            "The task holding its dedupe_key kept disappearing.", "Retry the transaction.");
}

// A concurrency_key must fit the indexes built on it (a B-tree entry holds
// about a third of a page).
void check_concurrency_key(Datum key, int element) {
	Size bytes = pg::guard([&] { return toast_raw_datum_size(key); }) - VARHDRSZ;
	if (bytes > max_concurrency_key_bytes)
		throw Error(sqlstate::invalid_parameter_value,
		            element < 0 ? "concurrency_key is too long"
		                        : fmt::format("concurrency_keys[{}] is too long", element + 1),
		            fmt::format("It has {} bytes; at most {} are allowed.", bytes, max_concurrency_key_bytes));
}

// A one-dimensional array argument and its elements (palloc'd, in the
// function's memory context).
struct ArrayArg {
	int n = 0;
	Datum *elems = nullptr;
	bool *nulls = nullptr;
};

ArrayArg array_arg(FunctionCallInfo fcinfo, int argno, const char *argname, Oid elemtype) {
	ArrayType *array = pg::guard([&] { return DatumGetArrayTypeP(PG_GETARG_DATUM(argno)); });
	if (ARR_NDIM(array) > 1)
		throw Error(sqlstate::invalid_parameter_value, fmt::format("{} must be a one-dimensional array", argname));
	ArrayArg out;
	int16 typlen = 0;
	bool typbyval = false;
	char typalign = 'i';
	pg::guard([&] {
		get_typlenbyvalalign(elemtype, &typlen, &typbyval, &typalign);
		deconstruct_array(array, elemtype, typlen, typbyval, typalign, &out.elems, &out.nulls, &out.n);
	});
	return out;
}

} // namespace

// concurrency.enqueue(queue, payload, run_at, priority, dedupe_key,
// concurrency_key) -> task id
CONCURRENCY_FUNCTION(concurrency_enqueue) {
	std::string name = queue::queue_name_arg(fcinfo);
	pg::require_arg(fcinfo, 1, "payload");
	int32 priority = int32_arg(fcinfo, 3, "priority");
	check_run_at(fcinfo, 2);
	if (!arg_null(fcinfo, 5))
		check_concurrency_key(PG_GETARG_DATUM(5), -1);
	TimestampTz now = clock_now();

	Datum values[6];
	char nulls[6];
	enqueue_params(fcinfo, now, priority, values, nulls);

	pg::spi_connect();
	Queue q(name);
	AsRole as_owner = authorize(q, Permission::enqueue, "enqueue");
	if (queue::is_distributed(q.info().relid)) // Citus: src/queue/distributed.hpp
		return queue::forward_distributed(fcinfo, "distributed_enqueue");
	bool inserted = false;
	std::optional<int64> id = enqueue_one(q, values, nulls, &inserted);
	if (!id)
		dedupe_holder_vanished(name);
	if (inserted)
		q.notify();
	pg::spi_finish();
	PG_RETURN_INT64(*id);
}

// One task of enqueue_batch, element i of its arrays, added on its own (as
// enqueue adds it) with enqueue's parameters (values, nulls: the batch's
// statement parameters, of which the run_at and priority serve every task).
// Its id; *inserted_any becomes true when it is a new task.
int64 enqueue_element(Queue &q, const Datum *values, const char *nulls, const ArrayArg &payloads,
                      const ArrayArg *dedupe_keys, const ArrayArg *concurrency_keys, int i, bool *inserted_any) {
	bool has_dedupe = dedupe_keys && !dedupe_keys->nulls[i];
	bool has_key = concurrency_keys && !concurrency_keys->nulls[i];
	Datum one[6] = {values[0], payloads.elems[i], values[2], values[3], has_dedupe ? dedupe_keys->elems[i] : Datum(0),
	                has_key ? concurrency_keys->elems[i] : Datum(0)};
	char one_nulls[6] = {' ', ' ', nulls[2], ' ', has_dedupe ? ' ' : 'n', has_key ? ' ' : 'n'};
	bool inserted = false;
	std::optional<int64> id = enqueue_one(q, one, one_nulls, &inserted);
	if (!id)
		dedupe_holder_vanished(std::string(q.name()));
	*inserted_any = *inserted_any || inserted;
	return *id;
}

void add_id_row(pg::ResultSet &out, int64 id) {
	Datum cols[1] = {Int64GetDatum(id)};
	bool isnull[1] = {false};
	pg::add_row(out, cols, isnull);
}

// concurrency.enqueue_batch(queue, payloads, run_at, priority, dedupe_keys,
// concurrency_keys) -> task ids in payload order
CONCURRENCY_FUNCTION(concurrency_enqueue_batch) {
	std::string name = queue::queue_name_arg(fcinfo);
	pg::require_arg(fcinfo, 1, "payloads");
	int32 priority = int32_arg(fcinfo, 3, "priority");
	check_run_at(fcinfo, 2);
	ArrayArg payloads = array_arg(fcinfo, 1, "payloads", JSONBOID);
	for (int i = 0; i < payloads.n; ++i)
		if (payloads.nulls[i])
			throw Error(sqlstate::null_value_not_allowed, "payloads must not contain null",
			            fmt::format("Element {} is null.", i + 1));
	bool has_dedupe = !arg_null(fcinfo, 4);
	bool has_keys = !arg_null(fcinfo, 5);
	ArrayArg dedupe_keys, concurrency_keys;
	if (has_dedupe) {
		dedupe_keys = array_arg(fcinfo, 4, "dedupe_keys", TEXTOID);
		if (dedupe_keys.n != payloads.n)
			throw Error(sqlstate::invalid_parameter_value, "dedupe_keys must have one element per payload",
			            fmt::format("There are {} payloads and {} dedupe keys.", payloads.n, dedupe_keys.n),
			            "Use NULL elements for payloads without a key.");
	}
	if (has_keys) {
		concurrency_keys = array_arg(fcinfo, 5, "concurrency_keys", TEXTOID);
		if (concurrency_keys.n != payloads.n)
			throw Error(sqlstate::invalid_parameter_value, "concurrency_keys must have one element per payload",
			            fmt::format("There are {} payloads and {} concurrency keys.", payloads.n,
			                        concurrency_keys.n),
			            "Use NULL elements for payloads without a key.");
		for (int i = 0; i < concurrency_keys.n; ++i)
			if (!concurrency_keys.nulls[i])
				check_concurrency_key(concurrency_keys.elems[i], i);
	}
	TimestampTz now = clock_now();

	static const Oid types[6] = {TIMESTAMPTZOID, JSONBARRAYOID, TIMESTAMPTZOID, INT4OID, TEXTARRAYOID, TEXTARRAYOID};
	Datum values[6];
	char nulls[6];
	enqueue_params(fcinfo, now, priority, values, nulls);

	// the keys as C++ text, before SPI (the datums live in this call's context)
	std::vector<std::optional<std::string>> keys(static_cast<std::size_t>(payloads.n));
	if (has_dedupe)
		for (int i = 0; i < payloads.n; ++i)
			if (!dedupe_keys.nulls[i]) {
				Datum d = dedupe_keys.elems[i];
				keys[i] = pg::guard([&] { return TextDatumGetCString(d); });
			}

	pg::ResultSet out = pg::materialize(fcinfo, INT8OID);
	pg::spi_connect();
	Queue q(name);
	AsRole as_owner = authorize(q, Permission::enqueue, "enqueue_batch");
	if (queue::is_distributed(q.info().relid)) // Citus: src/queue/distributed.hpp
		return queue::forward_distributed(fcinfo, "distributed_enqueue_batch", &out);
	if (q.info().key_limit > 0 && has_keys &&
	    std::any_of(concurrency_keys.nulls, concurrency_keys.nulls + concurrency_keys.n, [](bool n) { return !n; })) {
		// Tasks of keys on a queue that limits its keys: each is admitted or
		// blocked under its key's lock, so they are added one by one, in
		// payload order, after locking all their keys in sorted order.
		std::vector<std::string> key_names;
		for (int i = 0; i < concurrency_keys.n; ++i)
			if (!concurrency_keys.nulls[i]) {
				Datum d = concurrency_keys.elems[i];
				key_names.push_back(std::string(pg::guard([&] { return TextDatumGetCString(d); })));
			}
		queue::lock_keys(q, key_names);
		bool inserted_any = false;
		for (int i = 0; i < payloads.n; ++i)
			add_id_row(out, enqueue_element(q, values, nulls, payloads, has_dedupe ? &dedupe_keys : nullptr,
			                                &concurrency_keys, i, &inserted_any));
		if (inserted_any)
			q.notify(static_cast<uint64>(payloads.n));
		pg::spi_finish();
		return Datum(0);
	}
	bool any_dedupe = std::any_of(keys.begin(), keys.end(), [](const auto &k) { return k.has_value(); });
	uint64 n = q.run(any_dedupe ? QueueStatement::enqueue_batch_dedupe : QueueStatement::enqueue_batch, 6, types,
	                 values, nulls);
	bool inserted_any = n > 0;
	std::vector<int64> ids(keys.size(), 0);
	// Ids were drawn in payload order: the keyless tasks, by ascending id,
	// are the keyless payloads in order; a keyed one is found by its key.
	std::vector<int64> keyless;
	std::unordered_map<std::string, int64> by_key;
	for (uint64 i = 0; i < n; ++i) {
		int row = static_cast<int>(i);
		int64 id = queue::int64_column(row, 1);
		bool isnull = false;
		Datum key = queue::column(row, 2, &isnull);
		if (isnull)
			keyless.push_back(id);
		else
			by_key.emplace(pg::guard([&] { return TextDatumGetCString(key); }), id);
	}
	std::sort(keyless.begin(), keyless.end());
	std::size_t next_keyless = 0;
	for (std::size_t i = 0; i < keys.size(); ++i)
		if (!keys[i])
			ids[i] = keyless.at(next_keyless++);
	if (any_dedupe) {
		// keys held by tasks already there: one lookup for all of them
		std::vector<std::string> missing;
		for (const auto &k : keys)
			if (k && !by_key.count(*k))
				missing.push_back(*k);
		if (!missing.empty()) {
			std::vector<Datum> elems;
			for (const std::string &k : missing)
				elems.push_back(pg::text_datum(k));
			Datum *data = elems.data();
			int count = static_cast<int>(elems.size());
			Datum array = pg::guard([&] {
				return PointerGetDatum(construct_array(data, count, TEXTOID, -1, false, TYPALIGN_INT));
			});
			static const Oid lookup_types[1] = {TEXTARRAYOID};
			uint64 found = q.run("dedupe_many", q.sql().dedupe_lookup_many(), 1, lookup_types, &array);
			for (uint64 i = 0; i < found; ++i) {
				bool isnull = false;
				Datum key = queue::column(static_cast<int>(i), 1, &isnull);
				by_key.emplace(pg::guard([&] { return TextDatumGetCString(key); }),
				               queue::int64_column(static_cast<int>(i), 2));
			}
		}
		for (std::size_t i = 0; i < keys.size(); ++i) {
			if (!keys[i])
				continue;
			auto found = by_key.find(*keys[i]);
			if (found == by_key.end()) {
				// its holder vanished between the insert and the lookup
				int64 id = enqueue_element(q, values, nulls, payloads, &dedupe_keys,
				                           has_keys ? &concurrency_keys : nullptr, i, &inserted_any);
				found = by_key.emplace(*keys[i], id).first;
			}
			ids[i] = found->second;
		}
	}
	for (int64 id : ids)
		add_id_row(out, id);
	if (inserted_any)
		q.notify(std::max<uint64>(n, 1));
	pg::spi_finish();
	return Datum(0);
}

namespace {

// What dequeue was asked for.
struct DequeueArgs {
	queue::QueueName name;
	int32 batch;
	std::optional<Interval> lease;
	Datum worker;
	char worker_null;
};

// One look at the queue by dequeue: claims up to args.batch tasks into
// `out`, as the queue's owner; returns how many. When it claims none, *next_due
// is the earliest time a scheduled task comes due or a lease expires (or
// nothing), for dequeue(…, wait) to sleep until at most.
std::size_t claim_round(const DequeueArgs &args, pg::ResultSet &out, TimestampTz now,
                        std::optional<TimestampTz> *next_due) {
	int32 batch = args.batch;
	const int32 requested = batch;
	Datum worker = args.worker;
	char worker_null = args.worker_null;
	Queue q(args.name.view());
	AsRole as_owner = authorize(q, Permission::work, "dequeue");
	Interval lease = args.lease ? *args.lease : q.info().lease;
	ClaimCursor &cursor = q.info().cursor;
	// the horizon matters to the cursor only to tell whether it is pinned:
	// sampled at most every 100 ms, not read on every claim
	cursor.begin(now, q.info().horizon.lag(now, queue::horizon_lag));

	static const Oid claim_types[7] = {TIMESTAMPTZOID, INT4OID, INTERVALOID, TEXTOID,
	                                   INT8OID,        TIMESTAMPTZOID, INT8OID};
	std::optional<ClaimKey> last;
	std::size_t claimed = 0;
	// max_leased: this call claims at most as many tasks as it holds free
	// lease slots, and writes its leases into them
	bool slotted = q.info().max_leased > 0;
	std::vector<int32> slots;
	std::vector<int64> slot_ids, slot_tokens;
	if (slotted) {
		slots = queue::take_slots(q, batch);
		batch = static_cast<int32>(slots.size());
	}
	auto claim_from = [&](ClaimKey start, int32 wanted) {
		Datum values[7] = {TimestampTzGetDatum(now),
		                   Int32GetDatum(wanted),
		                   IntervalPGetDatum(&lease),
		                   worker,
		                   Int64GetDatum(start.neg_priority),
		                   TimestampTzGetDatum(start.run_at),
		                   Int64GetDatum(start.id)};
		char nulls[7] = {' ', ' ', ' ', worker_null, ' ', ' ', ' '};
		auto emit_row = [&](Datum *cols, bool *isnull) {
			pg::add_row(out, cols, isnull);
			if (slotted) {
				slot_ids.push_back(DatumGetInt64(cols[0]));
				slot_tokens.push_back(DatumGetInt64(cols[1]));
			}
		};
		// the claim without the executor where it applies (claim_direct.hpp):
		// the tasks come in claim order
		queue::ClaimedTask *tasks = nullptr;
		int direct = 0;
		if (queue::claim_direct(q.info(), now, wanted, lease, worker, worker_null == 'n', start, &tasks, &direct)) {
			for (int i = 0; i < direct; ++i)
				emit_row(tasks[i].cols, tasks[i].isnull);
			if (direct > 0 && (!last || *last < tasks[direct - 1].key))
				last = tasks[direct - 1].key;
			claimed += static_cast<std::size_t>(direct);
			return;
		}
		uint64 n = q.run(QueueStatement::claim, 7, claim_types, values, nulls);
		auto emit = [&](int row) {
			Datum cols[6];
			bool isnull[6];
			for (int c = 0; c < 6; ++c)
				cols[c] = queue::column(row, c + 1, &isnull[c]);
			emit_row(cols, isnull);
		};
		auto key_of = [](int row) {
			return ClaimKey{queue::int64_column(row, 7), queue::int64_column(row, 8), queue::int64_column(row, 1)};
		};
		std::optional<ClaimKey> greatest;
		if (n == 1) {
			emit(0);
			greatest = key_of(0);
		} else if (n > 1) {
			// the rows come in primary-key order; return them in claim order
			std::vector<std::pair<ClaimKey, int>> order;
			order.reserve(n);
			for (uint64 i = 0; i < n; ++i)
				order.emplace_back(key_of(static_cast<int>(i)), static_cast<int>(i));
			std::sort(order.begin(), order.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
			for (const auto &entry : order)
				emit(entry.second);
			greatest = order.back().first;
		}
		if (greatest && (!last || *last < *greatest))
			last = greatest;
		claimed += n;
	};

	// 1. The claim, unless due scheduled tasks or expired leases wait to be
	// woken up (two index probes): the common case is this one statement.
	if (batch > 0 && !q.tasks_wait(now, cursor.wake_floor()))
		claim_from(cursor.ready_floor(), batch);
	if (claimed < static_cast<std::size_t>(batch) || (slotted && batch == 0)) {
		// 2. Wake-up: due scheduled tasks become ready, expired leases are
		// reclaimed (ready again, or dead when their attempts are used up).
		static const Oid wake_types[4] = {TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, INT4OID};
		Datum wake_values[4] = {TimestampTzGetDatum(now), Int32GetDatum(std::max(batch, 32)),
		                        TimestampTzGetDatum(cursor.wake_floor()), Int32GetDatum(q.info().max_attempts)};
		uint64 woken = q.run(QueueStatement::wake, 4, wake_types, wake_values);
		bool made_ready = false;
		std::vector<std::string> released; // keys of tasks whose lease expired for good
		for (uint64 i = 0; i < woken; ++i) {
			bool isnull = false;
			int row = static_cast<int>(i);
			made_ready = made_ready || DatumGetBool(queue::column(row, 1, &isnull));
			if (q.info().key_limit > 0 && DatumGetBool(queue::column(row, 2, &isnull)))
				if (auto key = queue::key_column(row, 3))
					released.push_back(*key);
		}
		queue::release_keys(q, std::move(released), now);
		cursor.woke(made_ready);
		if (slotted && batch == 0) {
			// every slot was taken: the wake-up may have freed some (expired leases)
			slots = queue::take_slots(q, requested);
			batch = static_cast<int32>(slots.size());
		}
		// 3. The rest of the batch, now whatever waits (tasks locked by
		// another worker's wake-up must not stop this one), from the front
		// if tasks were made ready or a resumed scan came back short.
		bool from_front = cursor.rescan_from_front(claimed, static_cast<std::size_t>(batch));
		if (claimed < static_cast<std::size_t>(batch))
			claim_from(from_front ? ClaimKey::front() : cursor.ready_floor(), batch - static_cast<int32>(claimed));
	} else {
		cursor.woke(false);
	}
	cursor.finish(last);
	if (slotted)
		queue::fill_slots(q, slots, slot_ids, slot_tokens);
	q.maybe_purge(now);
	if (claimed == 0 && next_due) {
		*next_due = std::nullopt;
		if (q.run("next_due", q.sql().next_due(), 0, nullptr, nullptr) == 1) {
			bool isnull = false;
			Datum due = queue::column(0, 1, &isnull);
			if (!isnull)
				*next_due = DatumGetTimestampTz(due);
		}
	}
	return claimed;
}

// The wait argument n of dequeue: NULL or zero (no wait), or positive; only
// where the snapshot moves between looks.
std::optional<Interval> wait_arg(FunctionCallInfo fcinfo, int n) {
	if (PG_NARGS() <= n || PG_ARGISNULL(n))
		return std::nullopt;
	Interval *wait = PG_GETARG_INTERVAL_P(n);
	if (wait->month == 0 && wait->day == 0 && wait->time == 0)
		return std::nullopt;
	Interval positive = queue::positive_interval_arg(fcinfo, n, "wait");
	if (IsolationUsesXactSnapshot())
		throw Error(sqlstate::feature_not_supported,
		            "dequeue cannot wait in a REPEATABLE READ or SERIALIZABLE transaction",
		            "Its snapshot cannot move: tasks committed while it waited would stay invisible to it.",
		            "Call dequeue with wait in a READ COMMITTED transaction (the default), or without wait.");
	return positive;
}

} // namespace

// concurrency.dequeue(queue, batch, lease, worker, wait) -> claimed tasks.
// With wait, a call that claims nothing sleeps until a commit makes tasks
// of the queue claimable (queue/wait.hpp), a scheduled task comes due or a
// lease expires, and looks again with a fresh snapshot, until wait has
// passed.
CONCURRENCY_FUNCTION(concurrency_dequeue) {
	DequeueArgs args;
	args.name = queue::queue_name(fcinfo);
	args.batch = int32_arg(fcinfo, 1, "batch");
	if (args.batch < 1)
		throw Error(sqlstate::invalid_parameter_value, "batch must be at least 1");
	if (!PG_ARGISNULL(2))
		args.lease = queue::positive_interval_arg(fcinfo, 2, "lease");
	args.worker = PG_ARGISNULL(3) ? Datum(0) : PG_GETARG_DATUM(3);
	args.worker_null = PG_ARGISNULL(3) ? 'n' : ' ';
	std::optional<Interval> wait = wait_arg(fcinfo, 4);
	TimestampTz now = clock_now();

	pg::ResultSet out = pg::materialize(fcinfo);
	pg::spi_connect();
	{
		Queue q(args.name.view());
		AsRole as_owner = authorize(q, Permission::work, "dequeue");
		if (queue::is_distributed(q.info().relid)) { // Citus: src/queue/distributed.hpp
			if (wait)
				queue::refuse_on_distributed(q.name(), "dequeue with wait");
			q.maybe_purge(now);
			return queue::forward_distributed(fcinfo, "distributed_dequeue", &out, 4);
		}
	}
	if (!wait) {
		claim_round(args, out, now, nullptr);
		pg::spi_finish();
		return Datum(0);
	}
	Interval wait_for = *wait;
	TimestampTz deadline = pg::guard([&] {
		return DatumGetTimestampTz(
		    DirectFunctionCall2(timestamptz_pl_interval, TimestampTzGetDatum(now), IntervalPGetDatum(&wait_for)));
	});
	// on the wait list before the first look: no commit from now on is missed
	queue::QueueWait waiter(args.name.view());
	for (;;) {
		std::optional<TimestampTz> next_due;
		if (claim_round(args, out, now, &next_due) > 0)
			break;
		now = clock_now();
		if (now >= deadline)
			break;
		waiter.sleep(now, next_due ? std::min(deadline, *next_due) : deadline);
		now = clock_now();
	}
	pg::spi_finish();
	return Datum(0);
}


// concurrency.heartbeat(queue, task_id, lease_token, extend, progress) -> new
// deadline; a progress given is stored, shown by task_status
CONCURRENCY_FUNCTION(concurrency_heartbeat) {
	queue::QueueName name = queue::queue_name(fcinfo);
	int64 task_id = int64_arg(fcinfo, 1, "task_id");
	int64 token = int64_arg(fcinfo, 2, "lease_token");
	std::optional<Interval> extend_arg;
	if (!PG_ARGISNULL(3))
		extend_arg = queue::positive_interval_arg(fcinfo, 3, "extend");
	bool with_progress = !arg_null(fcinfo, 4);
	TimestampTz now = clock_now();

	pg::spi_connect();
	Queue q(name.view());
	AsRole as_owner = authorize(q, Permission::work, "heartbeat");
	if (queue::is_distributed(q.info().relid)) { // Citus: src/queue/distributed.hpp
		if (with_progress)
			queue::refuse_on_distributed(q.name(), "heartbeat with progress");
		return queue::forward_distributed(fcinfo, "distributed_heartbeat", nullptr, 4);
	}
	Interval extend = extend_arg ? *extend_arg : q.info().lease;
	static const Oid types[5] = {INT8OID, INT8OID, TIMESTAMPTZOID, INTERVALOID, JSONBOID};
	Datum values[5] = {Int64GetDatum(task_id), Int64GetDatum(token), TimestampTzGetDatum(now),
	                   IntervalPGetDatum(&extend), with_progress ? PG_GETARG_DATUM(4) : Datum(0)};
	uint64 n = with_progress ? q.run("heartbeat_progress", q.sql().heartbeat_progress(), 5, types, values)
	                         : q.run(QueueStatement::heartbeat, 4, types, values);
	if (n == 0)
		q.lease_lost(task_id);
	bool isnull = false;
	TimestampTz deadline = DatumGetTimestampTz(queue::column(0, 1, &isnull));
	pg::spi_finish();
	PG_RETURN_TIMESTAMPTZ(deadline);
}

// concurrency.complete(queue, task_id, lease_token, result). On a queue that
// retains tasks the task stays as done with its result; on one that does not,
// it is deleted and the result is dropped (a worker need not know how its
// queue is set up).
CONCURRENCY_FUNCTION(concurrency_complete) {
	queue::QueueName name = queue::queue_name(fcinfo);
	int64 task_id = int64_arg(fcinfo, 1, "task_id");
	int64 token = int64_arg(fcinfo, 2, "lease_token");
	bool has_result = !arg_null(fcinfo, 3);
	TimestampTz now = clock_now();

	pg::spi_connect();
	Queue q(name.view());
	AsRole as_owner = authorize(q, Permission::work, "complete");
	if (queue::is_distributed(q.info().relid)) { // Citus: src/queue/distributed.hpp
		q.maybe_purge(now);
		return queue::forward_distributed(fcinfo, "distributed_complete");
	}
	bool retain = q.info().has_retain;
	uint64 n = 0;
	if (retain) {
		static const Oid types[4] = {INT8OID, INT8OID, TIMESTAMPTZOID, JSONBOID};
		Datum values[4] = {Int64GetDatum(task_id), Int64GetDatum(token), TimestampTzGetDatum(now),
		                   has_result ? PG_GETARG_DATUM(3) : Datum(0)};
		char nulls[4] = {' ', ' ', ' ', has_result ? ' ' : 'n'};
		n = q.run(QueueStatement::complete_retained, 4, types, values, nulls);
	} else {
		static const Oid types[2] = {INT8OID, INT8OID};
		Datum values[2] = {Int64GetDatum(task_id), Int64GetDatum(token)};
		n = q.run(QueueStatement::complete, 2, types, values);
	}
	if (n == 0)
		q.lease_lost(task_id);
	if (q.info().key_limit > 0)
		if (auto key = queue::key_column(0, 1))
			queue::release_keys(q, {*key}, now);
	if (q.info().max_leased > 0) // its lease slot is free
		queue::note_claimable(q.name(), 1);
	q.maybe_purge(now);
	pg::spi_finish();
	PG_RETURN_VOID();
}

// concurrency.fail(queue, task_id, lease_token, error, retry_in) -> 'ready' | 'dead'
CONCURRENCY_FUNCTION(concurrency_fail) {
	queue::QueueName name = queue::queue_name(fcinfo);
	int64 task_id = int64_arg(fcinfo, 1, "task_id");
	int64 token = int64_arg(fcinfo, 2, "lease_token");
	std::optional<Interval> retry_in = queue::retry_in_arg(fcinfo, 4);
	TimestampTz now = clock_now();

	pg::spi_connect();
	Queue q(name.view());
	AsRole as_owner = authorize(q, Permission::work, "fail");
	if (queue::is_distributed(q.info().relid)) // Citus: src/queue/distributed.hpp
		return queue::forward_distributed(fcinfo, "distributed_fail");
	static const Oid lock_types[2] = {INT8OID, INT8OID};
	Datum lock_values[2] = {Int64GetDatum(task_id), Int64GetDatum(token)};
	if (q.run(QueueStatement::fail_lock, 2, lock_types, lock_values) == 0)
		q.lease_lost(task_id);
	bool isnull = false;
	int32 attempt = DatumGetInt32(queue::column(0, 1, &isnull));
	std::optional<std::string> key = q.info().key_limit > 0 ? queue::key_column(0, 2) : std::nullopt;

	auto [state, run_at] = queue::after_failure(attempt, q.info().max_attempts, retry_in, now);
	static const Oid types[4] = {INT8OID, TEXTOID, TIMESTAMPTZOID, TEXTOID};
	Datum values[4] = {Int64GetDatum(task_id), pg::text_datum(state), TimestampTzGetDatum(run_at),
	                   PG_ARGISNULL(3) ? Datum(0) : PG_GETARG_DATUM(3)};
	char nulls[4] = {' ', ' ', ' ', PG_ARGISNULL(3) ? 'n' : ' '};
	q.run(QueueStatement::fail_update, 4, types, values, nulls);
	// a task that will be retried keeps its key; a dead one releases it
	if (key && std::string_view(state) == "dead")
		queue::release_keys(q, {*key}, now);
	// a retry (and, with max_leased, the freed lease slot) may be claimable
	if (std::string_view(state) != "dead" || q.info().max_leased > 0)
		queue::note_claimable(q.name(), 1);
	pg::spi_finish();
	// a retry waiting for its run_at is 'ready' to the caller (queue_stats
	// counts it as scheduled until then)
	return pg::text_datum(std::string_view(state) == "dead" ? "dead" : "ready");
}

// concurrency.retry_dead(queue, task_ids) -> how many
CONCURRENCY_FUNCTION(concurrency_retry_dead) {
	std::string name = queue::queue_name_arg(fcinfo);
	TimestampTz now = clock_now();

	pg::spi_connect();
	Queue q(name);
	AsRole as_owner = authorize(q, Permission::manage, "retry_dead");
	if (queue::is_distributed(q.info().relid)) // Citus: src/queue/distributed.hpp
		return queue::forward_distributed(fcinfo, "distributed_retry_dead");
	static const Oid types[3] = {TIMESTAMPTZOID, INT8ARRAYOID, BOOLOID};
	bool limited = q.info().key_limit > 0;
	Datum values[3] = {TimestampTzGetDatum(now), PG_ARGISNULL(1) ? Datum(0) : PG_GETARG_DATUM(1),
	                   BoolGetDatum(limited)};
	char nulls[3] = {' ', PG_ARGISNULL(1) ? 'n' : ' ', ' '};
	uint64 n = q.run(QueueStatement::retry_dead, 3, types, values, nulls);
	if (limited) {
		// revived tasks of keys came back blocked: admit them as their keys allow
		std::vector<std::string> keys;
		for (uint64 i = 0; i < n; ++i)
			if (auto key = queue::key_column(static_cast<int>(i), 2))
				keys.push_back(*key);
		queue::release_keys(q, std::move(keys), now);
	}
	if (n > 0)
		q.notify(n);
	pg::spi_finish();
	PG_RETURN_INT64(static_cast<int64>(n));
}

// concurrency.queue_changed() — statement trigger on concurrency.queue: a
// relcache invalidation of the catalog makes every backend read the settings
// of its cached queues again.
CONCURRENCY_FUNCTION(concurrency_queue_changed) {
	if (!CALLED_AS_TRIGGER(fcinfo))
		throw Error(sqlstate::trigger_protocol_violated, "concurrency.queue_changed() is a trigger function");
	auto *trigger = reinterpret_cast<TriggerData *>(fcinfo->context);
	pg::guard([&] { CacheInvalidateRelcache(trigger->tg_relation); });
	return PointerGetDatum(nullptr);
}

// concurrency.queue_stats_rows() — the rows of the view concurrency.queue_stats
CONCURRENCY_FUNCTION(concurrency_queue_stats) {
	TimestampTz now = clock_now();
	pg::ResultSet out = pg::materialize(fcinfo);
	pg::spi_connect();
	std::vector<std::string> names;
	SPIPlanPtr list = pg::prepared_plan("queue-catalog:names", "SELECT name FROM concurrency.queue ORDER BY name", 0,
	                                    nullptr);
	uint64 n = pg::execute(list, nullptr, nullptr, true);
	for (uint64 i = 0; i < n; ++i) {
		bool isnull = false;
		Datum d = queue::column(static_cast<int>(i), 1, &isnull);
		names.emplace_back(pg::guard([&] { return TextDatumGetCString(d); }));
	}
	for (const std::string &name : names) {
		Datum cols[10];
		bool isnull[10] = {false, true, true, true, true, true, true, true, true, true};
		cols[0] = pg::text_datum(name);
		std::optional<Queue> q;
		if (OidIsValid(queue::queue_relid(name)))
			q.emplace(name);
		if (q && holds(*q, Permission::read)) {
			AsRole as_owner(queue_owner(*q));
			static const Oid types[1] = {TIMESTAMPTZOID};
			Datum values[1] = {TimestampTzGetDatum(now)};
			if (queue::is_distributed(q->info().relid)) // Citus: src/queue/distributed.hpp
				queue::distributed_stats(name, now);
			else
				q->run("queue_stats", StatsSql(name).stats(), 1, types, values);
			for (int c = 1; c < 10; ++c)
				cols[c] = queue::column(0, c, &isnull[c]);
			// blocked: behind their key, and while the queue has max_leased
			// leases, every ready task
			int64 leased = DatumGetInt64(cols[3]) + DatumGetInt64(cols[4]);
			int64 blocked = DatumGetInt64(cols[9]);
			if (q->info().max_leased > 0 && leased >= q->info().max_leased)
				blocked += DatumGetInt64(cols[1]);
			cols[9] = Int64GetDatum(blocked);
		}
		pg::add_row(out, cols, isnull);
	}
	pg::spi_finish();
	return Datum(0);
}

// concurrency.queue_keys(queue) -> per key with live tasks: concurrency_key,
// leased, waiting, oldest_waiting_age
CONCURRENCY_FUNCTION(concurrency_queue_keys) {
	std::string name = queue::queue_name_arg(fcinfo);
	TimestampTz now = clock_now();
	pg::ResultSet out = pg::materialize(fcinfo);
	pg::spi_connect();
	Queue q(name);
	AsRole as_owner = authorize(q, Permission::read, "queue_keys");
	if (queue::is_distributed(q.info().relid)) // Citus: src/queue/distributed.hpp
		return queue::forward_distributed(fcinfo, "distributed_queue_keys", &out);
	static const Oid types[1] = {TIMESTAMPTZOID};
	Datum values[1] = {TimestampTzGetDatum(now)};
	uint64 n = q.run("queue_keys", KeySql(name).queue_keys(), 1, types, values);
	for (uint64 i = 0; i < n; ++i) {
		Datum cols[4];
		bool isnull[4];
		for (int c = 0; c < 4; ++c)
			cols[c] = queue::column(static_cast<int>(i), c + 1, &isnull[c]);
		pg::add_row(out, cols, isnull);
	}
	pg::spi_finish();
	return Datum(0);
}
