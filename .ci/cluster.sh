#!/usr/bin/env bash
# CI for replicated mode, called by .ci/run before the tests:
# the fault-injection build compiles and vets, the Raft port's tests catch
# each of its protections switched off, and three real `baton serve`
# nodes on loopback elect a leader, serve only there, and hand over on
# SIGTERM. Every node is started and stopped by its PID. About 25 s.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"

echo "--- cluster: the faultinject build (the test-only mutation knobs) compiles and vets"
go vet -tags faultinject ./cluster
go test -tags faultinject -count=1 -run "TestMutationKnobs|TestResolveOnceKnob" ./cluster
go build -tags faultinject -o /dev/null ./cmd/baton

echo "--- cluster: the Raft port's admission with a protection switched off: its tests must fail"
# Each knob removes one protection against a flood of handshakes (that never
# finish, or replay a ClientHello; cluster/accept.go); the tests named
# beside it must then fail.
for mutation in "BATON_TEST_NO_MEMBER_ROOM TestRaftPortFloodFromMembersIP|TestRaftPortReservesConfiguredPeers" \
                "BATON_TEST_NO_STRANGER_EVICTION TestRaftPortStrangersShareTheRest" \
                "BATON_TEST_NO_STRANGER_RATE TestRaftPortStrangersHandshakeRate"; do
  knob=${mutation%% *}
  tests=${mutation#* }
  out=$(env "$knob=1" go test -tags faultinject -count=1 -run "^($tests)\$" ./cluster 2>&1) || true
  if ! grep -q -- "--- FAIL: " <<<"$out"; then
    echo "$knob=1: no test of $tests failed with the protection off; they prove nothing:" >&2
    echo "$out" >&2
    exit 1
  fi
  grep -A1 -- "--- FAIL: " <<<"$out"
done

echo "--- protocol version 3: each rule switched off must make its tests fail"
# The knobs of claims that survive a change of leader (cluster/ and
# server/mutations_faultinject.go), each against the unit tests that guard
# its rule over real TCP; the fault harness's checker gets them too.
for mutation in "BATON_TEST_IGNORE_LIST ./cluster TestClusterPlannedHandoverKeepsClaims" \
                "BATON_TEST_NO_INITIAL_WAIT ./cluster TestClusterCrashSuccessorWaits" \
                "BATON_TEST_SKIP_RECORD ./cluster TestClusterReleaseRecorded" \
                "BATON_TEST_RESUME_AFTER_GRACE ./server TestResumeInCrashGrace" \
                "BATON_TEST_LOWER_TOKEN_WINS ./server TestConflictHigherTokenWins" \
                "BATON_TEST_NO_CREDENTIAL_CHECK ./server TestVectorsFileVersion3"; do
  read -r knob pkg tests <<<"$mutation"
  out=$(env "$knob=1" go test -tags faultinject -count=1 -run "^($tests)\$" "$pkg" 2>&1) || true
  if ! grep -q -- "--- FAIL: " <<<"$out"; then
    echo "$knob=1: no test of $tests failed with the rule off; they prove nothing:" >&2
    echo "$out" >&2
    exit 1
  fi
  grep -A1 -- "--- FAIL: " <<<"$out" | head -2
done

echo "--- cluster: three nodes on loopback"
work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for i in 1 2 3; do [ -f "$work/n$i.log" ] && { echo "== n$i"; cat "$work/n$i.log"; }; done
  rm -rf "$work"
}
trap cleanup EXIT
go build -o "$work/baton" ./cmd/baton
# Fixed ports in a range the kernel does not hand out as ephemeral ones.
peers="n1=127.0.0.1:17301,n2=127.0.0.1:17302,n3=127.0.0.1:17303"
for i in 1 2 3; do
  "$work/baton" serve -node-id "n$i" -raft-addr "127.0.0.1:1730$i" -peers "$peers" \
    -addr "127.0.0.1:1710$i" -ops-addr "127.0.0.1:1720$i" -data-dir "$work/d$i" \
    -shutdown-linger 0s >"$work/n$i.log" 2>&1 &
  pids+=($!)
done
leader=""
for _ in $(seq 1 150); do
  for i in 1 2 3; do
    if curl -fsS -o /dev/null "http://127.0.0.1:1720$i/readyz" 2>/dev/null; then leader=$i; break 2; fi
  done
  sleep 0.1
done
[ -n "$leader" ] || { echo "no leader within 15 s" >&2; exit 1; }
echo "leader: n$leader"
curl -fsS "http://127.0.0.1:1720$leader/v1/cluster"; echo
for i in 1 2 3; do
  [ "$i" = "$leader" ] && continue
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:1720$i/readyz")
  [ "$code" = 503 ] || { echo "follower n$i: /readyz $code, want 503" >&2; exit 1; }
  # A follower sends /v1/ lock requests on to the leader, once it has heard
  # from it: right after the election it may not know it yet (503, "no
  # leader is known"), so it gets a few seconds.
  forwarded=""
  for _ in $(seq 1 50); do
    if curl -fsS -o /dev/null "http://127.0.0.1:1720$i/v1/locks" 2>/dev/null; then forwarded=1; break; fi
    sleep 0.1
  done
  [ -n "$forwarded" ] || { echo "follower n$i: /v1/locks not sent on to the leader within 5 s:" >&2; curl -sS "http://127.0.0.1:1720$i/v1/locks" >&2; exit 1; }
done
"$work/baton" cluster -ops-addr "127.0.0.1:1720$leader"
# SIGTERM on the leader: a planned handover, exit 0, and a new leader.
lpid=${pids[$((leader-1))]}
kill -TERM "$lpid"
status=0
wait "$lpid" || status=$?
[ "$status" -eq 0 ] || { echo "leader exited $status after SIGTERM, want 0" >&2; exit 1; }
next=""
for _ in $(seq 1 100); do
  for i in 1 2 3; do
    [ "$i" = "$leader" ] && continue
    if curl -fsS -o /dev/null "http://127.0.0.1:1720$i/readyz" 2>/dev/null; then next=$i; break 2; fi
  done
  sleep 0.1
done
[ -n "$next" ] || { echo "no new leader after the handover" >&2; exit 1; }
echo "new leader after SIGTERM: n$next"
for i in 1 2 3; do
  [ "$i" = "$leader" ] && continue
  kill -TERM "${pids[$((i-1))]}"
  wait "${pids[$((i-1))]}" || { echo "n$i did not exit 0 after SIGTERM" >&2; exit 1; }
done
pids=()
echo "cluster smoke: ok"
