#!/usr/bin/env bash
# Builds PostgreSQL MAJOR (17 or 18) from Debian's postgresql-MAJOR source
# package (17: suite trixie, 18: suite sid) into PREFIX (default
# /opt/concurrency_ext/pgMAJOR; PGMAJOR_PREFIX, e.g. PG17_PREFIX, chooses
# another) with what the tests need (pg_isolation_regress, the contrib module
# amcheck, the TAP modules; no other contrib module: the suites use none), and reuses a finished build: a second run prints the same
# pg_config at once, and a run started while another builds waits for it
# instead of building twice.
# Prints the prefix's pg_config on its last line. When the source (or what it
# needs to build) cannot be fetched it prints "PostgreSQL MAJOR: skipped,
# source unavailable" and exits 3, so that callers report a skip, not a failure.
# The downloaded source is shared by every prefix of a major version (in the
# work directory, PGMAJOR_WORK, default /var/tmp/concurrency_ext-pgMAJOR), its
# build tree is not: each prefix builds in a tree of its own under the work
# directory (a tree configured for another prefix would install there), and a
# tree whose config.status names another prefix is configured again.
# Usage: scripts/build-pg.sh MAJOR [--dry-run]
# --dry-run: say which tree the build would use and whether it would run
# configure, and change nothing (test/scripts/build_pg_prefix.sh).
# Needs root (apt). About 7 minutes on two cores.
set -uo pipefail
major=${1:-}
case "$major" in
17) suite=trixie ;;
18) suite=sid ;;
*) echo "usage: $0 17|18 [--dry-run]" >&2; exit 2 ;;
esac
prefix_var=PG${major}_PREFIX work_var=PG${major}_WORK
prefix=${!prefix_var:-/opt/concurrency_ext/pg$major}
work=${!work_var:-/var/tmp/concurrency_ext-pg$major}
dry_run=0; [ "${2:-}" = --dry-run ] && dry_run=1
# the tree of this prefix: its path with every other character made "_"
tree=$work/tree$(printf '%s' "$prefix" | tr -c 'A-Za-z0-9.-' '_')
jobs=$(( $(nproc) < 2 ? $(nproc) : 2 ))
skip() { echo "PostgreSQL $major: skipped, source unavailable${1:+ ($1)}"; exit 3; }

# Whether the tree in the current directory was configured for $prefix.
configured_for_prefix() {
  [ -f config.status ] && ./config.status --config 2>/dev/null | grep -qF "'--prefix=$prefix'"
}
source_tree() { ls -d "$tree"/postgresql-"$major"*/ 2>/dev/null | head -1; }

if [ "$dry_run" = 1 ]; then
  src=$(source_tree)
  if [ -z "$src" ]; then echo "tree $tree: would be extracted and configured for $prefix"
  elif (cd "$src" && configured_for_prefix); then echo "tree ${src%/}: configured for $prefix, reused"
  else echo "tree ${src%/}: would be configured for $prefix"; fi
  exit 0
fi

mkdir -p "$(dirname "$prefix")" "$work" "$tree" || exit 1
exec 9>"$prefix.lock"
flock 9                                   # one build at a time; later callers reuse it

pgxs_dir() { [ -x "$prefix/bin/pg_config" ] && dirname "$(dirname "$(dirname "$("$prefix/bin/pg_config" --pgxs)")")"; }
# The TAP modules are installed only by a tree configured with
# --enable-tap-tests; install them into a build made without it.
tap_modules() { # source tree
  local pgxs; pgxs=$(pgxs_dir) || return 1
  [ -f "$pgxs/src/test/perl/PostgreSQL/Test/Cluster.pm" ] && return 0
  [ -d "$1/src/test/perl" ] && make -s -C "$1/src/test/perl" install enable_tap_tests=yes >/dev/null
}
complete() {
  local pgxs; pgxs=$(pgxs_dir) || return 1
  [ -f "$prefix/.complete" ] && [ -x "$pgxs/src/test/isolation/pg_isolation_regress" ]
}

# Where the archive's index names a version whose files the mirror does not
# have yet (it lags the index after a point release), the upstream source of
# an earlier point release from the same pool: the newest of the five before
# it whose Debian source (.dsc) and orig tarball are both there, the tarball
# checked against the .dsc's SHA-256. Only the upstream tarball is built.
older_upstream() {
  local version upstream minor revision pool dsc n sum name
  version=$(apt-cache showsrc "postgresql-$major" 2>/dev/null | sed -n 's/^Version: //p' | sort -V | tail -1)
  upstream=${version%%-*}; minor=${upstream#*.}; revision=${version#*-}
  [ -n "$version" ] && [ "$minor" -gt 0 ] 2>/dev/null || return 1
  pool=http://deb.debian.org/debian/pool/main/p/postgresql-$major
  for n in $(seq $((minor - 1)) -1 $((minor > 5 ? minor - 5 : 0))); do
    dsc=postgresql-${major}_$major.$n-$revision.dsc
    /usr/lib/apt/apt-helper download-file "$pool/${dsc//+/%2b}" "$dsc" >/dev/null 2>&1 || continue
    read -r sum name < <(sed -n '/^Checksums-Sha256:/,/^[A-Z]/p' "$dsc" | grep -E " postgresql-${major}_$major\.$n\.orig\.tar\.[a-z0-9]+$" | awk '{print $1, $3}')
    [ -n "$name" ] && /usr/lib/apt/apt-helper download-file "$pool/$name" "$name" "SHA256:$sum" >/dev/null 2>&1 || continue
    echo "$sum  $name" | sha256sum -c --quiet - || { rm -f "$name"; continue; }
    echo "postgresql-$major $version: not on the mirror; building $major.$n ($dsc)" >&2
    return 0
  done
  return 1
}

if complete; then
  src=$(source_tree)
  [ -n "$src" ] && tap_modules "$src"
  echo "$prefix/bin/pg_config"; exit 0
fi

export DEBIAN_FRONTEND=noninteractive
cd "$work" || exit 1
src=$(source_tree)
if [ -z "$src" ]; then
  list=/etc/apt/sources.list.d/concurrency-ext-$suite-src.sources
  [ -f "$list" ] || cat >"$list" <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  apt-get update -qq >/dev/null 2>&1
  apt-get source -qq --download-only "postgresql-$major/$suite" >apt-source.log 2>&1 \
    || older_upstream || skip "apt-get source postgresql-$major/$suite failed"
  tarball=$(ls postgresql-"$major"_*.orig.tar.* 2>/dev/null | head -1)
  [ -n "$tarball" ] || skip "no orig tarball"
  tar xf "$tarball" -C "$tree" || exit 1
  src=$(source_tree)
fi
apt-get install -y -qq --no-install-recommends bison flex libreadline-dev zlib1g-dev libipc-run-perl >/dev/null 2>&1 \
  || skip "build dependencies could not be installed"
cd "$src" || exit 1
if ! configured_for_prefix; then
  [ -f config.status ] && { make -s distclean >/dev/null 2>&1 || true; }
  ./configure --prefix="$prefix" --without-icu --enable-debug --enable-tap-tests >configure.log 2>&1 \
    || { tail configure.log; exit 1; }
fi
make -j"$jobs" -s >build.log 2>&1 && make -s install >>build.log 2>&1 \
  && make -s -C src/test/isolation install >>build.log 2>&1 \
  && make -s -C contrib/amcheck install >>build.log 2>&1 || { tail -30 build.log; exit 1; }
tap_modules . || { echo "could not install the TAP modules"; exit 1; }
touch "$prefix/.complete"
echo "$prefix/bin/pg_config"
