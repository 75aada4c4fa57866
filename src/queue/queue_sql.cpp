#include "queue/queue_sql.hpp"

#include <fmt/format.h>

#include "common/sql_text.hpp"
#include "common/pure.hpp" // last: checks that no PostgreSQL header came before

namespace concurrency::queue {

std::string queue_channel(std::string_view queue) {
	return fmt::format("concurrency_{}", queue);
}

QueueSql::QueueSql(std::string_view queue)
    : queue_(queue), table_("concurrency." + quote_ident(queue_table_name(queue))) {}

QueueSql::QueueSql(std::string_view queue, const ShardPlacement &shard)
    : queue_(queue), table_("concurrency." + quote_ident(shard.relname)), shard_(shard),
      k_(fmt::format("shard_key OPERATOR(pg_catalog.=) {} AND ", shard.shard_key)),
      tk_(fmt::format("t.shard_key OPERATOR(pg_catalog.=) {} AND ", shard.shard_key)) {}

std::string QueueSql::name(Role role, Naming naming) const {
	return quote_ident(derived_name(QueueTable::tasks, queue_, role, naming));
}

// Every statement runs with search_path = pg_catalog, pg_temp, pinned by
// pg::spi_connect for all SPI use of the extension (a function-level SET
// clause would cost more per call). The operators, functions and types are
// schema-qualified as well, so that a statement means the same if it is ever
// run outside that pin (unit test QueueSql.StatementsQualifyEveryOperator).
#include "queue/sql_operators.hpp"

// A task id of a distributed queue: the shard's position in its low 10 bits,
// above them the node's Citus group (10 bits), above those a number from this
// node's lease_token sequence, so that no two nodes ever make the same id
// without asking each other. A lease token the same without the position.
// Ids and tokens made by 0.2.0 (a coordinator's number times 1024 plus the
// position) are smaller than any made since: the numbers only grow.
std::string QueueSql::new_id() const {
	return fmt::format("(pg_catalog.nextval('concurrency.lease_token'::pg_catalog.regclass) " TIMES
	                   " 1048576 " PLUS " {})",
	                   static_cast<long long>(shard_->group) * 1024 + shard_->position);
}

std::string QueueSql::draw_shard_ids() const {
	return fmt::format(
	    "SELECT pg_catalog.array_agg({} ORDER BY n.n) FROM pg_catalog.generate_series(1, $1) AS n", new_id());
}

std::string QueueSql::shard_columns() const {
	return shard_ ? "id, shard_key, " : "";
}

std::string QueueSql::shard_values() const {
	return shard_ ? fmt::format("{}, {}, ", new_id(), shard_->shard_key) : std::string();
}

std::string QueueSql::new_token() const {
	if (!shard_)
		return "pg_catalog.nextval('concurrency.lease_token'::pg_catalog.regclass)";
	return fmt::format("(pg_catalog.nextval('concurrency.lease_token'::pg_catalog.regclass) " TIMES
	                   " 1024 " PLUS " {})",
	                   shard_->group);
}

// The priority is widened before negation, so that INT_MIN has a negation.
const char *QueueSql::claim_order() {
	return "(" MINUS " (priority::pg_catalog.int8)), run_at, id";
}

// The tasks that hold their dedupe_key: every task but a dead or cancelled
// one (a retained done task keeps it). The predicate of the unique index and
// of every ON CONFLICT clause that infers it.
static constexpr const char *dedupe_holder_predicate =
    "dedupe_key IS NOT NULL AND state " NE " 'dead' AND state " NE " 'cancelled'";

// Finished tasks (kept while the queue retains them): the predicate of the
// partial index that purge walks, and of purge itself. Claims never see them:
// every claim and wake-up scan is on an index of live states.
static constexpr const char *finished_states = "state " EQ " ANY ('{done,cancelled}'::pg_catalog.text[])";

std::string QueueSql::dedupe_holder() {
	return dedupe_holder_predicate;
}

std::string QueueSql::link_columns(const char *alias) const {
	if (!links_)
		return ", NULL::pg_catalog.int4, NULL::pg_catalog.bool, NULL::pg_catalog.int8[], "
		       "NULL::pg_catalog.int8[]";
	return fmt::format(", {0}parents_open, {0}has_children, {0}children, {0}parents", alias);
}

std::string QueueSql::dedupe_target() const {
	return shard_ ? "(shard_key, dedupe_key)" : "(dedupe_key)";
}

std::string QueueSql::create_table(Naming naming) const {
	// Column order keeps 8-byte fields together (no alignment padding).
	// Every state change moves the row between the partial indexes below, so
	// it cannot be a HOT update; a heartbeat that extends a lease only writes
	// lease_extended_to, which no index covers, and stays HOT: fillfactor
	// leaves room on the page for that. Autovacuum is told to come often:
	// each task is inserted, updated and deleted within seconds.
	return fmt::format(
	    R"(CREATE TABLE {t} (
    id                bigint      GENERATED ALWAYS AS IDENTITY{id_seq},
    lease_token       bigint,
    run_at            timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    lease_expires_at  timestamptz,
    lease_extended_to timestamptz,
    enqueued_at       timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    priority          integer     NOT NULL DEFAULT 0,
    attempt           integer     NOT NULL DEFAULT 0,
    state             text        NOT NULL DEFAULT 'ready',
    worker            text,
    dedupe_key        text,
    last_error        text,
    payload           jsonb       NOT NULL DEFAULT '{{}}',
    finished_at       timestamptz,
    concurrency_key   text,
    result            jsonb,
    progress          jsonb,
    parents_open      integer,
    has_children      boolean,
    children          bigint[],
    parents           bigint[],
    steps             jsonb,
    awaiting          text,
    after_ends        boolean,
    CONSTRAINT {pkey} PRIMARY KEY (id)
) WITH (fillfactor = 70,
        autovacuum_vacuum_scale_factor = 0.0, autovacuum_vacuum_threshold = 1000,
        autovacuum_vacuum_insert_scale_factor = 0.0, autovacuum_vacuum_insert_threshold = 10000,
        autovacuum_analyze_scale_factor = 0.05, autovacuum_vacuum_cost_delay = 0);
CREATE INDEX {ready} ON {t} ({order}) WHERE state = 'ready';
CREATE INDEX {scheduled} ON {t} (run_at) WHERE state = 'scheduled';
CREATE INDEX {leased} ON {t} (lease_expires_at) WHERE state = 'leased';
CREATE UNIQUE INDEX {dedupe} ON {t} (dedupe_key) WHERE {dedupe_holder};
CREATE INDEX {finished} ON {t} (finished_at) WHERE {finished_states};
CREATE INDEX {waiting} ON {t} (id) WHERE state = 'waiting';
COMMENT ON TABLE {t} IS {comment};)",
	    fmt::arg("t", table_),
	    // named role first; table first, PostgreSQL names it so (q_<queue>_id_seq)
	    fmt::arg("id_seq", naming == Naming::role_first
	                           ? fmt::format(" (SEQUENCE NAME concurrency.{})", name(Role::id_seq, naming))
	                           : std::string()),
	    fmt::arg("pkey", name(Role::pkey, naming)), fmt::arg("ready", name(Role::ready, naming)),
	    fmt::arg("scheduled", name(Role::scheduled, naming)), fmt::arg("leased", name(Role::leased, naming)),
	    fmt::arg("dedupe", name(Role::dedupe, naming)), fmt::arg("dedupe_holder", dedupe_holder_predicate),
	    fmt::arg("finished", name(Role::finished, naming)), fmt::arg("finished_states", finished_states),
	    fmt::arg("waiting", name(Role::waiting, naming)), fmt::arg("order", claim_order()),
	    fmt::arg("comment", quote_literal(fmt::format("tasks of the concurrency_ext queue {}", queue_))));
}

