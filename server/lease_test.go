package server_test

import (
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
)

// TestLeaseSlidingWindow: heartbeats every lease/3 keep a holder and its
// waiter for several leases; the lease is a window of silence, not a
// deadline.
func TestLeaseSlidingWindow(t *testing.T) {
	t.Parallel()
	const lease = 600 * time.Millisecond
	ts := batontest.StartServer(t)
	h, tok := hold(t, ts, "slide", lease)
	w := queue(t, ts, "slide", lease, 1)
	start := time.Now()
	for time.Since(start) < 4*lease {
		time.Sleep(lease / 3) // the heartbeat schedule is the subject here
		expectHolds(t, h, tok)
		expectQueued(t, w, 1)
	}
	lv, ok := ts.Srv.Lock("slide")
	if !ok || lv.Holder == nil || lv.Holder.Token != tok || len(lv.Waiters) != 1 {
		t.Fatalf("after 4 leases: Lock(slide) = %+v, %v; want the same holder and waiter", lv, ok)
	}
	if lv.Holder.Since < 4*lease {
		t.Fatalf("holder's since %v, want at least %v", lv.Holder.Since, 4*lease)
	}
}

// TestLeaseExpiryHolder: a silent holder gets LEASE_EXPIRED not before its
// lease, counted from its last frame, and its waiter is promoted.
func TestLeaseExpiryHolder(t *testing.T) {
	t.Parallel()
	const lease = 400 * time.Millisecond
	ts := batontest.StartServer(t)
	h, tok := hold(t, ts, "expire", lease)
	w := queue(t, ts, "expire", longLease, 1)
	expectHolds(t, h, tok)
	lastSent := time.Now()
	expectHolds(t, h, tok) // the last frame: the lease counts from here

	tok2 := expectPush(t, w, lease+frameWait)
	pushed := time.Since(lastSent)
	expectErrorWithin(t, h, wire.CodeLeaseExpired, frameWait)
	expired := time.Since(lastSent)
	if pushed < lease || expired < lease {
		t.Fatalf("expired %v (push %v) after the last frame, want at least the lease %v", expired, pushed, lease)
	}
	if pushed > lease+500*time.Millisecond {
		t.Fatalf("push %v after the last frame, want within lease %v + 500ms", pushed, lease)
	}
	if tok2 <= tok {
		t.Fatalf("push token %d, want > %d", tok2, tok)
	}
	t.Logf("lease %v: pushed after %v, LEASE_EXPIRED read after %v", lease, pushed, expired)
}

// TestLeaseExpiryWaiter: a silent waiter loses its place; the one behind
// moves up and is the one promoted.
func TestLeaseExpiryWaiter(t *testing.T) {
	t.Parallel()
	const lease = 300 * time.Millisecond
	ts := batontest.StartServer(t)
	h, tok := hold(t, ts, "wexp", longLease)
	sent := time.Now()
	silent := queue(t, ts, "wexp", lease, 1)
	w := queue(t, ts, "wexp", longLease, 2)

	expectErrorWithin(t, silent, wire.CodeLeaseExpired, lease+frameWait)
	if d := time.Since(sent); d < lease {
		t.Fatalf("waiter expired %v after its ACQUIRE, want at least %v", d, lease)
	}
	expectQueued(t, w, 1) // it left the table before its ERROR was written
	expectHolds(t, h, tok)
	h.Conn.Close()
	if tok2 := expectPush(t, w, frameWait); tok2 <= tok {
		t.Fatalf("push token %d, want > %d", tok2, tok)
	}
}

// TestLeaseOverdueWaiterSkipped: when the holder leaves, a waiter that has
// been silent for its lease is not promoted: the next live one is.
func TestLeaseOverdueWaiterSkipped(t *testing.T) {
	t.Parallel()
	const lease = 300 * time.Millisecond
	ts := batontest.StartServer(t)
	h, tok := hold(t, ts, "skip", longLease)
	dead := queue(t, ts, "skip", lease, 1)
	live := queue(t, ts, "skip", longLease, 2)
	expectErrorWithin(t, dead, wire.CodeLeaseExpired, lease+frameWait)
	h.Conn.Close()
	if tok2 := expectPush(t, live, frameWait); tok2 <= tok {
		t.Fatalf("push token %d, want > %d", tok2, tok)
	}
}

// TestLeasePerSession: each session has its own lease: one of 1 ms ends at
// once while one of 10 s, silent as long, stays.
func TestLeasePerSession(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t)
	long, tok := hold(t, ts, "long", 10*time.Second)
	start := time.Now()
	short := batontest.Dial(t, ts.Addr)
	short.Acquire("short", time.Millisecond, false, "")
	expectAcquired(t, short)
	expectErrorWithin(t, short, wire.CodeLeaseExpired, time.Second)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("1ms lease ended after %v, want well within 1s", d)
	}
	expectHolds(t, long, tok)

	// A waiter with a 1 ms lease is gone as fast, and leaves the queue.
	w := batontest.Dial(t, ts.Addr)
	w.Acquire("long", time.Millisecond, false, "")
	expectWaiting(t, w, 1)
	expectErrorWithin(t, w, wire.CodeLeaseExpired, time.Second)
	queue(t, ts, "long", longLease, 1)
	expectHolds(t, long, tok)
}

// TestLeaseOnlyCompleteFramesCount: half a frame does not refresh the
// lease; only a complete frame proves the client alive.
func TestLeaseOnlyCompleteFramesCount(t *testing.T) {
	t.Parallel()
	const lease = 300 * time.Millisecond
	ts := batontest.StartServer(t) // io-timeout 5s, far beyond the lease
	h, tok := hold(t, ts, "half", lease)
	expectHolds(t, h, tok)
	last := time.Now()
	expectHolds(t, h, tok)
	h.Write([]byte{0x02}) // a heartbeat's first byte, and no more
	expectErrorWithin(t, h, wire.CodeLeaseExpired, lease+frameWait)
	if d := time.Since(last); d < lease {
		t.Fatalf("expired %v after the last complete frame, want at least %v", d, lease)
	}
}

// TestLeaseSilenceBeyondIOTimeout: io-timeout bounds one operation, not the
// silence between frames, which only the lease limits.
func TestLeaseSilenceBeyondIOTimeout(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t, ioTimeout(200*time.Millisecond))
	h, tok := hold(t, ts, "quiet", 10*time.Second)
	w := queue(t, ts, "quiet", 10*time.Second, 1)
	time.Sleep(700 * time.Millisecond) // silence beyond io-timeout is the subject
	expectHolds(t, h, tok)
	expectQueued(t, w, 1)
}
