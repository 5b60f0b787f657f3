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

	// An idle holder without waiters parks; a frame wakes it and is
	// answered; it parks again; its close ends the session.
	h0, tok0 := hold(t, ts, "p", longLease)
	waitParked(t, ts, 1)
	expectHolds(t, h0, tok0)
	waitParked(t, ts, 1)
	h0.Conn.Close()
	batontest.Eventually(t, frameWait, func() bool { _, ok := ts.Srv.Lock("p"); return !ok }, "lock p still listed after its parked holder's close")
	waitParked(t, ts, 0)

	// Waiters park (their holder does not: TestContendedHolderNotParked);
	// a frame wakes a parked waiter and is answered.
	h, tok := hold(t, ts, "p", longLease)
	w1 := queue(t, ts, "p", longLease, 1)
	w2 := queue(t, ts, "p", longLease, 2)
	waitParked(t, ts, 2)
	expectQueued(t, w2, 2)
	waitParked(t, ts, 2)

	// The holder's close promotes a parked waiter at once.
	h.Conn.Close()
	tok1 := expectPush(t, w1, frameWait)
	if tok1 <= tok {
		t.Fatalf("push token %d, want > %d", tok1, tok)
	}
	waitParked(t, ts, 1)

	// Force-release: ERROR, close, promotion of the parked waiter, which
	// then holds without waiters and parks.
	if _, err := ts.Srv.ForceRelease("p"); err != nil {
		t.Fatal(err)
	}
	expectError(t, w1, wire.CodeForceReleased)
	tok2 := expectPush(t, w2, frameWait)
	if tok2 <= tok1 {
		t.Fatalf("push token %d, want > %d", tok2, tok1)
	}
	waitParked(t, ts, 1)

	// Force-release of a parked holder.
	f, _ := hold(t, ts, "f", longLease)
	waitParked(t, ts, 2)
	if _, err := ts.Srv.ForceRelease("f"); err != nil {
		t.Fatal(err)
	}
	expectError(t, f, wire.CodeForceReleased)
	waitParked(t, ts, 1)

	// Kick of a parked waiter.
	k := queue(t, ts, "p", longLease, 1)
	waitParked(t, ts, 1)
	lv, _ := ts.Srv.Lock("p")
	if _, err := ts.Srv.Kick(lv.Waiters[0].ID); err != nil {
		t.Fatal(err)
	}
	expectError(t, k, wire.CodeKicked)

	// Lease expiry of a parked waiter, then of a parked holder.
	qh, _ := hold(t, ts, "q", longLease)
	short := queue(t, ts, "q", 300*time.Millisecond, 1)
	expectError(t, short, wire.CodeLeaseExpired)
	qh.Conn.Close()
	lone, _ := hold(t, ts, "s", 300*time.Millisecond)
	expectError(t, lone, wire.CodeLeaseExpired)

	// A parked session reset by its peer ends and leaves the table.
	r, _ := hold(t, ts, "r", longLease)
	resetConn(t, r)
	batontest.Eventually(t, frameWait, func() bool { _, ok := ts.Srv.Lock("r"); return !ok }, "lock r still listed after its parked holder's reset")
	eventuallyMetric(t, reg, "baton_connections", "", 1)
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
	waitParked(t, ts, n-1) // all but the holder, which has waiters
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
	lone, _ := hold(t, ts, "t", longLease)
	waitParked(t, ts, 2) // w and lone: a holder with waiters keeps its reader
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- ts.Srv.Shutdown(ctx) }()
	expectError(t, h, wire.CodeShutdown)
	expectError(t, w, wire.CodeShutdown)
	expectError(t, lone, wire.CodeShutdown)
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
	waitParked(t, ts, 1)
	expectHolds(t, h, tok)
	h.Conn.Close()
	if got := expectPush(t, w, frameWait); got <= tok {
		t.Fatalf("push token %d, want > %d", got, tok)
	}
}

