// Taking and releasing named locks: xact_lock, try_xact_lock, the ordered
// multi-lock, session_lock, try_session_lock, session_unlock.
//
// Locks go straight to the lock manager (LockAcquire on an advisory tag), as
// pg_advisory_lock does; see locks/lock_keys.hpp for the tags. A timeout is
// PostgreSQL's own lock_timeout: the variable behind the setting is lowered
// for the duration of the one LockAcquire call, so the lock manager's timer
// ends the wait (no polling).
//
// A lock is first asked for without waiting: the uncontended path costs what
// pg_advisory_lock costs. Only when somebody holds it does the call wait, and
// it waits inside an internal subtransaction (pg::in_subtransaction): when the
// timeout ends the wait with 55P03, rolling the subtransaction back is what
// cleans up after the error (wait queue, resource owner, error state), and
// the call can then raise its own 55P03 that names the holder.
#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "citus/node.hpp"
#include "locks/lock_keys.hpp"
#include "locks/lock_messages.hpp"
#include "locks/registry.hpp"
#include "locks/tracking.hpp"
#include "pg/datum.hpp"
#include "pg/spi.hpp"
#include "pg/xact.hpp"

extern "C" {
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "utils/array.h"
#include "utils/timestamp.h"
}

namespace concurrency::locks {

namespace {

// One lock to take: which subsystem, which resource, which mode.
struct Target {
	std::string_view name; // the caller's argument, valid for the call
	Subsystem subsystem;   // a copy: a later lookup may reload the cache
	std::optional<std::int64_t> resource;
	bool shared = false;
	AdvisoryTag tag;

	LOCKMODE mode() const { return shared ? ShareLock : ExclusiveLock; }
	LOCKTAG locktag() const {
		LOCKTAG t;
		SET_LOCKTAG_ADVISORY(t, MyDatabaseId, tag.high, tag.low, tag.klass);
		return t;
	}
};

// The end of the wait a caller allowed, and the allowance itself (for the
// message).
struct Deadline {
	TimestampTz at;
	std::int64_t micros;
};

std::optional<Deadline> deadline_arg(FunctionCallInfo fcinfo, int n) {
	if (PG_ARGISNULL(n))
		return std::nullopt;
	const Interval *timeout = PG_GETARG_INTERVAL_P(n);
	std::optional<std::int64_t> micros = timeout_micros(timeout->month, timeout->day, timeout->time);
	if (!micros)
		throw Error(sqlstate::invalid_parameter_value, "timeout must not be negative", "",
		            "Give the longest wait you accept, or NULL to wait as long as lock_timeout allows.");
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz at = *micros > std::numeric_limits<TimestampTz>::max() - now
	                     ? std::numeric_limits<TimestampTz>::max()
	                     : now + *micros;
	return Deadline{at, *micros};
}

// Advisory locks live in one server's lock manager: on a Citus worker a named
// lock would exclude nobody on the coordinator or the other workers. Named
// locks are taken on the coordinator only (docs/scaling-out.md).
[[noreturn]] void refuse_on_citus_worker(std::string_view name) {
	std::string coordinator = citus::coordinator_address();
	throw Error(sqlstate::feature_not_supported,
	            fmt::format("cannot use named lock \"{}\" on a Citus worker node", std::string(name)),
	            "Advisory locks are per node: a lock taken on a worker excludes nobody connected to the "
	            "coordinator or to another worker.",
	            coordinator.empty()
	                ? "Take named locks through the Citus coordinator."
	                : fmt::format("Take named locks through the Citus coordinator ({}).", coordinator));
}

Target resolve(std::string_view name, std::optional<std::int64_t> resource, bool shared) {
	// Before the registry lookup: the registry's rows live on the coordinator.
	if (citus::local_role().role == citus::Role::worker)
		refuse_on_citus_worker(name);
	Target t;
	t.subsystem = lookup_subsystem(name);
	t.name = name;
	t.resource = resource;
	t.shared = shared;
	t.tag = resource ? resource_tag(*resource, t.subsystem.slot) : subsystem_tag(t.subsystem.key);
	return t;
}

void check_can_lock(const Target &t, Level level) {
	if (RecoveryInProgress())
		throw Error(sqlstate::read_only_sql_transaction,
		            fmt::format("cannot take named lock \"{}\" during recovery", std::string(t.name)),
		            "This server is a hot standby: a lock taken here excludes nobody on the primary.",
		            "Take named locks on the primary.");
	if (IsInParallelMode())
		throw Error(sqlstate::invalid_transaction_state,
		            "cannot take named locks during a parallel operation");
	if (level == Level::session && t.subsystem.xact_only)
		throw Error(
		    sqlstate::insufficient_privilege,
		    fmt::format("subsystem \"{}\" allows transaction-level locks only", std::string(t.name)),
		    "It was registered with xact_only => true: behind a transaction-mode connection pool a "
		    "session-level lock stays with the server connection, and its unlock may run on another one.",
		    "Use concurrency.xact_lock or concurrency.try_xact_lock inside a transaction.");
}

LockAcquireResult lock_acquire(const Target &t, Level level, bool dont_wait) {
	LOCKTAG tag = t.locktag();
	LOCKMODE mode = t.mode();
	bool session = level == Level::session;
	return pg::guard([&] { return LockAcquire(&tag, mode, session, dont_wait); });
}

bool try_take(const Target &t, Level level) {
	LockAcquireResult result = lock_acquire(t, level, true);
	if (result == LOCKACQUIRE_NOT_AVAIL)
		return false;
	track_acquired(t.tag, t.shared, level, result == LOCKACQUIRE_OK, t.name, t.resource);
	return true;
}

// Sets the variable behind lock_timeout for one lock wait and restores it
// however the wait ends (the wait itself runs inside pg::guard).
class LockTimeoutOverride {
  public:
	explicit LockTimeoutOverride(int ms) : saved_(LockTimeout) { LockTimeout = ms; }
	~LockTimeoutOverride() { LockTimeout = saved_; }
	LockTimeoutOverride(const LockTimeoutOverride &) = delete;
	LockTimeoutOverride &operator=(const LockTimeoutOverride &) = delete;

