// What each backend remembers about a queue (queue.hpp: QueueInfo): the
// cache of them keyed by name, its invalidation and revalidation, the
// settings read from the catalog, and the OIDs of the queue's relations,
// found by their names (relation_names.hpp) once per cache entry. The
// statements, probes and purges of an open queue are queue.cpp's.
#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "citus/node.hpp"
#include "common/names.hpp"
#include "common/sql_text.hpp"
#include "pg/invalidation.hpp"
#include "queue/queue.hpp"
#include "queue/shard.hpp"

extern "C" {
#include "catalog/dependency.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
}

namespace concurrency::queue {

namespace {

// Frees what the claim without the executor keeps of an entry
// (QueueInfo::direct), as cache_init was given it.
void (*forget_direct)(QueueInfo &info) = nullptr;

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

} // namespace

// Plan keys of the statements kept by string: "queue:<name>\x1f<op>". A queue
// name has no control characters, so the prefix "queue:<name>\x1f" names the
// plans of exactly one queue.
std::string plan_prefix(std::string_view queue) {
	return fmt::format("queue:{}\x1f", queue);
}

namespace {

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
			info.fair_index = InvalidOid;
		}
		if (info.shard_id == 0)
			info.finished_index = InvalidOid;
		info.token_sequence = InvalidOid;
		pg::guard([&] { forget_direct(info); });
		// the columns of dependencies (added by the update from 0.2.0): the
		// statements are written for what the table has
		bool links = pg::guard([&] {
			return get_attnum(relid, "parents") != InvalidAttrNumber &&
			       OidIsValid(get_relname_relid("task_dependency", get_rel_namespace(relid)));
		});
		bool after_ends = pg::guard([&] { return get_attnum(relid, "after_ends") != InvalidAttrNumber; });
		if (relid != info.relid || links != info.links || after_ends != info.after_ends) {
			info.links = links;
			info.after_ends = after_ends;
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

void cache_init(void (*forget_direct_claim)(QueueInfo &info)) {
	forget_direct = forget_direct_claim;
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

Oid derived_relid(Oid table_relid, QueueTable table, std::string_view queue, Role role) {
	if (!OidIsValid(table_relid))
		return InvalidOid;
	for (Naming naming : {Naming::role_first, Naming::table_first}) {
		std::string name = derived_name(table, queue, role, naming);
		Oid relid = concurrency_relid(name);
		if (!OidIsValid(relid))
			continue;
		// the relation of that name is the table's (a table-first name may
		// be another queue's table: q_jobs_keyed)
		bool of_table = pg::guard([&] {
			if (role != Role::id_seq)
				return IndexGetRelation(relid, true) == table_relid;
			Oid owner = InvalidOid;
			int32 column = 0;
			return sequenceIsOwned(relid, DEPENDENCY_INTERNAL, &owner, &column) && owner == table_relid;
		});
		if (of_table)
			return relid;
	}
	return InvalidOid;
}

std::string derived_relation_name(QueueTable table, std::string_view queue, Role role) {
	Oid relid = derived_relid(concurrency_relid(table_name(table, queue)), table, queue, role);
	const char *existing = OidIsValid(relid)
	                           ? pg::guard([&] { return static_cast<const char *>(get_rel_name(relid)); })
	                           : nullptr;
	return existing ? std::string(existing) : derived_name(table, queue, role);
}

Naming naming_of_new_relations() {
	// concurrency_internal.queue_relation_name came with 0.4.0
	uint64 n = pg::execute("SELECT FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace s"
	                       " ON s.oid OPERATOR(pg_catalog.=) p.pronamespace"
	                       " WHERE s.nspname OPERATOR(pg_catalog.=) 'concurrency_internal'"
	                       " AND p.proname OPERATOR(pg_catalog.=) 'queue_relation_name'");
	return n > 0 ? Naming::role_first : Naming::table_first;
}

bool claim_relations(QueueInfo &info) {
	if (!OidIsValid(info.ready_index) || !OidIsValid(info.token_sequence)) {
		if (info.shard_id == 0) {
			info.ready_index = derived_relid(info.relid, QueueTable::tasks, info.name, Role::ready);
			info.fair_index = derived_relid(info.relid, QueueTable::tasks, info.name, Role::fair);
		}
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
		info->fair_index = InvalidOid;
		info->token_sequence = InvalidOid;
		info->direct = nullptr;
		info->lease = Interval{};
		info->max_attempts = 0;
		info->has_retain = false;
		info->retain = Interval{};
		info->key_limit = info->max_leased = 0;
		info->paused = false;
		info->links = info->after_ends = false;
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
		info->finished_index = shard->finished_index;
	}
	if (!info->valid)
		revalidate(*info);
	info_ = info;
}

} // namespace concurrency::queue
