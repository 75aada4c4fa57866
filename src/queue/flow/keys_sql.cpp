#include "queue/flow/keys_sql.hpp"

#include <fmt/format.h>

#include "common/sql_text.hpp"
#include "queue/queue_sql.hpp"
#include "queue/sql_operators.hpp"
#include "common/pure.hpp" // last: checks that no PostgreSQL header came before

namespace concurrency::queue {

KeySql::KeySql(std::string_view queue)
    : queue_(queue), tasks_("concurrency." + quote_ident(queue_table_name(queue))),
      keys_("concurrency." + quote_ident(key_table_name(queue))),
      slots_("concurrency." + quote_ident(slot_table_name(queue))) {}

KeySql::KeySql(std::string_view queue, const QueueSql &tasks, const ShardPlacement &shard)
    : queue_(queue), tasks_(tasks.table()), keys_("concurrency." + quote_ident(shard.key_relname)),
      slots_("concurrency." + quote_ident(slot_table_name(queue))),
      key_filter_(fmt::format("shard_key " EQ " {} AND ", shard.shard_key)), key_column_("shard_key, "),
      key_value_(fmt::format("{}, ", shard.shard_key)), task_columns_(tasks.shard_columns()),
      task_values_(tasks.shard_values()), dedupe_target_(tasks.dedupe_target()) {}

// The tasks admitted for their key: they count against key_limit.
// (Used in fmt format strings, hence the doubled braces.)
#define ADMITTED "state " EQ " ANY ('{{ready,scheduled,leased}}'::pg_catalog.text[])"
// The key_limit of the queue named $n, from the catalog; none (NULL or 0):
// no limit.
#define KEY_LIMIT(n)                                                                                         \
	"COALESCE((SELECT NULLIF(key_limit, 0) FROM concurrency.queue WHERE name " EQ " " n "), 2147483647)"

std::string KeySql::create_tables(Naming naming) const {
	// The keyed index serves admission (count a key's admitted tasks, find
	// its first blocked ones) and queue_keys; only keyed tasks are in it.
	return fmt::format(
	    R"(CREATE TABLE {k} (
    concurrency_key text NOT NULL,
    CONSTRAINT {kpkey} PRIMARY KEY (concurrency_key)
) WITH (fillfactor = 90);
COMMENT ON TABLE {k} IS {kcomment};
CREATE TABLE {s} (
    slot        integer NOT NULL,
    task_id     bigint,
    lease_token bigint,
    CONSTRAINT {spkey} PRIMARY KEY (slot)
) WITH (fillfactor = 50);
COMMENT ON TABLE {s} IS {scomment};
CREATE INDEX {keyed} ON {t} (concurrency_key, state, id) WHERE concurrency_key IS NOT NULL;)",
	    fmt::arg("k", keys_),
	    fmt::arg("kpkey", quote_ident(derived_name(QueueTable::keys, queue_, Role::pkey, naming))),
	    fmt::arg("kcomment",
	             quote_literal(fmt::format(
	                 "concurrency keys of the concurrency_ext queue {} (internal: locked to admit tasks)",
	                 queue_))),
	    fmt::arg("s", slots_),
	    fmt::arg("spkey", quote_ident(derived_name(QueueTable::slots, queue_, Role::pkey, naming))),
	    fmt::arg("scomment",
	             quote_literal(fmt::format(
	                 "lease slots of the concurrency_ext queue {} (internal: one per max_leased)", queue_))),
	    fmt::arg("t", tasks_),
	    fmt::arg("keyed", quote_ident(derived_name(QueueTable::tasks, queue_, Role::keyed, naming))));
}

std::string KeySql::drop_tables() const {
	return fmt::format("DROP TABLE IF EXISTS {}, {}", keys_, slots_);
}

std::string KeySql::alter_owner(std::string_view role) const {
	return fmt::format("ALTER TABLE {} OWNER TO {}; ALTER TABLE {} OWNER TO {}", keys_, quote_ident(role),
	                   slots_, quote_ident(role));
}

