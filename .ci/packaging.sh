#!/usr/bin/env bash
# CI checks of the repository's hygiene and packaging (called by .ci/run):
# no build output tracked in git, docs whose links resolve, a release
# archive that builds and runs, and a systemd unit that systemd itself
# accepts.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "--- tracked files: no executable binaries, nothing over 1 MiB"
bad=0
while IFS= read -r -d '' f; do
  [ -f "$f" ] || continue
  size=$(stat -c %s "$f")
  if [ "$size" -gt 1048576 ]; then
    echo "tracked file $f is $size bytes (over 1 MiB): build outputs and data dumps stay out of git" >&2
    bad=1
  fi
  magic=$(head -c 4 "$f" | od -An -tx1 | tr -d ' \n')
  case "$magic" in
    7f454c46|cffaedfe|cefaedfe|feedfacf|feedface|cafebabe|4d5a*)
      echo "tracked file $f is an executable binary (magic $magic)" >&2
      bad=1 ;;
  esac
  if [ -x "$f" ] && [ "$(head -c 2 "$f")" != "#!" ]; then
    echo "tracked file $f is executable but not a script with a #! line" >&2
    bad=1
  fi
done < <(git ls-files -z)
[ "$bad" -eq 0 ] || exit 1

echo "--- docs: every relative link and anchor of every tracked *.md resolves, headings render, pages tell no history, README's folder table matches the tree"
go test -count=1 ./internal/doccheck

echo "--- release archive: build linux/amd64, check its sum, run its baton version"
scripts/dist.sh -v ci-check linux/amd64
(cd dist && sha256sum -c SHA256SUMS)
unpack=$(mktemp -d)
trap 'rm -rf "$unpack"' EXIT
tar -xzf dist/baton-ci-check-linux-amd64.tar.gz -C "$unpack"
out=$("$unpack"/baton-ci-check-linux-amd64/baton version)
echo "$out"
case "$out" in
  "baton ci-check (commit "*) ;;
  *) echo "baton version of the release build says \"$out\", want \"baton ci-check (commit ...)\"" >&2; exit 1 ;;
esac
echo "--- release archive: the licence, the notices, every linked module's licence text, and docs whose links resolve inside it"
root="$unpack/baton-ci-check-linux-amd64"
cmp LICENSE "$root/LICENSE"
cmp NOTICE "$root/NOTICE"
for f in licenses/go/LICENSE licenses/github.com/hashicorp/raft/LICENSE licenses/github.com/prometheus/client_golang/NOTICE \
  deploy/systemd/baton.service deploy/grafana/baton.json deploy/helm/baton/Chart.yaml; do
  [ -f "$root/$f" ] || { echo "release archive: $f missing" >&2; exit 1; }
done
dead=0
for page in "$root/README.md" "$root"/docs/*.md; do
  while IFS= read -r target; do
    [ -e "$(dirname "$page")/$target" ] || { echo "release archive: ${page#"$root"/} links to $target, which is not in the archive" >&2; dead=1; }
  done < <(grep -oE '\]\([^)#]+' "$page" | sed 's/^](//' | grep -vE '^[a-z]+:' || true)
done
[ "$dead" = 0 ] || exit 1
rm -rf dist

echo "--- systemd unit: systemd-analyze verify, with no complaint at all"
if ! command -v systemd-analyze >/dev/null; then
  apt-get update && apt-get install -y --no-install-recommends systemd
fi
# The unit names /usr/local/bin/baton; verify a copy that names the binary
# just built, since verify checks that ExecStart is executable.
sed "s#/usr/local/bin/baton#$unpack/baton-ci-check-linux-amd64/baton#" deploy/systemd/baton.service >"$unpack/baton.service"
# With the TLS drop-in where systemd looks for it (beside the unit), so
# that its lines are checked too.
mkdir -p "$unpack/baton.service.d"
cp deploy/systemd/tls.conf "$unpack/baton.service.d/tls.conf"
if ! complaints=$(systemd-analyze verify "$unpack/baton.service" 2>&1) || [ -n "$complaints" ]; then
  echo "systemd-analyze verify deploy/systemd/baton.service:" >&2
  echo "$complaints" >&2
  exit 1
fi
echo "baton.service with tls.conf: verified (run as its service user in go test ./internal/cli: TestSystemdUnitAsServiceUser)"
