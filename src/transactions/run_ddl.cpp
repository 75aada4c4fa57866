// CALL concurrency.run_ddl(statements, lock_timeout, max_duration,
// terminate_blockers_after): schema changes that never stall the
// application. Each attempt first takes the locks the statements will need
// (read from their parse trees, src/transactions/ddl_targets.hpp) without
// queueing; while someone holds a conflicting lock it waits outside the
// lock queue, so nobody piles up behind it, and it names who is in the way.
// It queues, for at most lock_timeout, only when the way is clear or when a
// stream of short holders keeps winning. The statements run with
// lock_timeout set, so any lock not known in advance is bounded too.
#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "diagnostics/lock_describe.hpp"
#include "locks/lock_keys.hpp"
#include "pg/datum.hpp"
#include "pg/spi.hpp"
#include "transactions/ddl_targets.hpp"
#include "transactions/engine.hpp"
#include "transactions/policy.hpp"

extern "C" {
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "nodes/makefuncs.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
}

namespace concurrency::transactions {

namespace {

constexpr std::int64_t notice_interval_us = 5'000'000; // one NOTICE per blocker per 5 s
constexpr std::int64_t resignal_interval_us = 1'000'000;

struct Lock {
	Oid relid;
	LOCKMODE mode;
	friend bool operator<(const Lock &a, const Lock &b) {
		return a.relid != b.relid ? a.relid < b.relid : a.mode < b.mode;
	}
	friend bool operator==(const Lock &a, const Lock &b) { return a.relid == b.relid && a.mode == b.mode; }
};

std::string mode_name(LOCKMODE mode) {
	return pg::guard([&] { return GetLockmodeName(DEFAULT_LOCKMETHOD, mode); });
}

// "AccessShareLock,RowShareLock,…": the modes that conflict with `mode`.
std::string conflicting_modes(LOCKMODE mode) {
	std::string list;
	for (LOCKMODE m = AccessShareLock; m <= MaxLockMode; ++m)
		if (pg::guard([&] { return DoLockModesConflict(m, mode); })) {
			if (!list.empty())
				list += ',';
			list += mode_name(m);
		}
	return list;
}

// The sessions that hold, or wait ahead of us for, a lock on `lock.relid`
// that conflicts with `lock.mode`, as pg_locks and pg_stat_activity show
// them to the caller (so other users' queries are masked as there).
std::vector<Blocker> find_blockers(const Lock &lock, const std::string &relation) {
	static const Oid types[] = {OIDOID, OIDOID, TEXTOID};
	pg::spi_connect();
	SPIPlanPtr plan = pg::prepared_plan(
	    "transactions:blockers",
	    "SELECT coalesce(l.pid, 0), a.application_name, a.state,"
	    "       pg_catalog.date_part('epoch', pg_catalog.clock_timestamp() - a.xact_start)::float8,"
	    "       a.query, l.mode, l.granted"
	    "  FROM pg_catalog.pg_locks l"
	    "  LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid"
	    " WHERE l.locktype = 'relation' AND l.database = $1 AND l.relation = $2"
	    "   AND l.mode = ANY (pg_catalog.string_to_array($3, ','))"
	    "   AND l.pid IS DISTINCT FROM pg_catalog.pg_backend_pid()"
	    " ORDER BY l.granted DESC, a.xact_start NULLS LAST, l.pid"
	    " LIMIT 20",
	    3, types);
	std::string modes = conflicting_modes(lock.mode);
	Datum modes_datum = pg::text_datum(modes);
	Datum values[] = {ObjectIdGetDatum(MyDatabaseId), ObjectIdGetDatum(lock.relid), modes_datum};
	uint64 n = pg::execute(plan, values, nullptr, true);
	std::vector<Blocker> blockers;
	for (uint64 i = 0; i < n; ++i) {
		Blocker b;
		b.pid = pg::column_as<std::int32_t>(i, 1).value_or(0);
		b.application = pg::text_column(i, 2).value_or("");
		b.state = pg::text_column(i, 3);
		b.xact_age_s = pg::column_as<double>(i, 4);
		b.query = pg::text_column(i, 5).value_or("");
		b.mode = pg::text_column(i, 6).value_or("");
		b.granted = pg::column_as<bool>(i, 7).value_or(false);
		b.relation = relation;
		if (b.pid == 0) {
			b.application = "a prepared transaction (see pg_prepared_xacts)";
			b.state.reset();
		}
		blockers.push_back(std::move(b));
	}
	pg::spi_finish();
	return blockers;
}

std::int64_t interval_micros(FunctionCallInfo fcinfo, int n, const char *argname, bool positive) {
	const Interval *value = PG_GETARG_INTERVAL_P(n);
	std::optional<std::int64_t> micros = locks::timeout_micros(value->month, value->day, value->time);
	if (!micros || (positive && *micros == 0))
		throw Error(sqlstate::invalid_parameter_value,
		            fmt::format("{} must be {}", argname, positive ? "positive" : "zero or positive"));
	return *micros;
}

class WaitPolitely final : public Policy {
  public:
	WaitPolitely(std::string statements, DdlPlan plan, std::int64_t lock_timeout_us,
	             std::int64_t max_duration_us, std::optional<std::int64_t> terminate_after_us)
	    : statements_(std::move(statements)), plan_(std::move(plan)), lock_timeout_us_(lock_timeout_us),
	      max_duration_us_(max_duration_us), terminate_after_us_(terminate_after_us),
	      log_(notice_interval_us) {
		start_ = GetCurrentTimestamp();
		deadline_ = max_duration_us > PG_INT64_MAX - start_ ? PG_INT64_MAX : start_ + max_duration_us;
	}

