#!/usr/bin/env bash
# Builds PostgreSQL 18 from Debian's postgresql-18 source package (suite sid)
# into PREFIX (default /opt/concurrency_ext/pg18), reusing a finished build of
# the same version. Prints the prefix's pg_config on its last line; exits 3
# with "PostgreSQL 18: skipped, source unavailable" when the source cannot be
# fetched. Needs root (apt).
set -uo pipefail
prefix=${PG18_PREFIX:-/opt/concurrency_ext/pg18}
work=${PG18_WORK:-/var/tmp/concurrency_ext-pg18}
if [ -x "$prefix/bin/pg_config" ] && [ -f "$prefix/.complete" ] \
   && [ -x "$("$prefix/bin/pg_config" --pkglibdir)/pgxs/src/test/isolation/pg_isolation_regress" ]; then
  echo "$prefix/bin/pg_config"; exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq --no-install-recommends bison flex libreadline-dev zlib1g-dev dpkg-dev xz-utils >/dev/null || exit 1
list=/etc/apt/sources.list.d/concurrency-ext-sid-src.sources
if [ ! -f "$list" ]; then
  cat >"$list" <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: sid
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
fi
apt-get update -qq >/dev/null 2>&1
mkdir -p "$work" && cd "$work" || exit 1
if ! ls -d postgresql-18-*/ >/dev/null 2>&1 && ! ls -d postgresql-18*/ >/dev/null 2>&1; then
  apt-get source -qq --download-only postgresql-18 >/dev/null 2>&1 || { echo "PostgreSQL 18: skipped, source unavailable"; exit 3; }
  tarball=$(ls postgresql-18_*.orig.tar.* 2>/dev/null | head -1)
  [ -n "$tarball" ] || { echo "PostgreSQL 18: skipped, source unavailable"; exit 3; }
  tar xf "$tarball" || exit 1
fi
src=$(ls -d postgresql-18*/ | head -1)
cd "$src" || exit 1
[ -f config.status ] || ./configure --prefix="$prefix" --without-icu --enable-debug >configure.log 2>&1 || { tail configure.log; exit 1; }
make -j"$(nproc)" -s >build.log 2>&1 && make -s install >>build.log 2>&1 \
  && make -s -C src/test/isolation install >>build.log 2>&1 \
  && make -s -C contrib install >>build.log 2>&1 || { tail -30 build.log; exit 1; }
# TAP modules (PostgreSQL::Test::Cluster) for prove against this build; the
# server was configured without --enable-tap-tests, so say it here, and give
# `make installcheck-tap` enable_tap_tests=yes PROVE=prove against this prefix.
make -s -C src/test/perl install enable_tap_tests=yes >>build.log 2>&1 || exit 1
touch "$prefix/.complete"
echo "$prefix/bin/pg_config"
