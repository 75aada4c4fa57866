#include "queue/relation_names.hpp"

#include <initializer_list>

#include <fmt/format.h>

#include "common/sql_text.hpp"

#include "common/pure.hpp" // last: checks that no PostgreSQL header came before

namespace concurrency::queue {

namespace {

constexpr QueueTable all_tables[] = {QueueTable::tasks, QueueTable::keys, QueueTable::slots, QueueTable::rate,
                                     QueueTable::key_rate};

const char *table_word(QueueTable table) {
	switch (table) {
	case QueueTable::tasks:
		return "tasks";
	case QueueTable::keys:
		return "keys";
	case QueueTable::slots:
		return "slots";
	case QueueTable::rate:
		return "rate";
	case QueueTable::key_rate:
		return "key_rate";
	}
	return "";
}

} // namespace

const char *table_prefix(QueueTable table) {
	switch (table) {
	case QueueTable::tasks:
		return "q_";
	case QueueTable::keys:
		return "k_";
	case QueueTable::slots:
		return "s_";
	case QueueTable::rate:
		return "r_";
	case QueueTable::key_rate:
		return "rk_";
	}
	return "";
}

std::string table_name(QueueTable table, std::string_view queue) {
	return fmt::format("{}{}", table_prefix(table), queue);
}

std::string qualified_table_name(QueueTable table, std::string_view queue) {
	return "concurrency." + quote_ident(table_name(table, queue));
}

std::string queue_table_name(std::string_view queue) {
	return table_name(QueueTable::tasks, queue);
}
std::string key_table_name(std::string_view queue) {
	return table_name(QueueTable::keys, queue);
}
std::string slot_table_name(std::string_view queue) {
	return table_name(QueueTable::slots, queue);
}
std::string rate_table_name(std::string_view queue) {
	return table_name(QueueTable::rate, queue);
}
std::string key_rate_table_name(std::string_view queue) {
	return table_name(QueueTable::key_rate, queue);
}

std::optional<QueueTable> table_of_word(std::string_view word) {
	for (QueueTable table : all_tables)
		if (word == table_word(table))
			return table;
	return std::nullopt;
}

const char *role_word(Role role) {
	switch (role) {
	case Role::pkey:
		return "pkey";
	case Role::ready:
		return "ready";
	case Role::scheduled:
		return "scheduled";
	case Role::leased:
		return "leased";
	case Role::dedupe:
		return "dedupe";
	case Role::finished:
		return "finished";
	case Role::waiting:
		return "waiting";
	case Role::dead:
		return "dead";
	case Role::keyed:
		return "keyed";
	case Role::fair:
		return "fair";
	case Role::id_seq:
		return "id_seq";
	}
	return "";
}

std::optional<Role> role_of_word(std::string_view word) {
	for (Role role : all_roles)
		if (word == role_word(role))
			return role;
	return std::nullopt;
}

bool has_role(QueueTable table, Role role) {
	return table == QueueTable::tasks || role == Role::pkey;
}

std::string derived_name(QueueTable table, std::string_view queue, Role role, Naming naming) {
	if (naming == Naming::table_first)
		return fmt::format("{}{}_{}", table_prefix(table), queue, role_word(role));
	return fmt::format("{}_{}{}", role_word(role), table_prefix(table), queue);
}

std::optional<std::string> role_first_name(std::string_view relation, std::string_view table) {
	if (relation.size() <= table.size() + 1 || relation.substr(0, table.size()) != table ||
	    relation[table.size()] != '_')
		return std::nullopt;
	std::string_view role = relation.substr(table.size() + 1);
	if (!role_of_word(role))
		return std::nullopt;
	return fmt::format("{}_{}", role, table);
}

std::vector<std::string> relations_of_new_queue(std::string_view queue, Naming naming, bool rate_limit,
                                                bool key_rate_limit) {
	std::vector<std::string> names;
	auto table_with = [&](QueueTable table, std::initializer_list<Role> roles) {
		names.push_back(table_name(table, queue));
		for (Role role : roles)
			if (role != Role::id_seq || naming == Naming::role_first)
				names.push_back(derived_name(table, queue, role, naming));
	};
	// the DDL of src/queue/queue_sql.cpp (create_table), of the dead tasks'
	// index (stats_sql.cpp), of the side tables and the keyed tasks' index
	// (keys_sql.cpp) and of the rate slots (rate_sql.cpp)
	table_with(QueueTable::tasks, {Role::pkey, Role::id_seq, Role::ready, Role::scheduled, Role::leased,
	                               Role::dedupe, Role::finished, Role::waiting, Role::dead, Role::keyed});
	table_with(QueueTable::keys, {Role::pkey});
	table_with(QueueTable::slots, {Role::pkey});
	if (rate_limit)
		table_with(QueueTable::rate, {Role::pkey});
	if (key_rate_limit) {
		table_with(QueueTable::key_rate, {Role::pkey});
		names.push_back(derived_name(QueueTable::tasks, queue, Role::fair, naming));
	}
	return names;
}

std::optional<std::string> queue_of_table(std::string_view table) {
	for (QueueTable t : all_tables) {
		std::string_view prefix = table_prefix(t);
		if (table.size() > prefix.size() && table.substr(0, prefix.size()) == prefix)
			return std::string(table.substr(prefix.size()));
	}
	return std::nullopt;
}

} // namespace concurrency::queue
