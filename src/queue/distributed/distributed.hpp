// Distributed queues on Citus: the C++ side. A queue made distributed by
// concurrency.distribute_queue (src/sql/41_queue_distributed.sql) keeps its
// SQL functions. On a node that holds shards of the queue, a call runs the
// queue's own C++ code against the shard's table (Queue(name, LocalShard)):
// dequeue claims from this node's shards first, enqueue puts a task without
// keys into one of them, and a call about tasks whose shard is here acts on
// it. What must reach another node's shard is handed to the SQL function
// concurrency_internal.distributed_<op>, which sends each statement to one shard.
#pragma once

#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pg/srf.hpp"
#include "pg/spi.hpp"
#include "queue/distribution.hpp"
#include "queue/queue.hpp"
#include "queue/shard.hpp"

extern "C" {
#include "utils/timestamp.h"
}

namespace concurrency::queue {

// Empties the lease slots of tasks `ids` of distributed queue `whole`
// (max_leased; concurrency_internal.distributed_free_slots), in the caller's
// transaction.
void free_lease_slots(Queue &whole, const std::vector<int64> &ids);

// From _PG_init: registers this room's Distribution (queue/distribution.hpp),
// which the queue's own code asks, and what grant_queue and revoke_queue ask
// (permissions.hpp, PermissionHooks).
void distributed_init();

// Adds the `n` rows in SPI_tuptable to `out` (columns beyond SPI_tuptable's are NULL).
void add_rows(const pg::ResultSet &out, uint64 n);

// After key_limit of distributed queue `whole` changed to `key_limit` (0:
// none): admits and holds back the tasks of every key as a local queue's
// alter_queue does (KeySql::rebalance), on each shard of this node with its
// key table's shard locked, then on each other node's shards through a
// routed call of concurrency_internal.distributed_rebalance (not from a call
// routed here). The limit travels with the call: a node need not see the
// catalog's new row on the connection that carries it.
void rebalance_keys(Queue &whole, int32 key_limit, TimestampTz now);

// The operations of Distribution (queue/distribution.hpp), which documents them:
const Shards &distributed_shards(Queue &q);
bool shards_served_here(Queue &q, bool slots = true);
void decide_lease_slots(Queue &whole, const int64 *ids, int n, bool free, const char *what,
                        std::optional<SlotsDecided> &decided);
std::vector<int32> take_lease_slots(Queue &whole, int32 wanted, TimestampTz now);
void fill_lease_slots(Queue &whole, const std::vector<int32> &slots, const std::vector<ClaimedLease> &leases);
const LocalShard *local_shard_of(Queue &q, const int64 *ids, int n, bool slots = true);
bool route_tasks(Queue &whole, const int64 *ids, int n, std::optional<Queue> &shard, const char *what,
                 bool slots = true);
void require_slots_here(Queue &q, const char *what, bool claim = false);
int32 key_position(Datum key, int32 count);
int32 next_position(const Shards &shards);
const LocalShard *next_local_shard(const Shards &shards);
const LocalShard *claim_start(Queue &whole, const Shards &shards, TimestampTz now);
void claim_ended(Queue &whole, int32 position, bool full, TimestampTz now);
bool is_distributed(Oid relid);
void note_local_writes(Queue &whole);
uint64 call_on_shard(Queue &whole, int32 position, const char *function, int nargs, const Oid *types,
                     const Datum *values, const char *nulls, bool set_returning, bool writes,
                     const char *schema = "concurrency");
uint64 call_subset(FunctionCallInfo fcinfo, Queue &whole, int32 position, const std::vector<int> &members,
                   std::initializer_list<int> split, bool set_returning, int max_args = -1);
void route_batch(FunctionCallInfo fcinfo, Queue &whole, const std::vector<int64> &ids,
                 std::initializer_list<int> split, bool set_returning, bool acks,
                 const std::function<void(uint64)> &each, int max_args = -1);
Datum route_call(FunctionCallInfo fcinfo, Queue &whole, int32 position, const pg::ResultSet *out = nullptr,
                 int max_args = -1, bool writes = true);
std::optional<int32> routed_position(Queue &whole, const int64 *ids, int n, bool slots = true);
int64 on_every_node(FunctionCallInfo fcinfo, Queue &whole, const std::function<int64(Queue &)> &local);
int64 route_batch_count(FunctionCallInfo fcinfo, Queue &whole, const std::vector<int64> &ids,
                        std::initializer_list<int> split, bool acks);
Datum forward_distributed(FunctionCallInfo fcinfo, const char *function, const pg::ResultSet *out = nullptr,
                          int max_args = -1);
uint64 dequeue_elsewhere(FunctionCallInfo fcinfo, Queue &q, int32 batch, const pg::ResultSet &out);
uint64 dequeue_routed(FunctionCallInfo fcinfo, const pg::ResultSet &out);
int32 parents_position(Queue &q, const std::vector<int64> &after);
void distribute_key_rate_slots(const std::string &queue);
void require_coordinator(const std::string &queue);
void sync_catalog(const std::string &queue);
void require_coordinator_for(std::string_view queue, const char *what, bool catalog = true);
void distribute(const std::string &queue);
void distributed_limits(const std::string &queue, bool key_limit_changed, std::optional<int32> max_leased);
uint64 distributed_purge_chunk(Queue &whole, int32 chunk, TimestampTz now);

} // namespace concurrency::queue
