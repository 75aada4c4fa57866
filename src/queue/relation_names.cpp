#include "queue/relation_names.hpp"

#include "queue/flow/keys_sql.hpp"
#include "queue/flow/rate_sql.hpp"
#include "queue/queue_sql.hpp"
#include "common/pure.hpp" // last: checks that no PostgreSQL header came before

namespace concurrency::queue {

std::vector<std::string> relations_of_new_queue(std::string_view queue, bool rate_limit,
                                                bool key_rate_limit) {
	std::vector<std::string> names{queue_table_name(queue)};
	// the indexes of src/queue/queue_sql.cpp (create_table), of the dead
	// tasks (stats_sql.cpp) and of keyed tasks (keys_sql.cpp)
	for (const char *suffix :
	     {"pkey", "ready", "scheduled", "leased", "dedupe", "finished", "waiting", "dead", "keyed"})
		names.push_back(queue_index_name(queue, suffix));
	for (const std::string &side : {key_table_name(queue), slot_table_name(queue)}) {
		names.push_back(side);
		names.push_back(side + "_pkey");
	}
	if (rate_limit) {
		names.push_back(rate_table_name(queue));
		names.push_back(rate_table_name(queue) + "_pkey");
	}
	if (key_rate_limit) {
		names.push_back(key_rate_table_name(queue));
		names.push_back(key_rate_table_name(queue) + "_pkey");
		names.push_back(queue_index_name(queue, "fair"));
	}
	return names;
}

std::optional<std::string> queue_of_table(std::string_view table) {
	for (std::string_view prefix : {"q_", "k_", "s_", "r_", "rk_"})
		if (table.size() > prefix.size() && table.substr(0, prefix.size()) == prefix)
			return std::string(table.substr(prefix.size()));
	return std::nullopt;
}

} // namespace concurrency::queue
