#!/usr/bin/env bash
# TCP Fast Open is tested in a network namespace that the test creates
# (internal/clienttest/fastopen_linux_test.go: the sysctl net.ipv4.tcp_fastopen is per
# namespace, and the host's is left alone): it needs ip from iproute2.
set -euo pipefail
if ! command -v ip >/dev/null; then
  apt-get update && apt-get install -y --no-install-recommends iproute2
fi
ip -V