std::string QueueSql::drop_table() const {
	return fmt::format("DROP TABLE IF EXISTS {}", table_);
}

std::string QueueSql::alter_owner(std::string_view role) const {
	return fmt::format("ALTER TABLE {} OWNER TO {}", table_, quote_ident(role));
}

std::string QueueSql::enqueue() const {
	return fmt::format(
	    R"(INSERT INTO {t} ({cols}state, priority, run_at, payload, dedupe_key, concurrency_key, enqueued_at)
VALUES ({vals}CASE WHEN $3 )" GT
	    R"( $1 THEN 'scheduled' ELSE 'ready' END, $4, COALESCE($3, $1), $2, $5, $6, $1)
ON CONFLICT {target} WHERE {holder} DO NOTHING
RETURNING id)",
	    fmt::arg("t", table_), fmt::arg("holder", dedupe_holder_predicate), fmt::arg("cols", shard_columns()),
	    fmt::arg("vals", shard_values()), fmt::arg("target", dedupe_target()));
}

std::string QueueSql::dedupe_lookup() const {
	return fmt::format("SELECT id FROM {} WHERE {}dedupe_key " EQ " $1 AND {}", table_, k_,
	                   dedupe_holder_predicate);
}

std::string QueueSql::dedupe_replace() const {
	return fmt::format(
	    R"(UPDATE {t}
   SET payload = $2, run_at = COALESCE($3, $1), priority = $4,
       state = CASE WHEN state )" EQ R"( ANY ('{{blocked,waiting}}'::pg_catalog.text[]) THEN state
                    WHEN COALESCE($3, $1) )" GT R"( $1 THEN 'scheduled' ELSE 'ready' END
 WHERE {k}id )" EQ R"( $5 AND state )" EQ R"( ANY ('{{ready,scheduled,blocked,waiting}}'::pg_catalog.text[])
RETURNING id, state)",
	    fmt::arg("t", table_), fmt::arg("k", k_));
}

