// The statements of a claim (declared in queue/queue_sql.hpp): dequeue's
// wake-up step, the claim in claim order, the fair claim's rotation over
// the keys and the claim under key_rate_limit, key by key, and the index
// that those two walk.
#include <fmt/format.h>

#include "common/sql_text.hpp"
#include "queue/queue_sql.hpp"
#include "queue/sql_operators.hpp"

#include "common/pure.hpp" // last: checks that no PostgreSQL header came before

namespace concurrency::queue {

// Both steps of dequeue lock their rows in a sub-select with FOR UPDATE SKIP
// LOCKED and update them through `id = ANY (ARRAY(…))`: the update then finds
// its rows through the primary key whatever the plan cache's generic plan
// guesses for LIMIT $n (a join could turn into a hash join over the table).
// The wake-up leaves alone a lease whose indexed deadline passed but which a
// heartbeat extended (lease_extended_to): it neither locks nor writes it.
// Moving that lease's deadline into the index here would lock the row until
// the claim's transaction ends, and a waiting dequeue's transaction lasts
// while it sleeps: the holder's next heartbeat or complete would wait for it,
// and the lease lapse meanwhile (isolation spec queue_held_lease). The
// holder's heartbeat moves the indexed deadline itself (lease_extension).
std::string QueueSql::wake() const {
	return fmt::format(
	    R"(UPDATE {t} AS t
   SET state = CASE WHEN t.state )" EQ R"( 'scheduled' THEN 'ready'
                    WHEN t.attempt )" LT R"( $4 THEN 'ready'
                    ELSE 'dead' END,
       lease_extended_to = NULL,
       last_error = CASE WHEN t.state )" EQ R"( 'leased' THEN 'lease expired' ELSE t.last_error END
 WHERE {tk}t.id )" EQ R"( ANY (ARRAY(
         SELECT s.id FROM (SELECT id FROM {t}
                            WHERE {k}state )" EQ R"( 'scheduled' AND run_at )" LE R"( $1 AND run_at )" GE
	    R"( $3
                            ORDER BY run_at LIMIT $2 FOR UPDATE SKIP LOCKED) AS s
         UNION ALL
         SELECT l.id FROM (SELECT id FROM {t}
                            WHERE {k}state )" EQ R"( 'leased' AND lease_expires_at )" LE
	    R"( $1 AND lease_expires_at )" GE R"( $3
                              AND NOT COALESCE(lease_extended_to )" GT R"( $1, false)
                            ORDER BY lease_expires_at LIMIT $2 FOR UPDATE SKIP LOCKED) AS l))
RETURNING t.state )" EQ R"( 'ready', t.state )" EQ R"( 'dead', t.concurrency_key, t.id{links})",
	    fmt::arg("t", table_), fmt::arg("k", k_), fmt::arg("tk", tk_), fmt::arg("links", link_columns("t.")));
}

// What a claim writes into each task it leases ($1 now, $3 lease, $4
// worker), up to the WHERE of the tasks it chose.
std::string QueueSql::lease_tasks() const {
	return fmt::format(
	    R"(UPDATE {} AS t
   SET state = 'leased',
       attempt = t.attempt )" PLUS R"( 1,
       lease_token = {},
       lease_expires_at = $1 )" PLUS R"( $3,
       lease_extended_to = NULL,
       worker = $4
 WHERE)",
	    table_, new_token());
}

std::string QueueSql::claim() const {
	return fmt::format(R"({lease} {tk}t.id )" EQ R"( ANY (ARRAY(
         SELECT id FROM {t}
          WHERE {k}state )" EQ R"( 'ready' AND ({order}) )" GE R"( ($5, $6, $7)
          ORDER BY {order}
          LIMIT $2
            FOR UPDATE SKIP LOCKED))
RETURNING t.id, t.lease_token, t.attempt, t.payload, t.enqueued_at, t.lease_expires_at,
          )" MINUS R"( (t.priority::pg_catalog.int8), t.run_at)",
	                   fmt::arg("t", table_), fmt::arg("order", claim_order()),
	                   fmt::arg("lease", lease_tasks()), fmt::arg("k", k_), fmt::arg("tk", tk_));
}

namespace {

// Where a rotation over the keys starts: the condition on concurrency_key
// that keeps the keys after `from` (the key after which is parameter `key`).
std::string keys_after(FairFrom from, std::string_view key) {
	switch (from) {
	case FairFrom::start:
		return "";
	case FairFrom::after_null:
		return " AND concurrency_key IS NOT NULL";
	case FairFrom::after_key:
		break;
	}
	return fmt::format(" AND concurrency_key " GT " {}", key);
}

} // namespace

