// The claim (src/sql/21_queue_lifecycle.sql): dequeue, and the Claim it runs (see
// claim.hpp).
#include "queue/lifecycle/claim.hpp"

#include <algorithm>
#include <exception>
#include <string>
#include <utility>

#include "citus/node.hpp"
#include "pg/horizon.hpp"
#include "pg/relation.hpp"
#include "queue/lifecycle/claim_direct.hpp"
#include "queue/lifecycle/purge.hpp"
#include "queue/graphs/dependencies.hpp"
#include "queue/distribution.hpp"
#include "queue/flow/fair.hpp"
#include "queue/flow/keys.hpp"
#include "queue/flow/rate.hpp"
#include "queue/permissions.hpp"
#include "queue/time/schedule.hpp"
#include "queue/time/wait.hpp"

extern "C" {
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/snapmgr.h"
}

namespace concurrency::queue {

namespace {

// concurrency.direct_claim: off, every claim is the claim statement's (the
// suites run both ways; an operator can rule the direct path out).
bool direct_claim = true;

// How many transaction ids the xmin horizon (the oldest one that some
// snapshot may still need, server-wide) trails the next one by. Scans the
// process array: sampled (HorizonSampler), not called per claim.
uint32 horizon_lag() {
	return pg::guard([] {
		TransactionId next = XidFromFullTransactionId(ReadNextFullTransactionId());
		TransactionId oldest = pg::oldest_nonremovable_xid();
		return TransactionIdIsNormal(oldest) ? static_cast<uint32>(next - oldest) : 0u;
	});
}

} // namespace

void define_claim_settings() {
	DefineCustomBoolVariable(
	    "concurrency.direct_claim",
	    "Claims tasks without the executor where the claim statement's effects can be reproduced.",
	    "Off, dequeue always runs the claim statement.", &direct_claim, true, PGC_SUSET, 0, nullptr, nullptr,
	    nullptr);
}

Claim::Claim(Queue &q, TimestampTz now, const Interval &lease, Datum worker, bool worker_null,
             pg::ResultSet &out)
    : q_(q), cursor_(q.info().cursor), now_(now), lease_(lease), worker_(worker), worker_null_(worker_null),
      out_(out), slotted_(q.info().max_leased > 0 && !q.on_shard()),
      // a distributed queue's rate slots and lease slots are the
      // coordinator's, taken by dequeue before it claims, never by a claim
      // on a shard
      rated_(q.info().rate_limit > 0 && !q.on_shard()) {
	// the horizon matters to the cursor only to tell whether it is pinned:
	// sampled at most every 100 ms, not read on every claim
	cursor_.begin(now, q.info().horizon.lag(now, horizon_lag));
}

void Claim::emit(Datum *cols, bool *isnull) {
	pg::add_row(out_, cols, isnull);
	if (slotted_) {
		slot_ids_.push_back(DatumGetInt64(cols[0]));
		slot_tokens_.push_back(DatumGetInt64(cols[1]));
	}
}

void Claim::saw(const ClaimKey &greatest) {
	if (!last_ || *last_ < greatest)
		last_ = greatest;
}

void Claim::claim_from(ClaimKey start, int32 wanted) {
	if (q_.info().key_rate_limit > 0) {
		claim_key_rated(wanted);
		return;
	}
	if (q_.info().fair) {
		claim_fair(wanted);
		return;
	}
	// the claim without the executor where it applies (claim_direct.hpp):
	// the tasks come in claim order
	ClaimedTask *tasks = nullptr;
	int direct = 0;
	if (!direct_claim || !claim_direct(q_.info(), now_, wanted, lease_, worker_, worker_null_, start, &tasks,
	                                   &direct, &scanned_)) {
		claim_by_statement(start, wanted);
		return;
	}
	for (int i = 0; i < direct; ++i)
		emit(tasks[i].cols, tasks[i].isnull);
	if (direct > 0)
		saw(tasks[direct - 1].key);
	claimed_ += static_cast<std::size_t>(direct);
}

void Claim::claim_by_statement(ClaimKey start, int32 wanted) {
	static const Oid types[7] = {TIMESTAMPTZOID, INT4OID,        INTERVALOID, TEXTOID,
	                             INT8OID,        TIMESTAMPTZOID, INT8OID};
	Datum values[7] = {TimestampTzGetDatum(now_),
	                   Int32GetDatum(wanted),
	                   IntervalPGetDatum(&lease_),
	                   worker_,
	                   Int64GetDatum(start.neg_priority),
	                   TimestampTzGetDatum(start.run_at),
	                   Int64GetDatum(start.id)};
	char nulls[7] = {' ', ' ', ' ', worker_null_ ? 'n' : ' ', ' ', ' ', ' '};
	uint64 n = q_.run(QueueStatement::claim, 7, types, values, nulls);
	auto emit_row = [&](int row) {
		Datum cols[6];
		bool isnull[6];
		for (int c = 0; c < 6; ++c)
			cols[c] = column(row, c + 1, &isnull[c]);
		emit(cols, isnull);
	};
	auto key_of = [](int row) {
		return ClaimKey{int64_column(row, 7), int64_column(row, 8), int64_column(row, 1)};
	};
	if (n == 1) {
		emit_row(0);
		saw(key_of(0));
	} else if (n > 1) {
		// the rows come in primary-key order; return them in claim order
		std::vector<std::pair<ClaimKey, int>> order;
		order.reserve(n);
		for (uint64 i = 0; i < n; ++i)
			order.emplace_back(key_of(static_cast<int>(i)), static_cast<int>(i));
		std::sort(order.begin(), order.end(), [](const auto &a, const auto &b) { return a.first < b.first; });
		for (const auto &entry : order)
			emit_row(entry.second);
		saw(order.back().first);
	}
	claimed_ += n;
}

void Claim::claim_fair(int32 wanted) {
	static const Oid types[5] = {TIMESTAMPTZOID, INT4OID, INTERVALOID, TEXTOID, TEXTOID};
	static const char *const ops[3] = {"claim_fair_start", "claim_fair_after_null", "claim_fair_after_key"};
	FairPosition at = fair_position(q_.name());
	// without the executor where it applies (claim_direct.hpp)
	ClaimedTask *tasks = nullptr;
	int direct = 0;
	if (direct_claim &&
	    claim_direct_fair(q_.info(), now_, wanted, lease_, worker_, worker_null_, at, &tasks, &direct)) {
		for (int i = 0; i < direct; ++i)
			emit(tasks[i].cols, tasks[i].isnull);
		claimed_ += static_cast<std::size_t>(direct);
		set_fair_position(q_.name(), at);
		return;
	}
	// whether this call has looked from the rotation's beginning: a look
	// from there that claims nothing ends it
	bool from_start = at.from == FairFrom::start;
	int32 claimed = 0;
	while (claimed < wanted) {
		int32 ask = wanted - claimed;
		Datum values[5] = {TimestampTzGetDatum(now_), Int32GetDatum(ask), IntervalPGetDatum(&lease_), worker_,
		                   at.from == FairFrom::after_key ? pg::text_datum(at.key) : Datum(0)};
		char nulls[5] = {' ', ' ', ' ', worker_null_ ? 'n' : ' ', at.from == FairFrom::after_key ? ' ' : 'n'};
		int variant = static_cast<int>(at.from);
		uint64 n = q_.run(ops[variant], q_.sql().claim_fair(at.from), 5, types, values, nulls);
		if (n == 0) {
			// the rotation's end (or every task of the keys looked at is
			// being claimed by others): on from its beginning, once
			at = FairPosition{};
			if (from_start)
				break;
			from_start = true;
			continue;
		}
		for (uint64 i = 0; i < n; ++i) {
			Datum cols[6];
			bool isnull[6];
			for (int c = 0; c < 6; ++c)
				cols[c] = column(static_cast<int>(i), c + 1, &isnull[c]);
			emit(cols, isnull);
		}
		claimed += static_cast<int32>(n);
		bool isnull = false;
		int64 looked_at = DatumGetInt64(column(0, 8, &isnull));
		if (looked_at < ask) { // the rotation's end: the rest from its beginning
			at = FairPosition{};
			from_start = true;
			continue;
		}
		Datum last = column(0, 9, &isnull);
		at = isnull ? FairPosition{FairFrom::after_null, {}}
		            : FairPosition{FairFrom::after_key, pg::guard([&] { return TextDatumGetCString(last); })};
	}
	set_fair_position(q_.name(), at);
	claimed_ += static_cast<std::size_t>(claimed);
}

void Claim::passed_over(TimestampTz opens) {
	key_window_opens_ = key_window_opens_ ? std::min(*key_window_opens_, opens) : opens;
}

void Claim::claim_key_rated(int32 wanted) {
	static const Oid key_types[3] = {TEXTOID, TIMESTAMPTZOID, INT4OID};
	static const Oid claim_types[5] = {TIMESTAMPTZOID, INT4OID, INTERVALOID, TEXTOID, TEXTOID};
	static const char *const ops[3] = {"open_key_start", "open_key_after_null", "open_key_after_key"};
	const std::string rk = key_rate_sql(q_).table();
	const Interval period = q_.info().key_rate_period;
	const TimestampTz free_before = shifted(now_, period, false);
	FairPosition at = fair_position(q_.name());
	// a pass of the rotation from its beginning that claims nothing ends it
	bool from_start = at.from == FairFrom::start;
	int32 claimed = 0, claimed_in_pass = 0;
	while (claimed < wanted) {
		int variant = static_cast<int>(at.from);
		Datum values[3] = {at.from == FairFrom::after_key ? pg::text_datum(at.key) : Datum(0),
		                   TimestampTzGetDatum(free_before), Int32GetDatum(q_.info().key_rate_limit)};
		char nulls[3] = {at.from == FairFrom::after_key ? ' ' : 'n', ' ', ' '};
		uint64 found = q_.run(ops[variant], q_.sql().next_open_key(at.from, rk), 3, key_types, values, nulls);
		bool isnull = false, full = false;
		if (found == 1) {
			full = DatumGetBool(column(0, 2, &isnull));
			Datum oldest = column(0, 3, &isnull);
			if (!isnull)
				passed_over(shifted(DatumGetTimestampTz(oldest), period, true));
		}
		if (found == 0 || full) { // the rotation's end
			if (from_start && claimed_in_pass == 0)
				break;
			at = FairPosition{};
			from_start = true;
			claimed_in_pass = 0;
			continue;
		}
		Datum k = column(0, 1, &isnull);
		std::optional<std::string> key;
		if (!isnull)
			key = std::string(pg::guard([&] { return TextDatumGetCString(k); }));
		at = key ? FairPosition{FairFrom::after_key, *key} : FairPosition{FairFrom::after_null, {}};
		std::optional<KeyRateSlot> slot;
		if (key) {
			slot = take_key_rate_slot(q_, *key, now_);
			if (!slot) { // its slots are held by claims in flight, or it filled up meanwhile
				passed_over(key_rate_window_opens(q_, *key, now_));
				continue;
			}
		}
		Datum claim_values[5] = {TimestampTzGetDatum(now_), Int32GetDatum(1), IntervalPGetDatum(&lease_),
		                         worker_, key ? pg::text_datum(*key) : Datum(0)};
		char claim_nulls[5] = {' ', ' ', ' ', worker_null_ ? 'n' : ' ', key ? ' ' : 'n'};
		uint64 n = q_.run(key ? "claim_of_key" : "claim_of_null_key", q_.sql().claim_of_key(!key), 5,
		                  claim_types, claim_values, claim_nulls);
		if (n == 0) { // every ready task of the key is being claimed by others
			if (slot)
				give_back_key_rate_slot(q_, *key, *slot);
			continue;
		}
		Datum cols[6];
		bool col_null[6];
		for (int c = 0; c < 6; ++c)
			cols[c] = column(0, c + 1, &col_null[c]);
		emit(cols, col_null);
		++claimed;
		++claimed_in_pass;
	}
	set_fair_position(q_.name(), at);
	claimed_ += static_cast<std::size_t>(claimed);
}

bool wake_tasks(Queue &q, TimestampTz now, int32 limit, int64 floor) {
	static const Oid types[4] = {TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID, INT4OID};
	Datum values[4] = {TimestampTzGetDatum(now), Int32GetDatum(std::max(limit, 32)),
	                   TimestampTzGetDatum(floor), Int32GetDatum(q.info().max_attempts)};
	uint64 woken = q.run(QueueStatement::wake, 4, types, values);
	bool made_ready = false;
	std::vector<std::string> released; // keys of tasks whose lease expired for good
	std::vector<FinishedTask> died;    // those of them with parents or children
	for (uint64 i = 0; i < woken; ++i) {
		bool isnull = false;
		int row = static_cast<int>(i);
		made_ready = made_ready || DatumGetBool(column(row, 1, &isnull));
		if (!DatumGetBool(column(row, 2, &isnull)))
			continue;
		if (q.info().key_limit > 0)
			if (auto key = key_column(row, 3))
				released.push_back(*key);
		FinishedTask links = finished_row(row, int64_column(row, 4), 5);
		if (links.had_parents || links.has_children)
			died.push_back(links);
	}
	tasks_finished(q, died, Ending::dead, now);
	release_keys(q, std::move(released), now);
	return made_ready;
}

void Claim::wake(int32 batch) {
	cursor_.woke(wake_tasks(q_, now_, batch, cursor_.wake_floor()));
}

std::optional<TimestampTz> lease_end_on_shard(Queue &shard, int64 task_id, int64 lease_token,
                                              TimestampTz now) {
	wake_tasks(shard, now, 32, ClaimCursor::from_the_start);
	static const Oid types[2] = {INT8OID, INT8OID};
	Datum values[2] = {Int64GetDatum(task_id), Int64GetDatum(lease_token)};
	std::string sql =
	    fmt::format("SELECT GREATEST(lease_expires_at, lease_extended_to) FROM {} "
	                "WHERE {}id OPERATOR(pg_catalog.=) $1 AND lease_token OPERATOR(pg_catalog.=) $2 "
	                "AND state OPERATOR(pg_catalog.=) 'leased'",
	                shard.sql().table(), shard.sql().shard_filter(false));
	if (shard.run("lease_end", sql, 2, types, values) != 1)
		return std::nullopt;
	bool isnull = false;
	Datum end = column(0, 1, &isnull);
	if (isnull)
		return std::nullopt;
	return DatumGetTimestampTz(end);
}

void Claim::run(int32 batch) {
	RateSlots rate_slots;
	const std::size_t claimed_before = claimed_;
	scanned_ = 0;
	rate_limited_ = false;
	key_window_opens_.reset();
	if (rated_ && batch > 0) {
		rate_slots = take_rate_slots(q_, batch, now_, direct_claim);
		if (rate_slots.size() == 0) {
			rate_limited_ = true;
			return;
		}
		batch = std::min(batch, static_cast<int32>(rate_slots.size()));
	}
	const int32 requested = batch;
	if (slotted_) {
		slots_ = take_slots(q_, batch);
		batch = static_cast<int32>(slots_.size());
	}
	// 1. The claim, unless due scheduled tasks or expired leases wait to be
	// woken up (two index probes): the common case is this one statement.
	const bool none_due = batch > 0 && !q_.tasks_wait(now_, cursor_.wake_floor());
	if (none_due)
		claim_from(cursor_.ready_floor(), batch);
	if (claimed_ < static_cast<std::size_t>(batch) || (slotted_ && batch == 0)) {
		// 2. Wake-up, unless the probes found nothing to wake up by this
		// claim's `now`: the wake-up would update no row then (it is an
		// UPDATE of the queue table, the dearest statement of an empty
		// look). A due task committed since the probes' snapshot is claimed
		// by the next look, as one committed a moment later would be (a
		// waiter's next-due probe sees it).
		if (none_due)
			cursor_.woke(false);
		else
			wake(batch);
		if (slotted_ && batch == 0) {
			// every slot was taken: the wake-up may have freed some (expired leases)
			slots_ = take_slots(q_, requested);
			batch = static_cast<int32>(slots_.size());
		}
		// 3. The rest of the batch, now whatever waits (tasks locked by
		// another worker's wake-up must not stop this one), from the front
		// if tasks were made ready or a resumed scan came back short. After
		// no wake-up, a scan from where the first one started would find what
		// it found: only a resumed scan looks again, or a claim by turns over
		// the keys (fair, key_rate_limit) takes its next turn.
		bool from_front = cursor_.rescan_from_front(claimed_, static_cast<std::size_t>(batch));
		bool again = !none_due || from_front || q_.info().fair || q_.info().key_rate_limit > 0;
		if (again && claimed_ < static_cast<std::size_t>(batch))
			claim_from(from_front ? ClaimKey::front() : cursor_.ready_floor(),
			           batch - static_cast<int32>(claimed_));
	} else {
		cursor_.woke(false);
	}
	cursor_.cost(scanned_, claimed_ - claimed_before);
	cursor_.finish(last_);
	if (slotted_)
		fill_slots(q_, slots_, slot_ids_, slot_tokens_);
	if (rated_)
		give_back_rate_slots(q_, rate_slots, claimed_ - claimed_before);
	// a rollback of this claim makes its tasks ready again: it wakes waiters
	note_claimed(q_.name(), claimed_ - claimed_before);
}

} // namespace concurrency::queue

