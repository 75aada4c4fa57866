// The lock-history sampler: a background worker (started by a preloaded
// module) that takes the diagnostics' lock-manager snapshot every
// concurrency.history_interval, turns it into episodes (history_episodes) and
// writes them into the shared ring (history_shared).
//
// It runs in the module's background process (bgworker/host.hpp), which
// connects to no database: sessions' details come from the backend status
// array in shared memory (what pg_stat_activity reads), copied only when
// somebody waits or an episode is open, and then at most once a second unless
// a new blocker appears or an episode ends (see Backends). Nothing escapes
// it: a failed sample is logged by the host (at most once a minute) and the
// next one is taken.
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <optional>
#include <cstring>
#include <ctime>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "diagnostics/history_episodes.hpp"
#include "diagnostics/history_exits.hpp"
#include "diagnostics/history_shared.hpp"
#include "diagnostics/lock_snapshot.hpp"
#include "bgworker/host.hpp"

extern "C" {
#include "common/ip.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "utils/backend_status.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"
}

namespace concurrency::diagnostics {

namespace {

// The backend status array, copied (pgstat's local snapshot), by pid. The
// copy covers every backend (with its query text): with a thousand sessions
// it is most of a sample's cost, so the sampler keeps it for up to a second
// and copies again sooner only when it meets a blocker it does not know or
// must tell whether a root has exited.
class Backends {
  public:
	static constexpr TimestampTz max_age = USECS_PER_SEC;

	void load(TimestampTz now) {
		by_pid_.clear();
		loaded_at_ = now;
		int n = pg::guard([] {
			pgstat_clear_backend_activity_snapshot();
			return pgstat_fetch_stat_numbackends();
		});
		for (int i = 1; i <= n; ++i) {
			PgBackendStatus *status = pg::guard([&]() -> PgBackendStatus * {
#if PG_VERSION_NUM >= 160000
				LocalPgBackendStatus *local = pgstat_get_local_beentry_by_index(i);
#else
				LocalPgBackendStatus *local = pgstat_fetch_stat_local_beentry(i);
#endif
				return local ? &local->backendStatus : nullptr;
			});
			if (status && status->st_procpid > 0)
				by_pid_.emplace_back(status->st_procpid, status);
		}
		std::sort(by_pid_.begin(), by_pid_.end(),
		          [](const auto &a, const auto &b) { return a.first < b.first; });
	}
	void release() {
		by_pid_.clear();
		loaded_at_ = 0;
		pg::guard([] { pgstat_clear_backend_activity_snapshot(); });
	}
	bool loaded_at(TimestampTz now) const {
		return loaded_at_ == now;
	}
	bool stale(TimestampTz now) const {
		return loaded_at_ == 0 || now - loaded_at_ >= max_age;
	}

	const PgBackendStatus *find(int pid) const {
		auto it = std::lower_bound(by_pid_.begin(), by_pid_.end(), pid,
		                           [](const auto &entry, int p) { return entry.first < p; });
		return it != by_pid_.end() && it->first == pid ? it->second : nullptr;
	}

