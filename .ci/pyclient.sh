#!/usr/bin/env bash
# The Python client (called by .ci/run): python3 must be there for its
# suite (run by `go test ./clients`), and the package must install with
# pip from the work tree with no package index.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v python3 >/dev/null || ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
  apt-get update && apt-get install -y --no-install-recommends python3 python3-venv
fi
python3 --version
venv=$(mktemp -d)
trap 'rm -rf "$venv"' EXIT
python3 -m venv "$venv"
PIP_NO_INDEX=1 "$venv/bin/pip" install -q ./clients/python
(cd "$venv" && "$venv/bin/python" -c 'import baton; c = baton.Client(["127.0.0.1:7070"]); print("installed baton", baton.__version__, "owner", c.owner)')
