// Where one backend starts its index scans of one queue.
//
// A claim walks the queue's "ready" index from the front, in claim order.
// Every claimed task leaves a dead entry at the front of that index, which
// PostgreSQL removes (or marks killed, so later scans skip it cheaply) once no
// snapshot can see the old row version any more. While some session pins the
// xmin horizon (a long transaction, an old replication slot), nothing can be
// removed, and a scan from the front would walk over every task claimed since
// then: the claim would slow down in proportion to the queue's throughput.
//
// The same walk happens with a fresh horizon when the queue holds a deep
// backlog: entries marked killed are skipped without a look at the table, but
// the scan still reads every index page they fill until VACUUM removes them
// (autovacuum looks at most once a minute), so each claim of a drain reads
// more pages than the one before: draining 20,000 tasks read 54 blocks of the
// ready index a claim on average, and the index scan's instructions a claim
// (callgrind) doubled from a drain of 2,000 tasks to one of 6,000.
//
// So, while the horizon trails the next transaction id by more than
// `pinned_horizon_xids`, or while the last dequeue whose claim scanned the
// ready index from the front read more shared buffers there than
// `costly_front_buffers` plus `buffers_per_task` for each task it claimed
// (measured where the claim runs without the executor, claim_direct.hpp;
// the claim statement is not measured), a backend resumes its scan at
// the claim key of the last task it claimed (and its expired-lease/due-task
// scan at the time of its previous one), instead of starting from the front.
// It still starts from the front
//   * when the resumed scan comes back with fewer tasks than asked for,
//   * when its own wake-up step has just made tasks ready again,
//   * and at least every `rescan_interval_us`,
// so a task that becomes claimable behind a backend's resume point (a higher
// priority, an earlier run_at, a rolled-back claim) waits at most that long.
// With a fresh horizon and a front that costs little to walk (the normal
// case) every scan starts from the front and the claim order is exact; each
// scan from the front measures the front again.
//
// Pure C++ (no PostgreSQL headers), unit-tested in test/unit/queue_cursor_test.cpp.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <tuple>

namespace concurrency::queue {

// A task's position in claim order: highest priority first, then earliest
// run_at, then lowest id. The priority is negated so that ascending order of
// the key is claim order (the queue's ready index is built the same way).
struct ClaimKey {
	std::int64_t neg_priority = std::numeric_limits<std::int64_t>::min();
	std::int64_t run_at =
	    std::numeric_limits<std::int64_t>::min(); // PostgreSQL TimestampTz (µs); min = -infinity
	std::int64_t id = std::numeric_limits<std::int64_t>::min();

	static constexpr ClaimKey front() { return {}; }
	bool is_front() const { return *this == front(); }

	friend bool operator==(const ClaimKey &a, const ClaimKey &b) {
		return std::tie(a.neg_priority, a.run_at, a.id) == std::tie(b.neg_priority, b.run_at, b.id);
	}
	friend bool operator<(const ClaimKey &a, const ClaimKey &b) {
		return std::tie(a.neg_priority, a.run_at, a.id) < std::tie(b.neg_priority, b.run_at, b.id);
	}
};

struct ScanPolicy {
	std::uint32_t pinned_horizon_xids = 1000;
	std::int64_t rescan_interval_us = 100'000;
	// the claim's scan of the ready index from the front of a fresh queue
	// reads the index's metapage, root and first leaf, and a table page per
	// task it claims (fewer where they share one) or passes over (held by
	// other claims): 16 leaves room for a dozen tasks passed over; 4,000
	// dead entries at the front fill about 20 leaf pages
	std::uint64_t costly_front_buffers = 16;
	std::uint64_t buffers_per_task = 2;
};

class ClaimCursor {
  public:
	static constexpr std::int64_t from_the_start = std::numeric_limits<std::int64_t>::min();

	explicit ClaimCursor(ScanPolicy policy = {}) : policy_(policy) {}

	// Starts one dequeue at time `now` (µs); `horizon_lag_xids` is how far the
	// oldest transaction id still needed by some snapshot trails the next one.
	void begin(std::int64_t now, std::uint32_t horizon_lag_xids);

	// Whether this dequeue resumes scans instead of starting from the front.
	bool resuming() const { return resuming_; }

	// Lower bound of the wake-up scan (due scheduled tasks, expired leases),
	// as a TimestampTz; from_the_start for the whole range.
	std::int64_t wake_floor() const { return full_wake_ ? from_the_start : wake_mark_; }

	// Reports the wake-up step: whether it made any task ready again.
	void woke(bool made_tasks_ready);

	// Lower bound of the claim scan, in claim order.
	ClaimKey ready_floor() const { return full_ready_ ? ClaimKey::front() : last_claimed_; }

	// After a claim scan that returned `claimed` of the `wanted` tasks: whether
	// to scan again from the front for the rest. Marks the cursor accordingly.
	bool rescan_from_front(std::size_t claimed, std::size_t wanted);

	// Ends the dequeue; `last` is the greatest claim key it claimed, if any.
	void finish(std::optional<ClaimKey> last);

	// Reports what the dequeue's claim cost: the shared buffers its scans of
	// the ready index read and the tasks it claimed. Call before finish.
	// Where it scanned from the front, the cost says whether the following
	// dequeues resume.
	void cost(std::uint64_t buffers, std::size_t claimed);

	// Whether the last dequeue from the front found the front dear to walk.
	bool costly_front() const { return costly_front_; }

  private:
	ScanPolicy policy_;
	std::int64_t now_ = 0;
	bool resuming_ = false;
	bool costly_front_ = false;
	bool full_wake_ = true;
	bool full_ready_ = true;

	bool have_wake_mark_ = false;
	std::int64_t wake_mark_ = from_the_start; // `now` of the previous wake-up scan
	std::int64_t last_full_wake_ = 0;

	bool have_last_claimed_ = false;
	ClaimKey last_claimed_;
	std::int64_t last_full_ready_ = 0;
};

// How far the xmin horizon trails, sampled at most every `interval_us`:
// reading it scans the whole process array (every backend's xmin), which is
// too dear to do on every claim with hundreds of connections, and the cursor's
// policy only needs to know whether it is pinned, which changes slowly.
class HorizonSampler {
  public:
	explicit HorizonSampler(std::int64_t interval_us = 100'000) : interval_us_(interval_us) {}

	// The lag at time `now` (µs): the last sample while it is younger than the
	// interval, otherwise `sample()`, kept. A clock that went backwards also
	// samples again.
	template <typename Sample> std::uint32_t lag(std::int64_t now, Sample &&sample) {
		if (!have_ || now - sampled_at_ >= interval_us_ || now < sampled_at_) {
			lag_ = sample();
			sampled_at_ = now;
			have_ = true;
		}
		return lag_;
	}

  private:
	std::int64_t interval_us_;
	bool have_ = false;
	std::int64_t sampled_at_ = 0;
	std::uint32_t lag_ = 0;
};

} // namespace concurrency::queue
