// What the rooms of the queue ask of a distributed queue (Citus), and
// what a distributed queue is made of as they see it. The distributed room
// (queue/distributed/) implements Distribution and registers it from
// _PG_init (distributed_init), so that the hall, the lifecycle and the graphs
// depend on this header only, never on that room: the arrow runs from the
// distributed room to the queue, not back. A local queue's call asks
// distribution().is_distributed once (one indirect call) and nothing else of
// it; the other operations are for distributed queues. Internal to src/queue.
#pragma once

#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pg/srf.hpp"
#include "queue/queue.hpp"
#include "queue/shard.hpp"

extern "C" {
#include "utils/timestamp.h"
}

namespace concurrency::queue {

// The shards of a distributed queue as this node sees them.
struct Shards {
	int32 count = 0;               // all shards of the queue
	std::vector<LocalShard> local; // those placed on this node, by position
	std::vector<int32> keys;       // every shard's shard_key, by position
	std::vector<int32> groups;     // the Citus group of every shard's node, by position
	// the transaction that wrote the queue's row of concurrency.distributed_queue,
	// where it was this backend's own when the shards were read
	TransactionId written_by = InvalidTransactionId;
	// every shard on this node has its key table's shard beside it
	bool keys_everywhere = true;
	// The shard on this node at `position`, or nullptr.
	const LocalShard *at(int32 position) const;
};

// While one lives, this backend has decided the lease slots (max_leased) of
// the queue calls it makes on shards: a claim has taken its slots, an
// acknowledgement has emptied those of its tasks (decide_lease_slots), and
// the calls on shards are then served as a call routed here is
// (shards_served_here with `slots`).
class SlotsDecided {
  public:
	SlotsDecided() { ++alive_; }
	~SlotsDecided() { --alive_; }
	SlotsDecided(const SlotsDecided &) = delete;
	SlotsDecided &operator=(const SlotsDecided &) = delete;
	// Whether one lives in this backend.
	static bool any() { return alive_ != 0; }

  private:
	static inline int alive_ = 0;
};

// A task a claim leased: what its lease slot records.
struct ClaimedLease {
	int64 task_id;
	int64 lease_token;
	TimestampTz lease_expires_at;
};

// The position of a task's shard: its id's low 10 bits.
inline int32 task_position(int64 task_id) {
	return static_cast<int32>(task_id & 1023);
}

// The distributed queue's operations, as the distributed room implements
// them.
class Distribution {
  public:
	virtual ~Distribution() = default;

	// The shards of distributed queue `q` (q.info().relid is its table), read
	// once per backend from Citus's metadata and concurrency.distributed_queue
	// and kept until a relcache invalidation of the table (Citus sends one when
	// a shard is placed, moved or dropped). Call while SPI is connected.
	virtual const Shards &distributed_shards(Queue &q) = 0;

	// Whether this node's C++ may act on the queue's shards itself, and route
	// what it cannot serve to the other nodes' C++, for a call that takes or
	// frees lease slots (`slots`: dequeue and the acknowledgements that end or
	// hand back a lease) or not: a queue whose key table's shards are beside its
	// shards, known to every node (the objects installed copy the catalog
	// there, and the queue was not distributed by the running transaction
	// after a parallel query), and for calls about
	// slots of a queue with max_leased, only once they are decided (a call
	// routed here, or SlotsDecided: the slots are the coordinator's).
	virtual bool shards_served_here(Queue &q, bool slots = true) = 0;

	// For a call about the leases of tasks `ids` (`n` of them) of queue `whole` (`what`, the
	// function's name): on a distributed queue with max_leased whose calls this
	// node's C++ serves, not a call routed here, refuses the call on a worker
	// node (require_slots_here: the slots are the coordinator's), empties the
	// slots of the tasks where `free` (an acknowledgement: complete, fail,
	// cancel, release and their batch forms; a lost lease rolls it back with the
	// call) and opens `decided`: the call is then served and routed as on any
	// distributed queue. A heartbeat (not `free`) leaves the slots alone: a
	// claim that finds a slot's lease end passed looks at the task's lease
	// (take_lease_slots). Nothing otherwise: a queue without max_leased (every
	// local queue among them) is let go here, without a call of the
	// distributed room, which has the rest (decide_slots).
	void decide_lease_slots(Queue &whole, const int64 *ids, int n, bool free, const char *what,
	                        std::optional<SlotsDecided> &decided) {
		if (whole.info().max_leased != 0)
			decide_slots(whole, ids, n, free, what, decided);
	}
	virtual void decide_slots(Queue &whole, const int64 *ids, int n, bool free, const char *what,
	                          std::optional<SlotsDecided> &decided) = 0;

