#!/usr/bin/env bash
# The TypeScript client (called by .ci/run): Node.js 20 or later with npm,
# and its locked dev dependencies (the compiler); its suite runs in
# go test ./clients.
set -euo pipefail
cd "$(dirname "$0")/.."
major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$major" -lt 20 ] || ! command -v npm >/dev/null; then
  apt-get update && apt-get install -y --no-install-recommends nodejs npm
  major=$(node -p 'process.versions.node.split(".")[0]')
  [ "$major" -ge 20 ] || { echo "Node.js $major is too old: the client needs 20 or later" >&2; exit 1; }
fi
node --version
(cd clients/typescript && npm ci --no-audit --no-fund)
# dist/ is committed so that `npm install ./clients/typescript` works where
# npm does not run install scripts; it must be what the sources build.
(cd clients/typescript && npm run --silent build)
if ! git diff --quiet -- clients/typescript/dist || [ -n "$(git ls-files --others --exclude-standard clients/typescript/dist)" ]; then
  echo "clients/typescript/dist is not what the sources build: run 'npm run build' in clients/typescript and commit it" >&2
  git status --short clients/typescript/dist >&2
  exit 1
fi
# What a user installs: the packed tarball, in a project of its own,
# through both doors (require and import give the same objects), with none
# of the wire codec exported.
consumer=$(mktemp -d)
trap 'rm -rf "$consumer"' EXIT
(cd clients/typescript && npm pack --silent --pack-destination "$consumer" >/dev/null)
(cd "$consumer" && npm init -y >/dev/null && npm install --no-audit --no-fund --offline ./baton-client-*.tgz >/dev/null)
(cd "$consumer" && node -e '
const cjs = require("baton-client");
import("baton-client").then((esm) => {
  if (typeof cjs.Client !== "function" || esm.Client !== cjs.Client || esm.LockLost !== cjs.LockLost) throw new Error("the two doors differ");
  for (const internal of ["encodeAcquire", "decode", "split", "HEARTBEAT"]) if (internal in cjs) throw new Error(internal + " is exported");
  console.log("baton-client installs from its tarball; require and import give the same Client");
});')
# The mutation gate of the client's resume rules (docs/protocol.md section
# 14): with each rule removed from a copy of the package, the test that
# guards it must fail.
(cd clients/typescript && node test/mutations.mjs)
