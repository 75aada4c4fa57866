// The pure rules of run_transaction and run_ddl (no PostgreSQL headers,
// unit-tested in test/unit/transactions_test.cpp): which errors each one
// retries, how long it waits between attempts, the isolation level names,
// and for run_ddl the account of who stood in the way — when to report a
// blocker again, when to stop waiting politely and queue (bounded), whom to
// signal, and who was in the way longest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/backoff.hpp"

namespace concurrency::transactions {

// --- run_transaction -------------------------------------------------------

// The value for transaction_isolation from a caller's spelling ("read
// committed", "SERIALIZABLE", " Repeatable  Read "): nothing when it is none
// of PostgreSQL's four levels.
std::optional<std::string> isolation_setting(std::string_view text);

// 40001 (serialization failure) and 40P01 (deadlock): the attempt was rolled
// back whole, so running it again is safe.
bool transaction_retryable(std::string_view sqlstate);

// 10 ms, doubling, at most 1 s, each wait scaled into [1/2, 1] at random so
// that the sessions that collided do not collide again.
BackoffPolicy transaction_backoff();

// --- run_ddl ---------------------------------------------------------------

// 55P03 (a lock not obtained within lock_timeout) and 40P01 (deadlock).
bool ddl_retryable(std::string_view sqlstate);

// 50 ms, doubling, at most 1 s (or lock_timeout, if shorter but at least 50
// ms): how long it waits, without queueing, before looking again.
BackoffPolicy ddl_backoff(std::int64_t lock_timeout_us);

// The wait before the next attempt: the backoff delay, cut to what is left
// before `deadline_us` (never negative).
std::int64_t wait_before_next(std::int64_t delay_us, std::int64_t now_us, std::int64_t deadline_us);

// One session seen in the way (holding, or queued ahead for, a lock that
// conflicts with the one wanted), as pg_stat_activity shows it to the caller.
struct Blocker {
	int pid = 0;
	std::string application;
	std::optional<std::string> state; // none: not visible to the caller
	std::optional<double> xact_age_s; // age of its transaction, when visible
	std::string query;                // as pg_stat_activity shows it (masked text included)
	std::string relation;             // the relation it is in the way on
	std::string mode;                 // the lock mode it holds or waits for
	bool granted = true;              // false: queued ahead of us
};

// 'pid 4711 (application "psql", state "idle in transaction", transaction
// open for 8.2 s, query "SELECT 1") holds AccessShareLock on "public"."t"'
std::string describe_blocker(const Blocker &b);

// How run_ddl's next attempt takes its locks.
enum class Approach {
	conditional, // try each lock without waiting; when one is taken, do not queue
	queue,       // wait in the lock queue, for at most lock_timeout
};

// What an attempt found when it could not get a lock: how many attempts in
// a row lost, and whether the sessions in the way (if any) look short-lived.
// With nobody in the way (they finished while we looked) or with a stream
// of short holders that keeps winning, queueing costs others at most
// lock_timeout and ends the starvation; with a long holder (an idle
// transaction, a long query), queueing would only stall everyone behind us.
Approach next_approach(int consecutive_losses, bool anybody_in_the_way, bool all_short_lived);
inline constexpr int losses_before_queueing = 3;

// Whether `b` is short-lived enough for queueing: not idle in a transaction,
// and in its transaction (or, when that is not visible, in our way) for less
// than `long_us`.
bool short_lived(const Blocker &b, std::int64_t seen_for_us, std::int64_t long_us);

// What to do to a blocker once terminate_blockers_after has passed.
enum class Signal { none, cancel, terminate };
// Idle in transaction (or its state not visible): terminate, since cancelling
// an idle session does nothing; active or waiting: cancel its query.
Signal signal_for(const Blocker &b);

// Everyone seen in the way during one run_ddl call.
class BlockerLog {
  public:
	explicit BlockerLog(std::int64_t notice_interval_us) : notice_interval_us_(notice_interval_us) {}

	// Records one look at the sessions in the way at `now_us`, and returns
	// the positions (in `seen`) of those due a NOTICE: never reported, or
	// last reported at least notice_interval ago. A pid absent from a look
	// counts as gone: if it shows up again, its time in the way restarts.
	std::vector<std::size_t> observe(const std::vector<Blocker> &seen, std::int64_t now_us);

	// How long `pid` has been in the way without a break, as of the last look.
	std::int64_t seen_for_us(int pid) const;

	// True when every session of the last look is short-lived (see short_lived).
	bool all_short_lived(std::int64_t long_us) const;
	bool anybody_in_last_look() const { return !last_look_.empty(); }
	const std::vector<Blocker> &last_look() const { return last_look_; }

	// "pid 4711 (…) for 9 min 58 s; pid 4712 (…) for 3 s": the `n` sessions
	// that were in the way longest (in total), for the final error.
	std::string longest(std::size_t n) const;

  private:
	struct Entry {
		Blocker last;
		std::int64_t since_us = 0; // start of the current unbroken sighting
		std::int64_t last_seen_us = 0;
		std::int64_t total_us = 0; // closed sightings
		std::optional<std::int64_t> last_notice_us;
		bool in_last_look = false;
	};
	std::int64_t notice_interval_us_;
	std::map<int, Entry> entries_;
	std::vector<Blocker> last_look_;
};

// The DETAIL of the error when run_ddl gives up, and the NOTICE on success.
std::string give_up_detail(int attempts, double waited_s, const std::string &longest_blockers);
std::string success_notice(int attempts, double waited_s);

} // namespace concurrency::transactions
