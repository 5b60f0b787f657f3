#!/usr/bin/env bash
# CI for replicated mode's fault harness, called by .ci/run: real
# `baton serve` nodes, each in a network namespace of its own with a Raft
# link and a client link, Go client loops and long raw holders on mutexes,
# shared raw holders on a semaphore of limit 3, and
#  - the short schedule (18 faults over 1 s and 10 s leases, compound
#    faults included, and membership faults: cluster add and remove
#    under load and inside a grace, three voters grown to five and back,
#    a founder's and a joined member's disks wiped and restarted with
#    their usual flags (each must refuse, and is replaced under a new
#    id), a voter lagging two handovers behind) against the normal
#    build: the checker must pass, and the semaphore must have been full;
#  - the mutation gate: the faultinject build with each safety rule
#    switched off (no grace, a handoff of 0, no leader lease, a wiped
#    joined member that starts) must each make the checker report a
#    violation, or CI fails; with no grace, the semaphore too must be
#    caught over its limit;
#  - the two process-level scenarios (a handover inside a grace, a paused
#    leader on SIGCONT) and the slow old leader, against the normal build.
# Without root or iproute2 the harness falls back to loopback and says so.
# About 7 minutes on a 2-core machine.
# The long schedule: BATON_CLUSTER_SCHEDULE=long bash .ci/clusterfaults.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

if [ "$(id -u)" = 0 ] && ! command -v ip >/dev/null; then
  echo "--- cluster faults: installing iproute2 for network namespaces"
  apt-get update && apt-get install -y --no-install-recommends iproute2
fi

echo "--- cluster faults: schedule ${BATON_CLUSTER_SCHEDULE:-short}, the mutation gate, the scenarios"
# Not under -race: the nodes are separate processes, and the client loops
# under the race detector would starve them on a 2-core machine; the
# package's unit test runs under -race in go test ./... with the rest.
BATON_CLUSTER_FAULTS=1 go test -count=1 -v -timeout 180m \
  -run 'TestClusterFaults|TestMutationGate|TestHandoverInsideGraceKeepsGrace|TestPausedLeaderConfirmsNothing|TestControlWithoutGraceOverlaps|TestSlowOldLeaderGraceHolds' \
  ./internal/clusterharness
