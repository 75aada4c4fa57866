// Taking and releasing named locks: xact_lock, try_xact_lock, the ordered
// multi-lock, session_lock, try_session_lock, session_unlock.
//
// Locks go straight to the lock manager (LockAcquire on an advisory tag), as
// pg_advisory_lock does; see locks/lock_keys.hpp for the tags. A timeout is
// PostgreSQL's own lock_timeout: the variable behind the setting is lowered
// for the duration of the one LockAcquire call, so the lock manager's timer
// ends the wait (no polling). Its 55P03 is caught and replaced by an error
// that names the holder.
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
	Subsystem subsystem; // a copy: a later lookup may reload the cache
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

// The name argument without a copy; only a compressed or out-of-line value is
// detoasted (never the case for a literal or a short parameter).
std::string_view name_arg(FunctionCallInfo fcinfo, int n, const char *argname) {
	pg::require_arg(fcinfo, n, argname);
	auto *value = reinterpret_cast<struct varlena *>(DatumGetPointer(PG_GETARG_DATUM(n)));
	if (VARATT_IS_COMPRESSED(value) || VARATT_IS_EXTERNAL(value))
		value = pg::guard([&] { return pg_detoast_datum_packed(value); });
	return std::string_view(VARDATA_ANY(value), VARSIZE_ANY_EXHDR(value));
}

std::optional<std::int64_t> resource_arg(FunctionCallInfo fcinfo, int n) {
	if (PG_ARGISNULL(n))
		return std::nullopt;
	return PG_GETARG_INT64(n);
}

bool shared_arg(FunctionCallInfo fcinfo, int n) {
	pg::require_arg(fcinfo, n, "shared");
	return PG_GETARG_BOOL(n);
}