	void begin_attempt(int) override {
		attempt_start_ = GetCurrentTimestamp();
		std::string value = fmt::format("{}ms", locks::timeout_ms_for_lock_timeout(lock_timeout_us_));
		pg::guard([&] {
			(void)set_config_option("lock_timeout", value.c_str(), PGC_USERSET, PGC_S_SESSION,
			                        GUC_ACTION_LOCAL, true, 0, false);
		});
	}

	bool prepare(int) override {
		resolve_targets();
		blocked_ = std::nullopt;
		for (const Lock &lock : locks_) {
			acquiring_ = lock;
			if (approach_ == Approach::conditional) {
				if (!pg::guard([&] { return ConditionalLockRelationOid(lock.relid, lock.mode); })) {
					blocked_ = lock;
					return false;
				}
			} else {
				pg::guard([&] { LockRelationOid(lock.relid, lock.mode); }); // bounded by lock_timeout
			}
		}
		acquiring_ = std::nullopt;
		return true;
	}

	bool retryable(const char *sqlstate) const override { return ddl_retryable(sqlstate); }

	std::optional<std::int64_t> after_failure(int attempt, const ErrorData *error) override {
		++losses_;
		Approach tried = approach_;
		std::optional<Lock> on = blocked_ ? blocked_ : acquiring_;
		std::vector<Lock> looked_at = on ? std::vector<Lock>{*on} : locks_;
		std::vector<Blocker> blockers;
		for (const Lock &lock : looked_at) {
			std::vector<Blocker> found = find_blockers(lock, relation_name(lock.relid));
			blockers.insert(blockers.end(), found.begin(), found.end());
		}
		TimestampTz now = GetCurrentTimestamp();
		std::vector<std::size_t> due = log_.observe(blockers, now - start_);
		signal_blockers(now);
		approach_ =
		    next_approach(losses_, log_.anybody_in_last_look(), log_.all_short_lived(lock_timeout_us_));

		if (now >= deadline_)
			return std::nullopt;
		std::int64_t wait = wait_before_next(
		    backoff_delay_us(attempt, pg::random_unit(), ddl_backoff(lock_timeout_us_)), now, deadline_);
		if (!due.empty() || (blockers.empty() && now - last_unnamed_notice_ >= notice_interval_us)) {
			if (blockers.empty())
				last_unnamed_notice_ = now;
			report_attempt(attempt, tried, on, error, blockers, due, wait);
		}
		return wait;
	}