// The fair claim's rotation: each step finds the next key with ready tasks
// (one index probe, as a skip scan does), and each key's first ready task not
// locked by another claim (another probe). Keys come in their sort order, the
// tasks without a key (NULL, first in the index) before them.
std::string QueueSql::claim_fair(FairFrom from) const {
	return fmt::format(
	    R"(WITH RECURSIVE keys (k, n) AS (
        (SELECT concurrency_key, 1::pg_catalog.int4 FROM {t}
          WHERE {k}state )" EQ R"( 'ready'{first}
          ORDER BY concurrency_key NULLS FIRST LIMIT 1)
    UNION ALL
        SELECT nx.k, keys.n )" PLUS R"( 1
          FROM keys CROSS JOIN LATERAL (
                  (SELECT concurrency_key AS k FROM {t}
                    WHERE {k}state )" EQ R"( 'ready' AND keys.k IS NULL AND concurrency_key IS NOT NULL
                    ORDER BY concurrency_key NULLS FIRST LIMIT 1)
              UNION ALL
                  (SELECT concurrency_key FROM {t}
                    WHERE {k}state )" EQ R"( 'ready' AND concurrency_key )" GT R"( keys.k
                    ORDER BY concurrency_key NULLS FIRST LIMIT 1)) AS nx
         WHERE keys.n )" LT R"( $2)
{lease} {tk}t.id )" EQ R"( ANY (ARRAY(
         SELECT CASE WHEN keys.k IS NULL
                     THEN (SELECT id FROM {t}
                            WHERE {k}state )" EQ R"( 'ready' AND concurrency_key IS NULL
                            ORDER BY concurrency_key NULLS FIRST, {order}
                            LIMIT 1 FOR UPDATE SKIP LOCKED)
                     ELSE (SELECT id FROM {t}
                            WHERE {k}state )" EQ R"( 'ready' AND concurrency_key )" EQ R"( keys.k
                            ORDER BY concurrency_key NULLS FIRST, {order}
                            LIMIT 1 FOR UPDATE SKIP LOCKED) END
           FROM keys))
RETURNING t.id, t.lease_token, t.attempt, t.payload, t.enqueued_at, t.lease_expires_at, t.concurrency_key,
          (SELECT pg_catalog.count(*) FROM keys),
          (SELECT keys.k FROM keys ORDER BY keys.n DESC LIMIT 1))",
	    fmt::arg("t", table_), fmt::arg("order", claim_order()), fmt::arg("lease", lease_tasks()),
	    fmt::arg("k", k_), fmt::arg("tk", tk_), fmt::arg("first", keys_after(from, "$5")));
}

std::string QueueSql::next_open_key(FairFrom from, std::string_view key_rate_table) const {
	return fmt::format(
	    R"(WITH RECURSIVE keys (k, n, used, oldest) AS (
        SELECT f.k, 1::pg_catalog.int8, u.used, u.oldest
          FROM (SELECT concurrency_key AS k FROM {t}
                 WHERE {k}state )" EQ R"( 'ready'{after}
                 ORDER BY concurrency_key NULLS FIRST LIMIT 1) AS f
          CROSS JOIN LATERAL (SELECT pg_catalog.count(*) AS used, pg_catalog.min(used_at) AS oldest
                                FROM {r} WHERE {k}concurrency_key )" EQ R"( f.k AND used_at )" GT R"( $2) AS u
    UNION ALL
        SELECT nx.k, keys.n )" PLUS R"( 1, u.used, u.oldest
          FROM keys CROSS JOIN LATERAL (
                  SELECT concurrency_key AS k FROM {t}
                   WHERE {k}state )" EQ R"( 'ready' AND concurrency_key )" GT R"( keys.k
                   ORDER BY concurrency_key NULLS FIRST LIMIT 1) AS nx
          CROSS JOIN LATERAL (SELECT pg_catalog.count(*) AS used, pg_catalog.min(used_at) AS oldest
                                FROM {r} WHERE {k}concurrency_key )" EQ R"( nx.k AND used_at )" GT
	    R"( $2) AS u
         WHERE keys.used )" GE R"( $3)
SELECT k, k IS NOT NULL AND used )" GE R"( $3,
       (SELECT pg_catalog.min(oldest) FROM keys WHERE k IS NOT NULL AND used )" GE R"( $3)
  FROM keys ORDER BY n DESC LIMIT 1)",
	    fmt::arg("t", table_), fmt::arg("k", k_), fmt::arg("after", keys_after(from, "$1")),
	    fmt::arg("r", key_rate_table));
}

std::string QueueSql::claim_of_key(bool null_key) const {
	return fmt::format(R"({lease} {tk}t.id )" EQ R"( (
         SELECT id FROM {t}
          WHERE {k}state )" EQ R"( 'ready' AND concurrency_key {is_key}
          ORDER BY concurrency_key NULLS FIRST, {order}
          LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING t.id, t.lease_token, t.attempt, t.payload, t.enqueued_at, t.lease_expires_at, t.concurrency_key)",
	                   fmt::arg("t", table_), fmt::arg("order", claim_order()),
	                   fmt::arg("lease", lease_tasks()), fmt::arg("k", k_), fmt::arg("tk", tk_),
	                   fmt::arg("is_key", null_key ? "IS NULL" : EQ " $5"));
}

std::string QueueSql::create_fair_index(Naming naming) const {
	return fmt::format(
	    "CREATE INDEX IF NOT EXISTS {} ON {} (concurrency_key NULLS FIRST, {}) WHERE state = 'ready'",
	    name(Role::fair, naming), table_, claim_order());
}

std::string QueueSql::drop_fair_index(std::string_view index) {
	return fmt::format("DROP INDEX IF EXISTS concurrency.{}", quote_ident(index));
}

} // namespace concurrency::queue