std::optional<Deadline> deadline_arg(FunctionCallInfo fcinfo, int n) {
	if (PG_ARGISNULL(n))
		return std::nullopt;
	const Interval *timeout = PG_GETARG_INTERVAL_P(n);
	std::optional<std::int64_t> micros = timeout_micros(timeout->month, timeout->day, timeout->time);
	if (!micros)
		throw Error(sqlstate::invalid_parameter_value, "timeout must not be negative", "",
		            "Give the longest wait you accept, or NULL to wait as long as lock_timeout allows.");
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz at = *micros > std::numeric_limits<TimestampTz>::max() - now ? std::numeric_limits<TimestampTz>::max()
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
	            coordinator.empty() ? "Take named locks through the Citus coordinator."
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
		throw Error(sqlstate::invalid_transaction_state, "cannot take named locks during a parallel operation");
	if (level == Level::session && t.subsystem.xact_only)
		throw Error(sqlstate::insufficient_privilege,
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

std::optional<std::string> nullable_text(HeapTuple row, TupleDesc desc, int column) {
	bool isnull = false;
	Datum d = pg::guard([&] { return SPI_getbinval(row, desc, column, &isnull); });
	if (isnull)
		return std::nullopt;
	text *t = pg::guard([&] { return DatumGetTextPP(d); });
	return std::string(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
}

Datum column(HeapTuple row, TupleDesc desc, int n, bool *isnull) {
	return pg::guard([&] { return SPI_getbinval(row, desc, n, isnull); });
}

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
	Datum values[] = {ObjectIdGetDatum(MyDatabaseId), ObjectIdGetDatum(t.tag.high), ObjectIdGetDatum(t.tag.low),
	                  Int32GetDatum(t.tag.klass), BoolGetDatum(!t.shared)};
	uint64 n = pg::spi_execute_plan(plan, values, nullptr, true);
	std::vector<LockHolder> holders;
	total = 0;
	bool granted_seen = false;
	for (uint64 i = 0; i < n; ++i) {
		HeapTuple row = SPI_tuptable->vals[i];
		TupleDesc desc = SPI_tuptable->tupdesc;
		bool isnull = false;
		LockHolder h;
		Datum granted = column(row, desc, 6, &isnull);
		h.granted = !isnull && DatumGetBool(granted);
		if (granted_seen && !h.granted)
			break; // waiters matter only when no conflicting holder is left
		granted_seen = granted_seen || h.granted;
		Datum count = column(row, desc, 8, &isnull);
		total = static_cast<std::size_t>(DatumGetInt64(count));
		if (holders.size() >= 5)
			continue;
		Datum pid = column(row, desc, 1, &isnull);
		if (!isnull)
			h.pid = DatumGetInt32(pid);
		h.application = nullable_text(row, desc, 2).value_or("");
		h.state = nullable_text(row, desc, 3);
		Datum in_xact = column(row, desc, 4, &isnull);
		h.in_transaction = !isnull && DatumGetBool(in_xact);
		Datum seconds = column(row, desc, 5, &isnull);
		if (!isnull)
			h.seconds = DatumGetFloat8(seconds);
		h.mode = nullable_text(row, desc, 7).value_or("");
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
	std::string detail;
	std::string hint = "See concurrency.held_locks for every named lock and its holder.";
	try {
		std::size_t total = 0;
		std::vector<LockHolder> holders = find_holders(t, total);
		detail = describe_holders(holders, total);
		if (held_by_idle_session(holders))
			hint = "A session idle outside any transaction holds it: a session-level lock, often one left behind by "
			       "a connection pool (concurrency.held_locks shows it with suspect_leak).";
	} catch (const pg::PgException &e) {
		// The transaction is aborted by the error below anyway.
		detail = fmt::format("Its holder could not be determined: {}.", e.what());
	}
	throw Error(sqlstate::lock_not_available,
	            fmt::format("could not obtain {} within {}",
	                        lock_description(std::string(t.name), t.resource, t.shared), limit.describe()),
	            detail, hint);
}

// Takes `t`, waiting until it is granted, until `deadline`, or until the
// session's own lock_timeout, whichever comes first.
void take(const Target &t, Level level, const std::optional<Deadline> &deadline) {
	WaitLimit limit{true, 0, LockTimeout}; // the session's lock_timeout (0: none)
	int wait_ms = LockTimeout;
	if (deadline) {
		TimestampTz remaining = deadline->at - GetCurrentTimestamp();
		if (remaining <= 0 || deadline->micros == 0) {
			if (!try_take(t, level))
				fail_timeout(t, WaitLimit{false, deadline->micros, 0});
			return;
		}
		int ours = timeout_ms_for_lock_timeout(remaining);
		if (wait_ms <= 0 || ours < wait_ms) {
			wait_ms = ours;
			limit = WaitLimit{false, deadline->micros, 0};
		}
	}

	LockAcquireResult result;
	try {
		LockTimeoutOverride timeout(wait_ms);
		result = lock_acquire(t, level, false);
	} catch (const pg::PgException &e) {
		if (e.sqlerrcode() != ERRCODE_LOCK_NOT_AVAILABLE)
			throw; // deadlock, cancel, statement_timeout: as they are
		// The timer ended the wait. ProcessInterrupts has left the wait queue
		// already (LockErrorCleanup; again here, it is idempotent); if the lock
		// was granted at that very moment, it is now ours.
		pg::guard([] { LockErrorCleanup(); });
		LockAcquireResult again = lock_acquire(t, level, true);
		if (again == LOCKACQUIRE_NOT_AVAIL)
			fail_timeout(t, limit);
		if (again == LOCKACQUIRE_ALREADY_HELD) {
			// granted as the timer fired: drop the hold this retry added
			LOCKTAG tag = t.locktag();
			LOCKMODE mode = t.mode();
			bool session = level == Level::session;
			pg::guard([&] { LockRelease(&tag, mode, session); });
		}
		track_acquired(t.tag, t.shared, level, true, t.name, t.resource);
		return;
	}
	track_acquired(t.tag, t.shared, level, result == LOCKACQUIRE_OK, t.name, t.resource);
}

} // namespace

} // namespace concurrency::locks

using namespace concurrency;
using namespace concurrency::locks;

// concurrency.xact_lock(name, resource, timeout, shared)
CONCURRENCY_FUNCTION(concurrency_xact_lock) {
	std::string_view name = name_arg(fcinfo, 0, "name");
	bool shared = shared_arg(fcinfo, 3);
	Target t = resolve(name, resource_arg(fcinfo, 1), shared);
	check_can_lock(t, Level::transaction);
	take(t, Level::transaction, deadline_arg(fcinfo, 2));
	PG_RETURN_VOID();
}

// concurrency.try_xact_lock(name, resource, shared)
CONCURRENCY_FUNCTION(concurrency_try_xact_lock) {
	std::string_view name = name_arg(fcinfo, 0, "name");
	bool shared = shared_arg(fcinfo, 2);
	Target t = resolve(name, resource_arg(fcinfo, 1), shared);
	check_can_lock(t, Level::transaction);
	PG_RETURN_BOOL(try_take(t, Level::transaction));
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
		auto *value = reinterpret_cast<struct varlena *>(DatumGetPointer(elements[i]));
		if (VARATT_IS_COMPRESSED(value) || VARATT_IS_EXTERNAL(value))
			value = pg::guard([&] { return pg_detoast_datum_packed(value); });
		targets.push_back(resolve(std::string_view(VARDATA_ANY(value), VARSIZE_ANY_EXHDR(value)), std::nullopt, false));
	}
	std::optional<Deadline> deadline = deadline_arg(fcinfo, 1);
	for (const Target &t : targets)
		check_can_lock(t, Level::transaction);

	std::sort(targets.begin(), targets.end(),
	          [](const Target &a, const Target &b) { return a.subsystem.key < b.subsystem.key; });
	targets.erase(std::unique(targets.begin(), targets.end(),
	                          [](const Target &a, const Target &b) { return a.subsystem.key == b.subsystem.key; }),
	              targets.end());
	for (const Target &t : targets)
		take(t, Level::transaction, deadline);
	PG_RETURN_VOID();
}

