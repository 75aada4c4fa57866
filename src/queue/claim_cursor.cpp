#include "queue/claim_cursor.hpp"
#include "common/pure.hpp" // last: checks that no PostgreSQL header came before

namespace concurrency::queue {

void ClaimCursor::begin(std::int64_t now, std::uint32_t horizon_lag_xids) {
	now_ = now;
	resuming_ = horizon_lag_xids > policy_.pinned_horizon_xids || costly_front_;
	auto due = [&](std::int64_t last_full) {
		// a clock that went backwards also forces a full scan
		return now - last_full >= policy_.rescan_interval_us || now < last_full;
	};
	full_wake_ = !resuming_ || !have_wake_mark_ || due(last_full_wake_);
	full_ready_ = !resuming_ || !have_last_claimed_ || due(last_full_ready_);
}

void ClaimCursor::woke(bool made_tasks_ready) {
	if (full_wake_)
		last_full_wake_ = now_;
	wake_mark_ = now_;
	have_wake_mark_ = true;
	// tasks made ready again keep their place in claim order, which is most
	// likely behind the resume point
	if (made_tasks_ready)
		full_ready_ = true;
}

bool ClaimCursor::rescan_from_front(std::size_t claimed, std::size_t wanted) {
	if (full_ready_ || claimed >= wanted)
		return false;
	full_ready_ = true;
	return true;
}

void ClaimCursor::cost(std::uint64_t buffers, std::size_t claimed) {
	// a resumed claim says nothing about the front
	if (!full_ready_)
		return;
	costly_front_ = buffers > policy_.costly_front_buffers + policy_.buffers_per_task * claimed;
}

void ClaimCursor::finish(std::optional<ClaimKey> last) {
	if (full_ready_)
		last_full_ready_ = now_;
	if (last) {
		last_claimed_ = *last;
		have_last_claimed_ = true;
	}
}

} // namespace concurrency::queue