using namespace concurrency;
using namespace concurrency::queue;

namespace {

// The wait argument n of dequeue: NULL or zero (no wait), or positive; only
// where the snapshot moves between looks.
std::optional<Interval> wait_arg(FunctionCallInfo fcinfo, int n) {
	if (PG_NARGS() <= n || PG_ARGISNULL(n))
		return std::nullopt;
	Interval *wait = PG_GETARG_INTERVAL_P(n);
	if (wait->month == 0 && wait->day == 0 && wait->time == 0)
		return std::nullopt;
	Interval positive = positive_interval_arg(fcinfo, n, "wait");
	if (IsolationUsesXactSnapshot())
		throw Error(sqlstate::feature_not_supported,
		            "dequeue cannot wait in a REPEATABLE READ or SERIALIZABLE transaction",
		            "Its snapshot cannot move: tasks committed while it waited would stay invisible to it.",
		            "Call dequeue with wait in a READ COMMITTED transaction (the default), or without wait.");
	return positive;
}

// A distributed queue's claim on this node's shards (Citus): Claim on each
// shard's table in turn from claim_start (the shard that filled this
// backend's last claim, else the next one) until the batch is full; the
// first shard purges a chunk of its finished tasks, as a local dequeue does.
// Returns how many it claimed; none, with `visited` false, where the node
// holds no shard or its calls are routed. `every_shard`: the node holds all.
std::size_t claim_on_local_shards(Queue &q, int32 batch, TimestampTz now, const Interval &lease, Datum worker,
                                  bool worker_null, pg::ResultSet &out, bool &visited, bool &every_shard) {
	visited = every_shard = false;
	if (!distribution().shards_served_here(q))
		return 0;
	std::vector<int32> order; // the positions of this node's shards, in turn from the first
	{
		const Shards &shards = distribution().distributed_shards(q);
		const LocalShard *first = distribution().claim_start(q, shards, now);
		if (!first)
			return 0;
		every_shard = static_cast<int32>(shards.local.size()) == shards.count;
		std::size_t start = static_cast<std::size_t>(first - shards.local.data());
		order.reserve(shards.local.size());
		for (std::size_t i = 0; i < shards.local.size(); ++i)
			order.push_back(shards.local[(start + i) % shards.local.size()].position);
	}
	visited = true;
	std::size_t claimed = 0;
	for (std::size_t i = 0; i < order.size() && claimed < static_cast<std::size_t>(batch); ++i) {
		// a copy of the one shard: an invalidation while it is opened may
		// drop the cached list (a shard moved away meanwhile is passed over)
		const LocalShard *listed = distribution().distributed_shards(q).at(order[i]);
		if (!listed)
			continue;
		const LocalShard place = *listed;
		Queue shard(q.name(), place);
		Claim claim(shard, now, lease, worker, worker_null, out);
		claim.run(batch - static_cast<int32>(claimed));
		claimed += claim.claimed();
		if (claimed == static_cast<std::size_t>(batch))
			distribution().claim_ended(q, order[i], true, now);
		if (i == 0)
			maybe_purge(shard, now, /*distributed=*/false);
	}
	if (claimed < static_cast<std::size_t>(batch))
		distribution().claim_ended(q, -1, false, now);
	return claimed;
}

// How often a dequeue waiting on a distributed queue looks again without
// being woken: tasks enqueued on other nodes and due tasks are seen within it.
constexpr int64 distributed_wait_look_us = 1'000'000;

// The earliest time a scheduled task of the queue comes due, a lease
// expires or a schedule of the queue is due (nothing: none), which a waiter
// sleeps no longer than.
std::optional<TimestampTz> next_due(Queue &q) {
	std::optional<TimestampTz> schedule = next_schedule_time(q);
	static const Oid types[1] = {TIMESTAMPTZOID};
	Datum values[1] = {TimestampTzGetDatum(GetCurrentTimestamp())};
	if (q.run("next_due", q.sql().next_due(), 1, types, values) != 1)
		return schedule;
	bool isnull = false;
	Datum due = column(0, 1, &isnull);
	if (isnull)
		return schedule;
	return schedule ? std::min(*schedule, DatumGetTimestampTz(due)) : DatumGetTimestampTz(due);
}

// Reads pending invalidations before a look, so that a pause or resume
// committed since (pause_queue) counts for this very look: inside a long
// transaction that holds the queue's locks already, and between the looks of
// one waiting call, no lock taken would read them. With nothing pending this
// is a read of one shared counter.
void see_settings() {
	pg::guard([] { AcceptInvalidationMessages(); });
}

} // namespace

