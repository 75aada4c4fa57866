#!/usr/bin/env bash
# Installs concurrency_ext and shows it working on a throw-away cluster
# (pg_virtualenv): each capability has a part in examples/demo/*.sh, run in order.
# Usage: sudo scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root (it installs packages and the extension): sudo $0" >&2; exit 2; }
bash scripts/deps.sh
make -s -j2 >/dev/null && make -s install >/dev/null
echo "concurrency_ext built and installed; starting a throw-away cluster"
pg_virtualenv -v 15 bash -c '
  set -euo pipefail
  psql -X -q -c "CREATE EXTENSION concurrency_ext"
  psql -X -c "SELECT concurrency.version()"
  for part in examples/demo/*.sh; do
    [ -e "$part" ] || continue
    echo; echo "######## $(sed -n "2s/^# //p" "$part")"
    bash "$part"
  done
' 2> >(grep -vE '^[0-9]{4}-[0-9]{2}-[0-9]{2} ' >&2)