// TestContendedHolderNotParked: a holder parks while it has no waiter; the
// first waiter takes it out of the poller before the waiter hears WAITING,
// and a promoted waiter with a waiter behind it is never parked. Its close
// is then read by its own reader, and the lock passes on.
func TestContendedHolderNotParked(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t, parkIdle(true))
	holderParked := func(want bool) {
		t.Helper()
		parked, ok := ts.Srv.HolderParked("c")
		if !ok || parked != want {
			t.Fatalf("holder parked = %v (held: %v), want %v", parked, ok, want)
		}
	}
	h, tok := hold(t, ts, "c", longLease)
	waitParked(t, ts, 1)
	holderParked(true)

	// The unpark happens under the server's mutex before WAITING is queued:
	// once the waiter has read WAITING, the holder is out of the poller.
	w1 := queue(t, ts, "c", longLease, 1)
	holderParked(false)
	w2 := queue(t, ts, "c", longLease, 2)
	waitParked(t, ts, 2) // the waiters, not the holder
	holderParked(false)

	// A heartbeat does not park it again.
	expectHolds(t, h, tok)
	waitParked(t, ts, 2)
	holderParked(false)

	// Its close promotes w1, which has w2 behind it: w1 leaves the poller
	// right after its push is written.
	h.Conn.Close()
	tok1 := expectPush(t, w1, frameWait)
	if tok1 <= tok {
		t.Fatalf("push token %d, want > %d", tok1, tok)
	}
	batontest.Eventually(t, frameWait, func() bool { parked, ok := ts.Srv.HolderParked("c"); return ok && !parked }, "promoted holder with a waiter still parked")
	holderParked(false)
	w1.Conn.Close()
	expectPush(t, w2, frameWait)
	// w2 has no waiter: it parks like any idle holder.
	waitParked(t, ts, 1)
	holderParked(true)
}

// TestFirstWaitKeepsReader: a session's first wait keeps its reader for
// ParkAfter. Waiters promoted within it are pushed and read by the readers
// that queued them: nothing parks and the poller starts no reader. A frame
// ends the first wait, and the next wait parks; so does a session idle
// past ParkAfter. A negative ParkAfter is refused.
func TestFirstWaitKeepsReader(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t, func(c *server.Config) { c.ParkIdle, c.ParkAfter = true, time.Minute })
	reg := ts.Srv.Registry()
	h, tok := hold(t, ts, "first", longLease)
	before := ts.Srv.PollerReadersStarted() // the poller exists once a session does
	w1 := queue(t, ts, "first", longLease, 1)
	w2 := queue(t, ts, "first", longLease, 2)
	h.Conn.Close()
	tok1 := expectPush(t, w1, frameWait)
	w1.Conn.Close()
	tok2 := expectPush(t, w2, frameWait)
	if tok1 <= tok || tok2 <= tok1 {
		t.Fatalf("tokens %d, %d, %d: want rising", tok, tok1, tok2)
	}
	if got := metric(t, reg, "baton_connections_parked", ""); got != 0 {
		t.Fatalf("%v sessions parked within ParkAfter, want 0", got)
	}
	if got := ts.Srv.PollerReadersStarted() - before; got != 0 {
		t.Fatalf("the poller started %d readers, want 0", got)
	}
	// A frame ends the first wait: it is answered, and the next wait parks.
	expectHolds(t, w2, tok2)
	waitParked(t, ts, 1)

	short := batontest.StartServer(t, func(c *server.Config) { c.ParkIdle, c.ParkAfter = true, 100*time.Millisecond })
	hold(t, short, "idle", longLease)
	waitParked(t, short, 1)

	cfg := server.DefaultConfig()
	cfg.NextToken = func() uint64 { return 1 }
	cfg.ParkAfter = -time.Second
	if _, err := server.New(cfg); err == nil || err.Error() != "park-after (-1s) must not be negative" {
		t.Fatalf("New with ParkAfter -1s: %v", err)
	}
}

// TestParkedHeartbeatsAnsweredByPoller: a parked session's heartbeats are
// answered by the poller itself: no reader goroutine is started for them,
// and the session stays parked. Frames in pieces still go to a reader.
func TestParkedHeartbeatsAnsweredByPoller(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t, parkIdle(true))
	h, tok := hold(t, ts, "inline", longLease)
	hold(t, ts, "other", longLease) // a second parked session
	waitParked(t, ts, 2)
	before := ts.Srv.PollerReadersStarted()
	for range 50 {
		expectHolds(t, h, tok)
	}
	if got := ts.Srv.PollerReadersStarted() - before; got != 0 {
		t.Fatalf("%d readers started for 50 heartbeats of a parked session, want 0", got)
	}
	waitParked(t, ts, 2)

	// Half a heartbeat: the poller hands the byte it read to a reader,
	// which completes the frame.
	h.Write([]byte{byte(wire.TypeHeartbeat)})
	batontest.Eventually(t, frameWait, func() bool { return ts.Srv.PollerReadersStarted() > before }, "no reader started for half a frame")
	h.Write([]byte{0, 0})
	if got := expectAcquired(t, h); got != tok {
		t.Fatalf("token %d, want %d", got, tok)
	}
	waitParked(t, ts, 2)
}