  private:
	std::vector<std::pair<int, PgBackendStatus *>> by_pid_;
	TimestampTz loaded_at_ = 0;
};

const char *state_text(BackendState state) {
	switch (state) {
	case STATE_IDLE:
		return "idle";
	case STATE_RUNNING:
		return "active";
	case STATE_IDLEINTRANSACTION:
		return "idle in transaction";
	case STATE_FASTPATH:
		return "fastpath function call";
	case STATE_IDLEINTRANSACTION_ABORTED:
		return "idle in transaction (aborted)";
	case STATE_DISABLED:
		return "disabled";
#if PG_VERSION_NUM >= 180000
	case STATE_STARTING:
		return "starting";
#endif
	default:
		return "";
	}
}

// pg_stat_activity's client_addr: numeric, NULL ("") for a local socket or
// when unknown.
void client_addr_text(const PgBackendStatus *s, char *out, std::size_t size) {
	out[0] = '\0';
	const SockAddr &addr = s->st_clientaddr;
	if (addr.addr.ss_family != AF_INET && addr.addr.ss_family != AF_INET6)
		return;
	char host[NI_MAXHOST];
	char port[NI_MAXSERV];
	if (pg_getnameinfo_all(&addr.addr, addr.salen, host, sizeof host, port, sizeof port,
	                       NI_NUMERICHOST | NI_NUMERICSERV) != 0)
		return;
	clean_ipv6_addr(addr.addr.ss_family, host);
	strlcpy(out, host, size);
}

HistoryLockKey key_of(const LOCKTAG &tag) {
	HistoryLockKey k;
	k.field1 = tag.locktag_field1;
	k.field2 = tag.locktag_field2;
	k.field3 = tag.locktag_field3;
	k.field4 = tag.locktag_field4;
	k.type = tag.locktag_type;
	k.method = tag.locktag_lockmethodid;
	return k;
}

LOCKTAG tag_of(const HistoryLockKey &k) {
	LOCKTAG tag;
	std::memset(&tag, 0, sizeof tag);
	tag.locktag_field1 = k.field1;
	tag.locktag_field2 = k.field2;
	tag.locktag_field3 = k.field3;
	tag.locktag_field4 = k.field4;
	tag.locktag_type = k.type;
	tag.locktag_lockmethodid = k.method;
	return tag;
}

// Whether the lock tag's field1 is a database OID.
bool tag_has_database(const LOCKTAG &tag) {
	switch (tag.locktag_type) {
	case LOCKTAG_RELATION:
	case LOCKTAG_RELATION_EXTEND:
	case LOCKTAG_PAGE:
	case LOCKTAG_TUPLE:
	case LOCKTAG_OBJECT:
	case LOCKTAG_ADVISORY:
		return true;
	default:
		return false;
	}
}

const char *ended_by_text(EndedBy e) {
	return e == EndedBy::root_exited ? "root_exited" : e == EndedBy::released ? "released" : "";
}

// One line: the log line must not be split by the query's own line breaks.
std::string one_line(const char *text) {
	std::string s(text);
	for (char &c : s)
		if (c == '\n' || c == '\r' || c == '\t')
			c = ' ';
	return s;
}

std::int64_t process_cpu_ns() {
	struct timespec ts;
	if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0)
		return 0;
	return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

class Sampler {
  public:
	explicit Sampler(HistoryShared &ring) : ring_(ring), owner_(ring.capacity, 0) {
		floor_seen_ = pg_atomic_read_u64(&ring.floor);
		tracker_.set_next_id(std::max<uint64>(pg_atomic_read_u64(&ring.next_id), floor_seen_));
		// Take up the episodes a previous run of the sampler left open (it was
		// terminated, not crashed: a crash resets shared memory).
		for (uint32 i = 0; i < ring.capacity; ++i) {
			HistoryEpisode r;
			if (!history_read(ring, i, &r))
				continue;
			owner_[i] = r.id;
			if (r.id == 0 || r.id < floor_seen_ || r.ended_at != 0)
				continue;
			Episode e;
			e.id = r.id;
			e.root = RootKey{r.root_pid, r.root_identity};
			e.started_at = r.started_at;
			e.last_seen = r.last_seen;
			e.max_waiters = static_cast<std::uint32_t>(r.max_waiters);
			e.max_depth = static_cast<std::uint32_t>(r.max_depth);
			e.longest_wait = r.longest_wait;
			e.waiter_seconds = r.waiter_seconds;
			e.in_cycle = r.in_cycle;
			for (int k = 0; k < r.n_objects; ++k)
				e.objects.emplace_back(key_of(r.objects[k]), 1);
			e.slot = i;
			tracker_.adopt(e);
			records_[r.id] = r;
		}
		ring_.next_slot %= std::max<uint32>(ring.capacity, 1);
	}