  private:
	int saved_;
};

// Who holds `t` in a mode that conflicts with ours (or, if nobody does any
// more, who waits for it in such a mode), from pg_locks and
// pg_stat_activity. At most five are described; `total` counts all.
std::vector<LockHolder> find_holders(const Target &t, std::size_t &total) {
	static const Oid types[] = {OIDOID, OIDOID, OIDOID, INT4OID, BOOLOID};
	pg::spi_connect();
	SPIPlanPtr plan = pg::prepared_plan(
	    "locks:holders",
	    "SELECT l.pid, a.application_name, a.state, a.xact_start IS NOT NULL,"
	    "       pg_catalog.date_part('epoch', pg_catalog.clock_timestamp()"
	    "                                     - coalesce(a.xact_start, a.state_change))::float8,"
	    "       l.granted, l.mode, count(*) OVER (PARTITION BY l.granted)"
	    "  FROM pg_catalog.pg_locks l"
	    "  LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid"
	    " WHERE l.locktype = 'advisory' AND l.database = $1 AND l.classid = $2 AND l.objid = $3"
	    "   AND (l.objsubid::int4 & 65535) = $4"
	    "   AND l.pid IS DISTINCT FROM pg_catalog.pg_backend_pid()"
	    "   AND ($5 OR l.mode = 'ExclusiveLock')"
	    " ORDER BY l.granted DESC, coalesce(a.xact_start, a.state_change), l.pid"
	    " LIMIT 50",
	    5, types);
	Datum values[] = {ObjectIdGetDatum(MyDatabaseId), ObjectIdGetDatum(t.tag.high),
	                  ObjectIdGetDatum(t.tag.low), Int32GetDatum(t.tag.klass), BoolGetDatum(!t.shared)};
	uint64 n = pg::execute(plan, values, nullptr, true);
	std::vector<LockHolder> holders;
	total = 0;
	bool granted_seen = false;
	for (uint64 i = 0; i < n; ++i) {
		LockHolder h;
		h.granted = pg::column_as<bool>(i, 6).value_or(false);
		if (granted_seen && !h.granted)
			break; // waiters matter only when no conflicting holder is left
		granted_seen = granted_seen || h.granted;
		total = static_cast<std::size_t>(pg::int64_column(i, 8));
		if (holders.size() >= 5)
			continue;
		h.pid = pg::column_as<std::int32_t>(i, 1);
		h.application = pg::text_column(i, 2).value_or("");
		h.state = pg::text_column(i, 3);
		h.in_transaction = pg::column_as<bool>(i, 4).value_or(false);
		h.seconds = pg::column_as<double>(i, 5);
		h.mode = pg::text_column(i, 7).value_or("");
		holders.push_back(std::move(h));
	}
	pg::spi_finish();
	return holders;
}

// What ended a wait, for the message: the call's own timeout (its full
// allowance, in µs) or the session's lock_timeout (in ms).
struct WaitLimit {
	bool from_lock_timeout = false;
	std::int64_t micros = 0; // the call's timeout
	int lock_timeout_ms = 0;

