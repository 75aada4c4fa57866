// Backend start-up for the task-queue wing (init.hpp).
#include "queue/init/init.hpp"
#include "queue/args.hpp"
#include "queue/distributed/distributed.hpp"
#include "queue/flow/fair.hpp"
#include "queue/graphs/dependencies.hpp"
#include "queue/lifecycle/claim.hpp"
#include "queue/lifecycle/claim_direct.hpp"
#include "queue/permissions.hpp"
#include "queue/queue.hpp"
#include "queue/time/notifier.hpp"
#include "queue/time/schedule.hpp"
#include "queue/time/schedule_runner.hpp"
#include "queue/time/wait.hpp"
#include "queue/workflows/workflows.hpp"

namespace concurrency::queue {

void init() {
	cache_init(forget_direct);
	define_claim_settings();
	define_payload_setting();
	define_result_retention_setting();
	permissions_init();
	wait_init();
	notifier_init();
	fair_init();
	schedule_init();
	schedule_runner_init();
	dependencies_init();
	workflows_init();
	// the distributed queue registers its hooks into the queue's code
	// (distribution.hpp, permissions.hpp), which does not depend on it
	distributed_init();
}

} // namespace concurrency::queue
