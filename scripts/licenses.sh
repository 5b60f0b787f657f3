#!/usr/bin/env bash
# Copies the licence files (LICENSE*, LICENCE*, COPYING*, NOTICE*) of every
# module linked into the baton binary (and of Go itself) for GOOS/GOARCH into DIR/<module
# path>/, so a release archive or image carries the text each licence asks
# to go with the binary. Fails if a linked module has no licence file.
#
#   scripts/licenses.sh DIR [GOOS/GOARCH]
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:?usage: scripts/licenses.sh DIR [GOOS/GOARCH]}"
target="${2:-$(go env GOOS)/$(go env GOARCH)}"
mods=$(CGO_ENABLED=0 GOOS=${target%/*} GOARCH=${target#*/} go list -deps \
  -f '{{with .Module}}{{if not .Main}}{{.Path}}|{{.Dir}}{{end}}{{end}}' ./cmd/baton | sort -u)
missing=0
while IFS='|' read -r path moddir; do
  [ -n "$path" ] || continue
  # The Go client is this repository's own (the replace in go.mod).
  [ "$path" = github.com/batonlock/baton/clients/go ] && continue
  found=0
  for f in "$moddir"/*; do
    case "$(basename "$f")" in
      LICENSE*|LICENCE*|COPYING*|NOTICE*|License*|license*)
        mkdir -p "$dir/$path"
        cp "$f" "$dir/$path/"
        chmod 0644 "$dir/$path/$(basename "$f")"
        found=1 ;;
    esac
  done
  if [ "$found" = 0 ]; then
    echo "licenses: module $path has no licence file in $moddir" >&2
    missing=1
  fi
done <<<"$mods"
# The Go standard library and runtime are in every Go binary too.
mkdir -p "$dir/go"
cp "$(go env GOROOT)/LICENSE" "$dir/go/LICENSE"
chmod 0644 "$dir/go/LICENSE"
exit "$missing"
