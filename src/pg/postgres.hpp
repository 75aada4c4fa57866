// The one way into PostgreSQL's headers from C++. Include it after every
// standard and fmt header: port.h redefines snprintf and friends.
#pragma once

#ifdef CONCURRENCY_PURE_TRANSLATION_UNIT
#error "PostgreSQL headers in a pure C++ file (one that includes common/pure.hpp)"
#endif

// fmt (header-only, so its implementation is compiled here too) and the C
// stdio it uses come first: port.h turns fprintf, snprintf and friends into
// macros that break them when they are included after it.
#include <cstdio>
#include <fmt/format.h>

extern "C" {
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
}

// PostgreSQL's c.h defines these as macros; they break <algorithm> & co. in any
// file that includes standard headers after this one.
#undef Min
#undef Max
