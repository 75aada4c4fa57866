# Prints the flags PGXS compiles this tree's C++ with: src/cxx.mk's on top of
# pg_config's (CPPFLAGS with the server's include directories, CXXFLAGS with
# -O2 -g -fstack-protector-strong and the rest, CFLAGS_SL), for
# CMakeLists.txt, so that CMake builds the module with the same flags as make.
# Without the -I and -D of src/cxx.mk, which CMakeLists.txt sets itself.
#   make -s -f cmake/pgxs_flags.mk PG_CONFIG=… print-flags
include $(dir $(lastword $(MAKEFILE_LIST)))../src/cxx.mk

.PHONY: print-flags
print-flags:
	@echo 'CPPFLAGS=$(filter-out -I. -I$(srcdir) $(PG_CPPFLAGS),$(CPPFLAGS))'
	@echo 'CXXFLAGS=$(CXXFLAGS) $(CFLAGS_SL)'
	@echo 'SHLIB_LINK=$(SHLIB_LINK)'
