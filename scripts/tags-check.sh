#!/usr/bin/env bash
# Checks that a tag tool finds every entry point by its SQL name: each C
# symbol that src/sql's scripts name (AS 'MODULE_PATHNAME', 'concurrency_…')
# must be a function in the tags that Universal Ctags makes of src/ with the
# options committed in .ctags.d/ (which read CONCURRENCY_FUNCTION(name) as
# the definition of name). One FAIL line per symbol not found; ends with
# "N passed, M failed" (a symbol each).
set -uo pipefail
cd "$(dirname "$0")/.."
if ! ctags --version 2>/dev/null | grep -q 'Universal Ctags'; then
  echo "Universal Ctags is needed (scripts/deps.sh installs universal-ctags)"; echo "0 passed, 1 failed"; exit 1
fi
tags=$(ctags -R --languages=C++ --kinds-C++=f -x src | awk '{print $1}' | sort -u)
symbols=$(grep -rhoE "AS 'MODULE_PATHNAME', *'[A-Za-z_0-9]+'" src/sql | sed -E "s/.*'([A-Za-z_0-9]+)'$/\1/" | sort -u)
passed=0 failed=0
for s in $symbols; do
  if grep -qxF "$s" <<<"$tags"; then passed=$((passed + 1))
  else echo "FAIL $s (src/sql) is not a function in ctags' tags of src/"; failed=$((failed + 1)); fi
done
[ -n "$symbols" ] || { echo "FAIL no AS 'MODULE_PATHNAME' symbol found in src/sql"; failed=1; }
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
