#!/usr/bin/env bash
# CI for replicated mode's fault harness (issue 13), called by .ci/run:
# three real `baton serve` nodes, each in a network namespace of its own
# with a Raft link and a client link, 24 client loops, and the short
# schedule (each of the six faults once), the control run with the grace
# switched off (the checker must report the overlap) and the same run with
# the grace on. Without root or iproute2 the harness falls back to loopback
# and says which faults it skipped. About 2 minutes.
# The long schedule: BATON_CLUSTER_SCHEDULE=long bash .ci/clusterfaults.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

if [ "$(id -u)" = 0 ] && ! command -v ip >/dev/null; then
  echo "--- cluster faults: installing iproute2 for network namespaces"
  apt-get update && apt-get install -y --no-install-recommends iproute2
fi

echo "--- cluster faults: schedule ${BATON_CLUSTER_SCHEDULE:-short}, control run without the grace"
# Not under -race: the nodes are separate processes, and 24 client loops
# under the race detector would starve them on a 2-core machine; the
# package's unit test runs under -race in go test ./... with the rest.
BATON_CLUSTER_FAULTS=1 go test -count=1 -v -timeout 45m \
  -run 'TestClusterFaults|TestControlWithoutGraceOverlaps|TestSlowOldLeaderGraceHolds' \
  ./internal/clusterharness