std::string QueueSql::dedupe_lookup_many() const {
	return fmt::format("SELECT dedupe_key, id FROM {} WHERE {}dedupe_key " EQ " ANY ($1) AND {}", table_, k_,
	                   dedupe_holder_predicate);
}

// $5 holds the dedupe keys, $6 the concurrency keys (NULL arrays: none).
// Ids are drawn in payload order. Without dedupe keys, a plain insert.
// With them, only the first element of each key is inserted (the others are
// the same task) and RETURNING names the key of each inserted task.
std::string QueueSql::enqueue_batch(bool with_dedupe_keys) const {
	if (!with_dedupe_keys)
		return fmt::format(
		    R"(INSERT INTO {t} ({cols}state, priority, run_at, payload, concurrency_key, enqueued_at)
SELECT {vals}CASE WHEN $3 )" GT R"( $1 THEN 'scheduled' ELSE 'ready' END, $4, COALESCE($3, $1), u.payload,
       u.concurrency_key, $1
  FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($6)) WITH ORDINALITY AS u(payload, concurrency_key, n)
 WHERE $5 IS NULL
 ORDER BY u.n
RETURNING id, dedupe_key)",
		    fmt::arg("t", table_), fmt::arg("cols", shard_columns()), fmt::arg("vals", shard_values()));
	return fmt::format(
	    R"(INSERT INTO {t} ({cols}state, priority, run_at, payload, dedupe_key, concurrency_key, enqueued_at)
SELECT {vals}CASE WHEN $3 )" GT R"( $1 THEN 'scheduled' ELSE 'ready' END, $4, COALESCE($3, $1), u.payload,
       u.dedupe_key, u.concurrency_key, $1
  FROM (SELECT r.*, pg_catalog.row_number() OVER (PARTITION BY r.dedupe_key ORDER BY r.n) AS k
          FROM ROWS FROM (pg_catalog.unnest($2), pg_catalog.unnest($5), pg_catalog.unnest($6))
               WITH ORDINALITY AS r(payload, dedupe_key, concurrency_key, n)) AS u
 WHERE u.dedupe_key IS NULL OR u.k )" EQ R"( 1
 ORDER BY u.n
ON CONFLICT {target} WHERE {holder} DO NOTHING
RETURNING id, dedupe_key)",
	    fmt::arg("t", table_), fmt::arg("holder", dedupe_holder_predicate), fmt::arg("cols", shard_columns()),
	    fmt::arg("vals", shard_values()), fmt::arg("target", dedupe_target()));
}