	std::string describe() const {
		return from_lock_timeout ? fmt::format("lock_timeout ({})", human_duration(lock_timeout_ms / 1000.0))
		                         : human_duration(static_cast<double>(micros) / 1e6);
	}
};

[[noreturn]] void fail_timeout(const Target &t, const WaitLimit &limit) {
	std::string hint = "See concurrency.held_locks for every named lock and its holder.";
	std::size_t total = 0;
	std::vector<LockHolder> holders = find_holders(t, total);
	std::string detail = describe_holders(holders, total);
	if (held_by_idle_session(holders))
		hint =
		    "A session idle outside any transaction holds it: a session-level lock, often one left behind by "
		    "a connection pool (concurrency.held_locks shows it with suspect_leak).";
	throw Error(sqlstate::lock_not_available,
	            fmt::format("could not obtain {} within {}",
	                        lock_description(std::string(t.name), t.resource, t.shared), limit.describe()),
	            detail, hint);
}

// Takes `t`, waiting until it is granted, until `deadline`, or until the
// session's own lock_timeout, whichever comes first.
void take(const Target &t, Level level, const std::optional<Deadline> &deadline) {
	// Free (or held by us already): no wait, nothing to survive.
	LockAcquireResult first = lock_acquire(t, level, true);
	if (first != LOCKACQUIRE_NOT_AVAIL) {
		track_acquired(t.tag, t.shared, level, first == LOCKACQUIRE_OK, t.name, t.resource);
		return;
	}

	WaitLimit limit{true, 0, LockTimeout}; // the session's lock_timeout (0: none)
	int wait_ms = LockTimeout;
	if (deadline) {
		TimestampTz remaining = deadline->at - GetCurrentTimestamp();
		if (remaining <= 0 || deadline->micros == 0)
			fail_timeout(t, WaitLimit{false, deadline->micros, 0});
		int ours = timeout_ms_for_lock_timeout(remaining);
		if (wait_ms <= 0 || ours < wait_ms) {
			wait_ms = ours;
			limit = WaitLimit{false, deadline->micros, 0};
		}
	}

	LOCKTAG tag = t.locktag();
	LOCKMODE mode = t.mode();
	bool session = level == Level::session;
	LockAcquireResult result = LOCKACQUIRE_NOT_AVAIL;
	ErrorData *error = nullptr;
	{
		LockTimeoutOverride timeout(wait_ms);
		// The wait may end in an ERROR (the timeout, a deadlock, a cancel):
		// the subtransaction's rollback leaves the lock manager clean. When
		// it commits, a transaction-level lock passes to the caller's
		// (sub)transaction, exactly as if taken there.
		error = pg::in_subtransaction(
		    [&] { result = pg::guard([&] { return LockAcquire(&tag, mode, session, false); }); });
	}
	if (error) {
		if (error->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			throw pg::PgException(error); // deadlock, cancel, statement_timeout: as they are
		// The timer ended the wait. If the lock was granted at that very
		// moment, the rollback gave it back: one last look, without waiting.
		LockAcquireResult again = lock_acquire(t, level, true);
		if (again == LOCKACQUIRE_NOT_AVAIL)
			fail_timeout(t, limit);
		track_acquired(t.tag, t.shared, level, again == LOCKACQUIRE_OK, t.name, t.resource);
		return;
	}
	track_acquired(t.tag, t.shared, level, result == LOCKACQUIRE_OK, t.name, t.resource);
}

// The single-lock functions at either level: (name, resource, timeout,
// shared), waiting, and (name, resource, shared), trying.
void lock_one(FunctionCallInfo fcinfo, Level level) {
	std::string_view name = pg::text_view_arg(fcinfo, 0, "name");
	bool shared = pg::bool_arg(fcinfo, 3, "shared");
	Target t = resolve(name, pg::nullable_int64_arg(fcinfo, 1), shared);
	check_can_lock(t, level);
	take(t, level, deadline_arg(fcinfo, 2));
}

bool try_lock_one(FunctionCallInfo fcinfo, Level level) {
	std::string_view name = pg::text_view_arg(fcinfo, 0, "name");
	bool shared = pg::bool_arg(fcinfo, 2, "shared");
	Target t = resolve(name, pg::nullable_int64_arg(fcinfo, 1), shared);
	check_can_lock(t, level);
	return try_take(t, level);
}

} // namespace

} // namespace concurrency::locks

using namespace concurrency;
using namespace concurrency::locks;

// concurrency.xact_lock(name, resource, timeout, shared)
CONCURRENCY_FUNCTION(concurrency_xact_lock) {
	lock_one(fcinfo, Level::transaction);
	PG_RETURN_VOID();
}

// concurrency.try_xact_lock(name, resource, shared)
CONCURRENCY_FUNCTION(concurrency_try_xact_lock) {
	PG_RETURN_BOOL(try_lock_one(fcinfo, Level::transaction));
}

// concurrency.xact_lock(names text[], timeout): every name resolved first,
// then the subsystem locks taken in ascending key order, so that two callers
// can never deadlock on them; the timeout bounds the whole call.
CONCURRENCY_FUNCTION(concurrency_xact_lock_many) {
	pg::require_arg(fcinfo, 0, "names");
	ArrayType *array = pg::guard([&] { return PG_GETARG_ARRAYTYPE_P(0); });
	Datum *elements = nullptr;
	bool *nulls = nullptr;
	int count = 0;
	pg::guard([&] { deconstruct_array(array, TEXTOID, -1, false, TYPALIGN_INT, &elements, &nulls, &count); });

	std::vector<Target> targets;
	targets.reserve(static_cast<std::size_t>(count));
	for (int i = 0; i < count; ++i) {
		if (nulls[i])
			throw Error(sqlstate::null_value_not_allowed, "names must not contain null",
			            fmt::format("Element {} of the array is null.", i + 1));
		targets.push_back(resolve(pg::text_view(elements[i]), std::nullopt, false));
	}
	std::optional<Deadline> deadline = deadline_arg(fcinfo, 1);
	for (const Target &t : targets)
		check_can_lock(t, Level::transaction);

	std::sort(targets.begin(), targets.end(),
	          [](const Target &a, const Target &b) { return a.subsystem.key < b.subsystem.key; });
	targets.erase(
	    std::unique(targets.begin(), targets.end(),
	                [](const Target &a, const Target &b) { return a.subsystem.key == b.subsystem.key; }),
	    targets.end());
	for (const Target &t : targets)
		take(t, Level::transaction, deadline);
	PG_RETURN_VOID();
}

// concurrency.session_lock(name, resource, timeout, shared)
CONCURRENCY_FUNCTION(concurrency_session_lock) {
	lock_one(fcinfo, Level::session);
	PG_RETURN_VOID();
}

// concurrency.try_session_lock(name, resource, shared)
CONCURRENCY_FUNCTION(concurrency_try_session_lock) {
	PG_RETURN_BOOL(try_lock_one(fcinfo, Level::session));
}

// concurrency.session_unlock(name, resource, shared): one hold fewer; false,
// with the lock manager's WARNING, when this session holds none.
CONCURRENCY_FUNCTION(concurrency_session_unlock) {
	std::string_view name = pg::text_view_arg(fcinfo, 0, "name");
	bool shared = pg::bool_arg(fcinfo, 2, "shared");
	Target t = resolve(name, pg::nullable_int64_arg(fcinfo, 1), shared);
	LOCKTAG tag = t.locktag();
	LOCKMODE mode = t.mode();
	bool released = pg::guard([&] { return LockRelease(&tag, mode, true); });
	track_session_released(t.tag, t.shared, released);
	PG_RETURN_BOOL(released);
}

namespace concurrency::locks {
namespace {

// The resources of xact_lock_all: every element checked (a NULL must never
// silently skip a lock), then sorted and deduplicated, so that each resource
// is locked once and every caller takes them in the same, ascending order.
std::vector<std::int64_t> resources_arg(FunctionCallInfo fcinfo, int n) {
	pg::require_arg(fcinfo, n, "resources");
	ArrayType *array = pg::guard([&] { return PG_GETARG_ARRAYTYPE_P(n); });
	Datum *elements = nullptr;
	bool *nulls = nullptr;
	int count = 0;
	pg::guard([&] {
		deconstruct_array(array, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &elements, &nulls, &count);
	});
	std::vector<std::int64_t> resources;
	resources.reserve(static_cast<std::size_t>(count));
	for (int i = 0; i < count; ++i) {
		if (nulls[i])
			throw Error(sqlstate::null_value_not_allowed, "resources must not contain null",
			            fmt::format("Element {} of the array is null.", i + 1));
		resources.push_back(DatumGetInt64(elements[i]));
	}
	std::sort(resources.begin(), resources.end());
	resources.erase(std::unique(resources.begin(), resources.end()), resources.end());
	return resources;
}

} // namespace
} // namespace concurrency::locks

// concurrency.xact_lock_all(name, resources bigint[], timeout, shared): the
// resource locks of one subsystem, each once, in ascending order, so that two
// callers over the same resources (two transfers between the same accounts)
// can never deadlock on them; the timeout bounds the whole call.
CONCURRENCY_FUNCTION(concurrency_xact_lock_all) {
	std::string_view name = pg::text_view_arg(fcinfo, 0, "name");
	std::vector<std::int64_t> resources = resources_arg(fcinfo, 1);
	bool shared = pg::bool_arg(fcinfo, 3, "shared");
	Target first = resolve(name, std::nullopt, shared); // an unknown name fails even for an empty array
	check_can_lock(first, Level::transaction);
	std::optional<Deadline> deadline = deadline_arg(fcinfo, 2);
	for (std::int64_t resource : resources)
		take(resolve(name, resource, shared), Level::transaction, deadline);
	PG_RETURN_VOID();
}

// concurrency.try_xact_lock_all(name, resources bigint[], shared): all or
// none. Never waits; when one resource is taken by someone else, the locks
// this call already took are released again before it returns false.
CONCURRENCY_FUNCTION(concurrency_try_xact_lock_all) {
	std::string_view name = pg::text_view_arg(fcinfo, 0, "name");
	std::vector<std::int64_t> resources = resources_arg(fcinfo, 1);
	bool shared = pg::bool_arg(fcinfo, 2, "shared");
	Target first = resolve(name, std::nullopt, shared);
	check_can_lock(first, Level::transaction);
	std::vector<Target> targets;
	targets.reserve(resources.size());
	for (std::int64_t resource : resources)
		targets.push_back(resolve(name, resource, shared));
	std::vector<LockAcquireResult> results;
	results.reserve(targets.size());
	for (const Target &t : targets) {
		LockAcquireResult result = lock_acquire(t, Level::transaction, true);
		if (result == LOCKACQUIRE_NOT_AVAIL) {
			// release in reverse order the holds this call added
			for (std::size_t i = results.size(); i-- > 0;) {
				LOCKTAG tag = targets[i].locktag();
				LOCKMODE mode = targets[i].mode();
				pg::guard([&] { LockRelease(&tag, mode, false); });
			}
			PG_RETURN_BOOL(false);
		}
		results.push_back(result);
	}
	for (std::size_t i = 0; i < targets.size(); ++i)
		track_acquired(targets[i].tag, targets[i].shared, Level::transaction, results[i] == LOCKACQUIRE_OK,
		               targets[i].name, targets[i].resource);
	PG_RETURN_BOOL(true);
}
