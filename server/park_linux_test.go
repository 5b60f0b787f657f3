package server_test

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/server"
	"golang.org/x/sys/unix"
)

func parkIdle(on bool) func(*server.Config) {
	return func(c *server.Config) { c.ParkIdle = on }
}

// waitParked waits until n connections are parked.
func waitParked(t *testing.T, ts *batontest.Server, n float64) {
	t.Helper()
	eventuallyMetric(t, ts.Srv.Registry(), "baton_connections_parked", "", n)
}

// TestParkIdleSessions: sessions live in the poller, without reader
// goroutines, and every way a parked session can be reached still works:
// its frames are answered, its close hands the lock over, and the server's
// own ends (lease expiry, force-release, kick) deliver their ERROR and
// close.
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

	// Waiters park, and so does their holder (see TestHandoverInPoller);
	// a frame wakes a parked waiter and is answered.
	h, tok := hold(t, ts, "p", longLease)
	w1 := queue(t, ts, "p", longLease, 1)
	w2 := queue(t, ts, "p", longLease, 2)
	waitParked(t, ts, 3)
	expectQueued(t, w2, 2)
	waitParked(t, ts, 3)

	// The holder's close promotes a parked waiter at once.
	h.Conn.Close()
	tok1 := expectPush(t, w1, frameWait)
	if tok1 <= tok {
		t.Fatalf("push token %d, want > %d", tok1, tok)
	}
	waitParked(t, ts, 2)

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
	waitParked(t, ts, 2)
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
	lone, _ := hold(t, ts, "t", longLease)
	waitParked(t, ts, 3)
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
	waitParked(t, ts, 2)
	expectHolds(t, h, tok)
	h.Conn.Close()
	if got := expectPush(t, w, frameWait); got <= tok {
		t.Fatalf("push token %d, want > %d", got, tok)
	}
}

// TestHandoverInPoller: a holder with waiters stays parked, and its close
// is served by the poller: the waiter is pushed ACQUIRED at once, and no
// reader goroutine is started for either session, through a chain of
// handovers.
func TestHandoverInPoller(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t, parkIdle(true))
	h, tok := hold(t, ts, "c", longLease)
	w1 := queue(t, ts, "c", longLease, 1)
	w2 := queue(t, ts, "c", longLease, 2)
	waitParked(t, ts, 3)
	if parked, ok := ts.Srv.HolderParked("c"); !ok || !parked {
		t.Fatalf("holder with waiters parked = %v (held: %v), want true", parked, ok)
	}
	before := ts.Srv.PollerReadersStarted()
	expectHolds(t, h, tok) // a heartbeat of a holder with waiters, in the poller too

	h.Conn.Close()
	tok1 := expectPush(t, w1, frameWait)
	waitParked(t, ts, 2)
	w1.Conn.Close()
	tok2 := expectPush(t, w2, frameWait)
	if tok1 <= tok || tok2 <= tok1 {
		t.Fatalf("tokens %d, %d, %d: want rising", tok, tok1, tok2)
	}
	waitParked(t, ts, 1)
	if got := ts.Srv.PollerReadersStarted() - before; got != 0 {
		t.Fatalf("the poller started %d readers for two handovers, want 0", got)
	}
	expectHolds(t, w2, tok2)
}

