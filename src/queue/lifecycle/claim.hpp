// The claim of dequeue: which ready tasks a call leases, in claim order, and
// the wake-up step that makes due scheduled tasks and expired leases ready
// first. Each batch of tasks is claimed without the executor where that
// applies (claim_direct.hpp), else by the claim statement (QueueSql::claim).
// Internal to src/queue.
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "pg/srf.hpp"
#include "queue/claim_cursor.hpp"
#include "queue/queue.hpp"

namespace concurrency::queue {

// The wake-up step of a claim on open queue `q` at `now`: up to `limit` (at
// least 32) due scheduled tasks become ready, and as many expired leases
// (at or after `floor`, a TimestampTz) are reclaimed: ready again, or dead
// when their attempts are used up — their keys' next tasks admitted, their
// waiting descendants cancelled; a lease a heartbeat extended runs on.
// Returns whether it made a task ready.
bool wake_tasks(Queue &q, TimestampTz now, int32 limit, int64 floor);

// For the lease slots of a distributed queue with max_leased, whose lease
// end has passed (queue/distribution.hpp, take_lease_slots): wakes shard `shard`
// (on this node) at `now` as a claim does, then returns when the lease
// `lease_token` on task `task_id` ends, or nothing where the task is no
// longer leased under it.
std::optional<TimestampTz> lease_end_on_shard(Queue &shard, int64 task_id, int64 lease_token,
                                              TimestampTz now);

// Defines concurrency.direct_claim (from _PG_init, through queue::init).
void define_claim_settings();

// One dequeue's claim on an open queue (SPI connected, running as the
// queue's owner): up to `batch` tasks, each emitted as a row of `out`.
class Claim {
  public:
	Claim(Queue &q, TimestampTz now, const Interval &lease, Datum worker, bool worker_null,
	      pg::ResultSet &out);
	Claim(const Claim &) = delete;
	Claim &operator=(const Claim &) = delete;

	// Claims up to `batch` tasks: 1. the claim, unless tasks wait for the
	// wake-up; 2. the wake-up; 3. the rest of the batch. Then moves the
	// queue's cursor on and, under max_leased, writes the leases into the
	// slots taken. Under rate_limit, first takes rate slots (at most
	// `batch`), and claims nothing when none is free.
	void run(int32 batch);
	// How many tasks this call has claimed (over every run).
	std::size_t claimed() const { return claimed_; }
	// Whether the last run claimed nothing because the queue's rate limit
	// allowed no claim at its time.
	bool rate_limited() const { return rate_limited_; }
	// Under key_rate_limit, where the last run passed keys with ready tasks
	// over for want of a free slot: when the first of their windows opens.
	std::optional<TimestampTz> key_window_opens() const { return key_window_opens_; }

  private:
	Queue &q_;
	ClaimCursor &cursor_;
	const TimestampTz now_;
	Interval lease_;
	const Datum worker_;
	const bool worker_null_;
	pg::ResultSet &out_;
	// the greatest claim key of the tasks claimed, for the cursor
	std::optional<ClaimKey> last_;
	std::size_t claimed_ = 0;
	// shared buffers the direct claim's scans of the ready index read in
	// this run (ClaimCursor::cost)
	uint64 scanned_ = 0;
	// max_leased: this call claims at most as many tasks as it holds free
	// lease slots, and writes its leases into them
	const bool slotted_;
	std::vector<int32> slots_;
	std::vector<int64> slot_ids_, slot_tokens_;
	// rate_limit: this call claims at most as many tasks as it holds free
	// rate slots, and writes its claim time into those it used (rate.hpp)
	const bool rated_;
	// a run claimed nothing because every rate slot was in use
	bool rate_limited_ = false;
	std::optional<TimestampTz> key_window_opens_;

	// Claims up to `wanted` tasks at or after `start` in claim order; on a
	// fair queue, the next tasks of the rotation of its keys instead.
	void claim_from(ClaimKey start, int32 wanted);
	// The fair claim (fair.hpp): up to `wanted` tasks, a key's first ready
	// task each, the keys in turn from where the queue's last claim ended.
	void claim_fair(int32 wanted);
	// The claim under key_rate_limit (rate_sql.hpp, KeyRateSql): up to
	// `wanted` tasks, a key's first ready task each, the keys in turn as a
	// fair queue's, each key only with a rate slot of its own taken.
	void claim_key_rated(int32 wanted);
	void passed_over(TimestampTz opens);
	// The same by the claim statement.
	void claim_by_statement(ClaimKey start, int32 wanted);
	// Due scheduled tasks become ready, expired leases are reclaimed (ready
	// again, or dead when their attempts are used up), their keys released.
	void wake(int32 batch);
	// One claimed task: a row of the result, and its lease for the slots.
	void emit(Datum *cols, bool *isnull);
	void saw(const ClaimKey &greatest);
};

} // namespace concurrency::queue
