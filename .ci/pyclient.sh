#!/usr/bin/env bash
# The Python client (called by .ci/run): python3 must be there for its
# suite (run by `go test ./clients`), the package must install with pip
# from the work tree with no package index, with the version and the
# metadata of pyproject.toml, and pyright (from npm, its version locked in
# clients/python/package-lock.json) must pass in strict mode on the
# package, its examples and its build backend, as Python 3.9 (the oldest
# that pyproject.toml declares: no newer syntax or library).
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
want=$(python3 -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' clients/python/pyproject.toml)
(cd "$venv" && "$venv/bin/python" - "$want" <<'PY'
import sys
from importlib.metadata import metadata

import baton

want = sys.argv[1]
md = metadata("baton-client")
got = {"baton.__version__": baton.__version__, "Version": md["Version"]}
if set(got.values()) != {want}:
    sys.exit(f"installed versions {got}, want {want} (pyproject.toml)")
if not md.get_all("Classifier") or not md.get_all("Project-URL"):
    sys.exit("the installed metadata has no classifiers or project URLs")
c = baton.Client(["127.0.0.1:7070"])
print("installed baton", baton.__version__, "owner", c.owner, "with", len(md.get_all("Classifier")), "classifiers")
PY
)

echo "--- pyright, strict, as Python 3.9 (clients/python/pyrightconfig.json)"
if ! command -v npm >/dev/null; then
  apt-get update && apt-get install -y --no-install-recommends nodejs npm
fi
(cd clients/python && npm ci --no-audit --no-fund && npx --no-install pyright --version && npx --no-install pyright -p pyrightconfig.json)
