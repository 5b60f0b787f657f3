package server_test

import (
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
)

// TestIOTimeoutFirstFrame: the first frame must be complete within
// io-timeout of the connection; otherwise ERROR PROTOCOL and close.
func TestIOTimeoutFirstFrame(t *testing.T) {
	t.Parallel()
	const io = 200 * time.Millisecond
	ts := batontest.StartServer(t, ioTimeout(io))
	acq := acquireFrame(1, 0, 10000, "first", "")
	for _, tt := range []struct {
		name string
		send []byte
	}{
		{"nothing", nil},
		{"one byte", acq[:1]},
		{"a header", acq[:3]},
		{"half an ACQUIRE", acq[:len(acq)/2]},
		{"all but one byte", acq[:len(acq)-1]},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			c := batontest.Dial(t, ts.Addr)
			if tt.send != nil {
				c.Write(tt.send)
			}
			expectErrorWithin(t, c, wire.CodeProtocol, io+frameWait)
			d := time.Since(start)
			if d < io || d > io+time.Second {
				t.Fatalf("closed after %v, want after io-timeout %v (within 1s more)", d, io)
			}
		})
	}
	if _, ok := ts.Srv.Lock("first"); ok {
		t.Fatal("a session that never completed its ACQUIRE is in the table")
	}
}

// TestIOTimeoutHalfFrame: once a frame has begun, the rest must follow
// within io-timeout; otherwise ERROR PROTOCOL, close, and the session's
// place goes to the next.
func TestIOTimeoutHalfFrame(t *testing.T) {
	t.Parallel()
	const io = 200 * time.Millisecond
	ts := batontest.StartServer(t, ioTimeout(io))
	for _, part := range [][]byte{{0x02}, {0x02, 0x00}} {
		h, tok := hold(t, ts, "half", longLease)
		w := queue(t, ts, "half", longLease, 1)
		behind := queue(t, ts, "half", longLease, 2)
		// A waiter stalls mid-frame too: it leaves the queue.
		sent := time.Now()
		behind.Write(part)
		h.Write(part)
		expectErrorWithin(t, h, wire.CodeProtocol, io+frameWait)
		if d := time.Since(sent); d < io || d > io+time.Second {
			t.Fatalf("% x: holder ended %v after its partial frame, want io-timeout %v (within 1s more)", part, d, io)
		}
		expectErrorWithin(t, behind, wire.CodeProtocol, frameWait)
		tok2 := expectPush(t, w, frameWait)
		if tok2 <= tok {
			t.Fatalf("push token %d, want > %d", tok2, tok)
		}
		w.Conn.Close()
		batontest.Eventually(t, frameWait, func() bool { _, ok := ts.Srv.Lock("half"); return !ok }, "lock half still listed")
	}
}

// TestIOTimeoutStuckReader: a client that never reads, while the server
// has to write to it, blocks neither other sessions nor the promotion of
// an unrelated waiter; it is itself ended after io-timeout, and its lock
// moves on.
func TestIOTimeoutStuckReader(t *testing.T) {
	t.Parallel()
	const io = 2 * time.Second
	ts := batontest.StartServer(t, ioTimeout(io))
	stuck := dialSmallBuffer(t, ts)
	stuck.Acquire("stuck", longLease, false, "stuck")
	expectAcquired(t, stuck)
	next := queue(t, ts, "stuck", longLease, 1)
	other, otherTok := hold(t, ts, "other", longLease)
	otherW := queue(t, ts, "other", longLease, 1)

	began := time.Now()
	waitChan(t, flood(t, stuck), 10*time.Second, "the flooding client's writes never stalled")
	stalledAfter := time.Since(began)

	// While it is stuck: heartbeats and handovers elsewhere stay fast.
	start := time.Now()
	expectHolds(t, other, otherTok)
	expectQueued(t, otherW, 1)
	other.Conn.Close()
	tok := expectPush(t, otherW, frameWait)
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("promotion of an unrelated waiter took %v while a client is stuck, want under 500ms", d)
	}
	if tok <= otherTok {
		t.Fatalf("push token %d, want > %d", tok, otherTok)
	}
	fresh, freshTok := hold(t, ts, "fresh", longLease)
	expectHolds(t, fresh, freshTok)
	if got := metric(t, ts.Srv.Registry(), "baton_sessions_ended_total", "reason=write_timeout"); got != 0 {
		t.Fatalf("the stuck client was ended (write_timeout=%v) before the checks: they prove nothing", got)
	}

	// The stuck one ends by its write timeout; its waiter gets the lock.
	tokNext := expectPush(t, next, io+frameWait)
	t.Logf("writes stalled after %v; lock moved on %v after that", stalledAfter, time.Since(began)-stalledAfter)
	eventuallyMetric(t, ts.Srv.Registry(), "baton_sessions_ended_total", "reason=write_timeout", 1)
	expectHolds(t, next, tokNext)
}

// TestIOTimeoutStuckNewOwner: a waiter that never reads is promoted but
// cannot take the push; its write times out, it is ended, and the lock
// goes to the next waiter within about one io-timeout.
func TestIOTimeoutStuckNewOwner(t *testing.T) {
	t.Parallel()
	// Long enough that the holder surely closes while the stuck one's write
	// is still blocked (waitHeartbeatsStall takes 200ms of it).
	const io = time.Second
	ts := batontest.StartServer(t, ioTimeout(io))
	h, tok := hold(t, ts, "newowner", longLease)
	stuck := dialSmallBuffer(t, ts)
	stuck.Acquire("newowner", longLease, false, "stuck")
	expectWaiting(t, stuck, 1)
	next := queue(t, ts, "newowner", longLease, 2)
	waitChan(t, flood(t, stuck), 10*time.Second, "the flooding client's writes never stalled")
	waitHeartbeatsStall(t, ts.Srv.Registry())

	closed := time.Now()
	h.Conn.Close()
	tok2 := expectPush(t, next, 2*io+frameWait)
	d := time.Since(closed)
	if tok2 <= tok {
		t.Fatalf("push token %d, want > %d", tok2, tok)
	}
	if d > io+time.Second {
		t.Fatalf("lock reached the next waiter %v after the holder closed, want within io-timeout %v (+1s)", d, io)
	}
	t.Logf("lock reached the next waiter %v after the holder closed", d)
	// Two handovers: to the stuck one when the holder closed, and from it
	// when its write timed out.
	reg := ts.Srv.Registry()
	eventuallyMetric(t, reg, "baton_handovers_total", "cause=closed", 1)
	eventuallyMetric(t, reg, "baton_handovers_total", "cause=write_timeout", 1)
	expectHolds(t, next, tok2)
}
