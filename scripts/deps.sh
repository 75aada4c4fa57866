#!/usr/bin/env bash
# Installs what building and testing concurrency_ext needs on Debian 12
# (PostgreSQL 15 from Debian). Idempotent; needs root.
set -euo pipefail
packages=(
  # building the module into an existing server (README "From source")
  g++ make libfmt-dev postgresql-server-dev-15
  # the server's headers include GSSAPI's (Debian builds it with ENABLE_GSS);
  # postgresql-server-dev-15 does not pull them in
  libkrb5-dev
  # the server the tests run against, and its client tools
  postgresql-15 postgresql-contrib postgresql-common
  # unit tests, sanitizer run, TAP tests, fuzz suite and examples
  cmake clang-14 llvm-14 clang-format googletest libgtest-dev valgrind libipc-run-perl python3 python3-psycopg
  # entry points found by their SQL name in tags (scripts/tags-check.sh, .ctags.d/)
  universal-ctags
  # the Python client's tests (clients/python: pytest; its pool test uses psycopg_pool; a venv for
  # the OpenTelemetry SDK from PyPI)
  python3-pytest python3-psycopg-pool python3-venv
  # the Debian package (debian/, pg_buildext)
  dpkg-dev debhelper fakeroot postgresql-server-dev-all
  # a real pooler and the monitoring exporter, for their TAP tests
  pgbouncer prometheus-postgres-exporter
  # the dashboard's browser tests (clients/dashboard: playwright-core drives it)
  chromium
)
# the Node.js client's tests (clients/node), the dashboard's (clients/dashboard)
# and bench/peers: Debian's Node.js and npm, unless a node is there already
command -v node >/dev/null 2>&1 || packages+=(nodejs npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian starts the packages' own services (the default cluster, pgbouncer,
# postgres_exporter) where an init system runs; the tests use none of them:
# they start private instances on free ports.
