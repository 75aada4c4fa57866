// Backend start-up for the task-queue capability.
#include "queue/init.hpp"
#include "queue/args.hpp"
#include "queue/claim.hpp"
#include "queue/dependencies.hpp"
#include "queue/fair.hpp"
#include "queue/notifier.hpp"
#include "queue/permissions.hpp"
#include "queue/queue.hpp"
#include "queue/schedule.hpp"
#include "queue/schedule_runner.hpp"
#include "queue/wait.hpp"

namespace concurrency::queue {

void init() {
	cache_init();
	define_claim_settings();
	define_payload_setting();
	permissions_init();
	wait_init();
	notifier_init();
	fair_init();
	schedule_init();
	schedule_runner_init();
	dependencies_init();
}

} // namespace concurrency::queue
