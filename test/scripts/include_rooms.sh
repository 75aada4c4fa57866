#!/usr/bin/env bash
# scripts/include-rooms.py on small fake trees: it finds a circle between
# rooms and names the includes that draw it, resolves includes beside the
# file and from src/, leaves out the known arrows, and fails on a known arrow
# that closes no circle. Ends with "N passed, M failed".
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
check() { # name expected-pattern output
  if printf '%s\n' "$3" | grep -qE "$2"; then passed=$((passed + 1)); echo "ok $1"
  else failed=$((failed + 1)); echo "FAIL $1: got: $3"; fi
}
rooms() { python3 "$here/scripts/include-rooms.py" "$tmp/src" "$@"; echo "rc=$?"; }
mkdir -p "$tmp/src/a/inner" "$tmp/src/b" "$tmp/src/c"
printf '#include "b/b.hpp"\n#include "utils/guc.h"\n' >"$tmp/src/a/a.cpp"
printf '#include "inner/x.hpp"\n' >"$tmp/src/a/a.hpp"   # beside the file
printf '#include "c/c.hpp"\n' >"$tmp/src/a/inner/x.hpp"
printf '#pragma once\n' >"$tmp/src/b/b.hpp"
printf '#pragma once\n' >"$tmp/src/c/c.hpp"
check "no circle: passes" "^4 passed, 0 failed$" "$(rooms -)"
printf '#include "a/a.hpp"\n' >"$tmp/src/c/c.cpp"
out=$(rooms -)
check "a circle through an include resolved beside the file fails" "^rc=1$" "$out"
check "the circle is named" "^FAIL include circle between rooms: a, a/inner, c$" "$out"
check "with the includes that draw it" "a/inner -> c: a/inner/x.hpp:1 #include \"c/c.hpp\"" "$out"
check "a room off the circle passes" "^ok b$" "$out"
printf 'c -> a\n' >"$tmp/known"
check "a known arrow is left out" "rc=0" "$(rooms "$tmp/known")"
rm "$tmp/src/c/c.cpp"
out=$(rooms "$tmp/known")
check "a known arrow that closes no circle fails" "FAIL known arrow c -> a closes no circle" "$out"
check "and the check with it" "^rc=1$" "$out"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
