#!/usr/bin/env bash
# CI steps of the dashboard and event stream: install Debian's
# chromium for the browser tests in ops/ (they fail under CI=true without
# it), then a smoke run of GET / and GET /v1/events against the real binary.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

echo "--- dashboard: chromium for the browser tests"
if [ ! -x /usr/bin/chromium ]; then
  apt-get update && apt-get install -y --no-install-recommends chromium
fi
/usr/bin/chromium --version

echo "--- dashboard: smoke of / and /v1/events on the real server, stopped by its PID"
work=$(mktemp -d)
go build -o "$work/baton" ./cmd/baton
"$work/baton" serve -addr 127.0.0.1:0 -ops-addr 127.0.0.1:0 \
  -data-dir "$work/data" -shutdown-linger 100ms >"$work/serve.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null; cat "$work/serve.log"; rm -rf "$work"' EXIT
ops="" addr=""
for _ in $(seq 1 100); do
  kill -0 "$pid" 2>/dev/null || { echo "baton serve died:" >&2; exit 1; }
  ops=$(sed -n 's/.*msg="baton serving".* ops_addr=\([^ ]*\).*/\1/p' "$work/serve.log")
  addr=$(sed -n 's/.*msg="baton serving".* addr=\([^ ]*\).*/\1/p' "$work/serve.log")
  [ -n "$ops" ] && break
  sleep 0.1
done
[ -n "$ops" ] || { echo "baton serve did not report its addresses" >&2; exit 1; }
# Into files, not pipes: grep -q stops reading at the first match, and curl
# writing on into the closed pipe fails the step (exit 23) under pipefail.
curl -fsS -o "$work/index.html" "http://$ops/"
grep -q '<script type="module" src="/ui/app.js">' "$work/index.html"
curl -fsSI -o "$work/index.head" "http://$ops/"
grep -qi "content-security-policy: .*script-src 'self'" "$work/index.head"
curl -fsS "http://$ops/ui/app.js" >/dev/null
# baton watch -json sees a baton run job come and go.
"$work/baton" watch -json -ops-addr "$ops" >"$work/watch.jsonl" 2>"$work/watch.err" &
watch=$!
sleep 0.5
BATON_ADDR="$addr" "$work/baton" run ci/smoke -- true
for _ in $(seq 1 50); do
  grep -q '"type":"released"' "$work/watch.jsonl" && break
  sleep 0.1
done
kill -INT "$watch"; wait "$watch" || true
grep -q '"type":"granted","lock":"ci/smoke"' "$work/watch.jsonl" || { cat "$work/watch.jsonl" "$work/watch.err"; exit 1; }
grep -q '"type":"released","lock":"ci/smoke"' "$work/watch.jsonl" || { cat "$work/watch.jsonl" "$work/watch.err"; exit 1; }
curl -fs --max-time 1 "http://$ops/v1/events?snapshot=1" >"$work/events.txt" || true # the stream never ends by itself: curl stops it after 1 s
grep -q '^event: snapshot' "$work/events.txt"
kill -TERM "$pid"
wait "$pid"
trap 'rm -rf "$work"' EXIT
echo "dashboard smoke: ok"