	void finish(Outcome outcome, int attempts, const ErrorData *error) override {
		TimestampTz now = GetCurrentTimestamp();
		waited_s_ = static_cast<double>((outcome == Outcome::done ? attempt_start_ : now) - start_) / 1e6;
		if (outcome == Outcome::done) {
			std::string text = success_notice(attempts, waited_s_);
			pg::guard([&] { ereport(NOTICE, (errmsg_internal("%s", text.c_str()))); });
		}
		write_log(outcome, attempts, error, now);
	}

	[[noreturn]] void give_up(int attempts, ErrorData *) override {
		throw Error(
		    sqlstate::lock_not_available,
		    fmt::format("run_ddl gave up: its locks were not obtained within max_duration ({})",
		                locks::human_duration(static_cast<double>(max_duration_us_) / 1e6)),
		    give_up_detail(attempts, waited_s_, log_.longest(3)),
		    "End or wait out the sessions in the way (concurrency.lock_tree shows them), or allow more "
		    "max_duration, or pass terminate_blockers_after.");
	}

  private:
	void resolve_targets() {
		locks_.clear();
		for (const DdlTarget &t : plan_.targets) {
			Oid relid = pg::guard([&] {
				RangeVar *rv = makeRangeVar(t.schema.empty() ? nullptr : pstrdup(t.schema.c_str()),
				                            pstrdup(t.name.c_str()), -1);
				return RangeVarGetRelid(rv, NoLock, true);
			});
			if (!OidIsValid(relid))
				continue; // not there (yet): created by an earlier statement, or a mistake the statement
				          // reports
			locks_.push_back(Lock{relid, t.mode});
			if (t.drop_index) {
				Oid table = pg::guard([&] {
					char kind = get_rel_relkind(relid);
					return kind == RELKIND_INDEX || kind == RELKIND_PARTITIONED_INDEX
					           ? IndexGetRelation(relid, true)
					           : InvalidOid;
				});
				if (OidIsValid(table))
					locks_.push_back(Lock{table, AccessExclusiveLock});
			}
		}
		// one order for every caller, each lock once
		std::sort(locks_.begin(), locks_.end());
		locks_.erase(std::unique(locks_.begin(), locks_.end()), locks_.end());
	}

	std::string relation_name(Oid relid) {
		LOCKTAG tag;
		SET_LOCKTAG_RELATION(tag, MyDatabaseId, relid);
		return describer_.describe(tag);
	}

	void report_attempt(int attempt, Approach tried, const std::optional<Lock> &on, const ErrorData *error,
	                    const std::vector<Blocker> &blockers, const std::vector<std::size_t> &due,
	                    std::int64_t wait) {
		std::string what;
		if (on && tried == Approach::conditional && !error)
			what = fmt::format("{} on {} is taken; waiting without queueing", mode_name(on->mode),
			                   relation_name(on->relid));
		else if (on)
			what = fmt::format("{} on {} not obtained within lock_timeout", mode_name(on->mode),
			                   relation_name(on->relid));
		else
			what = fmt::format("the statements failed with SQLSTATE {}", pg::sqlstate_of(error).code);
		std::string message = fmt::format("run_ddl: attempt {}: {}; next attempt in {}", attempt, what,
		                                  locks::human_duration(static_cast<double>(wait) / 1e6));
		std::string detail;
		for (std::size_t i : due) {
			if (!detail.empty())
				detail += "\n";
			detail += "In the way: " + describe_blocker(blockers[i]) + ".";
		}
		if (blockers.empty())
			detail = on ? "Nobody holds a conflicting lock on it any more: they finished while it looked."
			            : "Nobody holds a conflicting lock on the relations named in the statements: the "
			              "lock it waited "
			              "for was one that could not be known in advance.";
		if (error && error->message)
			detail += fmt::format("\nThe error was: {}", error->message);
		pg::guard([&] {
			ereport(NOTICE,
			        (errmsg_internal("%s", message.c_str()), errdetail_internal("%s", detail.c_str())));
		});
	}

