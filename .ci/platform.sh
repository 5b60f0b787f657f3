#!/usr/bin/env bash
# CI for what platform teams run (called by .ci/run): the container image
# (.ci/image.sh: built twice to the same digest, run under runc), the Helm
# chart's render test (deploy/helm/rendertest, a module of its own so the
# server's build gains nothing of Helm), and nodes named by DNS in network
# namespaces (TestNodesRenamedByDNS, with its control: names resolved once
# must fail it).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

(cd deploy/image && go vet ./...)
bash .ci/image.sh

# Each test's whole output is printed when it fails, its summary when it
# passes.
run_logged() {
  local log
  log=$(mktemp)
  if ! "$@" >"$log" 2>&1; then
    cat "$log"
    rm -f "$log"
    return 1
  fi
  grep -a -E '^\s*(=== RUN|--- |PASS|ok)|objects|CONTROL|NETWORK|one at a time|grants;|: n[0-9]\.baton\.test: ' "$log" || true
  rm -f "$log"
}

echo "--- helm chart: render 1, 3 and 5 nodes with and without TLS, decode every object strictly, lint"
(cd deploy/helm/rendertest && go vet ./... && run_logged go test -count=1 -v ./...)

echo "--- nodes named by DNS: restarts at new addresses under the same names (network namespaces), and the control"
if [ "$(id -u)" = 0 ] && ! command -v ip >/dev/null; then
  apt-get update && apt-get install -y --no-install-recommends iproute2
fi
BATON_CLUSTER_FAULTS=1 run_logged go test -count=1 -v -timeout 20m -run '^TestNodesRenamedByDNS$' ./internal/clusterharness