// concurrency.session_lock(name, resource, timeout, shared)
CONCURRENCY_FUNCTION(concurrency_session_lock) {
	std::string_view name = name_arg(fcinfo, 0, "name");
	bool shared = shared_arg(fcinfo, 3);
	Target t = resolve(name, resource_arg(fcinfo, 1), shared);
	check_can_lock(t, Level::session);
	take(t, Level::session, deadline_arg(fcinfo, 2));
	PG_RETURN_VOID();
}

// concurrency.try_session_lock(name, resource, shared)
CONCURRENCY_FUNCTION(concurrency_try_session_lock) {
	std::string_view name = name_arg(fcinfo, 0, "name");
	bool shared = shared_arg(fcinfo, 2);
	Target t = resolve(name, resource_arg(fcinfo, 1), shared);
	check_can_lock(t, Level::session);
	PG_RETURN_BOOL(try_take(t, Level::session));
}

// concurrency.session_unlock(name, resource, shared): one hold fewer; false,
// with the lock manager's WARNING, when this session holds none.
CONCURRENCY_FUNCTION(concurrency_session_unlock) {
	std::string_view name = name_arg(fcinfo, 0, "name");
	bool shared = shared_arg(fcinfo, 2);
	Target t = resolve(name, resource_arg(fcinfo, 1), shared);
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
	pg::guard([&] { deconstruct_array(array, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE, &elements, &nulls, &count); });
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
	std::string_view name = name_arg(fcinfo, 0, "name");
	std::vector<std::int64_t> resources = resources_arg(fcinfo, 1);
	bool shared = shared_arg(fcinfo, 3);
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
	std::string_view name = name_arg(fcinfo, 0, "name");
	std::vector<std::int64_t> resources = resources_arg(fcinfo, 1);
	bool shared = shared_arg(fcinfo, 2);
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