	void sample(std::int64_t interval_us) {
		const uint64 floor = pg_atomic_read_u64(&ring_.floor);
		if (floor > floor_seen_) { // lock_history_reset()
			tracker_.forget_below(floor);
			for (auto it = records_.begin(); it != records_.end();)
				it = it->first < floor ? records_.erase(it) : std::next(it);
			floor_seen_ = floor;
		}

		WaitPicture picture = take_wait_picture();
		const std::int64_t period = previous_ ? picture.taken_at - previous_ : interval_us;
		previous_ = picture.taken_at;
		pg_atomic_write_u64(&ring_.last_sample_at, static_cast<uint64>(picture.taken_at));
		if (picture.edges.empty() && tracker_.active() == 0) {
			blockers_.clear();
			return; // the common case: nobody waits, nothing open
		}

		const TimestampTz now = picture.taken_at;
		// A blocker the previous sample did not see may be a session whose
		// status copy is from before its current transaction (the same pid,
		// reused for another episode): its details must be read afresh.
		std::vector<int> blockers;
		bool unknown_blocker = false;
		for (const auto &e : picture.edges) {
			const Session &blocker = picture.sessions[e.blocker];
			if (blocker.prepared())
				continue;
			blockers.push_back(blocker.pid);
			if (backends_.find(blocker.pid) == nullptr)
				unknown_blocker = true;
		}
		std::sort(blockers.begin(), blockers.end());
		blockers.erase(std::unique(blockers.begin(), blockers.end()), blockers.end());
		if (!std::includes(blockers_.begin(), blockers_.end(), blockers.begin(), blockers.end()))
			unknown_blocker = true;
		blockers_ = std::move(blockers);
		if (unknown_blocker || backends_.stale(now))
			backends_.load(now);
		Sample sample;
		sample.at = picture.taken_at;
		sample.period = std::min(period, 2 * interval_us); // a late wake-up does not count as waiting
		sample.sessions.resize(picture.sessions.size());
		for (std::size_t i = 0; i < picture.sessions.size(); ++i) {
			const Session &s = picture.sessions[i];
			SampledSession &out = sample.sessions[i];
			out.key.pid = s.pid;
			if (s.prepared())
				out.key.identity = s.xid;
			else if (const PgBackendStatus *b = backends_.find(s.pid))
				out.key.identity = b->st_proc_start_timestamp;
			out.waiting_since = s.waiting ? s.waiting_since : 0;
		}
		sample.locks.reserve(picture.locks.size());
		for (const LOCKTAG &tag : picture.locks)
			sample.locks.push_back(key_of(tag));
		sample.edges.reserve(picture.edges.size());
		for (const auto &e : picture.edges) {
			if (sample.sessions[e.waiter].lock == none)
				sample.sessions[e.waiter].lock = e.lock;
			sample.edges.emplace_back(e.waiter, e.blocker);
		}

		auto alive = [&](const RootKey &root) {
			if (root.pid == 0)
				return true; // a prepared transaction ends by COMMIT or ROLLBACK PREPARED
			if (!backends_.loaded_at(now))
				backends_.load(now);
			// still listed but on its way out: its locks went before its status entry
			const PgBackendStatus *b = backends_.find(root.pid);
			return b != nullptr && (root.identity == 0 || b->st_proc_start_timestamp == root.identity) &&
			       !history_exiting(root.pid, b->st_proc_start_timestamp);
		};
		EpisodeTracker::Changes changes = tracker_.observe(sample, alive);
		pg_atomic_write_u64(&ring_.next_id, tracker_.next_id());
		for (Episode *e : changes.ongoing)
			publish(*e, sample);
		for (Episode &e : changes.ended)
			finish(e);
	}

	// After a failed sample: the status copy may be half made.
	void forget_backends() { backends_.release(); }

  private:
	HistoryEpisode &record_of(const Episode &e) {
		auto [it, inserted] = records_.try_emplace(e.id);
		if (inserted)
			std::memset(static_cast<void *>(&it->second), 0, sizeof(HistoryEpisode));
		return it->second;
	}

