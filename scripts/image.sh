#!/usr/bin/env bash
# Builds the container image of baton serve, without a container daemon,
# as an OCI image layout in dist/image (or OUT), and prints its digest.
# The same commit and Go version give the same digest.
#
#   scripts/image.sh [-v VERSION] [-platform linux/ARCH] [OUT]
#
# The builder is deploy/image (a module of its own, on
# go-containerregistry). Run the layout with any OCI tool: skopeo copy
# oci:dist/image:VERSION docker://registry/baton:VERSION, or umoci unpack
# and runc (.ci/image.sh does that).
set -euo pipefail
cd "$(dirname "$0")/.."
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -v) args+=(-version "${2:?-v needs a version}"); shift 2 ;;
    -platform) args+=(-platform "${2:?-platform needs os/arch}"); shift 2 ;;
    -*) echo "image: unknown flag $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
out=$(realpath -m "${1:-dist/image}")
repo=$(pwd)
go -C deploy/image run . -repo "$repo" -o "$out" "${args[@]}"
