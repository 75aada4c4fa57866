#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "diagnostics/lock_describe.hpp"
#include "locks/registry.hpp"

extern "C" {
#include "catalog/objectaddress.h"
#include "catalog/pg_am_d.h"
#include "catalog/pg_amop_d.h"
#include "catalog/pg_amproc_d.h"
#include "catalog/pg_attrdef_d.h"
#include "catalog/pg_authid_d.h"
#include "catalog/pg_cast_d.h"
#include "catalog/pg_class_d.h"
#include "catalog/pg_collation_d.h"
#include "catalog/pg_constraint_d.h"
#include "catalog/pg_conversion_d.h"
#include "catalog/pg_database_d.h"
#include "catalog/pg_default_acl_d.h"
#include "catalog/pg_event_trigger_d.h"
#include "catalog/pg_extension_d.h"
#include "catalog/pg_foreign_data_wrapper_d.h"
#include "catalog/pg_foreign_server_d.h"
#include "catalog/pg_language_d.h"
#include "catalog/pg_largeobject_d.h"
#include "catalog/pg_namespace_d.h"
#include "catalog/pg_opclass_d.h"
#include "catalog/pg_operator_d.h"
#include "catalog/pg_opfamily_d.h"
#include "catalog/pg_policy_d.h"
#include "catalog/pg_proc_d.h"
#include "catalog/pg_publication_d.h"
#include "catalog/pg_publication_rel_d.h"
#include "catalog/pg_rewrite_d.h"
#include "catalog/pg_statistic_ext_d.h"
#include "catalog/pg_subscription_d.h"
#include "catalog/pg_tablespace_d.h"
#include "catalog/pg_transform_d.h"
#include "catalog/pg_trigger_d.h"
#include "catalog/pg_ts_config_d.h"
#include "catalog/pg_ts_dict_d.h"
#include "catalog/pg_ts_parser_d.h"
#include "catalog/pg_ts_template_d.h"
#include "catalog/pg_type_d.h"
#include "catalog/pg_user_mapping_d.h"
#if PG_VERSION_NUM >= 150000
#include "catalog/pg_parameter_acl_d.h"
#include "catalog/pg_publication_namespace_d.h"
#endif
#if PG_VERSION_NUM >= 160000
#include "catalog/pg_auth_members_d.h"
#endif
#include "commands/dbcommands.h"
#include "utils/lsyscache.h"
}

