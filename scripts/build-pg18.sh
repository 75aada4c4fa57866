#!/usr/bin/env bash
# PostgreSQL 18 from Debian sid's source package: scripts/build-pg.sh 18
# (PG18_PREFIX, PG18_WORK, --dry-run as there).
exec bash "$(dirname "$0")/build-pg.sh" 18 "$@"