// A heartbeat that moves the deadline later writes lease_extended_to only (no
// index covers it: a HOT update) while the indexed deadline is at least half
// the new lease away; closer, it moves the indexed deadline (an index update,
// every other heartbeat at the runtimes' pace of a third of the time left),
// so that the wake-up, which leaves extended leases alone, seldom finds one
// whose indexed deadline passed. A shorter lease, or a heartbeat from a
// holder whose expired task was made ready (or dead) but not claimed again,
// sets the indexed deadline too. `t`: the table's alias and a dot, or "".
// $3 timestamptz now, $4 interval extend.
std::string lease_extension(const std::string &t) {
	return fmt::format(R"(lease_expires_at = CASE WHEN {t}state )" EQ R"( 'leased' AND $3 )" PLUS R"( $4 )" GE
	                   R"( {t}lease_expires_at
                                 AND {t}lease_expires_at )" GE R"( ($3 )" PLUS R"( ($4 )" TIMES
	                   R"( 0.5::pg_catalog.float8))
                               THEN {t}lease_expires_at ELSE $3 )" PLUS R"( $4 END,
       lease_extended_to = CASE WHEN {t}state )" EQ R"( 'leased' AND $3 )" PLUS R"( $4 )" GT
	                   R"( {t}lease_expires_at
                                  AND {t}lease_expires_at )" GE R"( ($3 )" PLUS R"( ($4 )" TIMES
	                   R"( 0.5::pg_catalog.float8))
                                THEN $3 )" PLUS R"( $4 END)",
	                   fmt::arg("t", t));
}

std::string QueueSql::heartbeat() const {
	return fmt::format(
	    R"(UPDATE {t}
   SET state = 'leased',
       {extend}
 WHERE {k}id )" EQ R"( $1 AND lease_token )" EQ R"( $2
RETURNING $3 )" PLUS R"( $4)",
	    fmt::arg("t", table_), fmt::arg("k", k_), fmt::arg("extend", lease_extension("")));
}

std::string QueueSql::complete() const {
	// a parent is kept as done for its children (complete_retained)
	return fmt::format("DELETE FROM {} WHERE {}id " EQ " $1 AND lease_token " EQ
	                   " $2{} RETURNING concurrency_key{}",
	                   table_, k_, links_ ? " AND has_children IS NOT TRUE" : "", link_columns());
}

// A retained done task gives up its lease token: the holder's next call finds
// no lease and learns that the task is done.
static constexpr const char *finish_done = R"(state = 'done',
       finished_at = $3,
       lease_token = NULL,
       lease_expires_at = NULL,
       lease_extended_to = NULL)";

std::string QueueSql::complete_retained() const {
	return fmt::format(
	    R"(UPDATE {t}
   SET {done},
       result = $4
 WHERE {k}id )" EQ R"( $1 AND lease_token )" EQ R"( $2
RETURNING concurrency_key{links})",
	    fmt::arg("t", table_), fmt::arg("done", finish_done), fmt::arg("k", k_),
	    fmt::arg("links", link_columns()));
}

// The batch forms: the leases named by $1 (task ids) and $2 (lease tokens),
// pairwise, as rows u(id, lease_token), and the condition that a task t is
// held under one of them.
static constexpr const char *named_leases =
    "ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2)) AS u(id, lease_token)";
static constexpr const char *held_under_named_lease =
    "t.id " EQ " u.id AND t.lease_token " EQ " u.lease_token";

