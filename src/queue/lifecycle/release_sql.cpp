// The statements of release, heartbeat with progress, and the next due time
// that dequeue(…, wait) sleeps until (declared in queue/queue_sql.hpp).
#include <fmt/format.h>

#include "queue/queue_sql.hpp"
#include "queue/sql_operators.hpp"

#include "common/pure.hpp" // last: checks that no PostgreSQL header came before

namespace concurrency::queue {

// A task is handed back by the holder of its lease: leased, or made ready by
// a wake-up after its deadline but not claimed again (the same fence as
// complete and fail). It goes back to its place in claim order (its own
// run_at) unless a run_at is given; a serial key's head stays admitted, so it
// is its key's next task again; a lease slot (max_leased) is free once the
// token is gone.
std::string QueueSql::release_many() const {
	return fmt::format(
	    R"(UPDATE {t} AS t
   SET state = CASE WHEN $3 )" GT R"( $4 THEN 'scheduled' ELSE 'ready' END,
       run_at = COALESCE($3, t.run_at),
       attempt = GREATEST(t.attempt )" MINUS R"( 1, 0),
       lease_token = NULL,
       lease_expires_at = NULL,
       lease_extended_to = NULL,
       worker = NULL
  FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2)) AS u(id, lease_token)
 WHERE {tk}t.id )" EQ R"( u.id AND t.lease_token )" EQ R"( u.lease_token
   AND t.state )" EQ R"( ANY ('{{leased,ready}}'::pg_catalog.text[])
RETURNING t.id)",
	    fmt::arg("t", table_), fmt::arg("tk", tk_));
}

// As heartbeat and heartbeat_many, with the progress written too: no index
// covers it, so the update stays HOT.
std::string QueueSql::heartbeat_progress() const {
	return fmt::format(
	    R"(UPDATE {t}
   SET state = 'leased',
       {extend},
       progress = $5
 WHERE {k}id )" EQ R"( $1 AND lease_token )" EQ R"( $2
RETURNING $3 )" PLUS R"( $4)",
	    fmt::arg("t", table_), fmt::arg("k", k_), fmt::arg("extend", lease_extension("")));
}

std::string QueueSql::heartbeat_many_progress() const {
	return fmt::format(
	    R"(UPDATE {t} AS t
   SET state = 'leased',
       {extend},
       progress = COALESCE(u.progress, t.progress)
  FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($5)) AS u(id, lease_token, progress)
 WHERE {tk}t.id )" EQ R"( u.id AND t.lease_token )" EQ R"( u.lease_token
RETURNING t.id, $3 )" PLUS R"( $4)",
	    fmt::arg("t", table_), fmt::arg("tk", tk_), fmt::arg("extend", lease_extension("t.")));
}

// A lease whose indexed deadline passed may have been extended (the wake-up
// leaves it so): its own deadline counts. The leases past their indexed
// deadline are few (the holder's heartbeats move it), and are read whole;
// the first lease whose indexed deadline is ahead bounds the rest (a lease
// never ends before its indexed deadline).
std::string QueueSql::next_due() const {
	return fmt::format(R"(SELECT LEAST((SELECT run_at FROM {t} WHERE state )" EQ
	                   R"( 'scheduled' ORDER BY run_at LIMIT 1),
             (SELECT lease_expires_at FROM {t} WHERE state )" EQ R"( 'leased' AND lease_expires_at )" GT
	                   R"( $1 ORDER BY lease_expires_at LIMIT 1),
             (SELECT pg_catalog.min(GREATEST(lease_expires_at, lease_extended_to)) FROM {t}
               WHERE state )" EQ R"( 'leased' AND lease_expires_at )" LE R"( $1)))",
	                   fmt::arg("t", table_));
}

} // namespace concurrency::queue