std::string KeySql::lock_key() const {
	return fmt::format("SELECT FROM {} WHERE {}concurrency_key " EQ " $1 FOR UPDATE", keys_, key_filter_);
}

std::string KeySql::add_key() const {
	return fmt::format("INSERT INTO {} ({}concurrency_key) VALUES ({}$1) ON CONFLICT DO NOTHING", keys_,
	                   key_column_, key_value_);
}

std::string KeySql::enqueue(std::string_view dedupe_holder) const {
	return fmt::format(
	    R"(INSERT INTO {t} ({cols}state, priority, run_at, payload, dedupe_key, concurrency_key, enqueued_at)
SELECT {vals}CASE WHEN EXISTS (SELECT FROM {t} WHERE concurrency_key )" EQ R"( $6 AND state )" EQ
	    R"( 'blocked')
              OR (SELECT pg_catalog.count(*) FROM {t} WHERE concurrency_key )" EQ R"( $6 AND )" ADMITTED R"()
                 )" GE " " KEY_LIMIT("$7") R"(
            THEN 'blocked'
            WHEN $3 )" GT R"( $1 THEN 'scheduled' ELSE 'ready' END,
       $4, COALESCE($3, $1), $2, $5, $6, $1
ON CONFLICT {target} WHERE {holder} DO NOTHING
RETURNING id)",
	    fmt::arg("t", tasks_), fmt::arg("holder", dedupe_holder), fmt::arg("cols", task_columns_),
	    fmt::arg("vals", task_values_), fmt::arg("target", dedupe_target_));
}

std::string KeySql::admit() const {
	// The outer condition state = 'blocked' is checked again on the row it
	// updates: a blocked task cancelled meanwhile is left alone.
	return fmt::format(
	    R"(UPDATE {t} AS t
   SET state = CASE WHEN t.run_at )" GT R"( $3 THEN 'scheduled' ELSE 'ready' END
 WHERE t.state )" EQ R"( 'blocked'
   AND t.id )" EQ R"( ANY (ARRAY(
         SELECT id FROM {t}
          WHERE concurrency_key )" EQ R"( $1 AND state )" EQ R"( 'blocked'
          ORDER BY id
          LIMIT GREATEST(0, )" KEY_LIMIT("$2") " " MINUS R"(
                   (SELECT pg_catalog.count(*) FROM {t} WHERE concurrency_key )" EQ R"( $1 AND )" ADMITTED
	                                           R"())))
RETURNING t.id)",
	    fmt::arg("t", tasks_));
}

std::string KeySql::forget_key() const {
	// Called with the key's row locked: no enqueue of the key is under way,
	// and one that follows adds the row again (lock_key).
	return fmt::format(
	    R"(DELETE FROM {k} AS k
 WHERE {kf}k.concurrency_key )" EQ R"( $1
   AND NOT EXISTS (SELECT FROM {t} AS t
                    WHERE t.concurrency_key )" EQ R"( $1
                      AND t.state )" EQ R"( ANY ('{{ready,scheduled,leased,blocked}}'::pg_catalog.text[])))",
	    fmt::arg("k", keys_), fmt::arg("t", tasks_),
	    fmt::arg("kf", key_filter_.empty() ? std::string() : "k." + key_filter_));
}

std::string KeySql::lock_keys() const {
	return fmt::format("LOCK TABLE {} IN EXCLUSIVE MODE", keys_);
}

std::string KeySql::rebalance(bool limit_given) const {
	// Per key, its tasks not leased, in enqueue order: the first ones up to
	// the room left by the leased ones are admitted, the rest held back.
	// Without a key_limit, every one is admitted (room: 2^31 - 1).
	return fmt::format(
	    R"(UPDATE {t} AS t
   SET state = CASE WHEN r.place )" LE R"( r.room THEN (CASE WHEN t.state )" EQ R"( 'blocked'
                                                   THEN (CASE WHEN t.run_at )" GT
	    R"( $2 THEN 'scheduled' ELSE 'ready' END)
                                                   ELSE t.state END)
                    ELSE 'blocked' END
  FROM (SELECT w.id,
               pg_catalog.row_number() OVER (PARTITION BY w.concurrency_key ORDER BY w.id) AS place,
               {limit} )" MINUS R"( (SELECT pg_catalog.count(*) FROM {t} AS l
                                    WHERE l.concurrency_key )" EQ R"( w.concurrency_key
                                      AND l.state )" EQ R"( 'leased') AS room
          FROM {t} AS w
         WHERE w.concurrency_key IS NOT NULL
           AND w.state )" EQ R"( ANY ('{{ready,scheduled,blocked}}'::pg_catalog.text[])) AS r
 WHERE t.id )" EQ R"( r.id AND t.state )" EQ R"( ANY ('{{ready,scheduled,blocked}}'::pg_catalog.text[])
RETURNING t.id)",
	    fmt::arg("t", tasks_),
	    fmt::arg("limit",
	             limit_given ? "COALESCE(NULLIF($1::pg_catalog.int4, 0), 2147483647)" : KEY_LIMIT("$1")));
}

