// Marks a translation unit as pure C++: it must not see PostgreSQL's headers,
// so that it can be unit-tested without a server and never meets a longjmp.
// Include it last among a pure file's includes: it fails the build if
// postgres.h came before it, and src/pg/postgres.hpp fails if it comes after.
// CMake builds every file that includes this header into the pure library
// (concurrency_pure), which has no PostgreSQL include path at all.
#pragma once

#ifdef POSTGRES_H
#error "a pure C++ file (common/pure.hpp) must not include PostgreSQL headers"
#endif

#define CONCURRENCY_PURE_TRANSLATION_UNIT 1
