#!/usr/bin/env bash
# Builds baton's release archives: one tar.gz per platform with the binary,
# LICENSE and NOTICE, the licence texts of the modules linked into the
# binary (licenses/), the README and docs/ (so the README's links resolve
# inside the archive), the fencing kits (fence/postgres, fence/redis), the
# systemd unit, the Grafana dashboard and the Helm chart, and
# SHA256SUMS over them, in dist/.
#
#   scripts/dist.sh [-v VERSION] [GOOS/GOARCH ...]
#
# VERSION defaults to `git describe --tags --always --dirty`; the platforms
# to linux/amd64 linux/arm64 darwin/amd64 darwin/arm64. Binaries are static
# (CGO_ENABLED=0) and reproducible for one commit and Go version (-trimpath,
# no build ID, VCS stamping off: the version and commit are set with -X).
set -euo pipefail
cd "$(dirname "$0")/.."

version=""
if [ "${1:-}" = "-v" ]; then
  version="${2:?-v needs a version}"
  shift 2
fi
if [ -z "$version" ]; then
  version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
fi
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(linux/amd64 linux/arm64 darwin/amd64 darwin/arm64)
fi

out=dist
rm -rf "$out"
mkdir -p "$out"
pkg=github.com/batonlock/baton/internal/cli
for target in "${targets[@]}"; do
  goos=${target%/*}
  goarch=${target#*/}
  if [ -z "$goos" ] || [ -z "$goarch" ] || [ "$goos" = "$target" ]; then
    echo "dist: bad platform $target (want GOOS/GOARCH)" >&2
    exit 2
  fi
  name="baton-$version-$goos-$goarch"
  stage=$(mktemp -d)
  mkdir -p "$stage/$name"
  CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go build -trimpath -buildvcs=false \
    -ldflags "-s -w -buildid= -X $pkg.buildVersion=$version -X $pkg.buildCommit=$commit" \
    -o "$stage/$name/baton" ./cmd/baton
  cp README.md LICENSE NOTICE "$stage/$name/"
  cp -r docs "$stage/$name/"
  mkdir -p "$stage/$name/fence"
  cp -r fence/postgres fence/redis "$stage/$name/fence/"
  scripts/licenses.sh "$stage/$name/licenses" "$target"
  mkdir -p "$stage/$name/deploy"
  cp -r deploy/systemd deploy/grafana "$stage/$name/deploy/"
  mkdir -p "$stage/$name/deploy/helm"
  cp -r deploy/helm/baton "$stage/$name/deploy/helm/"
  # Fixed owner, order and times, so one commit gives the same bytes.
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime='2000-01-01 00:00:00Z' \
    -C "$stage" -cf - "$name" | gzip -n >"$out/$name.tar.gz"
  rm -rf "$stage"
  echo "dist: $out/$name.tar.gz"
done
(cd "$out" && sha256sum -- *.tar.gz >SHA256SUMS)
echo "dist: $out/SHA256SUMS"