namespace concurrency::diagnostics {

namespace {

// A palloc'd C string from a guarded call, as std::string ("" for NULL).
std::string take(char *s) {
	return s ? std::string(s) : std::string();
}

// The catalogs whose objects getObjectDescription describes: the cases of its
// switch (of getObjectClass's before PostgreSQL 17), PostgreSQL 13 to 18. For
// any other class it raises an error even with missing_ok.
bool describable_class(Oid classid) {
	static const Oid classes[] = {
		RelationRelationId,
		ProcedureRelationId,
		TypeRelationId,
		CastRelationId,
		CollationRelationId,
		ConstraintRelationId,
		ConversionRelationId,
		AttrDefaultRelationId,
		LanguageRelationId,
		LargeObjectRelationId,
		OperatorRelationId,
		OperatorClassRelationId,
		OperatorFamilyRelationId,
		AccessMethodRelationId,
		AccessMethodOperatorRelationId,
		AccessMethodProcedureRelationId,
		RewriteRelationId,
		TriggerRelationId,
		NamespaceRelationId,
		StatisticExtRelationId,
		TSParserRelationId,
		TSDictionaryRelationId,
		TSTemplateRelationId,
		TSConfigRelationId,
		AuthIdRelationId,
		DatabaseRelationId,
		TableSpaceRelationId,
		ForeignDataWrapperRelationId,
		ForeignServerRelationId,
		UserMappingRelationId,
		DefaultAclRelationId,
		ExtensionRelationId,
		EventTriggerRelationId,
		PolicyRelationId,
		PublicationRelationId,
		PublicationRelRelationId,
		SubscriptionRelationId,
		TransformRelationId,
#if PG_VERSION_NUM >= 150000
		ParameterAclRelationId,
		PublicationNamespaceRelationId,
#endif
#if PG_VERSION_NUM >= 160000
		AuthMemRelationId,
#endif
	};
	for (Oid c : classes)
		if (c == classid)
			return true;
	return false;
}

} // namespace

const char *lock_type_name(uint16 type) {
	return type <= LOCKTAG_LAST_TYPE ? LockTagTypeNames[type] : "???";
}

std::string LockDescriber::database(Oid db) {
	if (db == InvalidOid)
		return "shared catalogs";
	std::string name = take(pg::guard([&] { return get_database_name(db); }));
	return name.empty()
	           ? fmt::format("database {}", db)
	           : "database " + take(pg::guard([&] { return pstrdup(quote_identifier(name.c_str())); }));
}

std::string LockDescriber::relation(Oid db, Oid relid) {
	auto key = std::make_pair(db, relid);
	if (auto it = relations_.find(key); it != relations_.end())
		return it->second;
	std::string text;
	if (db == MyDatabaseId || db == InvalidOid) // shared relations are in every database's catalogs
		text = take(pg::guard([&]() -> char * {
			char *relname = get_rel_name(relid);
			if (!relname)
				return nullptr;
			char *nspname = get_namespace_name(get_rel_namespace(relid));
			return nspname ? quote_qualified_identifier(nspname, relname)
			               : pstrdup(quote_identifier(relname));
		}));
	if (text.empty())
		text = fmt::format("relation {}", relid);
	if (db != MyDatabaseId && db != InvalidOid)
		text += " in " + database(db);
	relations_.emplace(key, text);
	return text;
}

const std::vector<SubsystemKey> &LockDescriber::registry() {
	if (!registry_loaded_) {
		registry_ = locks::registered_subsystems();
		registry_loaded_ = true;
	}
	return registry_;
}

std::string LockDescriber::describe(const LOCKTAG &tag) {
	const Oid f1 = tag.locktag_field1, f2 = tag.locktag_field2, f3 = tag.locktag_field3;
	const uint16 f4 = tag.locktag_field4;
	switch (static_cast<LockTagType>(tag.locktag_type)) {
	case LOCKTAG_RELATION:
		return relation(f1, f2);
	case LOCKTAG_RELATION_EXTEND:
		return "extension of " + relation(f1, f2);
	case LOCKTAG_DATABASE_FROZEN_IDS:
		return "datfrozenxid of " + database(f1);
	case LOCKTAG_PAGE:
		return fmt::format("page {} of {}", f3, relation(f1, f2));
	case LOCKTAG_TUPLE:
		return fmt::format("tuple ({},{}) of {}", f3, f4, relation(f1, f2));
	case LOCKTAG_TRANSACTION:
		return fmt::format("transaction {}", f1);
	case LOCKTAG_VIRTUALTRANSACTION:
		return fmt::format("virtual transaction {}/{}", static_cast<int32>(f1), f2);
	case LOCKTAG_SPECULATIVE_TOKEN:
		return fmt::format("speculative insertion {} of transaction {}", f2, f1);
	case LOCKTAG_OBJECT: {
		std::string text;
		// A lock row can name a class that is no catalog (pg_locks rows are
		// user input to locked_object), and getObjectDescription raises an
		// error for a class it does not know, even with missing_ok: such a
		// class is not asked about; the raw identifiers are shown instead.
		if ((f1 == MyDatabaseId || f1 == InvalidOid) && describable_class(f2))
			text = take(pg::guard([&] {
				ObjectAddress address;
				address.classId = f2;
				address.objectId = f3;
				address.objectSubId = f4;
#if PG_VERSION_NUM >= 140000
				return getObjectDescription(&address, true);
#else
				return getObjectDescription(&address);
#endif
			}));
		if (text.empty())
			text = fmt::format("object classid {} objid {} objsubid {}", f2, f3, f4);
		if (f1 != MyDatabaseId && f1 != InvalidOid)
			text += " in " + database(f1);
		return text;
	}
	case LOCKTAG_ADVISORY: {
		if (f1 == MyDatabaseId)
			return describe_advisory(f2, f3, f4, registry());
		return describe_advisory(f2, f3, f4, {}) + " in " + database(f1);
	}
	default:
		return fmt::format("{} lock {} {} {} {}", lock_type_name(tag.locktag_type), f1, f2, f3, f4);
	}
}

bool locktag_from_pg_locks(const PgLocksRow &row, LOCKTAG *tag) {
	if (!row.locktype)
		return false;
	int type = -1;
	for (int t = 0; t <= LOCKTAG_LAST_TYPE; ++t)
		if (std::strcmp(row.locktype, lock_type_name(static_cast<uint16>(t))) == 0)
			type = t;
	if (type < 0)
		return false;
	std::memset(tag, 0, sizeof *tag);
	tag->locktag_type = static_cast<uint8>(type);
	tag->locktag_lockmethodid =
	    type == LOCKTAG_ADVISORY || type == LOCKTAG_USERLOCK ? USER_LOCKMETHOD : DEFAULT_LOCKMETHOD;
	switch (type) {
	case LOCKTAG_RELATION:
	case LOCKTAG_RELATION_EXTEND:
	case LOCKTAG_DATABASE_FROZEN_IDS:
	case LOCKTAG_PAGE:
	case LOCKTAG_TUPLE:
		tag->locktag_field1 = row.database;
		tag->locktag_field2 = row.relation;
		tag->locktag_field3 = row.page;
		tag->locktag_field4 = row.tuple;
		return true;
	case LOCKTAG_TRANSACTION:
		tag->locktag_field1 = row.transactionid;
		return true;
	case LOCKTAG_VIRTUALTRANSACTION: {
		if (!row.virtualxid)
			return false;
		const char *slash = std::strchr(row.virtualxid, '/');
		if (!slash)
			return false;
		tag->locktag_field1 = static_cast<uint32>(std::strtol(row.virtualxid, nullptr, 10));
		tag->locktag_field2 = static_cast<uint32>(std::strtoul(slash + 1, nullptr, 10));
		return true;
	}
#if PG_VERSION_NUM >= 160000
	case LOCKTAG_APPLY_TRANSACTION:
		tag->locktag_field1 = row.database;
		tag->locktag_field2 = row.objid;
		tag->locktag_field3 = row.transactionid;
		tag->locktag_field4 = row.objsubid;
		return true;
#endif
	default: // object, userlock, advisory, spectoken: as pg_lock_status() shows them
		tag->locktag_field1 = row.database;
		tag->locktag_field2 = row.classid;
		tag->locktag_field3 = row.objid;
		tag->locktag_field4 = row.objsubid;
		return true;
	}
}

} // namespace concurrency::diagnostics
