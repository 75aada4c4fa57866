// Per-backend queue cache, plan runner and result sets of the task queue.
#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "pg/invalidation.hpp"
#include "pg/relation.hpp"
#include "common/names.hpp"
#include "citus/node.hpp"
#include "common/sql_text.hpp"
#include "queue/queue.hpp"
#include "queue/shard.hpp"
#include "queue/lifecycle/claim_direct.hpp"
#include "queue/time/notifier.hpp"
#include "queue/flow/rate.hpp"
#include "queue/time/wait.hpp"

extern "C" {
#include "access/genam.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "executor/tuptable.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "utils/acl.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
}

namespace concurrency::queue {

namespace {
DistributedHooks distributed_hooks; // set by queue/distributed/ at start-up
} // namespace

namespace {

// The cache: queue name -> QueueInfo, in a memory context of its own under
// TopMemoryContext (it lives as long as the backend). Entries are never
// removed by an invalidation, only marked invalid, so a QueueInfo pointer
// stays good for the whole call that holds it; forget_queue removes one.
HTAB *queue_table = nullptr;
Oid catalog_relid = InvalidOid; // concurrency.queue, once known

HTAB *queues() {
	if (!queue_table) {
		HASHCTL ctl;
		std::memset(&ctl, 0, sizeof ctl);
		ctl.keysize = max_queue_key_bytes + 1;
		ctl.entrysize = sizeof(QueueInfo);
		queue_table = pg::guard([&] {
			ctl.hcxt =
			    AllocSetContextCreate(TopMemoryContext, "concurrency_ext queues", ALLOCSET_SMALL_SIZES);
			return hash_create("concurrency_ext queues", 16, &ctl, HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
		});
	}
	return queue_table;
}

// Invalidation callbacks: they run at any invalidation point (even inside
// a statement of ours), so they only flip flags.
void invalidate(Oid relid, bool privileges_only) {
	if (!queue_table)
		return;
	HASH_SEQ_STATUS status;
	hash_seq_init(&status, queue_table);
	while (auto *info = static_cast<QueueInfo *>(hash_seq_search(&status))) {
		if (privileges_only)
			info->acl_role = InvalidOid;
		else if (relid == InvalidOid || relid == catalog_relid || relid == info->relid)
			info->valid = false;
	}
}

void relation_changed(Datum, Oid relid) {
	invalidate(relid, false);
}
void roles_changed(Datum, int, uint32) {
	invalidate(InvalidOid, true);
}

void free_plans(QueueInfo &info) {
	for (SPIPlanPtr &plan : info.plans) {
		if (plan)
			pg::guard([&] { SPI_freeplan(plan); });
		plan = nullptr;
	}
}

// Plan keys of the statements kept by string: "queue:<name>\x1f<op>". A queue
// name has no control characters, so the prefix "queue:<name>\x1f" names the
// plans of exactly one queue.
std::string plan_prefix(std::string_view queue) {
	return fmt::format("queue:{}\x1f", queue);
}

// Piggy-backed purge: a chunk at most this often per backend and queue while
// the chunks come back short, at once while they come back full.
constexpr int32 purge_chunk = 500;
constexpr TimestampTz purge_interval_us = 1'000'000;

void load_settings(QueueInfo &info) {
	static const Oid types[1] = {TEXTOID};
	SPIPlanPtr plan = nullptr;
	try {
		plan = pg::prepared_plan("queue-catalog:settings", catalog_sql::settings, 1, types,
		                         CURSOR_OPT_GENERIC_PLAN);
	} catch (const pg::PgException &e) {
		// a 0.1.0 catalog under the 0.2.0 module: the package was upgraded,
		// the extension not yet
		if (e.sqlerrcode() == ERRCODE_UNDEFINED_COLUMN)
			throw Error(sqlstate::object_not_in_prerequisite_state,
			            "the queue catalog of concurrency_ext is older than its module",
			            "The installed module is 0.2.0; the extension in this database is still 0.1.0.",
			            "Run ALTER EXTENSION concurrency_ext UPDATE.");
		throw;
	}
	Datum values[1] = {pg::text_datum(info.name)};
	// what is committed now, not the statement's snapshot: a waiting dequeue
	// reloads the settings between its looks and must see a resume committed
	// while it slept (pause_queue)
	if (pg::execute(plan, values, nullptr, true, 1, pg::Visibility::latest) != 1)
		throw Error(sqlstate::undefined_object, fmt::format("queue \"{}\" does not exist", info.name),
		            fmt::format("Table concurrency.{} exists, but the queue is not in concurrency.queue.",
		                        quote_ident(queue_table_name(info.name))));
	bool isnull = false;
	info.lease = *DatumGetIntervalP(column(0, 1, &isnull));
	info.max_attempts = DatumGetInt32(column(0, 2, &isnull));
	Datum retain = column(0, 3, &isnull);
	info.has_retain = !isnull;
	info.retain = isnull ? Interval{} : *DatumGetIntervalP(retain);
	Datum key_limit = column(0, 4, &isnull);
	info.key_limit = isnull ? 0 : DatumGetInt32(key_limit);
	Datum max_leased = column(0, 5, &isnull);
	info.max_leased = isnull ? 0 : DatumGetInt32(max_leased);
	Datum paused = column(0, 6, &isnull);
	info.paused = !isnull && DatumGetBool(paused);
	Datum rate_limit = column(0, 7, &isnull);
	info.rate_limit = isnull ? 0 : DatumGetInt32(rate_limit);
	Datum rate_period = column(0, 8, &isnull);
	info.rate_period = isnull || info.rate_limit == 0 ? Interval{} : *DatumGetIntervalP(rate_period);
	Datum fair = column(0, 9, &isnull);
	info.fair = !isnull && DatumGetBool(fair);
	Datum key_rate_limit = column(0, 10, &isnull);
	info.key_rate_limit = isnull ? 0 : DatumGetInt32(key_rate_limit);
	Datum key_rate_period = column(0, 11, &isnull);
	info.key_rate_period =
	    isnull || info.key_rate_limit == 0 ? Interval{} : *DatumGetIntervalP(key_rate_period);
}

// The OID of index q_<queue>_<suffix> (42704 when it is missing: the queue
// table was changed by hand).
Oid index_relid(std::string_view queue, std::string_view suffix) {
	std::string index = queue_index_name(queue, suffix);
	Oid relid = concurrency_relid(index);
	if (!OidIsValid(relid))
		throw Error(sqlstate::undefined_object,
		            fmt::format("index concurrency.{} does not exist", quote_ident(index)),
		            fmt::format("Queue \"{}\" needs it to find due tasks.", queue),
		            "Drop the queue and create it again, or re-create the index as create_queue does.");
	return relid;
}

// Whether `index` (on one timestamptz column: run_at, lease_expires_at,
// finished_at) has an entry between `floor` (if any) and `now` whose row
// `snapshot` sees. Runs inside pg::guard.
bool due_entry(Relation heap, Oid index, Snapshot snapshot, std::optional<TimestampTz> floor,
               TimestampTz now) {
	Relation irel = index_open(index, AccessShareLock);
	ScanKeyData keys[2];
	int nkeys = 0;
	if (floor)
		ScanKeyInit(&keys[nkeys++], 1, BTGreaterEqualStrategyNumber, F_TIMESTAMPTZ_GE,
		            TimestampTzGetDatum(*floor));
	ScanKeyInit(&keys[nkeys++], 1, BTLessEqualStrategyNumber, F_TIMESTAMPTZ_LE, TimestampTzGetDatum(now));
	IndexScanDesc scan = pg::begin_index_scan(heap, irel, snapshot, nkeys);
	index_rescan(scan, keys, nkeys, nullptr, 0);
	TupleTableSlot *slot = table_slot_create(heap, nullptr);
	bool found = index_getnext_slot(scan, ForwardScanDirection, slot);
	ExecDropSingleTupleTableSlot(slot);
	index_endscan(scan);
	index_close(irel, NoLock);
	return found;
}

// Whether the queue may hold a task for purge to remove: its finished index
// has an entry at or before `cutoff` whose row this statement's snapshot
// sees. Where it cannot tell (a shard, whose index is not looked up; the
// index missing; the queue changed meanwhile), the purge statement decides.
// A queue without retention deletes its tasks as they finish, and one with
// retention keeps them for hours or days: most purges would find nothing,
// and the probe spares them the statement (in a new session, its planning).
bool may_purge(QueueInfo &info, TimestampTz cutoff) {
	if (info.shard_id != 0)
		return true;
	if (!OidIsValid(info.finished_index)) {
		info.finished_index = concurrency_relid(queue_index_name(info.name, "finished"));
		if (!OidIsValid(info.finished_index))
			return true;
	}
	return pg::guard([&] {
		Relation heap = try_table_open(info.relid, AccessShareLock);
		if (!heap)
			return true; // dropped since: the statement says so
		bool found = true;
		if (info.valid) { // (else changed meanwhile: the index OID may be stale)
			Snapshot snapshot =
			    RegisterSnapshot(ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot());
			found = due_entry(heap, info.finished_index, snapshot, std::nullopt, cutoff);
			UnregisterSnapshot(snapshot);
		}
		table_close(heap, NoLock);
		return found;
	});
}

// Brings an invalid entry up to date: the table's OID (42704 when the queue
// is gone), the settings, and, for a new incarnation of the queue, fresh
// plans and cursor.
void revalidate(QueueInfo &info) {
	// Valid from here on: an invalidation that arrives while we read (taking
	// a lock processes pending ones) flips it back for the next call.
	info.valid = true;
	info.acl_role = InvalidOid;
	try {
		if (!OidIsValid(catalog_relid))
			catalog_relid = concurrency_relid("queue");
		Oid relid = info.shard_id != 0 ? concurrency_relid(info.shard_relname) : queue_relid(info.name);
		if (!OidIsValid(relid) && info.shard_id != 0)
			throw Error(sqlstate::undefined_object,
			            fmt::format("shard {} of queue \"{}\" is not on this node", info.shard_id, info.name),
			            "It was moved or dropped while this call was running.", "Call again.");
		if (!OidIsValid(relid)) {
			if (citus::local_role().role == citus::Role::worker) {
				// a local queue of the coordinator, asked for on a worker node
				std::string coordinator = citus::coordinator_address();
				throw Error(sqlstate::undefined_object,
				            fmt::format("queue \"{}\" does not exist on this Citus worker node", info.name),
				            "A worker node serves the distributed queues of the cluster; a queue that is not "
				            "distributed lives on the server where it was created.",
				            coordinator.empty()
				                ? std::string("Call it on the coordinator.")
				                : fmt::format("Call it on the coordinator ({}).", coordinator));
			}
			throw Error(sqlstate::undefined_object, fmt::format("queue \"{}\" does not exist", info.name), "",
			            "Create it with concurrency.create_queue().");
		}
		info.owner = relation_owner(relid);
		// looked up by the first claim that probes them (tasks_wait): the
		// other functions do not need them (a shard's are set by open)
		if (info.shard_id == 0) {
			info.scheduled_index = InvalidOid;
			info.leased_index = InvalidOid;
			info.ready_index = InvalidOid;
		}
		info.finished_index = InvalidOid;
		info.token_sequence = InvalidOid;
		pg::guard([&] { forget_direct(info); });
		// the columns of dependencies (added by the update from 0.2.0): the
		// statements are written for what the table has
		bool links = pg::guard([&] {
			return get_attnum(relid, "parents") != InvalidAttrNumber &&
			       OidIsValid(get_relname_relid("task_dependency", get_rel_namespace(relid)));
		});
		if (relid != info.relid || links != info.links) {
			info.links = links;
			free_plans(info);
			std::string prefix = plan_prefix(info.key);
			pg::guard([&] { pg::forget_plans(prefix.c_str()); });
			info.cursor = ClaimCursor();
			info.horizon = HorizonSampler();
			info.next_purge = 0;
			info.relid = relid;
		}
		load_settings(info);
	} catch (...) {
		info.valid = false;
		throw;
	}
}

} // namespace

void cache_init() {
	pg::register_relcache_callback(relation_changed, (Datum)0);
	CacheRegisterSyscacheCallback(AUTHMEMROLEMEM, roles_changed, (Datum)0);
	CacheRegisterSyscacheCallback(AUTHOID, roles_changed, (Datum)0);
}

Oid concurrency_relid(const std::string &relname) {
	return pg::guard([&] {
		Oid nsp = get_namespace_oid("concurrency", true);
		return OidIsValid(nsp) ? get_relname_relid(relname.c_str(), nsp) : InvalidOid;
	});
}

void TableGeneration::start() {
	pg::register_relcache_callback(changed, PointerGetDatum(this));
}

void TableGeneration::changed(Datum arg, Oid relid) {
	auto *self = reinterpret_cast<TableGeneration *>(DatumGetPointer(arg));
	if (!OidIsValid(relid) || !OidIsValid(self->relid_) || relid == self->relid_) {
		++self->generation_;
		self->relid_ = InvalidOid;
	}
}

Oid TableGeneration::relid() {
	if (!OidIsValid(relid_))
		relid_ = concurrency_relid(relname_);
	return relid_;
}

Oid queue_relid(std::string_view queue) {
	return concurrency_relid(queue_table_name(queue));
}

TimestampTz clock_now() {
	return pg::guard([] { return GetCurrentTimestamp(); });
}

Oid relation_owner(Oid relid) {
	Oid owner = pg::guard([&] {
		HeapTuple tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
		if (!HeapTupleIsValid(tuple))
			return InvalidOid;
		Oid relowner = reinterpret_cast<Form_pg_class>(GETSTRUCT(tuple))->relowner;
		ReleaseSysCache(tuple);
		return relowner;
	});
	if (!OidIsValid(owner))
		throw Error(sqlstate::internal_error, fmt::format("cache lookup failed for relation {}", relid));
	return owner;
}

bool claim_relations(QueueInfo &info) {
	if (!OidIsValid(info.ready_index) || !OidIsValid(info.token_sequence)) {
		if (info.shard_id == 0)
			info.ready_index = concurrency_relid(queue_index_name(info.name, "ready"));
		info.token_sequence = concurrency_relid("lease_token");
	}
	return OidIsValid(info.ready_index) && OidIsValid(info.token_sequence);
}

void forget_queue(std::string_view queue) {
	// the plans of the queue and of its shards ("queue:<name>\x1f<shard>\x1f…")
	std::string prefix = plan_prefix(queue);
	pg::guard([&] { pg::forget_plans(prefix.c_str()); });
	HTAB *table = queues();
	std::vector<std::string> keys;
	HASH_SEQ_STATUS status;
	pg::guard([&] { hash_seq_init(&status, table); });
	while (auto *info = static_cast<QueueInfo *>(hash_seq_search(&status)))
		if (queue == info->name)
			keys.emplace_back(info->key);
	for (const std::string &k : keys) {
		char key[max_queue_key_bytes + 1] = {};
		std::memcpy(key, k.data(), std::min(k.size(), max_queue_key_bytes));
		auto *info =
		    static_cast<QueueInfo *>(pg::guard([&] { return hash_search(table, key, HASH_FIND, nullptr); }));
		if (!info)
			continue;
		free_plans(*info);
		pg::guard([&] { forget_direct(*info); });
		pg::guard([&] { hash_search(table, key, HASH_REMOVE, nullptr); });
	}
}

Queue::Queue(std::string_view name) : info_(nullptr) {
	char key[max_queue_key_bytes + 1] = {};
	std::memcpy(key, name.data(), std::min(name.size(), max_queue_name_bytes));
	open(key, name, nullptr);
}

Queue::Queue(std::string_view name, const LocalShard &shard) : info_(nullptr) {
	char key[max_queue_key_bytes + 1] = {};
	std::string k = fmt::format("{}\x1f{}", name.substr(0, max_queue_name_bytes), shard.shard_id);
	std::memcpy(key, k.data(), std::min(k.size(), max_queue_key_bytes));
	open(key, name, &shard);
}

void Queue::open(const char *key, std::string_view name, const LocalShard *shard) {
	HTAB *table = queues();
	bool found = false;
	auto *info =
	    static_cast<QueueInfo *>(pg::guard([&] { return hash_search(table, key, HASH_ENTER, &found); }));
	if (!found) {
		// the key is in place; the rest is constructed here
		std::memset(info->name, 0, sizeof info->name);
		std::memcpy(info->name, name.data(), std::min(name.size(), max_queue_name_bytes));
		info->shard_id = 0;
		info->shard_relname[0] = '\0';
		info->key_relname[0] = '\0';
		info->key_rate_relname[0] = '\0';
		info->shard_key = info->shard_position = info->shard_group = 0;
		new (&info->cursor) ClaimCursor();
		new (&info->horizon) HorizonSampler();
		info->valid = false;
		info->relid = InvalidOid;
		info->scheduled_index = InvalidOid;
		info->leased_index = InvalidOid;
		info->finished_index = InvalidOid;
		info->ready_index = InvalidOid;
		info->token_sequence = InvalidOid;
		info->direct = nullptr;
		info->lease = Interval{};
		info->max_attempts = 0;
		info->has_retain = false;
		info->retain = Interval{};
		info->key_limit = info->max_leased = 0;
		info->paused = false;
		info->next_purge = 0;
		for (SPIPlanPtr &plan : info->plans)
			plan = nullptr;
		info->acl_role = InvalidOid;
		info->acl_checked = info->acl_granted = 0;
	}
	if (shard) {
		// where the shard is, as the caller found it (queue/distributed/shards.cpp): its
		// indexes come with it, named as Citus names a shard's indexes
		info->shard_id = shard->shard_id;
		std::strncpy(info->shard_relname, shard->relname.c_str(), NAMEDATALEN - 1);
		info->shard_relname[NAMEDATALEN - 1] = '\0';
		std::strncpy(info->key_relname, shard->key_relname.c_str(), NAMEDATALEN - 1);
		info->key_relname[NAMEDATALEN - 1] = '\0';
		std::strncpy(info->key_rate_relname, shard->key_rate_relname.c_str(), NAMEDATALEN - 1);
		info->key_rate_relname[NAMEDATALEN - 1] = '\0';
		info->shard_key = shard->shard_key;
		info->shard_position = shard->position;
		info->shard_group = shard->group;
		info->ready_index = shard->ready_index;
		info->scheduled_index = shard->scheduled_index;
		info->leased_index = shard->leased_index;
	}
	if (!info->valid)
		revalidate(*info);
	info_ = info;
}

const QueueSql &Queue::sql() const {
	if (!sql_) {
		if (on_shard())
			sql_.emplace(name(), placement());
		else
			sql_.emplace(name());
		sql_->set_links(info_->links);
	}
	return *sql_;
}

ShardPlacement Queue::placement() const {
	return ShardPlacement{info_->shard_relname, info_->shard_key,   info_->shard_position,
	                      info_->shard_group,   info_->key_relname, info_->key_rate_relname};
}

const KeySql &Queue::keys() const {
	if (!keys_) {
		if (on_shard()) {
			if (info_->key_relname[0] == '\0')
				throw Error(sqlstate::undefined_object,
				            fmt::format("the key table of shard {} of queue \"{}\" is not on this node",
				                        info_->shard_id, name()));
			keys_.emplace(name(), sql(), placement());
		} else
			keys_.emplace(name());
	}
	return *keys_;
}

const KeyRateSql &Queue::key_rates() const {
	if (!key_rates_) {
		if (on_shard()) {
			if (info_->key_rate_relname[0] == '\0')
				throw Error(sqlstate::undefined_object,
				            fmt::format("the key rate slots of shard {} of queue \"{}\" are not on this node",
				                        info_->shard_id, name()));
			key_rates_.emplace(name(), placement());
		} else
			key_rates_.emplace(name());
	}
	return *key_rates_;
}

uint64 Queue::execute(SPIPlanPtr plan, const Datum *values, const char *nulls) {
	try {
		return pg::execute(plan, values, nulls, false);
	} catch (const pg::PgException &e) {
		// the queue was dropped after we looked it up (its table is gone; a
		// missing table that a trigger of the user's names is their error)
		if (e.sqlerrcode() == ERRCODE_UNDEFINED_TABLE && !on_shard() && !OidIsValid(queue_relid(name())))
			throw Error(sqlstate::undefined_object, fmt::format("queue \"{}\" does not exist", name()),
			            "It was dropped while this call was running.");
		throw;
	}
}

uint64 Queue::run(QueueStatement s, int nargs, const Oid *types, const Datum *values, const char *nulls) {
	SPIPlanPtr &plan = info_->plans[static_cast<int>(s)];
	if (!plan) {
		// One generic plan per statement, planned once: the statements are
		// written so that it is the right one (index scans whatever the values).
		std::string text = sql().text(s);
		SPIPlanPtr fresh = pg::guard([&] {
			return SPI_prepare_cursor(text.c_str(), nargs, const_cast<Oid *>(types), CURSOR_OPT_GENERIC_PLAN);
		});
		if (!fresh)
			throw Error(sqlstate::internal_error,
			            fmt::format("SPI_prepare failed: {}", SPI_result_code_string(SPI_result)), text);
		pg::guard([&] { SPI_keepplan(fresh); });
		plan = fresh;
	}
	return execute(plan, values, nulls);
}

uint64 Queue::run(const char *op, const std::string &sql, int nargs, const Oid *types, const Datum *values,
                  const char *nulls) {
	return run_internal(op, sql, nargs, types, values, nulls, Access::caller);
}

uint64 Queue::run_internal(const char *op, const std::string &sql, int nargs, const Oid *types,
                           const Datum *values, const char *nulls, Access access) {
	std::string key = plan_prefix(info_->key) + op;
	SPIPlanPtr plan = pg::prepared_plan(key.c_str(), sql.c_str(), nargs, types, CURSOR_OPT_GENERIC_PLAN);
	bool latest = access == Access::latest || access == Access::owner_latest;
	bool as_owner = access == Access::owner || access == Access::owner_latest;
	if (!latest && !as_owner)
		return execute(plan, values, nulls);
	// the side tables are the queue's internals: reached as its owner; the
	// caller's privileges were checked on the queue's table already
	return run_plan_as(plan, values, nulls, as_owner ? info_->owner : InvalidOid, latest);
}

uint64 run_plan_as(SPIPlanPtr plan, const Datum *values, const char *nulls, Oid role, bool latest) {
	Oid saved_user = InvalidOid;
	int saved_context = 0;
	if (OidIsValid(role)) {
		// with SECURITY_LOCAL_USERID_CHANGE: no SET ROLE meanwhile
		GetUserIdAndSecContext(&saved_user, &saved_context);
		SetUserIdAndSecContext(role, saved_context | SECURITY_LOCAL_USERID_CHANGE);
	}
	try {
		uint64 n = 0;
		if (latest) {
			int rc = pg::guard([&] {
				return SPI_execute_snapshot(plan, const_cast<Datum *>(values), nulls, GetLatestSnapshot(),
				                            InvalidSnapshot, false, true, 0);
			});
			if (rc < 0)
				throw Error(sqlstate::internal_error,
				            fmt::format("SPI_execute_snapshot failed: {}", SPI_result_code_string(rc)));
			n = SPI_processed;
		} else {
			n = pg::execute(plan, values, nulls, false);
		}
		if (OidIsValid(role))
			SetUserIdAndSecContext(saved_user, saved_context);
		return n;
	} catch (...) {
		if (OidIsValid(role))
			SetUserIdAndSecContext(saved_user, saved_context);
		throw;
	}
}

namespace {
const char *const lease_lost_hint = "Roll back the work done under this lease: the task is no longer yours.";
}

void task_gone(std::string_view queue, int64 task_id) {
	throw Error(sqlstate::lease_lost, fmt::format("task {} of queue \"{}\" does not exist", task_id, queue),
	            "It was completed already, or it never existed.", lease_lost_hint);
}

void Queue::lease_lost(int64 task_id) {
	static const Oid types[1] = {INT8OID};
	Datum values[1] = {Int64GetDatum(task_id)};
	const char *hint = lease_lost_hint;
	if (run(QueueStatement::inspect, 1, types, values) == 0)
		task_gone(name(), task_id);
	bool isnull = false;
	std::string state = pg::guard([&] { return TextDatumGetCString(column(0, 1, &isnull)); });
	int32 attempt = DatumGetInt32(column(0, 2, &isnull));
	Datum worker_datum = column(0, 3, &isnull);
	std::string worker = isnull ? "" : pg::guard([&] { return TextDatumGetCString(worker_datum); });
	bool held = DatumGetBool(column(0, 4, &isnull));
	Datum finished_datum = column(0, 5, &isnull);
	std::string finished = isnull ? "" : pg::guard([&] { return TextDatumGetCString(finished_datum); });
	std::string detail;
	if (state == "cancelled")
		detail = fmt::format("The task was cancelled at {}.", finished);
	else if (state == "done")
		detail = fmt::format("The task was completed at {}.", finished);
	// The token given may be of an earlier lease of this task, of another task,
	// or never issued at all: say only what is known.
	else if (held)
		detail =
		    fmt::format("The lease token does not match the task's current lease: it is {} at attempt {}{}.",
		                state, attempt, worker.empty() ? "" : fmt::format(", worker \"{}\"", worker));
	else
		detail = fmt::format("The task has no lease now: it is {} at attempt {}.", state, attempt);
	throw Error(sqlstate::lease_lost,
	            fmt::format("lease on task {} of queue \"{}\" was lost", task_id, name()), detail, hint);
}

bool Queue::tasks_wait(TimestampTz now, TimestampTz floor) {
	QueueInfo &info = *info_;
	if (!OidIsValid(info.scheduled_index) || !OidIsValid(info.leased_index)) {
		if (info.shard_id != 0)
			throw Error(
			    sqlstate::undefined_object,
			    fmt::format("the indexes of shard {} of queue \"{}\" are missing", info.shard_id, name()));
		if (!OidIsValid(queue_relid(info.name)))
			throw Error(sqlstate::undefined_object, fmt::format("queue \"{}\" does not exist", name()),
			            "It was dropped while this call was running.");
		info.scheduled_index = index_relid(info.name, "scheduled");
		info.leased_index = index_relid(info.name, "leased");
	}
	enum class Due { none, waiting, gone };
	Due due = pg::guard([&] {
		Relation heap = try_table_open(info.relid, AccessShareLock);
		if (!heap)
			return Due::gone; // dropped since this call looked the queue up
		if (!info.valid) {
			// changed meanwhile (the lock let its invalidation in): the index
			// OIDs may be stale; the claim's own statements see the change
			table_close(heap, NoLock);
			return Due::waiting;
		}
		Snapshot snapshot =
		    RegisterSnapshot(ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot());
		bool found = due_entry(heap, info.scheduled_index, snapshot, floor, now) ||
		             due_entry(heap, info.leased_index, snapshot, floor, now);
		UnregisterSnapshot(snapshot);
		table_close(heap, NoLock);
		return found ? Due::waiting : Due::none;
	});
	if (due == Due::gone)
		throw Error(sqlstate::undefined_object, fmt::format("queue \"{}\" does not exist", name()),
		            "It was dropped while this call was running.");
	return due == Due::waiting;
}

uint64 Queue::purge(TimestampTz now, int32 chunk, bool asked) {
	// finished before the cutoff: purge; without retention, every finished
	// task kept at all (completed with a result, cancelled, a parent done)
	// once concurrency.result_retention has passed, or every one when asked
	TimestampTz cutoff = asked ? now : now - static_cast<TimestampTz>(result_retention_s) * USECS_PER_SEC;
	if (info_->has_retain) {
		Interval retain = info_->retain;
		// cannot overflow: create_queue and alter_queue refuse more than 100 years
		cutoff = pg::guard([&] {
			return DatumGetTimestampTz(DirectFunctionCall2(timestamptz_mi_interval, TimestampTzGetDatum(now),
			                                               IntervalPGetDatum(&retain)));
		});
	}
	if (!may_purge(*info_, cutoff))
		return 0;
	static const Oid types[3] = {TIMESTAMPTZOID, TIMESTAMPTZOID, INT4OID};
	Datum values[3] = {TimestampTzGetDatum(cutoff), TimestampTzGetDatum(now), Int32GetDatum(chunk)};
	return run(QueueStatement::purge, 3, types, values);
}

void Queue::maybe_purge(TimestampTz now) {
	if (now < info_->next_purge)
		return;
	// a distributed queue: a chunk of one shard (queue/distributed/); the
	// distributed room is asked once
	const bool whole_distributed =
	    !on_shard() && distributed_hooks.is_distributed && distributed_hooks.is_distributed(info_->relid);
	uint64 purged =
	    whole_distributed ? distributed_hooks.purge_chunk(*this, purge_chunk, now) : purge(now, purge_chunk);
	info_->next_purge = purged == static_cast<uint64>(purge_chunk) ? now : now + purge_interval_us;
	// key_rate_limit: the slots of keys not claimed for long (rate.cpp,
	// forget_old_key_rate_slots); a distributed queue's on each shard, by
	// the claims that visit it (the slots are beside the shard's tasks)
	if (info_->key_rate_limit > 0 && !whole_distributed)
		forget_old_key_rate_slots(*this, now, purge_chunk);
}

void Queue::notify(uint64 tasks) {
	note_claimable(name(), tasks);
	notify_listeners(name());
}

void set_distributed_hooks(const DistributedHooks &hooks) {
	distributed_hooks = hooks;
}

void notify_listeners(std::string_view queue) {
	// A call routed here by another node (Citus) is part of a transaction
	// that Citus may commit with PREPARE TRANSACTION, which a NOTIFY forbids:
	// the node where the call was made notifies its listeners instead.
	if (citus::in_routed_call())
		return;
	switch (static_cast<NotifyMode>(notify_mode)) {
	case NotifyMode::off:
		return;
	case NotifyMode::background: // the database's notifier tells them (queue/notifier.hpp)
		if (note_listeners(queue))
			return;
		break; // not preloaded: at commit
	case NotifyMode::commit:
		break;
	}
	std::string channel = queue_channel(queue);
	pg::guard([&] { Async_Notify(channel.c_str(), ""); });
}

} // namespace concurrency::queue