std::string QueueSql::complete_many() const {
	return fmt::format(
	    R"(DELETE FROM {t} AS t
 USING {leases}
 WHERE {held}{parents}
RETURNING t.id, t.concurrency_key{links})",
	    fmt::arg("t", table_), fmt::arg("leases", named_leases),
	    fmt::arg("held", tk_ + held_under_named_lease),
	    fmt::arg("parents", links_ ? " AND t.has_children IS NOT TRUE" : ""),
	    fmt::arg("links", link_columns("t.")));
}

std::string QueueSql::complete_many_retained() const {
	return fmt::format(
	    R"(UPDATE {t} AS t
   SET {done},
       result = NULL
  FROM {leases}
 WHERE {held}
RETURNING t.id, t.concurrency_key{links})",
	    fmt::arg("t", table_), fmt::arg("leases", named_leases),
	    fmt::arg("held", tk_ + held_under_named_lease), fmt::arg("done", finish_done),
	    fmt::arg("links", link_columns("t.")));
}

std::string QueueSql::heartbeat_many() const {
	return fmt::format(
	    R"(UPDATE {t} AS t
   SET state = 'leased',
       {extend}
  FROM {leases}
 WHERE {held}
RETURNING t.id, $3 )" PLUS R"( $4)",
	    fmt::arg("t", table_), fmt::arg("leases", named_leases),
	    fmt::arg("held", tk_ + held_under_named_lease), fmt::arg("extend", lease_extension("t.")));
}

std::string QueueSql::fail_lock_many() const {
	return fmt::format(
	    R"(SELECT t.id, t.attempt, t.concurrency_key{links}
  FROM {t} AS t, {leases}
 WHERE {held}
 ORDER BY t.id
   FOR UPDATE OF t)",
	    fmt::arg("t", table_), fmt::arg("leases", named_leases),
	    fmt::arg("held", tk_ + held_under_named_lease), fmt::arg("links", link_columns("t.")));
}

std::string QueueSql::fail_update_many() const {
	return fmt::format(
	    R"(UPDATE {t} AS t
   SET state = u.state,
       run_at = CASE WHEN u.state )" EQ R"( 'dead' THEN t.run_at ELSE u.run_at END,
       lease_token = NULL,
       lease_expires_at = NULL,
       lease_extended_to = NULL,
       last_error = $4
  FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($3)) AS u(id, state, run_at)
 WHERE {tk}t.id )" EQ R"( u.id)",
	    fmt::arg("t", table_), fmt::arg("tk", tk_));
}

// What cancel(blocked) takes: the blocked tasks (first, without their key's
// lock), or every other task not finished yet.
static constexpr const char *cancel_blocked_states = "t.state " EQ " 'blocked'";
static constexpr const char *cancel_other_states =
    "t.state " NE " 'done' AND t.state " NE " 'cancelled' AND t.state " NE " 'blocked'";

// A cancelled task gives up its lease token like a done one. It keeps the
// deadline its holder had (with a heartbeat's extension), so that purge
// keeps it at least until then: the holder learns at its next heartbeat,
// complete or fail that the task was cancelled, also on a queue that retains
// nothing.
std::string QueueSql::cancel(bool blocked) const {
	return fmt::format(
	    R"(UPDATE {t} AS t
   SET state = 'cancelled',
       finished_at = $1,
       lease_token = NULL,
       lease_expires_at = CASE WHEN t.state )" EQ
	    R"( 'leased' THEN COALESCE(t.lease_extended_to, t.lease_expires_at) END,
       lease_extended_to = NULL
 WHERE {tk}t.id )" EQ R"( ANY ($2)
   AND {states}
RETURNING t.id, t.concurrency_key{links})",
	    fmt::arg("t", table_), fmt::arg("states", blocked ? cancel_blocked_states : cancel_other_states),
	    fmt::arg("tk", tk_), fmt::arg("links", link_columns("t.")));
}

