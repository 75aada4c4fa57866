// The distributed room's side of queue/distribution.hpp: its Distribution,
// whose operations are this room's functions (distributed.hpp), and
// distributed_init, which registers it and the permission hooks from
// _PG_init.
#include "queue/distributed/distributed.hpp"

#include "queue/permissions.hpp"

namespace concurrency::queue {

namespace {

class CitusDistribution final : public Distribution {
  public:
	const Shards &distributed_shards(Queue &q) override { return queue::distributed_shards(q); }
	bool shards_served_here(Queue &q, bool slots) override { return queue::shards_served_here(q, slots); }
	void decide_slots(Queue &whole, const int64 *ids, int n, bool free, const char *what,
	                  std::optional<SlotsDecided> &decided) override {
		queue::decide_lease_slots(whole, ids, n, free, what, decided);
	}
	std::vector<int32> take_lease_slots(Queue &whole, int32 wanted, TimestampTz now) override {
		return queue::take_lease_slots(whole, wanted, now);
	}
	void fill_lease_slots(Queue &whole, const std::vector<int32> &slots,
	                      const std::vector<ClaimedLease> &leases) override {
		queue::fill_lease_slots(whole, slots, leases);
	}
	const LocalShard *local_shard_of(Queue &q, const int64 *ids, int n, bool slots) override {
		return queue::local_shard_of(q, ids, n, slots);
	}
	bool route_tasks(Queue &whole, const int64 *ids, int n, std::optional<Queue> &shard, const char *what,
	                 bool slots) override {
		return queue::route_tasks(whole, ids, n, shard, what, slots);
	}
	void require_slots_here(Queue &q, const char *what, bool claim) override {
		queue::require_slots_here(q, what, claim);
	}
	int32 key_position(Datum key, int32 count) override { return queue::key_position(key, count); }
	int32 next_position(const Shards &shards) override { return queue::next_position(shards); }
	const LocalShard *next_local_shard(const Shards &shards) override {
		return queue::next_local_shard(shards);
	}
	const LocalShard *claim_start(Queue &whole, const Shards &shards, TimestampTz now) override {
		return queue::claim_start(whole, shards, now);
	}
	void claim_ended(Queue &whole, int32 position, bool full, TimestampTz now) override {
		queue::claim_ended(whole, position, full, now);
	}
	bool is_distributed(Oid relid) override { return queue::is_distributed(relid); }
	void note_local_writes(Queue &whole) override { queue::note_local_writes(whole); }
	uint64 call_on_shard(Queue &whole, int32 position, const char *function, int nargs, const Oid *types,
	                     const Datum *values, const char *nulls, bool set_returning, bool writes,
	                     const char *schema) override {
		return queue::call_on_shard(whole, position, function, nargs, types, values, nulls, set_returning,
		                            writes, schema);
	}
	uint64 call_subset(FunctionCallInfo fcinfo, Queue &whole, int32 position, const std::vector<int> &members,
	                   std::initializer_list<int> split, bool set_returning, int max_args) override {
		return queue::call_subset(fcinfo, whole, position, members, split, set_returning, max_args);
	}
	void route_batch(FunctionCallInfo fcinfo, Queue &whole, const std::vector<int64> &ids,
	                 std::initializer_list<int> split, bool set_returning, bool acks,
	                 const std::function<void(uint64)> &each, int max_args) override {
		queue::route_batch(fcinfo, whole, ids, split, set_returning, acks, each, max_args);
	}
	Datum route_call(FunctionCallInfo fcinfo, Queue &whole, int32 position, const pg::ResultSet *out,
	                 int max_args, bool writes) override {
		return queue::route_call(fcinfo, whole, position, out, max_args, writes);
	}
	std::optional<int32> routed_position(Queue &whole, const int64 *ids, int n, bool slots) override {
		return queue::routed_position(whole, ids, n, slots);
	}
	int64 on_every_node(FunctionCallInfo fcinfo, Queue &whole,
	                    const std::function<int64(Queue &)> &local) override {
		return queue::on_every_node(fcinfo, whole, local);
	}
	int64 route_batch_count(FunctionCallInfo fcinfo, Queue &whole, const std::vector<int64> &ids,
	                        std::initializer_list<int> split, bool acks) override {
		return queue::route_batch_count(fcinfo, whole, ids, split, acks);
	}
	Datum forward_distributed(FunctionCallInfo fcinfo, const char *function, const pg::ResultSet *out,
	                          int max_args) override {
		return queue::forward_distributed(fcinfo, function, out, max_args);
	}
	uint64 dequeue_elsewhere(FunctionCallInfo fcinfo, Queue &q, int32 batch,
	                         const pg::ResultSet &out) override {
		return queue::dequeue_elsewhere(fcinfo, q, batch, out);
	}
	uint64 dequeue_routed(FunctionCallInfo fcinfo, const pg::ResultSet &out) override {
		return queue::dequeue_routed(fcinfo, out);
	}
	int32 parents_position(Queue &q, const std::vector<int64> &after) override {
		return queue::parents_position(q, after);
	}
	void distribute_key_rate_slots(const std::string &name) override {
		queue::distribute_key_rate_slots(name);
	}
	void require_coordinator(const std::string &name) override { queue::require_coordinator(name); }
	void sync_catalog(const std::string &name) override { queue::sync_catalog(name); }
	void require_coordinator_for(std::string_view name, const char *what, bool catalog) override {
		queue::require_coordinator_for(name, what, catalog);
	}
	void distribute(const std::string &name) override { queue::distribute(name); }
	void distributed_limits(const std::string &name, bool key_limit_changed,
	                        std::optional<int32> max_leased) override {
		queue::distributed_limits(name, key_limit_changed, max_leased);
	}
	uint64 distributed_purge_chunk(Queue &whole, int32 chunk, TimestampTz now) override {
		return queue::distributed_purge_chunk(whole, chunk, now);
	}
};

CitusDistribution citus_distribution;

} // namespace

void distributed_init() {
	set_distribution(citus_distribution);
	set_permission_hooks(PermissionHooks{[](Queue &q, const char *what) {
		                                     if (!is_distributed(q.info().relid))
			                                     return false;
		                                     require_coordinator_for(q.name(), what);
		                                     return true;
	                                     },
	                                     sync_catalog});
}

} // namespace concurrency::queue
