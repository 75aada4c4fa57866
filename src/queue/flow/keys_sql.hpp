// The SQL of keyed concurrency and queue-wide limits (docs/queue.md, "Keys
// and limits"): the two side tables of a queue and the statements that admit
// tasks of a key, release keys and hand out lease slots. Pure C++ (no
// PostgreSQL headers); identifiers quoted, operators schema-qualified.
// Unit-tested in test/unit/keys_sql_test.cpp.
//
// How the limits are kept:
//   * key_limit: at most key_limit tasks of a key are *admitted* (ready,
//     scheduled or leased); the others wait in state 'blocked', in no index
//     that a claim walks. So a claim never checks a key: whatever it finds
//     ready may be taken, and tasks held back cost it nothing. A task enters
//     or leaves the admitted set only with its key's row in the key table
//     locked (enqueue, complete, fail for good, a lease expiring for good,
//     cancel, retry_dead), and the statement that decides runs after the lock
//     is granted, on the latest committed state: two of them on one key never
//     decide on the same picture. Blocked tasks are admitted in enqueue order.
//   * max_leased: the queue has max_leased slot rows. A claim locks free
//     slots with FOR UPDATE SKIP LOCKED (never waiting), checks them again on
//     the latest committed state, claims at most as many tasks as it holds
//     slots, and writes each task's id and lease token into its slot. A slot
//     is free when the lease written in it is over (the task is no longer
//     leased under that token), so completing, failing, cancelling or
//     reclaiming a task frees its slot without touching the slot table, and
//     a crashed worker's slot is free once its lease is reclaimed.
#pragma once

#include <string>
#include <string_view>

#include "queue/queue_sql.hpp"

namespace concurrency::queue {

// The side tables are k_<queue> (keys) and s_<queue> (lease slots):
// key_table_name, slot_table_name (relation_names.hpp).

class KeySql {
  public:
	explicit KeySql(std::string_view queue);
	// The same statements on one shard of a distributed queue (Citus): its
	// tasks in the shard's table (`tasks`, the shard's QueueSql, which makes
	// their ids), its keys in the key table's shard beside it
	// (`shard.key_relname`), whose rows carry the shard's shard_key.
	KeySql(std::string_view queue, const QueueSql &tasks, const ShardPlacement &shard);

	// CREATE TABLE of both side tables and the keyed index on the queue's
	// table; DROP of the side tables; ALTER … OWNER TO of the side tables.
	// (`naming`: of their primary keys and the keyed index, as
	// QueueSql::create_table's)
	std::string create_tables(Naming naming) const;
	std::string drop_tables() const;
	std::string alter_owner(std::string_view role) const;

	// $1 text key -> a row when the key's row exists (now locked FOR UPDATE)
	std::string lock_key() const;
	// $1 text key: adds the key's row if missing
	std::string add_key() const;
	// The statements below read the key_limit from the catalog themselves
	// (on the latest snapshot they run on), not from a backend's cache, so
	// that an alter_queue committed meanwhile is obeyed. $n "queue" is the
	// queue's name.
	// enqueue on a queue with key_limit: as QueueSql::enqueue ($1 now,
	// $2 payload, $3 run_at, $4 priority, $5 dedupe_key, $6 concurrency_key),
	// plus $7 text queue; the task is 'blocked' when its key is full or
	// already has blocked tasks. Run after lock_key, on the latest snapshot.
	std::string enqueue(std::string_view dedupe_holder) const;
	// $1 text key, $2 text queue, $3 timestamptz now: admits blocked tasks of
	// the key in enqueue order while it has room -> id of each admitted
	std::string admit() const;
	// $1 text key: removes the key's row from the key table when no live
	// task (ready, scheduled, leased, blocked) has the key any more
	std::string forget_key() const;
	// $1 text queue, $2 timestamptz now: after key_limit changed, admits and
	// holds back the tasks of every key (leased tasks stay leased) -> ids.
	// With `limit_given`, $1 is the int4 key_limit itself (0: none) rather
	// than the queue's name whose catalog row has it.
	std::string rebalance(bool limit_given = false) const;
	// Locks the key table (or the key table's shard) in EXCLUSIVE MODE: no
	// enqueue or release of a key runs meanwhile (they lock their key's row
	// first).
	std::string lock_keys() const;

	// $1 int4 wanted -> slot numbers of free slots, locked (SKIP LOCKED)
	std::string lock_free_slots() const;
	// $1 int4[] slots -> those of them still free on the latest snapshot
	std::string recheck_slots() const;
	// $1 int4[] slots, $2 int8[] task ids, $3 int8[] lease tokens
	std::string fill_slots() const;
	// $1 int4 max_leased: makes the slot table hold slots 1..max_leased
	// (the leases running now written into the new ones); 0 removes all
	std::string resize_slots() const;

	// $1 timestamptz now -> concurrency_key, leased, waiting, oldest_waiting_age
	std::string queue_keys() const;

  private:
	std::string queue_;
	std::string tasks_;
	std::string keys_;
	std::string slots_;
	// on a shard: "shard_key = <k> AND " for the key table's rows, the
	// column and value a new key row gets, and a new task's (id, shard_key)
	std::string key_filter_, key_column_, key_value_;
	std::string task_columns_, task_values_;
	std::string dedupe_target_ = "(dedupe_key)";
};

} // namespace concurrency::queue
