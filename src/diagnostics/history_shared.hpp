// The lock-wait history in shared memory: a fixed ring of episode slots,
// written by the sampler (the only writer) and read by lock_history.
//
// No lock is taken on the ring. Each slot carries a change counter (a
// seqlock, as PgBackendStatus does): the sampler makes it odd, writes the
// slot, makes it even again; a reader copies the slot and keeps the copy only
// when the counter was even and unchanged around it. So the sampler never
// waits for a reader, and a reader waits at most for one slot's memcpy.
// lock_history_reset() only raises a floor: episodes below it are hidden from
// readers and their slots are free for the sampler.
#pragma once

#include "pg/postgres.hpp"

extern "C" {
#include "datatype/timestamp.h"
#include "port/atomics.h"
#include "storage/lock.h"
}

namespace concurrency::diagnostics {

inline constexpr int history_max_objects = 3;         // locked_objects kept per episode
inline constexpr int history_max_queries = 3;         // waiting_queries kept per episode
inline constexpr int history_root_query_bytes = 1024; // root_query, truncated (raw bytes)
inline constexpr int history_waiting_query_bytes = 256;

// One episode, plain data. Strings are NUL-terminated raw bytes, clipped to
// whole characters when read (as pg_stat_activity does).
struct HistoryEpisode {
	uint64 id;                                   // 0: empty slot
	Oid database;                                // the root's database (InvalidOid: unknown)
	TimestampTz started_at, last_seen, ended_at; // ended_at 0 while it lasts
	int32 root_pid;                              // 0 for a prepared transaction
	int64 root_identity; // backend start (microseconds since the PostgreSQL epoch) or prepared xid
	Oid root_userid;
	char root_application[NAMEDATALEN];
	char root_client_addr[64];   // numeric address; "" when none (local socket, unknown)
	char root_state[32];         // pg_stat_activity's state text; "" when unknown
	TimestampTz root_xact_start; // 0: none
	int32 max_waiters, max_depth;
	int64 longest_wait; // microseconds
	double waiter_seconds;
	bool in_cycle;
	uint8 ended_by; // EndedBy
	int32 n_objects;
	LOCKTAG objects[history_max_objects];
	int32 n_queries;
	Oid query_userid[history_max_queries];
	char waiting_queries[history_max_queries][history_waiting_query_bytes];
	char root_query[history_root_query_bytes];
};

struct HistorySlot {
	pg_atomic_uint32 changecount;
	HistoryEpisode episode;
};

struct HistoryShared {
	pg_atomic_uint64 floor;          // episodes with a smaller id were cleared (lock_history_reset)
	pg_atomic_uint64 next_id;        // written by the sampler
	pg_atomic_uint32 worker_pid;     // 0 when no sampler runs
	pg_atomic_uint64 samples;        // samples taken since the server started
	pg_atomic_uint64 sample_cpu_ns;  // CPU time the sampler spent on them
	pg_atomic_uint64 last_sample_at; // TimestampTz of the latest sample
	uint32 next_slot;                // the sampler's cursor
	uint32 capacity;                 // concurrency.history_size
	HistorySlot slots[FLEXIBLE_ARRAY_MEMBER];
};

// Settings (GUCs).
extern int history_interval_ms;         // concurrency.history_interval, 0: off
extern int history_size;                // concurrency.history_size
extern int history_log_min_duration_ms; // concurrency.history_log_min_duration, -1: off

// The ring, or nullptr when the module was not preloaded.
HistoryShared *history_shared();

// Throws 55000 (with a HINT) when the ring does not exist.
HistoryShared &require_history();

// The seqlock, for the sampler: write `episode` into slot `i`.
void history_write(HistoryShared &shared, uint32 i, const HistoryEpisode &episode);
// For readers: copy slot `i`; false when it stayed busy (counter odd or moving)
// for too long, which only a sampler that died mid-write could cause.
bool history_read(const HistoryShared &shared, uint32 i, HistoryEpisode *out);

// Registers the GUCs, and when preloading the shared memory, the exit marks
// (history_exits.hpp) and the sampler (a tenant of the background host).
void history_init();

// Adds the sampler (history_worker.cpp) to the background host's tenants.
void history_sampler_tenant();

} // namespace concurrency::diagnostics
