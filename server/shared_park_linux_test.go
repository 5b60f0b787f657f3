package server_test

import (
	"testing"

	"github.com/batonlock/baton/internal/batontest"
)

// TestSharedHoldersStayParked: the idle poller's fast path serves shared
// holders as it serves a mutex's holder: their ACQUIRE, their heartbeats
// and their close (with the handover's push) are answered by the shard,
// with no reader goroutine started.
func TestSharedHoldersStayParked(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t, parkIdle(true))
	a, atok := holdShared(t, ts, "sem", 2)
	b, btok := holdShared(t, ts, "sem", 2)
	c := queueShared(t, ts, "sem", 2, 1)
	waitParked(t, ts, 3)
	const started = 0 // the ACQUIREs too were the shard's
	for range 3 {
		expectHolds(t, a, atok)
		expectHolds(t, b, btok)
		expectQueued(t, c, 1)
	}
	a.Conn.Close()
	if got := expectPush(t, c, frameWait); got <= btok {
		t.Fatalf("push token %d, want more than %d", got, btok)
	}
	waitParked(t, ts, 2)
	if n := ts.Srv.PollerReadersStarted(); n != started {
		t.Fatalf("readers started for parked shared sessions: %d, want none", n-started)
	}
}