	// A claim of distributed queue `whole` with max_leased, where its slots are
	// kept: locks up to `wanted` empty slots (FOR UPDATE SKIP LOCKED), or, where
	// none is, slots whose lease end has passed and whose task is no longer
	// leased under them once its shard is woken (lease_end_on_shard, claim.hpp,
	// on the shard's node), and returns their numbers.
	virtual std::vector<int32> take_lease_slots(Queue &whole, int32 wanted, TimestampTz now) = 0;
	// Writes the tasks the claim leased into its slots, one each, in order.
	virtual void fill_lease_slots(Queue &whole, const std::vector<int32> &slots,
	                              const std::vector<ClaimedLease> &leases) = 0;

	// For a call about tasks `ids` on a distributed queue: the queue's shard on
	// this node that holds all of them, or nullptr (the call is routed).
	virtual const LocalShard *local_shard_of(Queue &q, const int64 *ids, int n, bool slots = true) = 0;

	// For a call about tasks `ids` of queue `whole`: true where the call must be
	// routed (a distributed queue whose tasks are not all in one shard of this
	// node, or whose calls are routed); otherwise false, with `shard` opened on
	// the tasks' shard when the queue is distributed and left empty when not.
	// `what` (the function's name) is a call that frees or takes lease slots:
	// on a worker node it is refused for a queue with max_leased
	// (require_slots_here).
	virtual bool route_tasks(Queue &whole, const int64 *ids, int n, std::optional<Queue> &shard,
	                         const char *what, bool slots = true) = 0;

	// An acknowledgement of tasks `ids` (`n` of them) of queue `whole`
	// (`what`, the function's name: heartbeat, complete, fail, release,
	// cancel and their batch forms; `free` as for decide_lease_slots): on a
	// distributed queue, decide_lease_slots, then route_tasks, whose answer
	// it returns. A local queue's call asks is_distributed and nothing else:
	// false, `shard` left empty.
	bool route_acknowledgement(Queue &whole, const int64 *ids, int n, bool free, const char *what,
	                           std::optional<SlotsDecided> &decided, std::optional<Queue> &shard) {
		if (!is_distributed(whole.info().relid))
			return false;
		decide_lease_slots(whole, ids, n, free, what, decided);
		return route_tasks(whole, ids, n, shard, what);
	}

	// 0A000 for `what` on a worker node when the distributed queue has
	// max_leased, or for a `claim` (dequeue) rate_limit: its lease slots and its
	// rate slots are tables on the coordinator.
	virtual void require_slots_here(Queue &q, const char *what, bool claim = false) = 0;

	// The shard position of a concurrency_key or dedupe_key among `count`
	// shards, as concurrency_internal.distributed_key_position computes it.
	virtual int32 key_position(Datum key, int32 count) = 0;

	// The next of all the queue's shard positions (round-robin per backend),
	// for a task without keys on a node that holds none of them.
	virtual int32 next_position(const Shards &shards) = 0;

	// The next of this node's shards for a task without keys (round-robin per
	// backend), or nullptr when the node holds none.
	virtual const LocalShard *next_local_shard(const Shards &shards) = 0;

	// Where this backend's claim on `shards` of queue `whole` starts: the
	// shard whose tasks filled its last claim, for up to a second from the
	// first claim there, else the next of this node's shards in turn (and a
	// call routed here by another node, whose connection serves many
	// sessions, always the next in turn). The claim still goes on through
	// the node's other shards in turn until its batch is full, so that it
	// misses no ready task; staying spares a backend opening, planning and
	// caching every shard of the node. nullptr when the node holds none.
	virtual const LocalShard *claim_start(Queue &whole, const Shards &shards, TimestampTz now) = 0;
	// What a claim of queue `whole` found: its batch filled on the shard at
	// `position` (`full`), or not filled on any (then the next claim starts
	// at the next shard in turn).
	virtual void claim_ended(Queue &whole, int32 position, bool full, TimestampTz now) = 0;

	// Whether the queue whose table is `relid` is distributed. False at once
	// where Citus is not loaded; otherwise read from concurrency.distributed_queue
	// once per backend and table, until a relcache invalidation of the table.
	// Call while SPI is connected.
	virtual bool is_distributed(Oid relid) = 0;

	// This node's shards are written directly (SPI on the shard's table), where
	// Citus does not see it. Once this transaction has written here (it has a
	// transaction id), an empty write on a shard of this node made through
	// Citus, which runs it here, tells Citus that this node is written too: a
	// transaction that also writes on another node is then committed on both by
	// two-phase commit, not the other node first on its own. Once per
	// transaction; nothing on a node without shards of queue `whole`. Changes
	// SPI_tuptable.
	virtual void note_local_writes(Queue &whole) = 0;

