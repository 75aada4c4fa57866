// The task queue's PostgreSQL side: what a backend remembers about each
// queue (queue_cache.cpp), and an open queue, which runs its statements
// (queue.cpp). Internal to src/queue.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/names.hpp"
#include "queue/args.hpp"
#include "queue/claim_cursor.hpp"
#include "queue/queue_sql.hpp"
#include "pg/datum.hpp"
#include "pg/spi.hpp"

extern "C" {
#include "utils/acl.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"
}

namespace concurrency::queue {

struct DirectClaim; // claim_direct.cpp
struct LocalShard;  // shard.hpp

// Longest cache key: a queue name, or a queue name, \x1f and a shard id.
inline constexpr std::size_t max_queue_key_bytes = max_queue_name_bytes + 1 + 20;

// What a backend remembers about one queue, in a hash table of its own
// memory context, keyed by name. Valid until an invalidation says otherwise:
// the queue's table changed (dropped, re-created, renamed, GRANT/REVOKE: a
// relcache invalidation of its OID), the catalog concurrency.queue changed
// (its statement trigger sends a relcache invalidation of the catalog), role
// membership changed (for the cached privileges), or the invalidation queue
// overflowed. Then the next call looks the queue up and reads its settings
// again; while valid, a call costs one hash lookup.
struct QueueInfo {
	char key[max_queue_key_bytes + 1]; // hash key: must come first
	char name[max_queue_name_bytes + 1];
	bool valid;
	// the table whose rows this entry's statements touch: the queue's own,
	// or (shard_id not 0) one shard of a distributed queue on this node
	Oid relid;
	int64 shard_id;
	char shard_relname[NAMEDATALEN];
	char key_relname[NAMEDATALEN];      // the key table's shard beside it ("" if none)
	char key_rate_relname[NAMEDATALEN]; // the shard of key_rate_limit's slots beside it ("" if none)
	int32 shard_key, shard_position, shard_group;
	Oid owner; // of the queue's table
	// its partial indexes of scheduled tasks and of leases, probed by
	// tasks_wait before each claim (InvalidOid until the first probe)
	Oid scheduled_index;
	Oid leased_index;
	// its partial index of finished tasks, probed by purge before its
	// statement (InvalidOid until the first purge; a shard's is not probed)
	Oid finished_index;
	// its ready index, its fair index (InvalidOid where it has none) and the
	// lease-token sequence, for the claim without the executor
	// (claim_direct.hpp; InvalidOid until the first claim: claim_relations),
	// and what that claim keeps about the table (nullptr until then)
	Oid ready_index;
	Oid fair_index;
	Oid token_sequence;
	DirectClaim *direct;
	Interval lease;
	int32 max_attempts;
	// settings that may be absent (NULL in concurrency.queue: false / 0)
	bool has_retain;
	Interval retain;
	int32 key_limit;
	int32 max_leased;
	// pause_queue: no claims while set
	bool paused;
	// at most rate_limit claims in any rate_period (0: no limit; rate.hpp)
	int32 rate_limit;
	Interval rate_period;
	// alter_queue(…, fair => true): claims rotate among keys (fair.hpp)
	bool fair;
	// at most key_rate_limit claims of each concurrency key in any
	// key_rate_period (0: no limit; rate.hpp); such a queue's claims walk
	// its keys in turn, as a fair queue's do
	int32 key_rate_limit;
	Interval key_rate_period;
	// the table has the columns of dependencies and task_dependency exists
	// (QueueSql::set_links): not before the update from 0.2.0
	bool links;
	// the table has after_ends, the mark of a finally-child (added by the
	// update from 0.3.0): without it no task of the queue is one
	bool after_ends;
	// when this backend runs its next purge chunk of the queue
	// (lifecycle/purge.hpp: maybe_purge)
	TimestampTz next_purge;
	ClaimCursor cursor;
	HorizonSampler horizon;
	// the hot statements, prepared on first use and kept (SPI_keepplan)
	SPIPlanPtr plans[static_cast<int>(QueueStatement::count_)];
	// privileges of acl_role on the table: those in acl_checked were looked
	// up, those in acl_granted are held
	Oid acl_role;
	AclMode acl_checked;
	AclMode acl_granted;
};

// How run_internal runs a statement: on the statement's own snapshot or the
// latest committed state (whatever the isolation level), and as the calling
// role or as the owner of the queue's table (for its internal side tables).
enum class Access { caller, latest, owner, owner_latest };

// An open queue for the duration of one function call (SPI connected).
class Queue {
  public:
	// Looks the queue up (42704 if it does not exist) and loads its settings
	// when this backend has no valid copy of them.
	explicit Queue(std::string_view name);
	// The same queue's shard `shard`, on this node (Citus): every statement
	// of this Queue touches that shard's table only.
	Queue(std::string_view name, const LocalShard &shard);
	bool on_shard() const { return info_->shard_id != 0; }

	std::string_view name() const { return {info_->name}; }
	// The queue's SQL, built when first asked for (statements are prepared
	// once per backend; their text is not needed on later calls).
	const QueueSql &sql() const;
	QueueInfo &info() { return *info_; }
	const QueueInfo &info() const { return *info_; }
	// Where this Queue's shard is (on_shard), for the statements of the side
	// tables beside it (flow/keys.hpp: key_sql, flow/rate.hpp: key_rate_sql).
	ShardPlacement placement() const;
	// placement(), once this shard's side table `relname` (info().key_relname
	// or key_rate_relname) is known on this node: 42704 naming `what` (e.g.
	// "the key table") when it is not.
	ShardPlacement side_table_placement(const char *relname, std::string_view what) const;

