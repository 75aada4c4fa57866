// The names of a queue's relations in the schema concurrency, and the queue
// a relation of that schema belongs to: the one place where they are built
// (the DDL of distributed queues, queue/distributed/ddl.cpp, takes them from
// here too; SQL asks for them through
// concurrency_internal.queue_relation_name). Pure C++; unit-tested in
// test/unit/relation_names_test.cpp.
//
// A queue's tables are a prefix and its name: q_<queue> (its tasks),
// k_<queue> (keys), s_<queue> (lease slots), r_<queue> (rate slots),
// rk_<queue> (key rate slots). No prefix is the start of another, so no
// table of one queue has the name of another queue's table.
//
// Each index of those tables and the tasks' identity sequence are named by
// their role and their table, role first: ready_q_jobs, pkey_k_jobs,
// id_seq_q_jobs. No role followed by "_" begins with a table prefix, and no
// role is another role followed by "_" and more, so such a name is never
// another queue's relation's, nor a name of the older rule.
// Before 0.4.0 they were named table first, as PostgreSQL names a primary
// key (q_jobs_ready, k_jobs_pkey, q_jobs_id_seq), and one queue's could be
// another's: queue "jobs" had the index q_jobs_keyed, the table of a queue
// "jobs_keyed". A relation keeps the name it was made with (a queue made
// before 0.4.0 keeps its names through the update, and pg_dump keeps them
// all), so the code finds an index or the sequence by its role under either
// name (queue.hpp: derived_relid); create_queue refuses a name whose tables
// would have the names of such an older queue's relations (42P07 naming
// that queue: lifecycle/names.cpp). While the extension's objects are older
// than 0.4.0 (the module updated, ALTER EXTENSION … UPDATE not yet run),
// new relations are named table first, as those objects' SQL names them
// (queue.hpp: naming_of_new_relations).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace concurrency::queue {

// The tables of a queue.
enum class QueueTable : std::uint8_t { tasks, keys, slots, rate, key_rate };

// "q_", "k_", "s_", "r_", "rk_"
const char *table_prefix(QueueTable table);
// The table's name (unquoted): its prefix and the queue's name.
std::string table_name(QueueTable table, std::string_view queue);
std::string queue_table_name(std::string_view queue);    // q_<queue>
std::string key_table_name(std::string_view queue);      // k_<queue>
std::string slot_table_name(std::string_view queue);     // s_<queue>
std::string rate_table_name(std::string_view queue);     // r_<queue>
std::string key_rate_table_name(std::string_view queue); // rk_<queue>
// The table's name quoted, with its schema: concurrency."q_<queue>".
std::string qualified_table_name(QueueTable table, std::string_view queue);
// The table named by its word in concurrency_internal.queue_relation_name:
// tasks, keys, slots, rate, key_rate.
std::optional<QueueTable> table_of_word(std::string_view word);

// What a relation derived from a table is to it: its primary key, one of
// the tasks' indexes (the partial indexes of each state, the dedupe_key's,
// the keyed tasks', the fair claim's), or the tasks' identity sequence.
enum class Role : std::uint8_t {
	pkey,
	ready,
	scheduled,
	leased,
	dedupe,
	finished,
	waiting,
	dead,
	keyed,
	fair,
	id_seq,
};
inline constexpr Role all_roles[] = {Role::pkey,   Role::ready,    Role::scheduled, Role::leased,
                                     Role::dedupe, Role::finished, Role::waiting,   Role::dead,
                                     Role::keyed,  Role::fair,     Role::id_seq};
// "pkey", "ready", …, "id_seq"
const char *role_word(Role role);
std::optional<Role> role_of_word(std::string_view word);
// Whether `table` has a relation of role `role`: the tasks' table has every
// role, the other tables their primary key only.
bool has_role(QueueTable table, Role role);

// How a derived relation is named: role first (since 0.4.0), or table first
// (the relations made before).
enum class Naming : std::uint8_t { role_first, table_first };
// "<role>_<table>" or "<table>_<role>" (unquoted). A valid queue name has
// at most max_queue_name_bytes (48) bytes, so each fits in 63 bytes.
std::string derived_name(QueueTable table, std::string_view queue, Role role,
                         Naming naming = Naming::role_first);

// The name since 0.4.0 of `relation`, an index or the identity sequence of
// table `table` named table first ("<table>_<role>", made before 0.4.0):
// "<role>_<table>"; nothing where `relation` is no such name.
std::optional<std::string> role_first_name(std::string_view relation, std::string_view table);

// The relations create_queue makes for `queue`, under the names it gives
// them: the tasks' table, its indexes and identity sequence, the key and
// lease-slot tables with their primary keys, and with a rate limit (key
// rate limit) its slot table (and the fair index).
// Named as `naming` says; table first without the identity sequence, whose
// name PostgreSQL then chooses (q_<queue>_id_seq, or another where that is
// taken).
std::vector<std::string> relations_of_new_queue(std::string_view queue, Naming naming, bool rate_limit,
                                                bool key_rate_limit);

// The queue whose table `table` (unquoted, a table's name, not an index's)
// would be, by its prefix: q_, k_, s_, r_ or rk_; nothing for a name with
// none of them.
std::optional<std::string> queue_of_table(std::string_view table);

} // namespace concurrency::queue
