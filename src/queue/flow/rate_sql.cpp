#include "queue/flow/rate_sql.hpp"

#include <fmt/format.h>

#include "common/sql_text.hpp"
#include "queue/sql_operators.hpp"
#include "common/pure.hpp" // last: checks that no PostgreSQL header came before

namespace concurrency::queue {

SlotTableSql::SlotTableSql(std::string_view queue, std::string_view table)
    : queue_(queue), table_("concurrency." + quote_ident(table)) {}

std::string SlotTableSql::drop_table() const {
	return fmt::format("DROP TABLE IF EXISTS {}", table_);
}

std::string SlotTableSql::alter_owner(std::string_view role) const {
	return fmt::format("ALTER TABLE {} OWNER TO {}", table_, quote_ident(role));
}

RateSql::RateSql(std::string_view queue) : SlotTableSql(queue, rate_table_name(queue)) {}

std::string RateSql::create_table(Naming naming) const {
	return fmt::format(
	    R"(CREATE TABLE {r} (
    slot      integer     NOT NULL,
    used_at   timestamptz NOT NULL DEFAULT '-infinity',
    CONSTRAINT {pkey} PRIMARY KEY (slot)
) WITH (fillfactor = 50);
COMMENT ON TABLE {r} IS {comment};)",
	    fmt::arg("r", table_),
	    fmt::arg("pkey", quote_ident(derived_name(QueueTable::rate, queue_, Role::pkey, naming))),
	    fmt::arg("comment",
	             quote_literal(fmt::format(
	                 "rate slots of the concurrency_ext queue {} (internal: one per rate_limit)", queue_))));
}

std::string RateSql::resize() const {
	return fmt::format(R"(WITH gone AS (DELETE FROM {r} WHERE slot )" GT R"( $1)
INSERT INTO {r} (slot)
SELECT g.slot FROM pg_catalog.generate_series(1, $1) AS g(slot)
ON CONFLICT (slot) DO NOTHING)",
	                   fmt::arg("r", table_));
}

std::string RateSql::layout(bool adding) const {
	return fmt::format("ALTER TABLE {} SET (fillfactor = {})", table_, adding ? 50 : 100);
}

// The free slots are chosen in a MATERIALIZED CTE, run once per execution:
// as a subquery in the UPDATE's FROM (which an unmarked CTE referenced once
// becomes) the planner may re-run it for every row of an outer scan, each
// run locking and returning further slots (SKIP LOCKED passes over the
// rows this statement updated), so that one call took more slots than it
// asked for (found in counters: src/counters/add.cpp).
std::string RateSql::take() const {
	return fmt::format(R"(WITH free AS MATERIALIZED (
    SELECT slot, used_at FROM {r} WHERE used_at )" LE R"( $1 LIMIT $2 FOR UPDATE SKIP LOCKED)
UPDATE {r} AS s SET used_at = $3 FROM free
 WHERE s.slot )" EQ R"( free.slot
RETURNING s.slot, free.used_at AS before)",
	                   fmt::arg("r", table_));
}

std::string RateSql::give_back() const {
	return fmt::format(R"(UPDATE {r} AS s SET used_at = b.before
  FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2)) AS b(slot, before)
 WHERE s.slot )" EQ R"( b.slot)",
	                   fmt::arg("r", table_));
}

std::string RateSql::oldest_use() const {
	return fmt::format("SELECT pg_catalog.min(used_at) FROM {}", table_);
}

KeyRateSql::KeyRateSql(std::string_view queue) : SlotTableSql(queue, key_rate_table_name(queue)) {}

KeyRateSql::KeyRateSql(std::string_view queue, const ShardPlacement &shard)
    : SlotTableSql(queue, shard.key_rate_relname),
      filter_(fmt::format("shard_key " EQ " {} AND ", shard.shard_key)),
      s_filter_(fmt::format("s.shard_key " EQ " {} AND ", shard.shard_key)), column_(", shard_key"),
      value_(fmt::format(", {}", shard.shard_key)) {}

std::string KeyRateSql::create_table(Naming naming) const {
	return fmt::format(
	    R"(CREATE TABLE {r} (
    concurrency_key text        NOT NULL,
    slot            integer     NOT NULL,
    used_at         timestamptz NOT NULL DEFAULT '-infinity',
    CONSTRAINT {pkey} PRIMARY KEY (concurrency_key, slot)
) WITH (fillfactor = 50);
COMMENT ON TABLE {r} IS {comment};)",
	    fmt::arg("r", table_),
	    fmt::arg("pkey", quote_ident(derived_name(QueueTable::key_rate, queue_, Role::pkey, naming))),
	    fmt::arg("comment",
	             quote_literal(fmt::format("rate slots of each concurrency key of the concurrency_ext "
	                                       "queue {} (internal: up to key_rate_limit per key)",
	                                       queue_))));
}

std::string KeyRateSql::resize() const {
	return fmt::format("DELETE FROM {} WHERE slot " GT " $1", table_);
}

std::string KeyRateSql::take() const {
	return fmt::format(R"(WITH free AS MATERIALIZED (
    SELECT slot, used_at FROM {r}
     WHERE {f}concurrency_key )" EQ R"( $1 AND used_at )" LE R"( $2
     ORDER BY slot LIMIT 1 FOR UPDATE SKIP LOCKED),
used AS (
    UPDATE {r} AS s SET used_at = $3 FROM free
     WHERE {sf}s.concurrency_key )" EQ R"( $1 AND s.slot )" EQ R"( free.slot
    RETURNING s.slot, free.used_at AS before),
added AS (
    INSERT INTO {r} (concurrency_key, slot, used_at{column})
    SELECT $1, last.slot )" PLUS R"( 1, $3{value}
      FROM (SELECT COALESCE(pg_catalog.max(slot), 0) AS slot FROM {r}
             WHERE {f}concurrency_key )" EQ R"( $1) AS last
     WHERE last.slot )" LT R"( $4 AND NOT EXISTS (SELECT FROM free)
       AND pg_catalog.pg_try_advisory_xact_lock({oid}::pg_catalog.regclass::pg_catalog.oid::pg_catalog.int4,
                                                pg_catalog.hashtext($1) )" XOR R"( (last.slot )" PLUS R"( 1))
    ON CONFLICT DO NOTHING
    RETURNING slot, '-infinity'::pg_catalog.timestamptz AS before)
SELECT slot, before FROM used UNION ALL SELECT slot, before FROM added)",
	                   fmt::arg("r", table_), fmt::arg("oid", quote_literal(table_)), fmt::arg("f", filter_),
	                   fmt::arg("sf", s_filter_), fmt::arg("column", column_), fmt::arg("value", value_));
}

std::string KeyRateSql::give_back() const {
	return fmt::format("UPDATE {} SET used_at = $3 WHERE {}concurrency_key " EQ " $1 AND slot " EQ " $2",
	                   table_, filter_);
}

std::string KeyRateSql::oldest_use() const {
	return fmt::format(
	    "SELECT pg_catalog.min(used_at), pg_catalog.count(*) FROM {} WHERE {}concurrency_key " EQ " $1",
	    table_, filter_);
}

std::string KeyRateSql::forget_old() const {
	return fmt::format(R"(DELETE FROM {r} AS s
 WHERE s.used_at )" LE R"( $1 AND s.ctid )" EQ R"( ANY (ARRAY(
        SELECT ctid FROM {r} WHERE {f}used_at )" LE R"( $1
         LIMIT $2 FOR UPDATE SKIP LOCKED)))",
	                   fmt::arg("r", table_), fmt::arg("f", filter_));
}

} // namespace concurrency::queue