	// After terminate_blockers_after: idle-in-transaction holders are
	// terminated, active ones cancelled, each reported.
	void signal_blockers(TimestampTz now) {
		if (!terminate_after_us_ || now - start_ < *terminate_after_us_)
			return;
		for (const Blocker &b : log_.last_look()) {
			if (b.pid == 0)
				continue; // a prepared transaction: nobody to signal
			auto last = signalled_.find(b.pid);
			if (last != signalled_.end() && now - last->second < resignal_interval_us)
				continue;
			signalled_[b.pid] = now;
			Signal signal = signal_for(b);
			bool sent = false;
			ErrorData *failure = pg::in_subtransaction([&] {
				static const Oid types[] = {INT4OID};
				pg::spi_connect();
				SPIPlanPtr plan = pg::prepared_plan(
				    signal == Signal::terminate ? "transactions:terminate" : "transactions:cancel",
				    signal == Signal::terminate ? "SELECT pg_catalog.pg_terminate_backend($1)"
				                                : "SELECT pg_catalog.pg_cancel_backend($1)",
				    1, types);
				Datum values[] = {Int32GetDatum(b.pid)};
				if (pg::execute(plan, values, nullptr, false) == 1)
					sent = pg::column_as<bool>(0, 1).value_or(false);
				pg::spi_finish();
			});
			std::string message;
			if (failure)
				message = fmt::format("run_ddl: could not signal pid {}: {}", b.pid,
				                      failure->message ? failure->message : "");
			else if (sent)
				message =
				    fmt::format("run_ddl: {} pid {} after terminate_blockers_after ({}): {}",
				                signal == Signal::terminate ? "terminated" : "cancelled the query of", b.pid,
				                locks::human_duration(static_cast<double>(*terminate_after_us_) / 1e6),
				                describe_blocker(b));
			if (sent && std::find(terminated_.begin(), terminated_.end(), b.pid) == terminated_.end())
				terminated_.push_back(b.pid);
			if (!message.empty())
				pg::guard([&] { ereport(NOTICE, (errmsg_internal("%s", message.c_str()))); });
		}
	}

	// One row in concurrency.ddl_log, written as the table's owner (callers
	// may read their own rows, through row security, but not write any).
	void write_log(Outcome outcome, int attempts, const ErrorData *error, TimestampTz now) {
		const char *outcome_text = outcome == Outcome::done     ? "done"
		                           : outcome == Outcome::failed ? "failed"
		                                                        : "gave up";
		std::string error_text;
		if (outcome == Outcome::failed && error)
			error_text =
			    fmt::format("{}: {}", pg::sqlstate_of(error).code, error->message ? error->message : "");
		else if (outcome == Outcome::gave_up)
			error_text = fmt::format("55P03: locks not obtained within max_duration ({})",
			                         locks::human_duration(static_cast<double>(max_duration_us_) / 1e6));
		std::string pids = "{";
		for (std::size_t i = 0; i < terminated_.size(); ++i)
			pids += (i ? "," : "") + std::to_string(terminated_[i]);
		pids += "}";

		Oid caller = GetUserId();
		pg::spi_connect();
		SPIPlanPtr owner_plan = pg::prepared_plan("transactions:ddl_log_owner",
		                                          "SELECT c.relowner FROM pg_catalog.pg_class c WHERE c.oid "
		                                          "= 'concurrency.ddl_log'::pg_catalog.regclass",
		                                          0, nullptr);
		pg::execute(owner_plan, nullptr, nullptr, true, 1);
		bool isnull = false;
		Oid owner = DatumGetObjectId(pg::column(0, 1, &isnull));

		static const Oid types[] = {OIDOID,    TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT4OID,
		                            FLOAT8OID, TEXTOID, TEXTOID,        TEXTOID};
		SPIPlanPtr plan = pg::prepared_plan("transactions:ddl_log_insert",
		                                    "INSERT INTO concurrency.ddl_log (run_by, statements, started, "
		                                    "finished, attempts, waited, outcome, error,"
		                                    "                                 blockers_terminated)"
		                                    " VALUES (pg_catalog.pg_get_userbyid($1), $2, $3, $4, $5, "
		                                    "pg_catalog.make_interval(secs => $6), $7, $8,"
		                                    "         $9::pg_catalog.int4[])",
		                                    9, types);
		Datum values[] = {
		    ObjectIdGetDatum(caller),     pg::text_datum(statements_), TimestampTzGetDatum(start_),
		    TimestampTzGetDatum(now),     Int32GetDatum(attempts),     Float8GetDatum(waited_s_),
		    pg::text_datum(outcome_text), pg::text_datum(error_text),  pg::text_datum(pids)};
		const char nulls[] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', error_text.empty() ? 'n' : ' ', ' '};
		Oid saved_user;
		int saved_context;
		GetUserIdAndSecContext(&saved_user, &saved_context);
		SetUserIdAndSecContext(owner,
		                       saved_context | SECURITY_LOCAL_USERID_CHANGE | SECURITY_RESTRICTED_OPERATION);
		try {
			pg::execute(plan, values, nulls, false);
		} catch (...) {
			SetUserIdAndSecContext(saved_user, saved_context);
			throw;
		}
		SetUserIdAndSecContext(saved_user, saved_context);
		pg::spi_finish();
	}