	// Calls queue function concurrency.<function> (its SQL name) with `nargs`
	// arguments on the node that holds the queue's shard at `position`, in this
	// transaction: where the shard is on this node, as a plain call; elsewhere
	// through a Citus router query on that shard, whose only work is the call.
	// There the call finds its tasks in a shard of its own node and runs the
	// queue's C++ code on it, as any call made on that node would (a call routed
	// there acts on its node's shards only: citus::in_routed_call). The rows of
	// a set-returning function are added to `out`; otherwise the one value is
	// left in SPI_tuptable. Returns the number of rows. A call that `writes` is
	// made part of this transaction on that node, and committed with it (by
	// two-phase commit where another node is written too). Call while SPI is
	// connected.
	virtual uint64 call_on_shard(Queue &whole, int32 position, const char *function, int nargs,
	                             const Oid *types, const Datum *values, const char *nulls, bool set_returning,
	                             bool writes, const char *schema = "concurrency") = 0;

	// The caller's own call made on the node of the queue's shard at `position`
	// (call_on_shard) for the tasks `members` of its batch only: its array
	// arguments `split` (one element per task; a NULL array stays NULL) cut down
	// to the elements at those indexes, in that order. Returns the number of
	// rows, left in SPI_tuptable.
	virtual uint64 call_subset(FunctionCallInfo fcinfo, Queue &whole, int32 position,
	                           const std::vector<int> &members, std::initializer_list<int> split,
	                           bool set_returning, int max_args = -1) = 0;

	// A batch call about tasks `ids` (argument 1) that this node cannot serve
	// alone: the caller's own call made once per shard that holds some of them,
	// in shard order (so that two batches lock their tasks in one order), each
	// on its shard's node (call_on_shard), with the elements of the array
	// arguments `split` (one element per task, in task order; a NULL array stays
	// NULL) that belong to that shard. `each(n)` is called after each shard's
	// call with its n rows in SPI_tuptable. An id that names no shard of the
	// queue raises CE001 (`acks`: the task does not exist) or is left out.
	// The first lost lease raises CE001 for its shard, and the error undoes every
	// shard's part (one transaction).
	virtual void route_batch(FunctionCallInfo fcinfo, Queue &whole, const std::vector<int64> &ids,
	                         std::initializer_list<int> split, bool set_returning, bool acks,
	                         const std::function<void(uint64)> &each, int max_args = -1) = 0;

	// The caller's own call (its SQL function, all of its arguments, or the
	// first `max_args`) made on the node of the queue's shard at `position`
	// (call_on_shard), its result returned as the caller's: the scalar, or the
	// rows added to `out`. Ends the caller's SPI connection.
	virtual Datum route_call(FunctionCallInfo fcinfo, Queue &whole, int32 position,
	                         const pg::ResultSet *out = nullptr, int max_args = -1, bool writes = true) = 0;

	// For a call about tasks `ids` that the caller could not serve on this node:
	// the position of their shard when they are all in one shard of the queue
	// (route_call takes it there), or nothing (tasks of several shards, an id
	// that names no shard, or a queue whose calls still go through its SQL
	// functions: !shards_served_here). Refuses (55000) a call that Citus routed
	// to this node for tasks whose shard is not here: a shard that moved since
	// the caller looked.
	virtual std::optional<int32> routed_position(Queue &whole, const int64 *ids, int n,
	                                             bool slots = true) = 0;

	// A call about the whole of a distributed queue served here (purge,
	// retry_dead): `local` runs on each of this node's shards, and the caller's
	// own call is made once on each other node that holds shards of the queue,
	// where it runs `local` on that node's shards (a call routed to a node stays
	// there). Returns the sum of `local`'s results and the other nodes' (int8).
	virtual int64 on_every_node(FunctionCallInfo fcinfo, Queue &whole,
	                            const std::function<int64(Queue &)> &local) = 0;

	// route_batch for a function that returns how many tasks it acted on: the
	// sum over the shards.
	virtual int64 route_batch_count(FunctionCallInfo fcinfo, Queue &whole, const std::vector<int64> &ids,
	                                std::initializer_list<int> split, bool acks) = 0;

	// Between a package update and ALTER EXTENSION … UPDATE, whose objects are
	// still 0.2.0's (their worker nodes know no queue): runs 0.2.0's
	// concurrency.<function>(the caller's arguments; the first `max_args` of
	// them when given), which routes each statement to one shard, and returns
	// its result as the caller's: the scalar result, or the rows into `out` for
	// a set-returning caller (columns that the distributed function does not
	// return are NULL). Ends the caller's SPI connection. With 0.3.0's objects,
	// which have no such function, 0A000 (refuse_not_served_here): the C++
	// serves every call where this node sees the queue's tables.
	virtual Datum forward_distributed(FunctionCallInfo fcinfo, const char *function,
	                                  const pg::ResultSet *out = nullptr, int max_args = -1) = 0;

