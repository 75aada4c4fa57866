// Distributed queues on Citus: the DDL that makes a queue distributed
// (concurrency.distribute_queue) and the functions that keep a distributed
// queue's catalog and tables (concurrency_internal.distributed_queue_settings,
// distributed_leased, distributed_resize_slots, distributed_sync_catalog and
// distribute_key_rate_slots; src/sql/41_queue_distributed.sql declares them).
// Every name of a queue's relation comes from relation_names.hpp, QueueSql
// and derived_relation_name (queue.hpp), as the local queue's statements
// take theirs.
#include "queue/distributed/distributed.hpp"
#include "queue/distributed/internal.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "citus/node.hpp"
#include "common/sql_text.hpp"
#include "pg/datum.hpp"
#include "pg/spi.hpp"
#include "pg/srf.hpp"
#include "pg/xact.hpp"
#include "queue/queue.hpp"
#include "queue/queue_sql.hpp"
#include "queue/relation_names.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
}

namespace concurrency::queue {

namespace {

// Whether `queue` has a row of concurrency.distributed_queue.
bool distributed_in_catalog(const std::string &queue) {
	static const Oid types[1] = {TEXTOID};
	Datum values[1] = {pg::text_datum(queue)};
	SPIPlanPtr plan = pg::prepared_plan("ddl:is_distributed",
	                                    "SELECT FROM concurrency.distributed_queue d "
	                                    "WHERE d.queue OPERATOR(pg_catalog.=) $1",
	                                    1, types);
	return pg::execute(plan, values, nullptr, false, 1) > 0;
}

} // namespace

uint64 distributed_settings(const std::string &queue) {
	static const Oid types[2] = {TEXTOID, TEXTOID};
	std::string relation = QueueSql(queue).table();
	Datum values[2] = {pg::text_datum(queue), pg::text_datum(relation)};
	SPIPlanPtr plan = pg::prepared_plan(
	    "ddl:settings",
	    "SELECT $2, q.lease, q.max_attempts, d.shard_keys, d.dedupe_holder, q.retain, q.key_limit, "
	    "q.max_leased"
	    "  FROM concurrency.queue q JOIN concurrency.distributed_queue d ON d.queue OPERATOR(pg_catalog.=) "
	    "q.name WHERE q.name OPERATOR(pg_catalog.=) $1",
	    2, types);
	uint64 n = pg::execute(plan, values, nullptr, false, 1);
	if (n == 0)
		throw Error(sqlstate::undefined_object, fmt::format("distributed queue \"{}\" does not exist", queue),
		            "", "Create it with concurrency.create_queue, then concurrency.distribute_queue.");
	return n;
}

std::vector<LeasedTask> distributed_leased(const std::string &queue) {
	distributed_settings(queue); // 42704 when it is not a distributed queue
	std::string sql = fmt::format("SELECT id, lease_token, lease_expires_at FROM {} "
	                              "WHERE state OPERATOR(pg_catalog.=) 'leased'",
	                              QueueSql(queue).table());
	uint64 n = pg::execute(sql, 0, nullptr, nullptr, nullptr, false);
	std::vector<LeasedTask> leased;
	for (uint64 row = 0; row < n; ++row) {
		bool isnull = false;
		Datum end = pg::column(row, 3, &isnull);
		leased.push_back(
		    LeasedTask{pg::int64_column(row, 1), pg::column_as<int64>(row, 2),
		               isnull ? std::nullopt : std::optional<TimestampTz>(DatumGetTimestampTz(end))});
	}
	return leased;
}

void resize_lease_slots(const std::string &queue, std::optional<int32> max_leased) {
	distributed_settings(queue);
	if (!max_leased || *max_leased < 0)
		throw Error(sqlstate::invalid_parameter_value, "max_leased must not be negative");
	std::string slots = qualified_table_name(QueueTable::slots, queue);
	static const Oid count_types[1] = {INT4OID};
	Datum count[1] = {Int32GetDatum(*max_leased)};
	pg::execute(fmt::format("DELETE FROM {} WHERE slot OPERATOR(pg_catalog.>) $1", slots), 1, count_types,
	            count);
	pg::execute(fmt::format("INSERT INTO {} (slot) SELECT g FROM pg_catalog.generate_series(1, $1) AS g "
	                        "ON CONFLICT (slot) DO NOTHING",
	                        slots),
	            1, count_types, count);
	// the leases running now, in id order, into the empty slots
	std::vector<LeasedTask> leased = distributed_leased(queue);
	std::sort(leased.begin(), leased.end(),
	          [](const LeasedTask &a, const LeasedTask &b) { return a.id < b.id; });
	std::vector<Datum> ids, tokens, ends;
	std::vector<bool> token_null, end_null;
	for (const LeasedTask &t : leased) {
		ids.push_back(Int64GetDatum(t.id));
		tokens.push_back(Int64GetDatum(t.lease_token.value_or(0)));
		token_null.push_back(!t.lease_token);
		ends.push_back(TimestampTzGetDatum(t.lease_expires_at.value_or(0)));
		end_null.push_back(!t.lease_expires_at);
	}
	Datum arrays[3];
	std::size_t n = leased.size();
	auto no_nulls = std::make_unique<bool[]>(n + 1), tn = std::make_unique<bool[]>(n + 1),
	     en = std::make_unique<bool[]>(n + 1);
	for (std::size_t i = 0; i < n; ++i) {
		tn[i] = token_null[i];
		en[i] = end_null[i];
	}
	pg::guard([&] {
		int dims[1] = {static_cast<int>(n)};
		int lbs[1] = {1};
		arrays[0] = PointerGetDatum(construct_md_array(ids.data(), no_nulls.get(), 1, dims, lbs, INT8OID, 8,
		                                               FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		arrays[1] = PointerGetDatum(construct_md_array(tokens.data(), tn.get(), 1, dims, lbs, INT8OID, 8,
		                                               FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		arrays[2] = PointerGetDatum(construct_md_array(ends.data(), en.get(), 1, dims, lbs, TIMESTAMPTZOID, 8,
		                                               FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	});
	static const Oid types[3] = {INT8ARRAYOID, INT8ARRAYOID, TIMESTAMPTZARRAYOID};
	pg::execute(
	    fmt::format("WITH running AS (SELECT r.id, r.lease_token, r.lease_expires_at,"
	                "                        pg_catalog.row_number() OVER (ORDER BY r.id) AS n"
	                "                   FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2),"
	                "                                   pg_catalog.unnest($3))"
	                "                        AS r(id, lease_token, lease_expires_at)"
	                "                  WHERE r.id NOT IN (SELECT task_id FROM {0} WHERE task_id IS NOT "
	                "NULL)),"
	                "     empty AS (SELECT slot, pg_catalog.row_number() OVER (ORDER BY slot) AS n"
	                "                 FROM {0} WHERE task_id IS NULL)"
	                " UPDATE {0} AS sl SET task_id = running.id, lease_token = running.lease_token,"
	                "                      lease_expires_at = running.lease_expires_at"
	                "   FROM running JOIN empty USING (n)"
	                "  WHERE sl.slot OPERATOR(pg_catalog.=) empty.slot",
	                slots),
	    3, types, arrays);
}

void sync_catalog_here(const std::string &queue) {
	// (two questions: Citus's catalog exists only where the first one fails)
	if (citus::local_role().role != citus::Role::coordinator)
		return;
	if (pg::execute("SELECT FROM pg_catalog.pg_dist_node WHERE groupid OPERATOR(pg_catalog.<>) 0", 0, nullptr,
	                nullptr, nullptr, false) == 0)
		return;
	static const Oid types[2] = {TEXTOID, TEXTOID};
	Datum values[2] = {pg::text_datum(queue), pg::text_datum(QueueSql(queue).table())};
	SPIPlanPtr plan = pg::prepared_plan(
	    "ddl:sync_catalog",
	    "SELECT pg_catalog.format('DELETE FROM concurrency.queue WHERE name = %L;', $1)"
	    " || coalesce((SELECT pg_catalog.string_agg(pg_catalog.format('INSERT INTO concurrency.queue SELECT "
	    "* "
	    "FROM jsonb_populate_record(NULL::concurrency.queue, %L);', pg_catalog.to_jsonb(q)), '')"
	    "                FROM concurrency.queue q WHERE q.name OPERATOR(pg_catalog.=) $1), '')"
	    " || coalesce((SELECT pg_catalog.string_agg(pg_catalog.format('INSERT INTO "
	    "concurrency.distributed_queue "
	    "SELECT * FROM jsonb_populate_record(NULL::concurrency.distributed_queue, %L);', "
	    "pg_catalog.to_jsonb(d)), "
	    "'')"
	    "                FROM concurrency.distributed_queue d WHERE d.queue OPERATOR(pg_catalog.=) $1), '')"
	    " || coalesce((SELECT pg_catalog.string_agg(pg_catalog.format('INSERT INTO "
	    "concurrency.queue_permission "
	    "VALUES (%L, %L::regrole, %L);', p.queue, p.grantee::text, p.permission), '')"
	    "                FROM concurrency.queue_permission p"
	    "               WHERE p.queue OPERATOR(pg_catalog.=) $1"
	    "                 AND (p.grantee::oid OPERATOR(pg_catalog.=) 0"
	    "                      OR EXISTS (SELECT FROM pg_catalog.pg_roles r"
	    "                                  WHERE r.oid OPERATOR(pg_catalog.=) p.grantee::oid))), '')"
	    // the owner of the queue's table makes the routed calls on every node
	    // (schema concurrency_internal), as distribute_queue let it here
	    " || coalesce((SELECT pg_catalog.format('GRANT USAGE ON SCHEMA concurrency_internal TO %I;', "
	    "r.rolname)"
	    "                FROM pg_catalog.pg_class c JOIN pg_catalog.pg_roles r"
	    "                  ON r.oid OPERATOR(pg_catalog.=) c.relowner"
	    "               WHERE c.oid OPERATOR(pg_catalog.=) pg_catalog.to_regclass($2)"
	    "                 AND NOT r.rolsuper"
	    "                 AND EXISTS (SELECT FROM concurrency.distributed_queue d"
	    "                              WHERE d.queue OPERATOR(pg_catalog.=) $1)), '')",
	    2, types);
	pg::execute(plan, values, nullptr, false);
	std::optional<std::string> command = pg::text_column(0, 1);
	static const Oid send_types[1] = {TEXTOID};
	Datum send[1] = {pg::text_datum(command.value_or(""))};
	SPIPlanPtr send_plan =
	    pg::prepared_plan("ddl:send", "SELECT concurrency_internal.distributed_send($1)", 1, send_types);
	pg::execute(send_plan, send, nullptr, false);
}

void distribute_key_rate_slots_here(const std::string &queue) {
	if (!distributed_in_catalog(queue))
		throw Error(sqlstate::object_not_in_prerequisite_state,
		            fmt::format("queue \"{}\" is not a distributed queue", queue));
	Oid relid = concurrency_relid(key_rate_table_name(queue));
	if (!OidIsValid(relid))
		throw Error(sqlstate::object_not_in_prerequisite_state,
		            fmt::format("queue \"{}\" has no slots of key_rate_limit", queue), "",
		            "alter_queue(queue, key_rate_limit => …, key_rate_period => …) makes them.");
	static const Oid types[1] = {OIDOID};
	Datum values[1] = {ObjectIdGetDatum(relid)};
	SPIPlanPtr plan =
	    pg::prepared_plan("ddl:has_shard_key",
	                      "SELECT FROM pg_catalog.pg_attribute a"
	                      " WHERE a.attrelid OPERATOR(pg_catalog.=) $1"
	                      "   AND a.attname OPERATOR(pg_catalog.=) 'shard_key' AND NOT a.attisdropped",
	                      1, types);
	if (pg::execute(plan, values, nullptr, false) > 0)
		return; // distributed already
	std::string rkrel = qualified_table_name(QueueTable::key_rate, queue);
	pg::execute(fmt::format("DELETE FROM {}", rkrel));
	pg::execute(fmt::format("ALTER TABLE {0} ADD COLUMN shard_key integer NOT NULL DEFAULT 0,"
	                        " DROP CONSTRAINT {1},"
	                        " ADD CONSTRAINT {1} PRIMARY KEY (shard_key, concurrency_key, slot)",
	                        rkrel,
	                        quote_ident(derived_relation_name(QueueTable::key_rate, queue, Role::pkey))));
	static const Oid dist_types[2] = {TEXTOID, TEXTOID};
	Datum dist[2] = {pg::text_datum(rkrel), pg::text_datum(QueueSql(queue).table())};
	pg::execute("SELECT create_distributed_table($1::regclass, 'shard_key', colocate_with => $2)", 2,
	            dist_types, dist);
}

namespace {

// One SQL statement whose one text result is the answer (NULL: nothing).
std::optional<std::string> text_of(const std::string &sql, int nargs = 0, const Oid *types = nullptr,
                                   const Datum *values = nullptr) {
	uint64 n = pg::execute(sql, nargs, types, values, nullptr, false);
	return n > 0 ? pg::text_column(0, 1) : std::nullopt;
}

void set_local(const char *name, const std::string &value) {
	static const Oid types[2] = {TEXTOID, TEXTOID};
	Datum values[2] = {pg::text_datum(name), pg::text_datum(value)};
	pg::execute("SELECT pg_catalog.set_config($1, $2, true)", 2, types, values);
}

void create_distributed(const std::string &relation, const char *options) {
	static const Oid types[1] = {TEXTOID};
	Datum values[1] = {pg::text_datum(relation)};
	pg::execute(fmt::format("SELECT create_distributed_table($1::regclass, 'shard_key', {})", options), 1,
	            types, values);
}

// One shard_key value per shard of the table `relid` (`n` shards), in shard
// order: the smallest value that hashes into each shard.
std::vector<int32> shard_key_values(const std::string &queue, Oid relid, int32 n) {
	static const Oid shard_types[1] = {OIDOID};
	Datum rel[1] = {ObjectIdGetDatum(relid)};
	uint64 count = pg::execute("SELECT shardid FROM pg_catalog.pg_dist_shard"
	                           " WHERE logicalrelid OPERATOR(pg_catalog.=) $1 ORDER BY shardid",
	                           1, shard_types, rel, nullptr, false);
	std::vector<int64> shards;
	for (uint64 i = 0; i < count; ++i)
		shards.push_back(pg::int64_column(i, 1));
	std::vector<std::optional<int32>> keys(static_cast<std::size_t>(n));
	int32 filled = 0;
	constexpr int32 last = 100000000, chunk = 1024;
	static const Oid types[3] = {REGCLASSOID, INT4OID, INT4OID};
	for (int32 from = 0; filled < n && from < last; from += chunk) {
		Datum values[3] = {ObjectIdGetDatum(relid), Int32GetDatum(from),
		                   Int32GetDatum(std::min(from + chunk, last) - 1)};
		uint64 rows = pg::execute("SELECT v, pg_catalog.get_shard_id_for_distribution_column($1, v)"
		                          "  FROM pg_catalog.generate_series($2, $3) AS v ORDER BY v",
		                          3, types, values, nullptr, false);
		for (uint64 row = 0; row < rows && filled < n; ++row) {
			auto at = std::find(shards.begin(), shards.end(), pg::int64_column(row, 2));
			std::size_t idx = static_cast<std::size_t>(at - shards.begin());
			if (at == shards.end() || idx >= keys.size() || keys[idx])
				continue;
			keys[idx] = pg::column_as<int32>(row, 1);
			++filled;
		}
	}
	if (filled < n || static_cast<int32>(shards.size()) != n)
		throw Error(sqlstate::internal_error,
		            fmt::format("could not find a shard key value for each of the {} shards of queue \"{}\"",
		                        n, queue));
	std::vector<int32> out;
	for (const auto &k : keys)
		out.push_back(*k);
	return out;
}

} // namespace

void distribute_queue_here(const std::string &queue, std::optional<int32> shard_count) {
	static const Oid name_types[1] = {TEXTOID};
	Datum name[1] = {pg::text_datum(queue)};
	if (pg::execute(
	        "SELECT q.key_rate_limit IS NOT NULL AND q.rate_limit IS NOT NULL FROM concurrency.queue q"
	        " WHERE q.name OPERATOR(pg_catalog.=) $1",
	        1, name_types, name, nullptr, false) == 0)
		throw Error(sqlstate::undefined_object, fmt::format("queue \"{}\" does not exist", queue));
	bool both_rates = pg::column_as<bool>(0, 1).value_or(false);
	citus::Role role = citus::local_role().role;
	if (role != citus::Role::coordinator)
		throw Error(
		    sqlstate::feature_not_supported,
		    fmt::format("cannot distribute queue \"{}\": this server is not a Citus coordinator", queue),
		    fmt::format("Its Citus node role is {}.", role == citus::Role::worker ? "worker" : "none"),
		    "Run distribute_queue on the coordinator of a Citus cluster.");
	if (distributed_in_catalog(queue))
		return; // already distributed
	if (both_rates)
		refuse_key_rate_distributed(
		    queue, "Remove one of them first (alter_queue(queue, rate_limit => 0) or key_rate_limit => 0).");
	int32 n = shard_count
	              ? *shard_count
	              : std::stoi(text_of("SELECT pg_catalog.current_setting('citus.shard_count')").value());
	if (n < 1 || n > 1024)
		throw Error(sqlstate::invalid_parameter_value, "shard_count must be between 1 and 1024");
	std::string rel = QueueSql(queue).table();
	std::string krel = qualified_table_name(QueueTable::keys, queue);
	// the names its indexes have (made before 0.4.0, table first)
	std::string pkey_name = quote_ident(derived_relation_name(QueueTable::tasks, queue, Role::pkey));
	std::string dedupe_name = quote_ident(derived_relation_name(QueueTable::tasks, queue, Role::dedupe));
	pg::execute(fmt::format("LOCK TABLE {}, {} IN ACCESS EXCLUSIVE MODE", rel, krel));
	if (pg::execute(fmt::format("SELECT FROM {} LIMIT 1", rel), 0, nullptr, nullptr, nullptr, false) > 0)
		throw Error(sqlstate::object_not_in_prerequisite_state,
		            fmt::format("cannot distribute queue \"{}\": it has tasks", queue),
		            "A task id names its shard, and the ids of existing tasks do not.",
		            "Distribute a queue right after create_queue, or drain it first.");
	// every index and constraint includes the distribution column shard_key:
	// the primary key becomes (shard_key, id), the dedupe index (shard_key,
	// dedupe_key); ids are set by enqueue (they carry the shard position)
	pg::execute(fmt::format("ALTER TABLE {0} ADD COLUMN shard_key integer NOT NULL DEFAULT 0,"
	                        " ALTER COLUMN id DROP IDENTITY, DROP CONSTRAINT {1},"
	                        " ADD CONSTRAINT {1} PRIMARY KEY (shard_key, id)",
	                        rel, pkey_name));
	static const Oid index_types[1] = {TEXTOID};
	Datum index[1] = {pg::text_datum("concurrency." + dedupe_name)};
	std::optional<std::string> holder =
	    text_of("SELECT pg_catalog.pg_get_expr(i.indpred, i.indrelid) FROM pg_catalog.pg_index i"
	            " WHERE i.indexrelid OPERATOR(pg_catalog.=) $1::regclass",
	            1, index_types, index);
	pg::execute(fmt::format("DROP INDEX concurrency.{}", dedupe_name));
	pg::execute(fmt::format("CREATE UNIQUE INDEX {} ON {} (shard_key, dedupe_key) WHERE {}", dedupe_name, rel,
	                        holder.value_or("")));
	// one connection per node for the shards, metadata and catalog copy that
	// the rest of this transaction may use (see the top of
	// 40_citus.sql); after a parallel query in this transaction
	// Citus cannot, and the queue functions leave the queue alone until the
	// transaction commits
	std::string mode = text_of("SELECT pg_catalog.current_setting('citus.multi_shard_modify_mode')").value();
	std::string options = fmt::format("shard_count => {}, colocate_with => 'none'", n);
	ErrorData *failure = pg::in_subtransaction([&] {
		set_local("citus.multi_shard_modify_mode", "sequential");
		create_distributed(rel, options.c_str());
	});
	if (failure) {
		if (failure->sqlerrcode != ERRCODE_INTERNAL_ERROR || !failure->message ||
		    !std::strstr(failure->message, "in sequential mode because a parallel query was executed"))
			throw pg::PgException(failure);
		set_local("concurrency_ext.distributed_in_parallel", "on");
		create_distributed(rel, options.c_str());
	}
	// the key table (key_limit) beside it: a key's row on the shard of its
	// tasks, primary key (shard_key, concurrency_key); a key row is only
	// there while the key has live tasks, and the queue has none
	pg::execute(fmt::format("DELETE FROM {}", krel));
	pg::execute(
	    fmt::format("ALTER TABLE {0} ADD COLUMN shard_key integer NOT NULL DEFAULT 0,"
	                " DROP CONSTRAINT {1}, ADD CONSTRAINT {1} PRIMARY KEY (shard_key, concurrency_key)",
	                krel, quote_ident(derived_relation_name(QueueTable::keys, queue, Role::pkey))));
	create_distributed(krel, fmt::format("colocate_with => {}", quote_literal(rel)).c_str());
	// the lease slots (max_leased) stay a table on the coordinator, where
	// every claim runs; a slot also keeps when the lease written in it ends
	// (the rate slots of rate_limit, r_<queue>, stay there as they are)
	pg::execute(fmt::format("ALTER TABLE {} ADD COLUMN lease_expires_at timestamptz",
	                        qualified_table_name(QueueTable::slots, queue)));
	Oid relid = queue_relid(queue);
	std::vector<int32> keys = shard_key_values(queue, relid, n);
	std::vector<Datum> key_datums;
	for (int32 k : keys)
		key_datums.push_back(Int32GetDatum(k));
	static const Oid row_types[3] = {TEXTOID, INT4ARRAYOID, TEXTOID};
	Datum row[3] = {pg::text_datum(queue), Datum(0), holder ? pg::text_datum(*holder) : Datum(0)};
	char row_nulls[3] = {' ', ' ', holder ? ' ' : 'n'};
	pg::guard([&] {
		row[1] = PointerGetDatum(construct_array(key_datums.data(), static_cast<int>(key_datums.size()),
		                                         INT4OID, 4, true, TYPALIGN_INT));
	});
	pg::execute(
	    "INSERT INTO concurrency.distributed_queue (queue, shard_keys, dedupe_holder) VALUES ($1, $2, $3)", 3,
	    row_types, row, row_nulls);
	// the slots of key_rate_limit (where the queue has the limit) beside the
	// tasks too
	if (OidIsValid(concurrency_relid(key_rate_table_name(queue))))
		distribute_key_rate_slots_here(queue);
	// the queue functions hand what this node cannot serve to the routed
	// functions of schema concurrency_internal, as the owner of the queue's
	// table
	Oid owner = relation_owner(relid);
	std::string owner_name =
	    pg::guard([&] { return static_cast<const char *>(GetUserNameFromId(owner, false)); });
	pg::execute(fmt::format("GRANT USAGE ON SCHEMA concurrency_internal TO {}", quote_ident(owner_name)));
	// every node serves the queue: its settings, shard keys and permissions on
	// every node, in this transaction (as the catalog's owner: SECURITY
	// DEFINER)
	SPIPlanPtr sync = pg::prepared_plan(
	    "ddl:sync", "SELECT concurrency_internal.distributed_sync_catalog($1)", 1, name_types);
	pg::execute(sync, name, nullptr, false);
	set_local("citus.multi_shard_modify_mode", mode);
}

} // namespace concurrency::queue

using namespace concurrency;
using namespace concurrency::queue;

// concurrency_internal.distributed_queue_settings(queue) — the table, lease,
// max_attempts, shard keys, dedupe holder, retention, key_limit and
// max_leased of a distributed queue; 42704 when it is not one.
CONCURRENCY_FUNCTION(concurrency_distributed_queue_settings) {
	std::string queue = pg::text_arg(fcinfo, 0, "queue");
	TupleDesc desc = pg::guard([&] {
		TupleDesc d = nullptr;
		if (get_call_result_type(fcinfo, nullptr, &d) != TYPEFUNC_COMPOSITE)
			elog(ERROR, "return type must be a row type");
		return BlessTupleDesc(d);
	});
	pg::spi_connect();
	distributed_settings(queue);
	Datum values[8];
	bool nulls[8];
	for (int c = 0; c < 8; ++c)
		values[c] = pg::column(0, c + 1, &nulls[c]);
	HeapTupleHeader row =
	    pg::guard([&] { return SPI_returntuple(heap_form_tuple(desc, values, nulls), desc); });
	pg::spi_finish();
	return PointerGetDatum(row);
}

// concurrency_internal.distributed_leased(queue) — the leased tasks of a
// distributed queue (id, lease token, lease end), a query over every shard.
CONCURRENCY_FUNCTION(concurrency_distributed_leased) {
	std::string queue = pg::text_arg(fcinfo, 0, "queue");
	pg::ResultSet out = pg::materialize(fcinfo);
	pg::spi_connect();
	for (const LeasedTask &t : distributed_leased(queue)) {
		Datum values[3] = {Int64GetDatum(t.id), Int64GetDatum(t.lease_token.value_or(0)),
		                   TimestampTzGetDatum(t.lease_expires_at.value_or(0))};
		bool nulls[3] = {false, !t.lease_token, !t.lease_expires_at};
		pg::add_row(out, values, nulls);
	}
	pg::spi_finish();
	return Datum(0);
}

// concurrency_internal.distributed_resize_slots(queue, max_leased) — after
// alter_queue set max_leased (0: none): slots 1..max_leased, the leases
// running now written into the empty ones.
CONCURRENCY_FUNCTION(concurrency_distributed_resize_slots) {
	std::string queue = pg::text_arg(fcinfo, 0, "queue");
	std::optional<int32> max_leased;
	if (!PG_ARGISNULL(1))
		max_leased = PG_GETARG_INT32(1);
	pg::spi_connect();
	resize_lease_slots(queue, max_leased);
	pg::spi_finish();
	PG_RETURN_VOID();
}

// concurrency_internal.distributed_sync_catalog(queue) — copies what the
// coordinator knows of a queue (its row of concurrency.queue, of
// concurrency.distributed_queue and its permissions) to every other node,
// replacing what they had, in this transaction; a queue that is gone is
// removed there. Nothing on a server that is not a Citus coordinator.
// SECURITY DEFINER: runs as the owner of the catalog, as whom Citus sends
// the command.
CONCURRENCY_FUNCTION(concurrency_distributed_sync_catalog) {
	std::string queue = pg::text_arg(fcinfo, 0, "queue");
	pg::spi_connect();
	sync_catalog_here(queue);
	pg::spi_finish();
	PG_RETURN_VOID();
}

// concurrency_internal.distribute_key_rate_slots(queue) — the slots of
// key_rate_limit of distributed queue `queue` (rk_<queue>) distributed
// beside its tasks: a key's slots on the shard of its tasks. Slots still
// there are forgotten (a key's first claims make them again). Nothing where
// they are distributed already; 55000 for a queue that is not distributed
// or has no such slots.
CONCURRENCY_FUNCTION(concurrency_distribute_key_rate_slots) {
	std::string queue = pg::text_arg(fcinfo, 0, "queue");
	pg::spi_connect();
	distribute_key_rate_slots_here(queue);
	pg::spi_finish();
	PG_RETURN_VOID();
}

// concurrency.distribute_queue(queue, shard_count) — makes an empty queue
// distributed (shard_count shards, default citus.shard_count): its table and
// key table Citus distributed tables by shard_key, co-located, every unique
// index on shard_key; its catalog and permissions on every node. The caller
// must own the queue's table and run it on the coordinator.
CONCURRENCY_FUNCTION(concurrency_distribute_queue) {
	std::string queue = pg::text_arg(fcinfo, 0, "queue");
	std::optional<int32> shard_count;
	if (!PG_ARGISNULL(1))
		shard_count = PG_GETARG_INT32(1);
	pg::spi_connect();
	distribute_queue_here(queue, shard_count);
	pg::spi_finish();
	PG_RETURN_VOID();
}
