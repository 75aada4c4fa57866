// Prints, for each queue name given, the DDL that 0.1.0's create_queue ran
// for it: QueueSql::create_table of the release commit, compiled against that
// commit's sources by scripts/upgrade-check.sh (the sources are listed on the
// line below), so that before.sql makes the queue tables exactly as 0.1.0 did
// without a copy of their DDL.
// upgrade-check sources: src/core/queue_sql.cpp src/core/sql_text.cpp
#include <cstdio>

#include "core/queue_sql.hpp"

int main(int argc, char **argv) {
	for (int i = 1; i < argc; ++i)
		std::printf("%s\n", concurrency::QueueSql(argv[i]).create_table().c_str());
	return 0;
}