	// dequeue(queue, batch, lease, worker) — the caller's first four arguments,
	// `batch` for its second — made on each other node that holds shards of queue `q`, one after another
	// (starting at a different one at each call), until one claims tasks there:
	// its rows are added to `out`. Returns how many. SPI stays connected.
	virtual uint64 dequeue_elsewhere(FunctionCallInfo fcinfo, Queue &q, int32 batch,
	                                 const pg::ResultSet &out) = 0;

	// 0.2.0's concurrency.distributed_dequeue with the caller's (dequeue's)
	// first four arguments, as forward_distributed: a routed claim from the
	// queue's shards wherever they are, its rows added to `out`. Returns how
	// many; SPI stays connected.
	virtual uint64 dequeue_routed(FunctionCallInfo fcinfo, const pg::ResultSet &out) = 0;

	// enqueue(…, after) and enqueue_batch(…, after) on distributed queue `q`:
	// the position of the shard of the first parent in `after`, where a new task
	// without a key goes (a keyed one goes to its key's shard; parents on other
	// shards are told of it by messages, dependencies.hpp). 22023 for an id that
	// names no shard of the queue (no such task).
	virtual int32 parents_position(Queue &q, const std::vector<int64> &after) = 0;

	// After alter_queue made the slot table of key_rate_limit of distributed
	// queue `queue` (rk_<queue>): distributes it beside the queue's shards
	// (concurrency_internal.distribute_key_rate_slots). Call while SPI is
	// connected, as the owner of the queue's table, on the coordinator.
	virtual void distribute_key_rate_slots(const std::string &queue) = 0;

	// For create_queue(…, distributed => true), before it changes anything:
	// 0A000 unless this server is a Citus coordinator.
	virtual void require_coordinator(const std::string &queue) = 0;

	// After a change of a distributed queue's catalog rows on the coordinator:
	// concurrency_internal.distributed_sync_catalog(queue) copies them to every other node
	// in this transaction. Call while SPI is connected, as the catalog's owner.
	virtual void sync_catalog(const std::string &queue) = 0;

	// 0A000 for `what` (alter_queue, drop_queue, grant_queue, …: the function's
	// name) of a distributed queue on a worker node: the coordinator keeps its
	// catalog (`catalog`) or its lease slots. The HINT names the coordinator.
	virtual void require_coordinator_for(std::string_view queue, const char *what, bool catalog = true) = 0;

	// Makes the queue distributed: concurrency.distribute_queue(queue) with its
	// default shard count (a no-op for a queue that is distributed already).
	// Call while SPI is connected.
	virtual void distribute(const std::string &queue) = 0;

	// After alter_queue changed the limits of a distributed queue: when
	// key_limit changed, rebalance_keys; when max_leased is set (0: none),
	// concurrency_internal.distributed_resize_slots gives the queue that many
	// lease slots. Call while SPI is connected.
	virtual void distributed_limits(const std::string &queue, bool key_limit_changed,
	                                std::optional<int32> max_leased) = 0;

	// One chunk of the purge that queue calls do, on distributed queue `whole`:
	// Queue::purge on the next shard (round-robin), on this node or on the
	// shard's node through a routed call of
	// concurrency_internal.distributed_purge_chunk. Returns how many finished
	// tasks it deleted. Call while SPI is connected.
	virtual uint64 distributed_purge_chunk(Queue &whole, int32 chunk, TimestampTz now) = 0;
};

// 0A000 for `what` (a function, with the argument that needs it) on
// distributed queue `queue` where this node's C++ does not serve it: the
// extension's objects are older than its module, or the other nodes do not
// see every table of the queue yet (distributed in this transaction after a
// parallel query, its shards on several connections per node).
[[noreturn]] void refuse_not_served_here(std::string_view queue, const char *what);

// 0A000 for enqueue_graph with tasks in distributed queue `queue` and in
// another queue, or a parent in another queue (`queue`: a distributed one).
[[noreturn]] void refuse_graph_distributed(std::string_view queue);
// 0A000 for enqueue_graph whose tasks' keys are in several shards of
// distributed queue `queue`.
[[noreturn]] void refuse_graph_shards(std::string_view queue);

// 0A000 for key_rate_limit beside rate_limit on distributed queue `queue`.
[[noreturn]] void refuse_key_rate_distributed(std::string_view queue,
                                              const char *hint = "Keep one of the two limits.");

// The distributed room's Distribution, registered from _PG_init
// (set_distribution, by distributed_init) before any queue call.
extern Distribution *registered_distribution;
inline Distribution &distribution() {
	return *registered_distribution;
}
void set_distribution(Distribution &implementation);

} // namespace concurrency::queue
