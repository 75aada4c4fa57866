#include "queue/lifecycle/stats_sql.hpp"

#include <fmt/format.h>

#include "common/sql_text.hpp"
#include "queue/queue_sql.hpp"
#include "queue/sql_operators.hpp"
#include "common/pure.hpp" // last: checks that no PostgreSQL header came before

namespace concurrency::queue {

StatsSql::StatsSql(std::string_view queue)
    : queue_(queue), table_("concurrency." + quote_ident(queue_table_name(queue))) {}

std::string StatsSql::create_index(Naming naming) const {
	return fmt::format("CREATE INDEX {} ON {} (id) WHERE state = 'dead'",
	                   quote_ident(derived_name(QueueTable::tasks, queue_, Role::dead, naming)), table_);
}

// Each subquery's WHERE is the predicate of one partial index of the table
// (src/queue/queue_sql.cpp, keys_sql.cpp, create_index above), written as
// the index has it, so that even the generic plan scans only that index's
// tasks: ready -> ready_q_<queue>, scheduled -> scheduled_, leased ->
// leased_, dead -> dead_, done and cancelled -> finished_, blocked ->
// keyed_ (only keyed tasks are ever blocked: admission and retry_dead give
// that state to keyed tasks only), waiting -> waiting_. One statement: one snapshot for all.
std::string StatsSql::stats() const {
	return fmt::format(R"(SELECT r.n )" PLUS R"( d.n,
       (SELECT pg_catalog.count(*) FROM {t} WHERE state )" EQ R"( 'scheduled' AND run_at )" GT R"( $1),
       l.live, l.expired,
       (SELECT pg_catalog.count(*) FROM {t} WHERE state )" EQ R"( 'dead'),
       $1 )" MINUS R"( LEAST(r.oldest, d.oldest),
       f.done, f.cancelled,
       (SELECT pg_catalog.count(*) FROM {t} WHERE concurrency_key IS NOT NULL AND state )" EQ R"( 'blocked'),
       (SELECT pg_catalog.count(*) FROM {t} WHERE state )" EQ R"( 'waiting')
  FROM (SELECT pg_catalog.count(*) AS n, pg_catalog.min(run_at) AS oldest
          FROM {t} WHERE state )" EQ R"( 'ready') AS r,
       (SELECT pg_catalog.count(*) AS n, pg_catalog.min(run_at) AS oldest
          FROM {t} WHERE state )" EQ R"( 'scheduled' AND run_at )" LE R"( $1) AS d,
       (SELECT pg_catalog.count(*) FILTER (WHERE COALESCE(lease_extended_to, lease_expires_at) )" GT
	                   R"( $1) AS live,
               pg_catalog.count(*) FILTER (WHERE COALESCE(lease_extended_to, lease_expires_at) )" LE
	                   R"( $1) AS expired
          FROM {t} WHERE state )" EQ R"( 'leased') AS l,
       (SELECT pg_catalog.count(*) FILTER (WHERE state )" EQ R"( 'done') AS done,
               pg_catalog.count(*) FILTER (WHERE state )" EQ R"( 'cancelled') AS cancelled
          FROM {t} WHERE state )" EQ R"( ANY ('{{done,cancelled}}'::pg_catalog.text[])) AS f)",
	                   fmt::arg("t", table_));
}

std::string StatsSql::stats_over_shards() const {
	return fmt::format(R"(SELECT pg_catalog.count(*) FILTER (WHERE state )" EQ R"( 'ready' OR (state )" EQ
	                   R"( 'scheduled' AND run_at )" LE
	                   R"( $1)),
       pg_catalog.count(*) FILTER (WHERE state )" EQ R"( 'scheduled' AND run_at )" GT R"( $1),
       pg_catalog.count(*) FILTER (WHERE state )" EQ
	                   R"( 'leased' AND COALESCE(lease_extended_to, lease_expires_at) )" GT
	                   R"( $1),
       pg_catalog.count(*) FILTER (WHERE state )" EQ
	                   R"( 'leased' AND COALESCE(lease_extended_to, lease_expires_at) )" LE
	                   R"( $1),
       pg_catalog.count(*) FILTER (WHERE state )" EQ R"( 'dead'),
       $1 )" MINUS R"( pg_catalog.min(run_at) FILTER (WHERE state )" EQ R"( 'ready' OR (state )" EQ
	                   R"( 'scheduled' AND run_at )" LE R"( $1)),
       pg_catalog.count(*) FILTER (WHERE state )" EQ R"( 'done'),
       pg_catalog.count(*) FILTER (WHERE state )" EQ R"( 'cancelled'),
       pg_catalog.count(*) FILTER (WHERE state )" EQ R"( 'blocked'),
       pg_catalog.count(*) FILTER (WHERE state )" EQ R"( 'waiting')
  FROM {t})",
	                   fmt::arg("t", table_));
}

} // namespace concurrency::queue
