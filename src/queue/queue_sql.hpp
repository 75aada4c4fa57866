// The SQL of one queue: its table's DDL and the statements that the queue
// functions prepare once per backend. Pure C++ (no PostgreSQL headers); every
// identifier derived from the queue name is quoted, so that a hostile name is
// just a name, and every operator, function and type in the statements is
// schema-qualified, so that they mean the same under any search_path.
// Unit-tested in test/unit/queue_sql_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "queue/relation_names.hpp"

namespace concurrency::queue {

// The queue's LISTEN channel, concurrency_<queue> (its relations' names:
// relation_names.hpp).
std::string queue_channel(std::string_view queue);

// Longest concurrency_key and dedupe_key accepted (bytes): an index entry
// must hold it.
inline constexpr std::size_t max_concurrency_key_bytes = 1024;
inline constexpr std::size_t max_dedupe_key_bytes = 1024;

// The statements of one queue that the hot functions run, kept per backend
// in an array indexed by this (no string keys on the hot path).
enum class QueueStatement {
	enqueue,
	dedupe_lookup,
	enqueue_batch,
	enqueue_batch_dedupe,
	wake,
	claim,
	heartbeat,
	complete,
	complete_retained,
	complete_many,
	complete_many_retained,
	heartbeat_many,
	fail_lock,
	fail_update,
	fail_lock_many,
	fail_update_many,
	purge,
	inspect,
	retry_dead,
	count_ // not a statement: how many there are
};

// One shard of a distributed queue's table on this node (Citus): where its
// rows are, and what its statements write into a new task's id and lease
// token (QueueSql::new_id).
struct ShardPlacement {
	std::string relname;    // the shard's table, e.g. q_<queue>_102008 (unquoted)
	std::int32_t shard_key; // the value of the distribution column shard_key in this shard
	std::int32_t position;  // the shard's place among the queue's shards (0..1023)
	std::int32_t group;     // this node's Citus group id (0..1023)
	// the shard of the queue's key table k_<queue> beside it (key_limit),
	// e.g. k_<queue>_102040 (unquoted); empty where it is not on this node
	std::string key_relname;
	// the shard of the slots of key_rate_limit rk_<queue> beside it
	// (unquoted); empty where the queue has no such limit
	std::string key_rate_relname;
};

// Where a fair queue's claim starts in the rotation of its keys (fair.hpp):
// at its beginning (the tasks without a key, then the keys in order), after
// the tasks without a key, or after a given key.
enum class FairFrom : std::uint8_t { start, after_null, after_key };

class QueueSql {
  public:
	// The statements on the queue's own table.
	explicit QueueSql(std::string_view queue);
	// The same statements on one shard's table of a distributed queue: every
	// statement about given tasks also names the shard's shard_key (its
	// primary key is (shard_key, id)), and enqueue writes id and shard_key.
	QueueSql(std::string_view queue, const ShardPlacement &shard);

	// The condition under which a task holds its dedupe_key (the predicate of
	// the unique index and of every ON CONFLICT that infers it).
	static std::string dedupe_holder();
	// The claim order, as the ready index stores it: ascending (-priority,
	// run_at, id); the claims (queue/lifecycle/claim_sql.cpp) walk it.
	static const char *claim_order();

	// Whether the table has the columns of dependencies (parents_open,
	// has_children) and concurrency.task_dependency exists: true unless the
	// module runs on 0.2.0's objects, before ALTER EXTENSION … UPDATE. Without
	// them the statements read NULL where they would read those columns.
	void set_links(bool links) { links_ = links; }

	// concurrency."q_<queue>", quoted.
	const std::string &table() const { return table_; }
	// On a shard, "shard_key = <its key> AND " (with "t." before the column
	// for the alias t: the shard's primary key is (shard_key, id)); empty on
	// a queue's own table.
	const std::string &shard_filter(bool aliased) const { return aliased ? tk_ : k_; }

	// CREATE TABLE with its indexes, storage and autovacuum settings, and the
	// comment; one string of several statements.
	// `naming`: how its indexes and identity sequence are named
	// (relation_names.hpp: role first, or, while the extension's objects are
	// older than 0.4.0, table first, as their SQL names them).
	std::string create_table(Naming naming) const;
	std::string drop_table() const;
	// ALTER TABLE … OWNER TO role
	std::string alter_owner(std::string_view role) const;

