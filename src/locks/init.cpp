// Backend start-up for the named-locks capability.
#include "locks/init.hpp"
#include "locks/registry.hpp"
#include "locks/tracking.hpp"

namespace concurrency::locks {

void init() {
	registry_init();
	tracking_init();
}

} // namespace concurrency::locks