std::string KeySql::lock_free_slots() const {
	return fmt::format(
	    R"(SELECT s.slot FROM {s} AS s
 WHERE NOT EXISTS (SELECT FROM {t} AS t
                    WHERE t.id )" EQ R"( s.task_id AND t.lease_token )" EQ R"( s.lease_token AND t.state )" EQ
	    R"( 'leased')
 ORDER BY s.slot
 LIMIT $1
   FOR UPDATE OF s SKIP LOCKED)",
	    fmt::arg("s", slots_), fmt::arg("t", tasks_));
}

std::string KeySql::recheck_slots() const {
	return fmt::format(
	    R"(SELECT s.slot FROM {s} AS s
 WHERE s.slot )" EQ R"( ANY ($1)
   AND NOT EXISTS (SELECT FROM {t} AS t
                    WHERE t.id )" EQ R"( s.task_id AND t.lease_token )" EQ R"( s.lease_token AND t.state )" EQ
	    R"( 'leased')
 ORDER BY s.slot)",
	    fmt::arg("s", slots_), fmt::arg("t", tasks_));
}

std::string KeySql::fill_slots() const {
	return fmt::format(
	    R"(UPDATE {s} AS s SET task_id = u.task_id, lease_token = u.lease_token
  FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($3)) AS u(slot, task_id, lease_token)
 WHERE s.slot )" EQ R"( u.slot)",
	    fmt::arg("s", slots_));
}

std::string KeySql::resize_slots() const {
	return fmt::format(R"(WITH gone AS (DELETE FROM {s} WHERE slot )" GT R"( $1)
INSERT INTO {s} (slot, task_id, lease_token)
SELECT g.slot, l.id, l.lease_token
  FROM pg_catalog.generate_series(1, $1) AS g(slot)
  LEFT JOIN (SELECT id, lease_token, pg_catalog.row_number() OVER (ORDER BY id) AS n
               FROM {t} WHERE state )" EQ R"( 'leased') AS l ON l.n )" EQ R"( g.slot
ON CONFLICT (slot) DO NOTHING)",
	                   fmt::arg("s", slots_), fmt::arg("t", tasks_));
}

std::string KeySql::queue_keys() const {
	return fmt::format(
	    R"(SELECT concurrency_key,
       pg_catalog.count(*) FILTER (WHERE state )" EQ R"( 'leased'),
       pg_catalog.count(*) FILTER (WHERE state )" NE R"( 'leased'),
       $1 )" MINUS R"( pg_catalog.min(enqueued_at) FILTER (WHERE state )" NE R"( 'leased')
  FROM {t}
 WHERE concurrency_key IS NOT NULL
   AND state )" EQ R"( ANY ('{{ready,scheduled,leased,blocked}}'::pg_catalog.text[])
 GROUP BY concurrency_key
 ORDER BY concurrency_key)",
	    fmt::arg("t", tasks_));
}

} // namespace concurrency::queue