	// The statements below are prepared once per backend and queue. Their
	// parameters are listed as $n: type — meaning.

	// $1 timestamptz now, $2 jsonb payload, $3 timestamptz run_at (NULL: now),
	// $4 int4 priority, $5 text dedupe_key, $6 text concurrency_key -> id, or
	// no row on a dedupe conflict
	std::string enqueue() const;
	// $1 text dedupe_key -> id of the task that holds it
	std::string dedupe_lookup() const;
	// enqueue(…, on_conflict => 'replace'): the dedupe_key's holder takes the
	// new payload, run_at and priority if it has not started (ready,
	// scheduled, or blocked by its key or waiting for its parents, which it
	// stays). $1 timestamptz now,
	// $2 jsonb payload, $3 timestamptz run_at (NULL: now), $4 int4 priority,
	// $5 int8 the holder's id -> its id and new state, or no row (leased,
	// finished, or gone)
	std::string dedupe_replace() const;
	// $1 text[] dedupe keys -> dedupe_key, id of the task holding each
	std::string dedupe_lookup_many() const;
	// $1 timestamptz now, $2 jsonb[] payloads, $3 timestamptz run_at, $4 int4 priority,
	// $5 text[] dedupe keys, $6 text[] concurrency keys -> id, dedupe_key of
	// each task inserted, in payload order
	std::string enqueue_batch(bool with_dedupe_keys) const;
	// The claim's statements, up to drop_fair_index, are in
	// queue/lifecycle/claim_sql.cpp.
	// The wake-up step of dequeue: due scheduled tasks become ready; expired
	// leases become ready (or dead when their attempts are used up); a lease
	// extended by a heartbeat past its indexed deadline is left alone.
	// $1 timestamptz now, $2 int4 limit per kind, $3 timestamptz floor,
	// $4 int4 max_attempts -> made ready (bool), made dead (bool),
	// concurrency_key: one row per task changed
	std::string wake() const;
	// The claim: $1 timestamptz now, $2 int4 batch, $3 interval lease, $4 text worker,
	// $5 int8, $6 timestamptz, $7 int8: the claim key to start from
	// -> task_id, lease_token, attempt, payload, enqueued_at,
	// lease_expires_at, neg_priority, run_at (in no particular order: the
	// caller sorts by the claim key). Whether due scheduled tasks or expired
	// leases wait for the wake-up step first is the caller's question
	// (Queue::tasks_wait: two index probes without the executor).
	std::string claim() const;
	// The claim of a fair queue (fair.hpp): the first ready task, in claim
	// order, of each of the next $2 keys of the rotation from `from` ($5 text:
	// the key after which it starts, for after_key), skipping tasks other
	// claims have locked. $1 to $4 as claim's -> task_id, lease_token,
	// attempt, payload, enqueued_at, lease_expires_at, concurrency_key, how
	// many keys it looked at (int8; fewer than $2: the rotation's end), the
	// last of them (NULL: the tasks without a key).
	std::string claim_fair(FairFrom from) const;
	// The claim under key_rate_limit (rate_sql.hpp, KeyRateSql) walks the
	// keys one at a time. next_open_key: the next key of the rotation after
	// `from` ($1 text: the key after which it looks, for after_key) that has
	// ready tasks and whose window, by the slots of `key_rate_table` (the
	// quoted name; on a shard, the slots' shard beside it) used after $2 timestamptz (now - key_rate_period),
	// has fewer than $3 int4 (key_rate_limit) claims; the tasks without a key count as a key that is never
	// full -> no row when no key after `from` has ready tasks, else key (NULL: the tasks without a key),
	// whether it is full (true: every key from `from` to the rotation's end is), the oldest use within the
	// window of the full keys passed over (NULL: none). claim_of_key: the first ready task of key $5 (text;
	// `null_key`: of the tasks without a key, $5 unused) in claim order that no other claim has locked,
	// leased; $1 to $4 as claim's ($2 unused) -> the columns of claim_fair up to concurrency_key.
	std::string next_open_key(FairFrom from, std::string_view key_rate_table) const;
	std::string claim_of_key(bool null_key) const;
	// CREATE INDEX IF NOT EXISTS of the index the fair claim walks (ready
	// tasks by key, the tasks without a key first, then in claim order);
	// DROP INDEX IF EXISTS of it, under the name it has (`index`, unquoted:
	// made before 0.4.0, it is named table first).
	std::string create_fair_index(Naming naming) const;
	static std::string drop_fair_index(std::string_view index);
	// $1 int8 task_id, $2 int8 lease_token, $3 timestamptz now, $4 interval extend -> new deadline
	std::string heartbeat() const;
	// $1 int8 task_id, $2 int8 lease_token (deletes the task: SPI_processed 1
	// or 0) -> concurrency_key
	std::string complete() const;
	// the same on a queue that retains tasks: the task becomes done;
	// $3 timestamptz now, $4 jsonb result
	std::string complete_retained() const;
	// $1 int8[] task ids, $2 int8[] lease tokens -> id of each task completed
	// (deleted, or done with $3 timestamptz now on a queue that retains tasks)
	std::string complete_many() const;
	std::string complete_many_retained() const;
	// $1 int8[] task ids, $2 int8[] lease tokens, $3 timestamptz now,
	// $4 interval extend -> id, new deadline of each task whose lease was extended
	std::string heartbeat_many() const;
	// $1 int8 task_id, $2 int8 lease_token -> attempt, concurrency_key (row locked)
	std::string fail_lock() const;
	// $1 int8 task_id, $2 text new state, $3 timestamptz run_at, $4 text error
	std::string fail_update() const;
	// $1 int8[] task ids, $2 int8[] lease tokens -> id, attempt (rows locked, in id order)
	std::string fail_lock_many() const;
	// $1 int8[] task ids, $2 text[] new states, $3 timestamptz[] run_at, $4 text error
	std::string fail_update_many() const;
	// $1 timestamptz now, $2 int8[] task ids -> id, concurrency_key of each
	// task cancelled: the blocked ones (`blocked`), or those in the other
	// live states
	std::string cancel(bool blocked) const;
	// $1 timestamptz now, $2 int8[] task ids: deletes those cancelled tasks
	// whose holder's lease has ended (a queue that retains nothing)
	std::string cancel_drop() const;
	// $1 timestamptz cutoff, $2 timestamptz now, $3 int4 chunk: deletes up to
	// $3 done or cancelled tasks finished before the cutoff
	std::string purge() const;
	// $1 int8 id, $2 timestamptz now -> the row of task_status()
	std::string task_status() const;
	// $1 int8 task_id -> state, attempt, worker, lease held (bool), finished_at (text)
	std::string inspect() const;
	// $1 timestamptz now, $2 int8[] task ids (NULL: all dead tasks), $3 bool
	// the queue has a key_limit -> id, concurrency_key of each task revived
	std::string retry_dead() const;

