package server_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/server"
	"github.com/batonlock/baton/wire"
)

func parkIdle(on bool) func(*server.Config) {
	return func(c *server.Config) { c.ParkIdle = on }
}

// waitParked waits until n connections are parked.
func waitParked(t *testing.T, ts *batontest.Server, n float64) {
	t.Helper()
	eventuallyMetric(t, ts.Srv.Registry(), "baton_connections_parked", "", n)
}

// TestParkIdleSessions: idle sessions give up their reader goroutines, and
// every way a parked session can be reached still works: its frames are
// answered, its close hands the lock over, and the server's own ends
// (lease expiry, force-release, kick) deliver their ERROR and close.
func TestParkIdleSessions(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t, parkIdle(true))
	reg := ts.Srv.Registry()

	h, tok := hold(t, ts, "p", longLease)
	w1 := queue(t, ts, "p", longLease, 1)
	w2 := queue(t, ts, "p", longLease, 2)
	waitParked(t, ts, 3)

	// A frame wakes a parked session and is answered; it parks again.
	expectHolds(t, h, tok)
	expectQueued(t, w2, 2)
	waitParked(t, ts, 3)

	// A parked holder's close promotes a parked waiter at once.
	h.Conn.Close()
	tok1 := expectPush(t, w1, frameWait)
	if tok1 <= tok {
		t.Fatalf("push token %d, want > %d", tok1, tok)
	}
	waitParked(t, ts, 2)

	// Force-release of a parked holder: ERROR, close, promotion.
	if _, err := ts.Srv.ForceRelease("p"); err != nil {
		t.Fatal(err)
	}
	expectError(t, w1, wire.CodeForceReleased)
	tok2 := expectPush(t, w2, frameWait)
	if tok2 <= tok1 {
		t.Fatalf("push token %d, want > %d", tok2, tok1)
	}

	// Kick of a parked waiter.
	k := queue(t, ts, "p", longLease, 1)
	waitParked(t, ts, 2)
	lv, _ := ts.Srv.Lock("p")
	if _, err := ts.Srv.Kick(lv.Waiters[0].ID); err != nil {
		t.Fatal(err)
	}
	expectError(t, k, wire.CodeKicked)

	// Lease expiry of a parked holder: its waiter is pushed, it gets ERROR.
	short, _ := hold(t, ts, "q", 300*time.Millisecond)
	sw := queue(t, ts, "q", longLease, 1)
	waitParked(t, ts, 3)
	expectPush(t, sw, time.Second+frameWait)
	expectError(t, short, wire.CodeLeaseExpired)

	// A parked session reset by its peer ends and leaves the table.
	r, _ := hold(t, ts, "r", longLease)
	waitParked(t, ts, 3)
	resetConn(t, r)
	batontest.Eventually(t, frameWait, func() bool { _, ok := ts.Srv.Lock("r"); return !ok }, "lock r still listed after its parked holder's reset")
	eventuallyMetric(t, reg, "baton_connections", "", 2)
	expectHolds(t, w2, tok2)
}

// TestParkedSessionsCostNoGoroutine: many idle sessions, few goroutines.
func TestParkedSessionsCostNoGoroutine(t *testing.T) {
	// Not parallel: it counts the process's goroutines.
	ts := batontest.StartServer(t, parkIdle(true))
	before := runtime.NumGoroutine()
	const n = 200
	conns := make([]*batontest.Conn, n)
	for i := range conns {
		conns[i] = batontest.Dial(t, ts.Addr)
		conns[i].Acquire("many", longLease, false, "")
		conns[i].ReadFrame(frameWait)
	}
	waitParked(t, ts, n)
	if got := runtime.NumGoroutine() - before; got > n/10 {
		t.Fatalf("%d goroutines more with %d parked sessions, want at most %d", got, n, n/10)
	}
	// Every one still answers.
	for _, c := range conns {
		c.Heartbeat()
		if f := c.ReadFrame(frameWait); f.Type != wire.TypeAcquired && f.Type != wire.TypeWaiting {
			t.Fatalf("heartbeat reply %v, want ACQUIRED or WAITING", f)
		}
	}
}

// TestShutdownWithParkedSessions: Shutdown reaches parked sessions too.
func TestShutdownWithParkedSessions(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t, parkIdle(true))
	h, _ := hold(t, ts, "s", longLease)
	w := queue(t, ts, "s", longLease, 1)
	waitParked(t, ts, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- ts.Srv.Shutdown(ctx) }()
	expectError(t, h, wire.CodeShutdown)
	expectError(t, w, wire.CodeShutdown)
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

// TestParkOff: ParkIdle false keeps every reader goroutine.
func TestParkOff(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t, parkIdle(false))
	h, tok := hold(t, ts, "off", longLease)
	time.Sleep(50 * time.Millisecond) // the absence of a park is the subject
	if got := metric(t, ts.Srv.Registry(), "baton_connections_parked", ""); got != 0 {
		t.Fatalf("parked = %v with ParkIdle false, want 0", got)
	}
	expectHolds(t, h, tok)
}

// TestParkWithConnsPerIPCap: the per-address cap wraps the connection; its
// sessions park all the same.
func TestParkWithConnsPerIPCap(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t, parkIdle(true), func(c *server.Config) { c.MaxConnsPerIP = 10 })
	h, tok := hold(t, ts, "cap", longLease)
	w := queue(t, ts, "cap", longLease, 1)
	waitParked(t, ts, 2)
	expectHolds(t, h, tok)
	h.Conn.Close()
	if got := expectPush(t, w, frameWait); got <= tok {
		t.Fatalf("push token %d, want > %d", got, tok)
	}
}