	void copy_counts(const Episode &e, HistoryEpisode &r) {
		r.id = e.id;
		r.started_at = e.started_at;
		r.last_seen = e.last_seen;
		r.root_pid = e.root.pid;
		r.root_identity = e.root.identity;
		r.max_waiters = static_cast<int32>(e.max_waiters);
		r.max_depth = static_cast<int32>(e.max_depth);
		r.longest_wait = e.longest_wait;
		r.waiter_seconds = e.waiter_seconds;
		r.in_cycle = e.in_cycle;
		r.ended_by = static_cast<uint8>(e.ended_by);
		std::vector<HistoryLockKey> top = top_objects(e, history_max_objects);
		r.n_objects = static_cast<int32>(top.size());
		for (std::size_t k = 0; k < top.size(); ++k)
			r.objects[k] = tag_of(top[k]);
	}

	// An episode seen in this sample: its counts, and the root's and waiters'
	// details as they are now.
	void publish(Episode &e, const Sample &sample) {
		HistoryEpisode &r = record_of(e);
		copy_counts(e, r);
		const int root_pid = sample.sessions[e.root_session].key.pid;
		if (const PgBackendStatus *b = root_pid > 0 ? backends_.find(root_pid) : nullptr) {
			r.database = b->st_databaseid;
			r.root_userid = b->st_userid;
			strlcpy(r.root_application, b->st_appname ? b->st_appname : "", sizeof r.root_application);
			client_addr_text(b, r.root_client_addr, sizeof r.root_client_addr);
			strlcpy(r.root_state, state_text(b->st_state), sizeof r.root_state);
			r.root_xact_start = b->st_xact_start_timestamp;
			strlcpy(r.root_query, b->st_activity_raw ? b->st_activity_raw : "", sizeof r.root_query);
		} else if (root_pid == 0) {
			strlcpy(r.root_state, "prepared", sizeof r.root_state);
			if (r.n_objects > 0 && tag_has_database(r.objects[0]))
				r.database = r.objects[0].locktag_field1;
		}
		// a few distinct queries among the longest waiting (many waiters often run the same one)
		constexpr std::size_t waiters_looked_at = 32;
		for (std::size_t k = 0; k < e.waiter_sessions.size() && k < waiters_looked_at; ++k) {
			const std::uint32_t v = e.waiter_sessions[k];
			if (r.n_queries >= history_max_queries)
				break;
			const PgBackendStatus *b = backends_.find(sample.sessions[v].key.pid);
			if (!b || !b->st_activity_raw || !b->st_activity_raw[0])
				continue;
			bool known = false;
			for (int q = 0; q < r.n_queries && !known; ++q)
				known = std::strncmp(r.waiting_queries[q], b->st_activity_raw,
				                     history_waiting_query_bytes - 1) == 0;
			if (known)
				continue;
			strlcpy(r.waiting_queries[r.n_queries], b->st_activity_raw, history_waiting_query_bytes);
			r.query_userid[r.n_queries] = b->st_userid;
			++r.n_queries;
		}
		write(e, r);
	}

	void finish(Episode &e) {
		HistoryEpisode &r = record_of(e);
		copy_counts(e, r);
		r.ended_at = e.last_seen;
		write(e, r);
		log_if_long(e, r);
		records_.erase(e.id);
	}

	void write(Episode &e, const HistoryEpisode &r) {
		if (e.slot == none)
			e.slot = allocate(e.id);
		if (owner_[e.slot] == e.id) // else newer episodes took its place
			history_write(ring_, e.slot, r);
	}

	// The next slot after the cursor that holds no open episode; when every
	// slot holds one, the oldest place is taken anyway.
	uint32 allocate(uint64 id) {
		const uint32 capacity = ring_.capacity;
		const uint32 start = ring_.next_slot % capacity;
		uint32 chosen = start;
		for (uint32 k = 0; k < capacity; ++k) {
			uint32 i = (start + k) % capacity;
			if (owner_[i] == 0 || records_.count(owner_[i]) == 0) {
				chosen = i;
				break;
			}
		}
		owner_[chosen] = id;
		ring_.next_slot = (chosen + 1) % capacity;
		return chosen;
	}

