#!/usr/bin/env bash
# scripts/build-pg18.sh keeps one build tree per prefix, and configures again
# a tree whose config.status names another prefix (issue 64: a tree built for
# PG18_PREFIX=/opt/pg18 was reused for the default prefix, installed into
# /opt/pg18, and the TAP modules were then missing from the default prefix).
# Checked with --dry-run on fake trees: nothing is downloaded or built.
# Ends with "N passed, M failed".
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
check() { # name expected-pattern output
  if printf '%s\n' "$3" | grep -qE "$2"; then passed=$((passed + 1)); echo "ok $1"
  else failed=$((failed + 1)); echo "FAIL $1: got: $3"; fi
}
dry() { PG18_PREFIX=$1 PG18_WORK=$tmp/work bash "$here/scripts/build-pg18.sh" --dry-run; }
# a source tree configured for prefix $2, in tree $1
fake_tree() { # dir prefix
  mkdir -p "$1/postgresql-18.1"
  printf '#!/bin/sh\n[ "$1" = --config ] && echo "'"'"'--prefix=%s'"'"' '"'"'--enable-tap-tests'"'"'"\n' "$2" \
    >"$1/postgresql-18.1/config.status"
  chmod +x "$1/postgresql-18.1/config.status"
}

a=$tmp/a/pg18 b=$tmp/b/pg18
out_a=$(dry "$a"); out_b=$(dry "$b")
check "nothing built yet: extract and configure" "would be extracted and configured for $a" "$out_a"
tree_a=$(printf '%s' "$out_a" | sed -E 's/^tree ([^:]*):.*/\1/')
tree_b=$(printf '%s' "$out_b" | sed -E 's/^tree ([^:]*):.*/\1/')
check "each prefix has a tree of its own" "^x$" "$([ "$tree_a" != "$tree_b" ] && echo x)"
# the old layout: one tree in the work directory, configured for prefix a
fake_tree "$tmp/work" "$a"
check "a tree of the old layout is not reused for another prefix" "would be extracted and configured for $b" "$(dry "$b")"
fake_tree "$tree_a" "$a"
check "a tree configured for its prefix is reused" "configured for $a, reused" "$(dry "$a")"
check "the other prefix still gets a tree of its own" "would be extracted and configured for $b" "$(dry "$b")"
# a prefix's tree configured for another prefix (copied, or by hand) is configured again
fake_tree "$tree_b" "$a"
check "a tree configured for another prefix is configured again" "would be configured for $b" "$(dry "$b")"
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