// After cancel on a queue that retains nothing: the cancelled tasks that no
// holder needs to learn about go at once, but a parent stays for its
// children, as a done one does (purge takes it after them): a finally-child
// reads that it was cancelled (parent_outcomes). $1 now, $2 int8[] task ids.
std::string QueueSql::cancel_drop() const {
	return fmt::format(
	    R"(DELETE FROM {t}
 WHERE {k}id )" EQ R"( ANY ($2) AND state )" EQ R"( 'cancelled'
   AND (lease_expires_at IS NULL OR lease_expires_at )" LE R"( $1){parents})",
	    fmt::arg("t", table_), fmt::arg("k", k_),
	    fmt::arg("parents", links_ ? " AND has_children IS NOT TRUE" : ""));
}

// $1 cutoff (finished before it: purge), $2 now, $3 chunk size. A cancelled
// task whose holder's lease still runs is kept until the lease ends; a parent
// while a child of it has not finished (an edge in task_dependency names it,
// or a child named in its row is not finished).
std::string QueueSql::purge() const {
	// on a shard: nor while it names a child in another shard (the child's
	// end removes it: a forget message, dependencies.hpp)
	std::string elsewhere = shard_ ? R"(
                     AND NOT EXISTS (SELECT FROM pg_catalog.unnest(p.children) AS c(id)
                                      WHERE (c.id OPERATOR(pg_catalog.&) 1023) )" NE
	                                 R"( (p.id OPERATOR(pg_catalog.&) 1023)))"
	                               : "";
	return fmt::format(
	    R"(DELETE FROM {t}
 WHERE {k}id )" EQ R"( ANY (ARRAY(
         SELECT p.id FROM {t} AS p
          WHERE {k}{finished_states} AND finished_at )" LE R"( $1
            AND (state )" EQ R"( 'done' OR lease_expires_at IS NULL OR lease_expires_at )" LE R"( $2)
            {parents}
          ORDER BY finished_at
          LIMIT $3
            FOR UPDATE SKIP LOCKED)))",
	    fmt::arg("t", table_), fmt::arg("finished_states", finished_states), fmt::arg("k", k_),
	    fmt::arg("parents",
	             !links_ ? std::string()
	                     : fmt::format(R"(AND (has_children IS NOT TRUE
                 OR (NOT EXISTS (SELECT FROM concurrency.task_dependency AS d
                                  WHERE d.parent_queue )" EQ R"( {q} AND d.parent_id )" EQ R"( p.id)
                     AND NOT EXISTS (SELECT FROM {t} AS c
                                      WHERE {k}c.id )" EQ R"( ANY (p.children)
                                        AND c.state )" NE
	                                   R"( ALL ('{{done,dead,cancelled}}'::pg_catalog.text[])){elsewhere})))",
	                                   fmt::arg("q", quote_literal(queue_)), fmt::arg("t", table_),
	                                   fmt::arg("k", k_), fmt::arg("elsewhere", elsewhere))));
}

// $1 int8 id, $2 timestamptz now
std::string QueueSql::task_status() const {
	return fmt::format(
	    R"(SELECT id,
       CASE WHEN state )" EQ R"( 'scheduled' AND run_at )" LE R"( $2 THEN 'ready' ELSE state END,
       attempt, priority, run_at, enqueued_at,
       CASE WHEN state )" EQ R"( 'leased' THEN COALESCE(lease_extended_to, lease_expires_at) END,
       worker, last_error, finished_at, result, dedupe_key, concurrency_key,
       CASE WHEN state )" NE R"( ALL ('{{done,cancelled,dead}}'::pg_catalog.text[]) THEN progress END,
       {parents_open}
  FROM {t}
 WHERE {k}id )" EQ R"( $1)",
	    fmt::arg("t", table_), fmt::arg("k", k_),
	    fmt::arg("parents_open", links_ ? "CASE WHEN state " EQ " 'waiting' THEN parents_open END"
	                                    : "NULL::pg_catalog.int4"));
}

