// Backend start-up for the lock-diagnostics capability.
#include "diagnostics/init.hpp"
#include "diagnostics/history_shared.hpp"

namespace concurrency::diagnostics {

void init() {
	history_init();
}

} // namespace concurrency::diagnostics
