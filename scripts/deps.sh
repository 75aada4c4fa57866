#!/usr/bin/env bash
# Installs what building and testing concurrency_ext needs on Debian 12
# (PostgreSQL 15 from Debian). Idempotent; needs root.
set -euo pipefail
packages=(
  postgresql-15 postgresql-server-dev-15 postgresql-contrib postgresql-common
  g++ make cmake clang-14 llvm-14 libfmt-dev googletest libgtest-dev valgrind
  libipc-run-perl python3 python3-psycopg
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian creates a default cluster that nothing here uses; keep it stopped.
