#include "queue/rate_sql.hpp"

#include <fmt/format.h>

#include "common/sql_text.hpp"
#include "queue/sql_operators.hpp"
#include "common/pure.hpp" // last: checks that no PostgreSQL header came before

namespace concurrency::queue {

std::string rate_table_name(std::string_view queue) {
	return fmt::format("r_{}", queue);
}

RateSql::RateSql(std::string_view queue)
    : queue_(queue), table_("concurrency." + quote_ident(rate_table_name(queue))) {}

std::string RateSql::create_table() const {
	return fmt::format(
	    R"(CREATE TABLE {r} (
    slot      integer     NOT NULL,
    used_at   timestamptz NOT NULL DEFAULT '-infinity',
    CONSTRAINT {pkey} PRIMARY KEY (slot)
) WITH (fillfactor = 50);
COMMENT ON TABLE {r} IS {comment};)",
	    fmt::arg("r", table_), fmt::arg("pkey", quote_ident(rate_table_name(queue_) + "_pkey")),
	    fmt::arg("comment",
	             quote_literal(fmt::format(
	                 "rate slots of the concurrency_ext queue {} (internal: one per rate_limit)", queue_))));
}

std::string RateSql::drop_table() const {
	return fmt::format("DROP TABLE IF EXISTS {}", table_);
}

std::string RateSql::alter_owner(std::string_view role) const {
	return fmt::format("ALTER TABLE {} OWNER TO {}", table_, quote_ident(role));
}

std::string RateSql::resize() const {
	return fmt::format(R"(WITH gone AS (DELETE FROM {r} WHERE slot )" GT R"( $1)
INSERT INTO {r} (slot)
SELECT g.slot FROM pg_catalog.generate_series(1, $1) AS g(slot)
ON CONFLICT (slot) DO NOTHING)",
	                   fmt::arg("r", table_));
}

std::string RateSql::take() const {
	return fmt::format(R"(UPDATE {r} SET used_at = $3
 WHERE slot )" EQ R"( ANY (ARRAY(
           SELECT slot FROM {r} WHERE used_at )" LE R"( $1 LIMIT $2 FOR UPDATE SKIP LOCKED))
RETURNING slot)",
	                   fmt::arg("r", table_));
}

std::string RateSql::give_back() const {
	return fmt::format("UPDATE {} SET used_at = '-infinity' WHERE slot " EQ " ANY ($1)", table_);
}

std::string RateSql::oldest_use() const {
	return fmt::format("SELECT pg_catalog.min(used_at) FROM {}", table_);
}

} // namespace concurrency::queue
