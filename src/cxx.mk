# PGXS for the C++ modules of this tree: the top-level Makefile (the
# extension), test/module/Makefile (the test-only border module) and
# cmake/pgxs_flags.mk (which hands PGXS's resulting flags to CMakeLists.txt)
# set what they build, then include this file instead of $(PGXS). So the
# compile flags are written once, here, and PGXS adds its own (pg_config's
# CPPFLAGS, CXXFLAGS, CFLAGS_SL) around them.
CONCURRENCY_SRC := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
EXTVERSION   := $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" $(CONCURRENCY_SRC)/../concurrency_ext.control)

PG_CPPFLAGS  += -I$(CONCURRENCY_SRC) -DCONCURRENCY_EXT_VERSION=\"$(EXTVERSION)\"
PG_CXXFLAGS  += -std=c++17 -fno-strict-aliasing -Wno-register
SHLIB_LINK   += -lfmt -lstdc++
# `make SANITIZE=undefined` (or address,undefined) builds with those sanitizers
# (scripts/sanitize.sh runs the suites against such a build).
ifdef SANITIZE
PG_CXXFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=undefined
SHLIB_LINK  += -fsanitize=$(SANITIZE)
endif

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# The LLVM bitcode (for JIT inlining) must see the same C++ dialect.
BITCODE_CXXFLAGS += -std=c++17 -Wno-register
