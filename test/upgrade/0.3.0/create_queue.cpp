// Prints, for each queue name given, the DDL that 0.3.0's create_queue ran
// for a queue with key_limit, rate_limit and key_rate_limit: the table and
// its indexes, the dead tasks' index, the side tables of keys and lease
// slots, the rate slots of both limits and the fair index, from the release
// commit's own QueueSql, StatsSql, KeySql, RateSql and KeyRateSql, compiled
// against that commit's sources by scripts/upgrade-check.sh (the sources are
// listed below). Its relations are named as 0.3.0 named them
// (table first: q_<queue>_ready), which the update keeps (names.before.sql).
// clang-format off
// upgrade-check sources: src/queue/queue_sql.cpp src/queue/release_sql.cpp src/queue/stats_sql.cpp src/queue/keys_sql.cpp src/queue/rate_sql.cpp src/common/sql_text.cpp
// clang-format on
#include <cstdio>

#include "queue/keys_sql.hpp"
#include "queue/queue_sql.hpp"
#include "queue/rate_sql.hpp"
#include "queue/stats_sql.hpp"

int main(int argc, char **argv) {
	using namespace concurrency::queue;
	for (int i = 1; i < argc; ++i)
		std::printf("%s;\n%s;\n%s;\n%s;\n%s;\n%s;\n", QueueSql(argv[i]).create_table().c_str(),
		            StatsSql(argv[i]).create_index().c_str(), KeySql(argv[i]).create_tables().c_str(),
		            RateSql(argv[i]).create_table().c_str(), KeyRateSql(argv[i]).create_table().c_str(),
		            QueueSql(argv[i]).create_fair_index().c_str());
	return 0;
}