	std::string statements_;
	DdlPlan plan_;
	std::int64_t lock_timeout_us_;
	std::int64_t max_duration_us_;
	std::optional<std::int64_t> terminate_after_us_;
	TimestampTz start_ = 0, deadline_ = 0, attempt_start_ = 0;
	TimestampTz last_unnamed_notice_ = 0;
	Approach approach_ = Approach::conditional;
	int losses_ = 0;
	BlockerLog log_;
	std::vector<Lock> locks_;
	std::optional<Lock> blocked_, acquiring_;
	std::map<int, TimestampTz> signalled_;
	std::vector<int> terminated_;
	double waited_s_ = 0;
	diagnostics::LockDescriber describer_;
};

} // namespace

} // namespace concurrency::transactions

using namespace concurrency;
using namespace concurrency::transactions;

CONCURRENCY_FUNCTION(concurrency_run_ddl) {
	std::string statements = pg::text_arg(fcinfo, 0, "statements");
	pg::require_arg(fcinfo, 1, "lock_timeout");
	pg::require_arg(fcinfo, 2, "max_duration");
	std::int64_t lock_timeout_us = interval_micros(fcinfo, 1, "lock_timeout", true);
	if (lock_timeout_us > static_cast<std::int64_t>(INT_MAX) * 1000)
		throw Error(sqlstate::invalid_parameter_value, "lock_timeout must be less than 24 days");
	std::int64_t max_duration_us = interval_micros(fcinfo, 2, "max_duration", false);
	std::optional<std::int64_t> terminate_after_us;
	if (!PG_ARGISNULL(3))
		terminate_after_us = interval_micros(fcinfo, 3, "terminate_blockers_after", false);
	require_nonatomic(fcinfo, "concurrency.run_ddl");
	if (terminate_after_us &&
	    !pg::guard([] { return superuser() || has_privs_of_role(GetUserId(), ROLE_PG_SIGNAL_BACKEND); }))
		throw Error(
		    sqlstate::insufficient_privilege,
		    "terminate_blockers_after needs the right to signal other sessions",
		    "Only superusers and members of pg_signal_backend may terminate or cancel other sessions.",
		    "Grant pg_signal_backend to the role that runs migrations, or leave terminate_blockers_after "
		    "NULL.");
	List *parsed = parse_statements(statements);
	WaitPolitely policy(statements, ddl_plan(parsed), lock_timeout_us, max_duration_us, terminate_after_us);
	run_attempts(fcinfo, "concurrency.run_ddl", statements, policy);
	PG_RETURN_VOID();
}
