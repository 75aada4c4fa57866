// The names of a queue's relations on the PostgreSQL side of create_queue
// and of the SQL (relation_names.hpp builds them): the refusal of a new
// queue whose tables would have the names of an older queue's relations,
// and concurrency_internal.queue_relation_name
// (src/sql/21_queue_lifecycle.sql).
#include "queue/lifecycle/names.hpp"

#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/sql_text.hpp"
#include "queue/queue.hpp"
#include "queue/relation_names.hpp"

extern "C" {
#include "catalog/pg_type.h"
#include "utils/lsyscache.h"
}

namespace concurrency::queue {

namespace {

// The HINT of a name taken by an index or the identity sequence of queue
// `owner` (of its table `table`): another name, or the relation renamed as
// since 0.4.0 (role first), under which the queue's code finds it as well.
std::string hint_for_taken(const std::string &relation, const std::string &kind, const std::string &table,
                           const std::string &owner) {
	std::optional<std::string> renamed = role_first_name(relation, table);
	if (!renamed || (kind != "i" && kind != "S"))
		return "Choose another name for the queue.";
	return fmt::format("Choose another name for the queue, or give the {} of queue \"{}\" its name of "
	                   "0.4.0, which no queue can take: ALTER {} concurrency.{} RENAME TO {};",
	                   kind == "i" ? "index" : "sequence", owner, kind == "i" ? "INDEX" : "SEQUENCE",
	                   quote_ident(relation), quote_ident(*renamed));
}

} // namespace

// Before a new queue's relations are created: refuses (42P07) a name that
// another queue's relation already has, saying whose. The indexes and the
// identity sequence a new queue makes are named role first
// (relation_names.hpp), which no other queue's relation can be; its tables
// can have the name of an index or sequence of a queue made before 0.4.0:
// queue "jobs_keyed" would meet the index q_jobs_keyed of such a queue
// "jobs", queue "jobs_id_seq" its sequence q_jobs_id_seq. A relation of no
// queue is left to CREATE's own error.
void refuse_names_of_other_queues(const std::string &name, Naming naming, bool rate_limit,
                                  bool key_rate_limit) {
	std::string names;
	for (const std::string &relation : relations_of_new_queue(name, naming, rate_limit, key_rate_limit))
		names += (names.empty() ? "" : ", ") + quote_literal(relation);
	// the table an index is of, or a sequence belongs to (an identity's)
	uint64 n = pg::execute(fmt::format(R"(SELECT c.relname::pg_catalog.text, c.relkind::pg_catalog.text,
       COALESCE(t.relname, o.relname, c.relname)::pg_catalog.text
  FROM pg_catalog.pg_class c
  LEFT JOIN pg_catalog.pg_index i ON i.indexrelid OPERATOR(pg_catalog.=) c.oid
  LEFT JOIN pg_catalog.pg_class t ON t.oid OPERATOR(pg_catalog.=) i.indrelid
  LEFT JOIN pg_catalog.pg_depend d
         ON c.relkind OPERATOR(pg_catalog.=) 'S' AND d.classid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
        AND d.objid OPERATOR(pg_catalog.=) c.oid AND d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_class'::pg_catalog.regclass
        AND d.deptype OPERATOR(pg_catalog.=) ANY (ARRAY['a', 'i']::pg_catalog."char"[])
  LEFT JOIN pg_catalog.pg_class o ON o.oid OPERATOR(pg_catalog.=) d.refobjid
 WHERE c.relnamespace OPERATOR(pg_catalog.=) 'concurrency'::pg_catalog.regnamespace
   AND c.relname OPERATOR(pg_catalog.=) ANY (ARRAY[{}]::pg_catalog.name[])
 ORDER BY 1)",
	                                   names));
	struct Taken {
		std::string relation, kind, table, owner;
	};
	std::vector<Taken> taken;
	for (uint64 r = 0; r < n; ++r) {
		std::string table = pg::text_column(r, 3).value_or("");
		std::optional<std::string> owner = queue_of_table(table);
		if (owner && *owner != name)
			taken.push_back(
			    {pg::text_column(r, 1).value_or(""), pg::text_column(r, 2).value_or(""), table, *owner});
	}
	static const Oid types[1] = {TEXTOID};
	for (const Taken &t : taken) {
		Datum values[1] = {pg::text_datum(t.owner)};
		if (pg::execute("SELECT 1 FROM concurrency.queue WHERE name OPERATOR(pg_catalog.=) $1", 1, types,
		                values) == 0)
			continue;
		throw Error(
		    sqlstate::duplicate_table,
		    fmt::format("cannot create queue \"{}\": relation concurrency.{} already exists", name,
		                quote_ident(t.relation)),
		    fmt::format("It is {} of queue \"{}\", and queue \"{}\" would give one of its own the same name.",
		                t.kind == "i"   ? "an index"
		                : t.kind == "S" ? "the identity sequence"
		                                : "a table",
		                t.owner, name),
		    hint_for_taken(t.relation, t.kind, t.table, t.owner));
	}
}

} // namespace concurrency::queue

using namespace concurrency;
using namespace concurrency::queue;

// concurrency_internal.queue_relation_name(queue, tbl, role) — the name
// (unquoted) of table `tbl` (tasks, keys, slots, rate, key_rate) of queue
// `queue`, or, with `role`, of that table's index or identity sequence of
// that role (relation_names.hpp: pkey, ready, …, id_seq): the name it has
// (table first where it was made before 0.4.0), or, where the table has no
// such relation (yet), the name it gets (derived_relation_name, as the DDL
// of distributed queues takes it). For the statements that join the catalog
// to the tables, so that no name is built but in relation_names.cpp. 22023 for a word it does not know.
CONCURRENCY_FUNCTION(concurrency_queue_relation_name) {
	std::string name = queue::queue_name_arg(fcinfo);
	std::string_view table_word = pg::text_view_arg(fcinfo, 1, "tbl");
	std::optional<QueueTable> table = table_of_word(table_word);
	if (!table)
		throw Error(sqlstate::invalid_parameter_value, fmt::format("unknown queue table \"{}\"", table_word),
		            "", "Use tasks, keys, slots, rate or key_rate.");
	std::string relation = table_name(*table, name);
	if (PG_NARGS() > 2 && !PG_ARGISNULL(2)) {
		std::string_view role_text = pg::text_view_arg(fcinfo, 2, "role");
		std::optional<Role> role = role_of_word(role_text);
		if (!role || !has_role(*table, *role))
			throw Error(
			    sqlstate::invalid_parameter_value,
			    fmt::format("queue table \"{}\" has no relation of role \"{}\"", table_word, role_text), "",
			    "The tasks have pkey, ready, scheduled, leased, dedupe, finished, waiting, dead, "
			    "keyed, fair and id_seq; the other tables pkey.");
		relation = queue::derived_relation_name(*table, name, *role);
	}
	return pg::text_datum(relation);
}