	void log_if_long(const Episode &e, const HistoryEpisode &r) {
		if (history_log_min_duration_ms < 0 ||
		    e.duration() < static_cast<std::int64_t>(history_log_min_duration_ms) * 1000)
			return;
		std::string waiters;
		for (int pid : e.waiter_pids)
			waiters += (waiters.empty() ? "" : ", ") + std::to_string(pid);
		if (e.max_waiters > e.waiter_pids.size())
			waiters += ", ...";
		std::string root =
		    r.root_pid == 0 ? std::string("a prepared transaction") : fmt::format("pid {}", r.root_pid);
		std::string line = fmt::format(
		    "lock wait episode {} ended ({}) after {:.3f} s: root blocker {} (application \"{}\", state "
		    "\"{}\") "
		    "blocked up to {} sessions (waiters: {}); root query: {}",
		    e.id, ended_by_text(e.ended_by), static_cast<double>(e.duration()) / 1e6, root,
		    one_line(r.root_application), r.root_state, e.max_waiters, waiters, one_line(r.root_query));
		pg::guard([&] { ereport(LOG, (errmsg_internal("%s", line.c_str()))); });
	}

	HistoryShared &ring_;
	EpisodeTracker tracker_;
	Backends backends_;
	std::vector<int> blockers_;                          // the previous sample's blocker pids, sorted
	std::unordered_map<uint64, HistoryEpisode> records_; // open episodes, as written to their slots
	std::vector<uint64> owner_;                          // episode id in each slot
	uint64 floor_seen_ = 0;
	TimestampTz previous_ = 0;
};

// The sampler's state in the host (bgworker/host.hpp), which calls these.
std::optional<Sampler> sampler;
MemoryContext sample_context = nullptr;
TimestampTz last_start = 0;

void sampler_start() {
	HistoryShared *ring = history_shared();
	if (ring == nullptr || ring->capacity == 0)
		return; // not preloaded: nothing to sample
	if (!sample_context)
		sample_context = pg::guard([] {
			return AllocSetContextCreate(TopMemoryContext, "concurrency_ext lock history sample",
			                             ALLOCSET_DEFAULT_SIZES);
		});
	sampler.emplace(*ring);
	pg_atomic_write_u32(&ring->worker_pid, static_cast<uint32>(MyProcPid));
}

long sampler_tick() {
	const int interval_ms = history_interval_ms;
	if (!sampler || interval_ms <= 0)
		return -1;
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz due = last_start + static_cast<TimestampTz>(interval_ms) * 1000;
	if (last_start != 0 && now < due)
		return static_cast<long>((due - now + 999) / 1000);
	last_start = now;
	HistoryShared &ring = *history_shared();
	MemoryContext caller = MemoryContextSwitchTo(sample_context);
	std::int64_t cpu = process_cpu_ns();
	auto done = [&] {
		MemoryContextSwitchTo(caller);
		MemoryContextReset(sample_context);
		pg_atomic_fetch_add_u64(&ring.sample_cpu_ns, static_cast<uint64>(process_cpu_ns() - cpu));
		pg_atomic_fetch_add_u64(&ring.samples, 1);
	};
	try {
		sampler->sample(static_cast<std::int64_t>(interval_ms) * 1000);
	} catch (...) {
		sampler->forget_backends();
		done();
		throw; // logged by the host as "lock history sample failed: …"
	}
	pg::guard([] { LWLockReleaseAll(); });
	done();
	return interval_ms;
}

void sampler_stop() noexcept {
	if (HistoryShared *ring = history_shared())
		pg_atomic_write_u32(&ring->worker_pid, 0);
}

} // namespace

void history_sampler_tenant() {
	bgworker::add_tenant(bgworker::Tenant{"lock history sample", sampler_start, sampler_tick, sampler_stop});
}

} // namespace concurrency::diagnostics
