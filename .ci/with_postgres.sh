#!/usr/bin/env bash
# Run a command with an empty PostgreSQL database for Prefect (issue 29): start Debian's PostgreSQL on a private
# port and socket folder, export RATCHET_TEST_POSTGRES_URL (tests/e2e/test_daemon_postgres.py: `ratchet up` with
# [prefect] database_url through one scheduled round of the tiny model, then SIGTERM) and RATCHET_REQUIRE_POSTGRES=1
# (that test may not skip), run "$@", stop and remove the cluster. Installs postgresql when it is absent.
# pytest's exit code 5 (no tests collected) is a failure here.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
fi
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
data=$(mktemp -d /tmp/ratchet-pg-XXXXXX)
chown postgres "$data"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
as_pg() { su postgres -s /bin/bash -c "$*"; }
stop() { as_pg "'$bin/pg_ctl' -D '$data/db' stop -m fast" >/dev/null 2>&1 || true; rm -rf "$data"; }
trap stop EXIT
as_pg "'$bin/initdb' -D '$data/db' -A trust -U prefect" >/dev/null
as_pg "'$bin/pg_ctl' -D '$data/db' -w -l '$data/log' -o \"-p $port -k '$data' -c listen_addresses=127.0.0.1\" start" >/dev/null
as_pg "'$bin/createdb' -h 127.0.0.1 -p $port -U prefect prefect"
set +e
RATCHET_REQUIRE_POSTGRES=1 RATCHET_TEST_POSTGRES_URL="postgresql+asyncpg://prefect@127.0.0.1:$port/prefect" "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then echo "pytest collected no tests for: $*" >&2; exit 1; fi
exit "$rc"