	// Runs hot statement `s` of this queue, prepared on first use in this
	// backend and kept. Returns SPI_processed; rows are in SPI_tuptable.
	uint64 run(QueueStatement s, int nargs, const Oid *types, const Datum *values,
	           const char *nulls = nullptr);

	// Runs statement `op` with text `sql`, prepared on first use in this
	// backend and kept under a string key (for statements off the hot path).
	uint64 run(const char *op, const std::string &sql, int nargs, const Oid *types, const Datum *values,
	           const char *nulls = nullptr);

	// Runs statement `op` (kept by string key) with `access`.
	uint64 run_internal(const char *op, const std::string &sql, int nargs, const Oid *types,
	                    const Datum *values, const char *nulls, Access access);

	// Raises CE001 for task `task_id` after a statement under a lease token
	// found nothing, with what became of the task.
	[[noreturn]] void lease_lost(int64 task_id);

	// Whether a scheduled task due at `now` or a lease expired by `now`, at
	// or after `floor`, waits for dequeue's wake-up step: the first entry of
	// each partial index in that range that the active snapshot sees. Two
	// index probes without the executor (a plan with these probes as
	// subqueries cost more to start than the claim itself).
	bool tasks_wait(TimestampTz now, TimestampTz floor);

	// Deletes up to `chunk` done or cancelled tasks whose retention has
	// passed (on a queue that retains none: those finished more than
	// concurrency.result_retention ago, or all when `asked` — purge() —,
	// except a cancelled task whose holder's lease still runs). Returns how
	// many.
	uint64 purge(TimestampTz now, int32 chunk, bool asked = false);

  private:
	QueueInfo *info_;
	void open(const char *key, std::string_view name, const LocalShard *shard);
	mutable std::optional<QueueSql> sql_;
	uint64 execute(SPIPlanPtr plan, const Datum *values, const char *nulls);
};

// Runs `plan` as `role` (InvalidOid: the current user), on the latest
// committed state when `latest` (whatever the isolation level), else on the
// statement's own snapshot. Returns SPI_processed.
uint64 run_plan_as(SPIPlanPtr plan, const Datum *values, const char *nulls, Oid role, bool latest);

// Oid of relation concurrency.<relname>, or InvalidOid.
Oid concurrency_relid(const std::string &relname);

// The OID of the relation of role `role` (an index, or the identity
// sequence) of table `table` of `queue`, whose OID is `table_relid`, under
// either name it may have (relation_names.hpp: role first, or table first
// where it was made before 0.4.0); InvalidOid where the table has none. A
// relation of that name that is not the table's (the table of another
// queue) is not it.
Oid derived_relid(Oid table_relid, QueueTable table, std::string_view queue, Role role);
// The name (unquoted) of that relation: the name it has (table first where
// it was made before 0.4.0), or, where the table has none (yet), the name
// it gets (concurrency_internal.queue_relation_name, and the DDL of
// distributed queues).
std::string derived_relation_name(QueueTable table, std::string_view queue, Role role);

// How the relations made now are named (SPI connected): role first, unless
// the extension's objects are older than 0.4.0 (the module updated, ALTER
// EXTENSION … UPDATE not yet run), whose SQL (distribute_queue) names the
// indexes table first: then as they did.
Naming naming_of_new_relations();

// The prefix of the keys of the plans that Queue::run_internal keeps for
// the queue (or shard) of cache key `key`: "queue:<key>\x1f".
std::string plan_prefix(std::string_view key);

// For a per-backend cache of what one catalog table of the extension says
// (concurrency.<relname>): a generation counter bumped by every relcache
// invalidation of that table (its statement trigger sends one, also this
// backend's own changes at their command's end and at a rollback), of every
// relation, or of any relation while the table is not known (an update may
// just have created it). An entry stamped with current() before it was
// read is stale once the counter moved. Objects of static storage only: the
// callback (registered by start(), from _PG_init) keeps `this`.
class TableGeneration {
  public:
	explicit TableGeneration(const char *relname) : relname_(relname) {}
	void start();
	std::uint64_t current() const { return generation_; }
	// The table's OID, looked up again after an invalidation of it;
	// InvalidOid where the extension's objects predate it.
	Oid relid();

  private:
	static void changed(Datum arg, Oid relid);
	const char *relname_;
	std::uint64_t generation_ = 1;
	Oid relid_ = InvalidOid;
};
// The clock, read once per call of a task function and passed to its
// statements: a deadline computed from now() would be as old as the
// transaction.
TimestampTz clock_now();
// The owner of relation `relid` (from the syscache).
Oid relation_owner(Oid relid);

// CE001 for an acknowledgement of task `task_id` of `queue` that does not
// exist (any more).
[[noreturn]] void task_gone(std::string_view queue, int64 task_id);

// Oid of concurrency."q_<queue>", or InvalidOid.
Oid queue_relid(std::string_view queue);

// Looks up the ready index, the fair index and the lease-token sequence of
// the claim without the executor, once per cache entry (reset with the
// other OIDs when the entry is revalidated). False when the ready index or
// the sequence is missing.
bool claim_relations(QueueInfo &info);

// Forgets this backend's plans and settings of `queue` (after DROP).
void forget_queue(std::string_view queue);

// Registers the invalidation callbacks of the cache (from _PG_init).
// `forget_direct_claim` frees what the claim without the executor keeps of
// an entry (QueueInfo::direct: the lifecycle room's claim_direct.hpp), on
// every revalidation of the entry and when it is forgotten, inside pg::guard.
void cache_init(void (*forget_direct_claim)(QueueInfo &info));

// The queue's functions read arguments, run statements and read columns with
// the border's helpers (src/pg).
using pg::column;
using pg::execute;
using pg::int32_arg;
using pg::int64_arg;
using pg::int64_column;

} // namespace concurrency::queue
