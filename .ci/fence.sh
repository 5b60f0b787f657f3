#!/usr/bin/env bash
# The fencing kits' resources (called by .ci/run): PostgreSQL and Redis
# from Debian's packages. The tests start their own servers (initdb into
# a temporary directory, redis-server on a free port) and stop them by
# their PIDs, so only the packages are needed; with CI=true a test that
# finds one missing fails instead of skipping.
set -euo pipefail
have_pg() { command -v initdb >/dev/null || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; }
if ! have_pg || ! command -v redis-server >/dev/null; then
  apt-get update
  apt-get install -y --no-install-recommends postgresql redis-server
fi
# The Debian packages start no service in a container; if a system did,
# the tests use their own servers on free ports all the same.
pg=$(command -v postgres || ls /usr/lib/postgresql/*/bin/postgres | sort -V | tail -1)
"$pg" --version
redis-server --version