std::string QueueSql::fail_lock() const {
	return fmt::format("SELECT attempt, concurrency_key{} FROM {} WHERE {}id " EQ " $1 AND lease_token " EQ
	                   " $2 FOR UPDATE",
	                   link_columns(), table_, k_);
}

std::string QueueSql::fail_update() const {
	return fmt::format(
	    R"(UPDATE {t}
   SET state = $2,
       run_at = CASE WHEN $2 )" EQ R"( 'dead' THEN run_at ELSE $3 END,
       lease_token = NULL,
       lease_expires_at = NULL,
       lease_extended_to = NULL,
       last_error = $4
 WHERE {k}id )" EQ R"( $1)",
	    fmt::arg("t", table_), fmt::arg("k", k_));
}

std::string QueueSql::inspect() const {
	return fmt::format("SELECT state, attempt, worker, lease_token IS NOT NULL, "
	                   "pg_catalog.to_char(finished_at, 'YYYY-MM-DD HH24:MI:SS.USOF') FROM {} WHERE {}id " EQ
	                   " $1",
	                   table_, k_);
}

// A dead task whose dedupe_key has been taken by another task since (live,
// or retained as done) is left dead: reviving it would make two holders of
// one key. With $3 (the queue has a key_limit), a keyed task comes back
// 'blocked', behind its key's tasks, to be admitted under its key's lock.
// A revived task is no parent any more: its ordinary children were cancelled
// by its death, and its finally-children counted that death as its end (its
// next end must not count again).
std::string QueueSql::retry_dead() const {
	return fmt::format(
	    R"(UPDATE {t} AS t
   SET state = CASE WHEN $3 AND t.concurrency_key IS NOT NULL THEN 'blocked' ELSE 'ready' END,
       attempt = 0, run_at = $1,
       lease_token = NULL, lease_expires_at = NULL, lease_extended_to = NULL{children}
 WHERE {tk}t.state )" EQ R"( 'dead'
   AND ($2 IS NULL OR t.id )" EQ R"( ANY ($2))
   AND (t.dedupe_key IS NULL
        OR NOT EXISTS (SELECT FROM {t} AS o
                        WHERE {ok}o.dedupe_key )" EQ R"( t.dedupe_key AND o.state )" NE R"( 'dead'
                          AND o.state )" NE R"( 'cancelled'))
RETURNING t.id, t.concurrency_key)",
	    fmt::arg("t", table_), fmt::arg("tk", tk_), fmt::arg("ok", shard_ ? "o." + k_ : std::string()),
	    fmt::arg("children", links_ ? ", has_children = NULL" : ""));
}

std::string QueueSql::text(QueueStatement s) const {
	switch (s) {
	case QueueStatement::enqueue:
		return enqueue();
	case QueueStatement::dedupe_lookup:
		return dedupe_lookup();
	case QueueStatement::enqueue_batch:
		return enqueue_batch(false);
	case QueueStatement::enqueue_batch_dedupe:
		return enqueue_batch(true);
	case QueueStatement::wake:
		return wake();
	case QueueStatement::claim:
		return claim();
	case QueueStatement::heartbeat:
		return heartbeat();
	case QueueStatement::complete:
		return complete();
	case QueueStatement::complete_retained:
		return complete_retained();
	case QueueStatement::complete_many:
		return complete_many();
	case QueueStatement::complete_many_retained:
		return complete_many_retained();
	case QueueStatement::heartbeat_many:
		return heartbeat_many();
	case QueueStatement::fail_lock:
		return fail_lock();
	case QueueStatement::fail_update:
		return fail_update();
	case QueueStatement::fail_lock_many:
		return fail_lock_many();
	case QueueStatement::fail_update_many:
		return fail_update_many();
	case QueueStatement::purge:
		return purge();
	case QueueStatement::inspect:
		return inspect();
	case QueueStatement::retry_dead:
		return retry_dead();
	case QueueStatement::count_:
		break;
	}
	return {};
}

} // namespace concurrency::queue