	// Handing work back and reporting progress (queue/release_sql.cpp),
	// prepared on first use under their own names.
	// $1 int8[] task ids, $2 int8[] lease tokens, $3 timestamptz run_at
	// (NULL: the task keeps its own), $4 timestamptz now -> id of each task
	// handed back: ready (or scheduled at $3), the attempt not counted, the
	// lease token gone
	std::string release_many() const;
	// heartbeat's $1 to $4, and $5 jsonb progress (stored)
	std::string heartbeat_progress() const;
	// heartbeat_many's $1 to $4, and $5 jsonb[] progress at the tasks'
	// positions (a NULL element leaves that task's progress as it is)
	std::string heartbeat_many_progress() const;
	// $1 timestamptz now -> the earliest time at which a scheduled task comes
	// due or a lease expires, or earlier (NULL: none): how long
	// dequeue(…, wait) may sleep at most
	std::string next_due() const;

	// The text of statement `s` (one of the above).
	std::string text(QueueStatement s) const;

	// "id, shard_key, " and their values for an INSERT of a new task (shards
	// only; empty on a queue's own table)
	std::string shard_columns() const;
	std::string shard_values() const;
	// the target of ON CONFLICT that infers the dedupe index
	std::string dedupe_target() const;
	// Shards only: $1 int4 n -> an int8[] of n new task ids (enqueue_graph
	// draws its tasks' ids before it inserts them); and the shard's
	// shard_key, which an INSERT of a new task writes.
	std::string draw_shard_ids() const;
	std::optional<std::int32_t> shard_key() const {
		return shard_ ? std::optional<std::int32_t>(shard_->shard_key) : std::nullopt;
	}