// TestAdoptedAtAccept: a connection is parked from its accept, and the
// poller takes its ACQUIRE without a reader goroutine. What the poller does
// not take itself goes to a reader with what it read: an ACQUIRE in two
// pieces (whose reader keeps its first wait for ParkAfter, then parks), an
// ACQUIRE with a heartbeat behind it, and a lease longer than any that
// Config.Leases has let through (it may wait for a disk). A negative
// ParkAfter is refused.
func TestAdoptedAtAccept(t *testing.T) {
	t.Parallel()
	var noted atomic.Int64
	ts := batontest.StartServer(t, func(c *server.Config) {
		c.ParkIdle, c.ParkAfter = true, 200*time.Millisecond
		c.Leases = batontest.LeaseFunc(func(d time.Duration) error { noted.Add(1); return nil })
	})
	silent := batontest.Dial(t, ts.Addr)
	waitParked(t, ts, 1)
	before := ts.Srv.PollerReadersStarted()

	// The first 30 s lease goes to a reader (NoteLease may wait); the next
	// one is the poller's.
	silent.Acquire("a", longLease, false, "")
	tok := expectAcquired(t, silent)
	if got := ts.Srv.PollerReadersStarted() - before; got != 1 {
		t.Fatalf("%d readers for the first lease of its length, want 1", got)
	}
	waitParked(t, ts, 1)
	before = ts.Srv.PollerReadersStarted()
	w := queue(t, ts, "a", longLease, 1)
	waitParked(t, ts, 2)
	if got := ts.Srv.PollerReadersStarted() - before; got != 0 {
		t.Fatalf("%d readers for an ACQUIRE the poller takes, want 0", got)
	}
	if got := noted.Load(); got != 2 {
		t.Fatalf("NoteLease called %d times, want 2", got)
	}

	// In two pieces: a reader completes it, answers, and parks the session
	// after its first wait.
	split := batontest.Dial(t, ts.Addr)
	frame := acquireFrame(1, 0, uint32(longLease/time.Millisecond), "b", "")
	split.Write(frame[:4])
	batontest.Eventually(t, frameWait, func() bool { return ts.Srv.PollerReadersStarted() > before }, "no reader started for part of an ACQUIRE")
	split.Write(frame[4:])
	expectAcquired(t, split)
	waitParked(t, ts, 3)

	// A heartbeat right behind the ACQUIRE: both answered, in order.
	both := batontest.Dial(t, ts.Addr)
	both.Write(append(acquireFrame(1, 0, uint32(longLease/time.Millisecond), "c", ""), byte(wire.TypeHeartbeat), 0, 0))
	tokC := expectAcquired(t, both)
	if got := expectAcquired(t, both); got != tokC {
		t.Fatalf("heartbeat reply token %d, want %d", got, tokC)
	}
	waitParked(t, ts, 4)

	silent.Conn.Close()
	if got := expectPush(t, w, frameWait); got <= tok {
		t.Fatalf("push token %d, want > %d", got, tok)
	}

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

// TestCloseRightBehindFrame: a client that closes right behind its ACQUIRE
// or a HEARTBEAT, in the same segment, releases at once. The poller is told
// of both by one event: it must read the close after answering the frame,
// not park the session with its close unread until the lease ends.
func TestCloseRightBehindFrame(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t, parkIdle(true))
	// lastWords sends frame and the client's FIN in one segment: corked,
	// the frame waits, and the FIN rides on it.
	lastWords := func(c *batontest.Conn, frame []byte) {
		t.Helper()
		tc := c.Conn.(*net.TCPConn)
		raw, err := tc.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var serr error
		if err := raw.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_CORK, 1) }); err != nil || serr != nil {
			t.Fatalf("TCP_CORK: %v %v", err, serr)
		}
		c.Write(frame)
		if err := tc.CloseWrite(); err != nil {
			t.Fatalf("CloseWrite: %v", err)
		}
	}
	// freeSoon claims name with NOWAIT until it is granted, well within the
	// 30 s lease a lost close would hold it for.
	freeSoon := func(name string) {
		t.Helper()
		deadline := time.Now().Add(frameWait)
		for {
			c := batontest.Dial(t, ts.Addr)
			c.Acquire(name, longLease, true, "")
			f := c.ReadFrame(frameWait)
			c.Conn.Close()
			if f.Type == wire.TypeAcquired {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("lock %q still held %v after its holder closed: %v", name, frameWait, f)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	for i := range 10 {
		name := fmt.Sprintf("behind-acquire-%d", i)
		c := batontest.Dial(t, ts.Addr)
		lastWords(c, acquireFrame(1, 0, uint32(longLease/time.Millisecond), name, ""))
		expectAcquired(t, c)
		freeSoon(name)

		name = fmt.Sprintf("behind-heartbeat-%d", i)
		h, tok := hold(t, ts, name, longLease)
		lastWords(h, []byte{byte(wire.TypeHeartbeat), 0, 0})
		if got := expectAcquired(t, h); got != tok {
			t.Fatalf("heartbeat reply token %d, want %d", got, tok)
		}
		freeSoon(name)
	}
}

// TestSlowNoteLeaseOffTheShard: an ACQUIRE whose lease cannot be noted
// without a wait (a Raft round in a cluster: Replica.TryNoteLease says so)
// goes to a reader goroutine; the poller's shards keep answering every
// other parked session meanwhile.
func TestSlowNoteLeaseOffTheShard(t *testing.T) {
	t.Parallel()
	var slow atomic.Bool
	release := make(chan struct{})
	ts := batontest.StartServer(t, func(c *server.Config) {
		c.ParkIdle, c.ParkAfter = true, 0
		c.Replica = &batontest.Replica{
			Note: func(time.Duration) error {
				if slow.Load() {
					<-release
				}
				return nil
			},
			TryNote: func(time.Duration) (bool, error) { return !slow.Load(), nil },
		}
	})
	ts.Srv.BeginTerm(0, server.Carried{})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the server's shutdown, which waits for the shard
	var holders []*batontest.Conn
	for i := range 8 {
		h, _ := hold(t, ts, fmt.Sprintf("h%d", i), longLease)
		holders = append(holders, h)
	}
	waitParked(t, ts, 8)
	slow.Store(true)
	for i := range 4 { // on every shard, whichever takes them
		c := batontest.Dial(t, ts.Addr)
		c.Acquire(fmt.Sprintf("slow%d", i), longLease, false, "")
	}
	time.Sleep(100 * time.Millisecond) // the slow ACQUIREs are in NoteLease
	for i, h := range holders {
		h.Heartbeat()
		if f, err := h.TryReadFrame(2 * time.Second); err != nil || f.Type != wire.TypeAcquired {
			t.Fatalf("holder %d's heartbeat while a NoteLease waits: got %v, %v; want ACQUIRED", i, f, err)
		}
	}
	unblock()
}