// A fresh snapshot made the active one for a scope (a look of a waiter that
// stopped holding its statement's snapshot's horizon: pg/horizon.hpp).
struct FreshSnapshot {
	FreshSnapshot() {
		pg::guard([] { PushActiveSnapshot(GetTransactionSnapshot()); });
	}
	~FreshSnapshot() {
		// (an error on the way: the transaction's abort clears the stack)
		if (std::uncaught_exceptions() == 0)
			PopActiveSnapshot();
	}
	FreshSnapshot(const FreshSnapshot &) = delete;
	FreshSnapshot &operator=(const FreshSnapshot &) = delete;
};

// concurrency.dequeue(queue, batch, lease, worker, wait) -> claimed tasks.
// With wait, a call that claims nothing sleeps until a commit makes tasks
// of the queue claimable (queue/wait.hpp), a scheduled task comes due or a
// lease expires, and looks again with a fresh snapshot, until wait has
// passed.
CONCURRENCY_FUNCTION(concurrency_dequeue) {
	QueueName name = queue_name(fcinfo);
	int32 batch = int32_arg(fcinfo, 1, "batch");
	if (batch < 1)
		throw Error(sqlstate::invalid_parameter_value, "batch must be at least 1");
	std::optional<Interval> lease_arg;
	if (!PG_ARGISNULL(2))
		lease_arg = positive_interval_arg(fcinfo, 2, "lease");
	Datum worker = PG_ARGISNULL(3) ? Datum(0) : PG_GETARG_DATUM(3);
	bool worker_null = PG_ARGISNULL(3);
	std::optional<Interval> wait = wait_arg(fcinfo, 4);
	TimestampTz now = clock_now();

	pg::ResultSet out = pg::materialize(fcinfo);
	pg::spi_connect();
	// One look: claims what it can, as the queue's owner. Without tasks,
	// *due is the queue's next due time.
	auto look = [&](std::optional<TimestampTz> *due) {
		see_settings();
		Queue q(name.view());
		AsRole as_owner = authorize(q, Permission::work, "dequeue");
		if (q.info().paused) // pause_queue: nothing until the resume wakes it
			return std::size_t(0);
		materialize_due(q, now); // schedules' due times (queue/schedule.hpp)
		Claim claim(q, now, lease_arg ? *lease_arg : q.info().lease, worker, worker_null, out);
		claim.run(batch);
		maybe_purge(q, now, /*distributed=*/false);
		if (due && claim.claimed() == 0) {
			*due = next_due(q);
			// held back by the rate limit: look again when its window opens
			if (claim.rate_limited())
				if (auto opens = rate_window_opens(q, clock_now()))
					*due = *due ? std::min(**due, *opens) : *opens;
			// ready tasks of keys held back by key_rate_limit: likewise
			if (auto opens = claim.key_window_opens())
				*due = *due ? std::min(**due, *opens) : *opens;
		}
		return claim.claimed();
	};
	// A claim of up to `wanted` tasks of distributed queue `q` (Citus:
	// src/queue/distribution.hpp), its rows into `rows`: this node's shards
	// first, then, without tasks there, the other nodes' shards.
	auto claim_distributed = [&](Queue &q, int32 wanted, pg::ResultSet &rows) {
		bool visited = false, every_shard = false;
		std::size_t claimed = claim_on_local_shards(q, wanted, now, lease_arg ? *lease_arg : q.info().lease,
		                                            worker, worker_null, rows, visited, every_shard);
		// a call routed here by another node claims from this node's shards only
		if (claimed > 0 || every_shard || citus::in_routed_call())
			return claimed;
		if (distribution().shards_served_here(q)) // the other nodes' shards, each node's on its node
			return static_cast<std::size_t>(distribution().dequeue_elsewhere(fcinfo, q, wanted, rows));
		if (!visited) // a chunk of a shard on some node
			maybe_purge(q, now, /*distributed=*/true);
		return static_cast<std::size_t>(distribution().dequeue_routed(fcinfo, rows));
	};
	// A look at a distributed queue. Its limits are decided where their
	// slots are, the coordinator (require_slots_here sent other nodes' calls
	// there), before the claim: at most as many tasks as the rate slots
	// (rate_limit) and the lease slots (max_leased) it takes allow, the lease
	// slots then filled with the tasks, unused rate slots given back. A call
	// routed to a node claims within the limits its caller decided.
	auto look_distributed = [&]() {
		see_settings();
		Queue q(name.view());
		AsRole as_owner = authorize(q, Permission::work, "dequeue");
		if (q.info().paused) // on every node: the coordinator copies the flag to each
			return std::size_t(0);
		materialize_due(q, now); // schedules' due times (queue/schedule.hpp)
		bool limited = q.info().rate_limit > 0 || q.info().max_leased > 0;
		if (!limited || citus::in_routed_call())
			return claim_distributed(q, batch, out);
		if (!distribution().shards_served_here(q, false)) // 0.2.0's routed SQL functions decide
			return static_cast<std::size_t>(distribution().dequeue_routed(fcinfo, out));
		int32 wanted = batch;
		RateSlots rate;
		if (q.info().rate_limit > 0) {
			rate = take_rate_slots(q, wanted, now, false);
			wanted = std::min(wanted, static_cast<int32>(rate.size()));
		}
		std::vector<int32> slots;
		if (q.info().max_leased > 0 && wanted > 0) {
			slots = distribution().take_lease_slots(q, wanted, now);
			wanted = std::min(wanted, static_cast<int32>(slots.size()));
		}
		std::vector<ClaimedLease> leases;
		if (wanted > 0) {
			SlotsDecided decided;
			std::function<void(const Datum *, const bool *)> tap = [&](const Datum *cols, const bool *) {
				leases.push_back(
				    {DatumGetInt64(cols[0]), DatumGetInt64(cols[1]), DatumGetTimestampTz(cols[5])});
			};
			pg::ResultSet tapped = out;
			tapped.tap = &tap;
			claim_distributed(q, wanted, tapped);
		}
		if (q.info().max_leased > 0)
			distribution().fill_lease_slots(q, slots, leases);
		if (q.info().rate_limit > 0)
			give_back_rate_slots(q, rate, leases.size());
		return leases.size();
	};
	bool distributed = false;
	{
		Queue q(name.view());
		AsRole as_owner = authorize(q, Permission::work, "dequeue");
		distributed = distribution().is_distributed(q.info().relid);
		if (distributed)
			distribution().require_slots_here(q, "dequeue", true);
	}
	if (!wait) {
		if (distributed)
			look_distributed();
		else
			look(nullptr);
		pg::spi_finish();
		return Datum(0);
	}
	Interval wait_for = *wait;
	TimestampTz deadline = pg::guard([&] {
		return DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval, TimestampTzGetDatum(now),
		                                               IntervalPGetDatum(&wait_for)));
	});
	// on the wait list before the first look: no commit from now on is missed
	QueueWait waiter(name.view());
	// A sleeping waiter need not hold the xmin horizon back where nothing
	// reads with its statement's snapshot (pg/horizon.hpp; found out before
	// its first sleep, not by calls that claim at once): every look after a
	// sleep runs under a fresh snapshot of its own.
	std::optional<bool> unpinned;
	bool slept = false;
	for (;;) {
		std::optional<TimestampTz> due;
		std::optional<FreshSnapshot> fresh;
		if (slept && *unpinned)
			fresh.emplace();
		std::size_t claimed = distributed ? look_distributed() : look(&due);
		fresh.reset();
		if (claimed > 0)
			break;
		now = clock_now();
		if (now >= deadline)
			break;
		// a distributed queue: commits on this node wake the waiter; what
		// other nodes' shards receive, and their due tasks, it sees when it
		// looks again, at least every distributed_wait_look_us
		if (distributed)
			due = now + distributed_wait_look_us;
		if (!unpinned)
			unpinned = !distributed && pg::only_call_holds_snapshot(fcinfo->flinfo->fn_oid);
		if (*unpinned)
			pg::stop_holding_horizon();
		TimestampTz until = due ? std::min(deadline, *due) : deadline;
		// Slept to the end of the wait, and no commit woke it: the call ends
		// without another look. What that look could find the caller's next
		// call finds at its first (a claim rolled back since the last look),
		// and an idle waiter looks once per call, not twice.
		if (waiter.sleep(now, until) && until == deadline && !distributed)
			break;
		slept = true;
		now = clock_now();
	}
	pg::spi_finish();
	return Datum(0);
}
