// pg::add_shared_memory: one pair of hooks for every capability's shared memory.
#include "pg/shmem.hpp"

#include <array>
#include <cstddef>

#include "pg/postgres.hpp"

extern "C" {
#include "miscadmin.h"
#include "storage/ipc.h"
}

namespace concurrency::pg {

namespace {

struct SharedPart {
	void (*request)();
	void (*start)();
};

constexpr std::size_t max_parts = 8;
std::array<SharedPart, max_parts> parts{};
std::size_t part_count = 0;
shmem_startup_hook_type previous_start = nullptr;
#if PG_VERSION_NUM >= 150000
shmem_request_hook_type previous_request = nullptr;
#endif

void request_all() {
#if PG_VERSION_NUM >= 150000
	if (previous_request)
		previous_request();
#endif
	for (std::size_t i = 0; i < part_count; ++i)
		parts[i].request();
}

void start_all() {
	if (previous_start)
		previous_start();
	for (std::size_t i = 0; i < part_count; ++i)
		parts[i].start();
}

} // namespace

void add_shared_memory(void (*request)(), void (*start)()) {
	if (part_count == 0) {
#if PG_VERSION_NUM >= 150000
		previous_request = shmem_request_hook;
		shmem_request_hook = request_all;
#endif
		previous_start = shmem_startup_hook;
		shmem_startup_hook = start_all;
	}
	if (part_count == max_parts)
		elog(ERROR, "concurrency_ext: more than %zu shared memory parts", max_parts);
	parts[part_count++] = SharedPart{request, start};
#if PG_VERSION_NUM < 150000
	request(); // before 15, requests are made during _PG_init itself
#endif
}

} // namespace concurrency::pg