  private:
	std::string queue_;
	std::string table_;
	std::optional<ShardPlacement> shard_;
	bool links_ = true;
	// ", <alias>parents_open, <alias>has_children" (or NULLs of their types
	// without links_): the last columns of what finishes a task
	std::string link_columns(const char *alias = "") const;
	// "shard_key = <k> AND " (and with "t."): empty on a queue's own table
	std::string k_, tk_;
	// the name of its index (or identity sequence) `role`, quoted
	std::string name(Role role, Naming naming) const;
	// the expressions of a new task id (shards only) and a new lease token
	std::string new_id() const;
	std::string new_token() const;
	// "UPDATE … SET <a new lease> WHERE", shared by both claims
	std::string lease_tasks() const;
};

// The statements on the catalog concurrency.queue (one row per queue, its
// settings), run by the admin functions (admin.cpp), the cache (queue.cpp)
// and queue_stats (inspect.cpp). The catalog's columns: name, lease,
// max_attempts, retain, key_limit, max_leased, created_by.
// The SET of a heartbeat's lease (queue_sql.cpp): `t` the table's alias and
// a dot, or "".
std::string lease_extension(const std::string &t);

namespace catalog_sql {
// $1 name, $2..$6 the settings, $7 created_by: no row when the queue exists
// (its rate limit, where it has one, is set by set_rate after it)
inline constexpr const char *insert =
    "INSERT INTO concurrency.queue (name, lease, max_attempts, retain, key_limit, max_leased, created_by) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7::pg_catalog.name) ON CONFLICT (name) DO NOTHING";
// $1 name, $2..$6 the settings asked for ($7 unused), $8 rate_limit, $9
// rate_period, $10 key_rate_limit, $11 key_rate_period -> whether the queue has them, its settings and those
// asked for in words. The rate limit is read from the row as jsonb: a 0.2.0 catalog (the package updated,
// ALTER EXTENSION … UPDATE not yet run) has no such columns, and its queues have none.
#define CATALOG_RATE "(pg_catalog.to_jsonb(q) OPERATOR(pg_catalog.->>) 'rate_limit')::pg_catalog.int4"
#define CATALOG_PERIOD "(pg_catalog.to_jsonb(q) OPERATOR(pg_catalog.->>) 'rate_period')::pg_catalog.interval"
#define CATALOG_KEY_RATE "(pg_catalog.to_jsonb(q) OPERATOR(pg_catalog.->>) 'key_rate_limit')::pg_catalog.int4"
#define CATALOG_KEY_PERIOD                                                                                   \
	"(pg_catalog.to_jsonb(q) OPERATOR(pg_catalog.->>) 'key_rate_period')::pg_catalog.interval"
inline constexpr const char *compare_settings =
    "SELECT lease = $2 AND max_attempts = $3 AND retain IS NOT DISTINCT FROM $4 "
    "AND key_limit IS NOT DISTINCT FROM $5 AND max_leased IS NOT DISTINCT FROM $6 "
    "AND " CATALOG_RATE " IS NOT DISTINCT FROM $8 AND " CATALOG_PERIOD " IS NOT DISTINCT FROM $9 "
    "AND " CATALOG_KEY_RATE " IS NOT DISTINCT FROM $10 AND " CATALOG_KEY_PERIOD " IS NOT DISTINCT FROM $11, "
    "format('lease %s, max_attempts %s, retain %s, key_limit %s, max_leased %s, rate_limit %s, "
    "key_rate_limit %s', "
    "       lease, max_attempts, coalesce(retain::text, 'none'), "
    "       coalesce(key_limit::text, 'none'), coalesce(max_leased::text, 'none'), "
    "       coalesce(" CATALOG_RATE " || ' per ' || " CATALOG_PERIOD ", 'none'), "
    "       coalesce(" CATALOG_KEY_RATE " || ' per ' || " CATALOG_KEY_PERIOD ", 'none')), "
    "format('lease %s, max_attempts %s, retain %s, key_limit %s, max_leased %s, rate_limit %s, "
    "key_rate_limit %s', "
    "       $2, $3, coalesce($4::text, 'none'), "
    "       coalesce($5::text, 'none'), coalesce($6::text, 'none'), "
    "       coalesce($8 || ' per ' || $9, 'none'), coalesce($10 || ' per ' || $11, 'none')) "
    "FROM concurrency.queue q WHERE name = $1";
// $1 name, $2..$6 the settings (NULL keeps lease and max_attempts), $7..$9
// whether retain, key_limit, max_leased are given (their NULL removes them)
inline constexpr const char *update = "UPDATE concurrency.queue SET lease = coalesce($2, lease), "
                                      "max_attempts = coalesce($3, max_attempts), "
                                      "retain = CASE WHEN $7 THEN $4 ELSE retain END, "
                                      "key_limit = CASE WHEN $8 THEN $5 ELSE key_limit END, "
                                      "max_leased = CASE WHEN $9 THEN $6 ELSE max_leased END "
                                      "WHERE name = $1";
// $1 name, $2 whether rate_limit is given, $3 rate_limit (NULL: none), $4
// rate_period (NULL: the queue's, or none without a limit). Run only where
// a rate setting is given (the columns are 0.3.0's).
inline constexpr const char *set_rate =
    "UPDATE concurrency.queue SET rate_limit = CASE WHEN $2 THEN $3 ELSE rate_limit END, "
    "rate_period = CASE WHEN $2 AND $3 IS NULL THEN NULL ELSE coalesce($4, rate_period) END "
    "WHERE name = $1";
// The same for the key rate limit (key_rate_limit, key_rate_period).
inline constexpr const char *set_key_rate =
    "UPDATE concurrency.queue SET key_rate_limit = CASE WHEN $2 THEN $3 ELSE key_rate_limit END, "
    "key_rate_period = CASE WHEN $2 AND $3 IS NULL THEN NULL ELSE coalesce($4, key_rate_period) END "
    "WHERE name = $1";
// $1 name, $2 fair. Run only where fair is given (the column is 0.3.0's).
inline constexpr const char *set_fair = "UPDATE concurrency.queue SET fair = $2 WHERE name = $1";
// $1 name
inline constexpr const char *remove = "DELETE FROM concurrency.queue WHERE name = $1";
// $1 name -> lease, max_attempts, retain, key_limit, max_leased, paused,
// rate_limit, rate_period, fair, key_rate_limit, key_rate_period. Those of 0.3.0 are read from the row as
// jsonb: a 0.2.0 catalog (the package updated, ALTER EXTENSION … UPDATE not yet run) has no such columns, and
// its queues run without them. Read when a backend loads the settings, not per call.
inline constexpr const char *settings =
    "SELECT q.lease, q.max_attempts, q.retain, q.key_limit, q.max_leased, "
    "COALESCE((pg_catalog.to_jsonb(q) OPERATOR(pg_catalog.->>) 'paused')::pg_catalog.bool, "
    "false), " CATALOG_RATE ", " CATALOG_PERIOD ", "
    "(pg_catalog.to_jsonb(q) OPERATOR(pg_catalog.->>) 'fair')::pg_catalog.bool, " CATALOG_KEY_RATE
    ", " CATALOG_KEY_PERIOD " "
    "FROM concurrency.queue q WHERE q.name OPERATOR(pg_catalog.=) $1";
// $1 name, $2 paused -> the name, when the flag changed (permission manage
// is checked before)
inline constexpr const char *set_paused =
    "UPDATE concurrency.queue SET paused = $2 "
    "WHERE name OPERATOR(pg_catalog.=) $1 AND paused IS DISTINCT FROM $2 "
    "RETURNING name";
// every queue's name, in order
inline constexpr const char *names = "SELECT name FROM concurrency.queue ORDER BY name";
} // namespace catalog_sql

} // namespace concurrency::queue
