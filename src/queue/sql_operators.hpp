// Schema-qualified operators for the SQL text of the queue statements, so
// that a statement means the same under any search_path (unit test
// QueueSql.StatementsQualifyEveryOperator). Pure C++: string literals only.
#pragma once

#define EQ "OPERATOR(pg_catalog.=)"
#define NE "OPERATOR(pg_catalog.<>)"
#define LT "OPERATOR(pg_catalog.<)"
#define LE "OPERATOR(pg_catalog.<=)"
#define GT "OPERATOR(pg_catalog.>)"
#define GE "OPERATOR(pg_catalog.>=)"
#define PLUS "OPERATOR(pg_catalog.+)"
#define MINUS "OPERATOR(pg_catalog.-)"
#define TIMES "OPERATOR(pg_catalog.*)"
#define XOR "OPERATOR(pg_catalog.#)"
