// Schedules without any dequeue: where the module is preloaded, the module's
// background process (bgworker/host.hpp) has the schedule launcher as a
// tenant, which launches, at each database's next due time, a short-lived background
// worker connected to that database (the schedule runner) that enqueues the
// due times of its schedules exactly as a dequeue would (materialize_due:
// row locks make each due time one task, whoever gets there first) and
// reports the database's next due time in shared memory before it exits.
//
// What a runner learns is kept per database in shared memory: the next due
// time of its schedules. A write to concurrency.schedule (schedule(),
// unschedule(), a restore, a change by hand) asks for a runner at its commit;
// at server start every database gets one. A database whose setting
// concurrency.schedule_runner is off (ALTER DATABASE … SET) is left to its
// dequeue calls. Internal to src/queue.
#pragma once

namespace concurrency::queue {

// Defines concurrency.schedule_runner and, when preloading, requests the
// shared memory, registers the commit callback and adds the launcher to the
// background host's tenants (from _PG_init).
void schedule_runner_init();

// The launcher, a tenant of the background host (connected to no database):
// call once at its start; reads pg_database and asks for a runner in every
// database that accepts connections (templates aside). Throws on errors.
void schedule_launcher_start();

// For the launcher's loop: starts a runner for each database whose next due
// time has come (one at a time per database). Returns how long the launcher
// may sleep before it must call again, in milliseconds (-1: until its latch
// is set: a commit asking for a runner, or a runner that stopped). Never
// throws.
long schedule_launcher_tick() noexcept;

// For the launcher at exit: no latch to set any more.
void schedule_launcher_stop() noexcept;

// concurrency.queue_changed() firing on concurrency.schedule: asks for a
// runner in this database at commit (not for the writes of a runner or of a
// dequeue's own materialization, which only move due times later).
void schedule_changed_in_transaction();

// A queue created (an insert into concurrency.queue): asks at commit for a
// runner in this database where none is due there (so that a database whose
// first queue this is gets its counts sampled: stats_history.hpp), and
// nothing where one is: no background worker is started, and only the
// spinlock of the shared state is taken, once, at commit.
void runner_wanted_in_transaction();

// While alive, writes to concurrency.schedule ask for no runner (a
// materialization in progress).
class QuietSchedules {
  public:
	QuietSchedules();
	~QuietSchedules();
	QuietSchedules(const QuietSchedules &) = delete;
	QuietSchedules &operator=(const QuietSchedules &) = delete;

  private:
	bool previous_;
};

} // namespace concurrency::queue
