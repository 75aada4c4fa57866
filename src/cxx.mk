# PGXS for the C++ modules of this tree: the top-level Makefile (the
# extension), test/module/Makefile (the test-only border module) and
# cmake/pgxs_flags.mk (which hands PGXS's resulting flags to CMakeLists.txt)
# set what they build, then include this file instead of $(PGXS). So the
# compile flags are written once, here, and PGXS adds its own (pg_config's
# CPPFLAGS, CXXFLAGS, CFLAGS_SL) around them.
CONCURRENCY_SRC := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
EXTVERSION   := $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" $(CONCURRENCY_SRC)/../concurrency_ext.control)

# fmt is used header-only (FMT_HEADER_ONLY): the module needs no libfmt.so at
# run time, only the server and the C/C++ runtime (scripts/test.sh checks ldd).
PG_CPPFLAGS  += -I$(CONCURRENCY_SRC) -DCONCURRENCY_EXT_VERSION=\"$(EXTVERSION)\" -DFMT_HEADER_ONLY
PG_CXXFLAGS  += -std=c++17 -fno-strict-aliasing -Wno-register -Wall -Wextra
# PostgreSQL's headers are system headers here (-isystem: GCC and Clang then
# drop the -I PGXS adds for the same directories), so that -Wextra reports
# this tree's code, not theirs (unused parameters of their inline functions).
PG_CPPFLAGS  += -isystem $(includedir_server) -isystem $(includedir_internal)
# `make WERROR=1` turns every warning into an error (scripts/test.sh builds so).
ifdef WERROR
PG_CXXFLAGS += -Werror
endif
SHLIB_LINK   += -lstdc++
# `make SANITIZE=undefined` (or address,undefined) builds with those sanitizers
# (scripts/sanitize.sh runs the suites against such a build).
ifdef SANITIZE
PG_CXXFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=undefined
SHLIB_LINK  += -fsanitize=$(SANITIZE)
endif

# No LLVM bitcode: JIT inlining cannot use C++ functions that call into SPI,
# and the bitcode pass (clang, with fmt header-only) doubled the build time
# (pg_duckdb does the same).
override with_llvm = no

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# Bitcode installed by a build from before with_llvm = no would be stale: the
# JIT could inline an old function body from it.
.PHONY: remove-stale-bitcode
install: remove-stale-bitcode
remove-stale-bitcode:
	rm -rf '$(DESTDIR)$(pkglibdir)/bitcode/$(MODULE_big)' '$(DESTDIR)$(pkglibdir)/bitcode/$(MODULE_big).index.bc'
