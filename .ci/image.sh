#!/usr/bin/env bash
# CI for the container image (called by .ci/platform.sh): scripts/image.sh
# builds it twice, the second time from a fresh clone in another folder
# with an empty Go build cache, and both must have the same digest and the
# same bytes; then umoci (Debian's) unpacks it into a runtime bundle and
# runc (Debian's) runs it as root with a read-only root file system, the
# data directory and the admin token bind-mounted. The checks: /readyz and
# /healthz, a lock round trip with the baton CLI (held: a second claim is
# busy; released: it is free), the process runs as uid 65532, / is mounted
# read-only, there is no shell, the licence is in the image. The container
# is stopped by its PID with SIGTERM and must exit 0.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

need=()
for tool in runc umoci jq; do command -v "$tool" >/dev/null || need+=("$tool"); done
if [ ${#need[@]} -gt 0 ]; then
  echo "--- image: installing ${need[*]}"
  apt-get update && apt-get install -y --no-install-recommends "${need[@]}"
fi
runc --version | head -1
umoci --version

work=$(mktemp -d)
id="baton-ci-$$"
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
  runc delete -f "$id" >/dev/null 2>&1 || true
  [ -f "$work/container.log" ] && { echo "== container log"; cat "$work/container.log"; }
  rm -rf "$work"
}
trap cleanup EXIT

echo "--- image: build, then build again from a fresh clone with an empty build cache: the same digest"
first=$(scripts/image.sh -v ci-image "$work/a" | tee /dev/stderr)
git clone -q . "$work/clone"
git -C "$work/clone" checkout -q "$(git rev-parse HEAD)"
second=$(GOCACHE="$work/gocache" "$work/clone/scripts/image.sh" -v ci-image "$work/b" | tee /dev/stderr)
d1=$(echo "$first" | awk '{print $2}')
d2=$(echo "$second" | awk '{print $2}')
case "$d1" in sha256:*) ;; *) echo "image: no digest in \"$first\"" >&2; exit 1 ;; esac
if [ "$d1" != "$d2" ]; then
  echo "image: not reproducible: $d1, then $d2 from a fresh clone" >&2
  exit 1
fi
diff -r "$work/a" "$work/b"
echo "image: $d1 both times"
rm -rf "$work/gocache" "$work/clone" "$work/b"

echo "--- image: umoci unpack, runc run as root with a read-only root file system"
umoci unpack --image "$work/a:ci-image" "$work/bundle" >/dev/null
root="$work/bundle/rootfs"
cmp LICENSE "$root/usr/share/doc/baton/LICENSE"
cmp NOTICE "$root/usr/share/doc/baton/NOTICE"
[ -f "$root/usr/share/doc/baton/licenses/github.com/hashicorp/raft/LICENSE" ] || { echo "image: no licence of hashicorp/raft" >&2; exit 1; }
for sh in bin/sh bin/bash usr/bin/sh; do
  [ ! -e "$root/$sh" ] || { echo "image: /$sh exists: the image must have no shell" >&2; exit 1; }
done
# Static: built with cgo off (the build settings the binary records), so
# it needs no libc and no loader, which the image does not have.
go version -m "$root/usr/local/bin/baton" | grep -q 'CGO_ENABLED=0' || { echo "image: the binary was not built with CGO_ENABLED=0" >&2; exit 1; }
mkdir -p "$work/data" "$work/secrets"
chown 65532:65532 "$work/data"
chmod 0700 "$work/data"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/secrets/admin-token"
chmod 0444 "$work/secrets/admin-token"
addr=127.0.0.1:17470
ops=127.0.0.1:17471
# The host's network (no network namespace), so the checks reach it on
# loopback; the image's /data volume is the host folder above.
jq --arg data "$work/data" --arg secrets "$work/secrets" --arg addr "$addr" --arg ops "$ops" '
  .root.readonly = true
  | .process.terminal = false
  | .linux.namespaces |= map(select(.type != "network"))
  | .mounts |= map(select(.destination != "/data"))
      + [{"destination": "/data", "type": "bind", "source": $data, "options": ["rbind", "rw"]},
         {"destination": "/run/secrets/baton", "type": "bind", "source": $secrets, "options": ["rbind", "ro"]}]
  | .process.env += ["BATON_ADDR=" + $addr, "BATON_OPS_ADDR=" + $ops,
      "BATON_ADMIN_TOKEN_FILE=/run/secrets/baton/admin-token", "BATON_SHUTDOWN_LINGER=200ms"]
' "$work/bundle/config.json" >"$work/config.json"
mv "$work/config.json" "$work/bundle/config.json"
(cd "$work/bundle" && runc run -d --pid-file "$work/pid" "$id" >"$work/container.log" 2>&1 </dev/null)
pid=$(cat "$work/pid")
echo "image: container $id, pid $pid"
ready=""
for _ in $(seq 1 100); do
  kill -0 "$pid" 2>/dev/null || { echo "image: the container's baton died" >&2; exit 1; }
  if curl -fsS "http://$ops/readyz" >/dev/null 2>&1; then ready=1; break; fi
  sleep 0.1
done
[ -n "$ready" ] || { echo "image: /readyz not 200 within 10 s" >&2; exit 1; }
curl -fsS "http://$ops/readyz"; echo
curl -fsS "http://$ops/healthz"; echo
grep -qE '^Uid:\s+65532\s+65532\s+65532\s+65532' "/proc/$pid/status" || { echo "image: baton does not run as uid 65532:" >&2; grep Uid "/proc/$pid/status" >&2; exit 1; }
[ "$(awk '$5 == "/" {print $6}' "/proc/$pid/mountinfo" | cut -d, -f1)" = ro ] || { echo "image: / is not mounted read-only" >&2; exit 1; }
if runc exec "$id" /bin/sh -c true 2>/dev/null; then echo "image: runc exec /bin/sh worked: the image has a shell" >&2; exit 1; fi
[ -d "$work/data" ] && [ -n "$(ls -A "$work/data")" ] || { echo "image: nothing written to the data directory" >&2; exit 1; }

echo "--- image: a lock round trip against the container"
go build -o "$work/baton" ./cmd/baton
status=0
"$work/baton" run -addr "$addr" -wait 10s ci/image -- "$work/baton" run -addr "$addr" -nowait -q ci/image -- true || status=$?
[ "$status" = 75 ] || { echo "image: a second claim while the lock was held exited $status, want 75 (busy)" >&2; exit 1; }
"$work/baton" run -addr "$addr" -nowait ci/image -- true

echo "--- image: SIGTERM to the container's PID: exit 0"
kill -TERM "$pid"
for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then echo "image: still running 10 s after SIGTERM" >&2; exit 1; fi
state=$(runc state "$id" | jq -r .status)
[ "$state" = stopped ] || { echo "image: runc state $state, want stopped" >&2; exit 1; }
grep -q 'msg="baton stopped" exit_code=0' "$work/container.log" || { echo "image: no clean stop in the log" >&2; exit 1; }
runc delete "$id"
pid=""
echo "image: ok ($d1)"
