#!/usr/bin/env bash
# Release by reset against release by close: BenchmarkUncontendedClaims (16
# workers, each taking and releasing a lock of its own, client and server in
# one process), each run in a fresh network namespace so that its TIME_WAIT
# sockets and port search are its own. Two kernels' settings:
#
#   tw_reuse=2  Linux's default, which lets a connect reuse a TIME_WAIT port
#               on loopback only;
#   tw_reuse=0  what a connection over a real network gets with that same
#               default: TIME_WAIT ports are not reused.
#
#   sudo scripts/bench-release.sh [CLAIMS]     # CLAIMS per run, default 40000
#
# Needs root and ip (iproute2). Prints the benchmark lines, and the TIME_WAIT
# sockets left in the namespace (ss -tan state time-wait).
set -euo pipefail
cd "$(dirname "$0")/.."
claims=${1:-40000}
bin=$(mktemp -d)/baton.test
trap 'rm -rf "$(dirname "$bin")"' EXIT
go test -c -o "$bin" ./internal/clienttest
for reuse in 2 0; do
  for mode in reset normal_close; do
    ns="baton-bench-$$-$reuse-$mode"
    ip netns add "$ns"
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" sh -c "echo $reuse > /proc/sys/net/ipv4/tcp_tw_reuse"
    echo "tw_reuse=$reuse $mode:"
    ip netns exec "$ns" "$bin" -test.run '^$' -test.bench "UncontendedClaims/$mode\$" \
      -test.benchtime "${claims}x" 2>&1 | grep -E '^Benchmark|connect:' | head -3 || true
    echo "  TIME_WAIT left: $(ip netns exec "$ns" ss -tan state time-wait | tail -n +2 | wc -l)"
    ip netns del "$ns"
  done
done
