package server_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
)

// TestFIFO: a free lock is granted at once, the others queue in order, and
// heartbeat replies carry the current state and position.
func TestFIFO(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t)
	h, tok := hold(t, ts, "fifo", longLease)
	w1 := queue(t, ts, "fifo", longLease, 1)
	w2 := queue(t, ts, "fifo", longLease, 2)
	w3 := queue(t, ts, "fifo", longLease, 3)
	expectHolds(t, h, tok)
	expectQueued(t, w1, 1)
	expectQueued(t, w2, 2)
	expectQueued(t, w3, 3)

	// The one ahead leaves: positions move up; nobody is promoted.
	w1.Conn.Close()
	waitWaiters(t, ts, "fifo", 2)
	expectQueued(t, w3, 2)
	expectQueued(t, w2, 1)
	expectHolds(t, h, tok)

	// Handovers in arrival order, tokens strictly rising. The one behind
	// hears nothing but its own replies meanwhile.
	h.Conn.Close()
	tok2 := expectPush(t, w2, frameWait)
	if tok2 <= tok {
		t.Fatalf("push token %d, want > %d", tok2, tok)
	}
	expectHolds(t, w2, tok2)
	expectQueued(t, w3, 1)
	w2.Conn.Close()
	tok3 := expectPush(t, w3, frameWait)
	if tok3 <= tok2 {
		t.Fatalf("push token %d, want > %d", tok3, tok2)
	}
	expectHolds(t, w3, tok3)

	// The last one leaves: the lock is free again, with a larger token.
	w3.Conn.Close()
	batontest.Eventually(t, frameWait, func() bool { _, ok := ts.Srv.Lock("fifo"); return !ok }, "lock fifo still listed after its last session closed")
	_, tok4 := hold(t, ts, "fifo", longLease)
	if tok4 <= tok3 {
		t.Fatalf("token %d after the lock was free, want > %d", tok4, tok3)
	}
}

// waitWaiters waits until lock name has n waiters: the server notices a
// close asynchronously, and there is no frame to wait for.
func waitWaiters(t *testing.T, ts *batontest.Server, name string, n int) {
	t.Helper()
	batontest.Eventually(t, frameWait, func() bool {
		lv, _ := ts.Srv.Lock(name)
		return len(lv.Waiters) == n
	}, "lock %s does not have %d waiters", name, n)
}

// TestNoWait: NOWAIT on a held lock is refused with BUSY (the holder and
// the queue are untouched); on a free lock it is granted.
func TestNoWait(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t)
	c := batontest.Dial(t, ts.Addr)
	c.Acquire("nowait", longLease, true, "")
	tok := expectAcquired(t, c)
	w := queue(t, ts, "nowait", longLease, 1)

	b := batontest.Dial(t, ts.Addr)
	b.Acquire("nowait", longLease, true, "busy")
	expectError(t, b, wire.CodeBusy)
	expectHolds(t, c, tok)
	expectQueued(t, w, 1)
	queue(t, ts, "nowait", longLease, 2) // the refused one took no place
}

// TestPromotionOrder: ten waiters are promoted one by one in the order of
// their ACQUIRE, each with a larger token, each pushed only when its turn
// comes.
func TestPromotionOrder(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t)
	h, last := hold(t, ts, "order", longLease)
	const n = 10
	ws := make([]*batontest.Conn, n)
	for i := range ws {
		ws[i] = queue(t, ts, "order", longLease, uint32(i+1))
	}
	prev := h
	for i, w := range ws {
		prev.Conn.Close()
		tok := expectPush(t, w, frameWait)
		if tok <= last {
			t.Fatalf("waiter %d: token %d, want > %d", i, tok, last)
		}
		last = tok
		expectHolds(t, w, tok)
		if i+1 < n { // the next one is still waiting, first in line
			expectQueued(t, ws[i+1], 1)
		}
		prev = w
	}
}

// TestTokensPerName: tokens rise per name; a grant on one name does not
// disturb another.
func TestTokensPerName(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t)
	last := map[string]uint64{}
	for i := range 6 {
		name := fmt.Sprintf("n%d", i%3)
		c, tok := hold(t, ts, name, longLease)
		if tok <= last[name] {
			t.Fatalf("%s: token %d, want > %d", name, tok, last[name])
		}
		last[name] = tok
		c.Conn.Close()
		batontest.Eventually(t, frameWait, func() bool { _, ok := ts.Srv.Lock(name); return !ok }, "lock %s still listed", name)
	}
}

// TestHandover ends the owner in every way there is and checks that the
// head of the queue is pushed ACQUIRED promptly with a larger token, while
// it pipelines heartbeats: its frames are WAITING replies, then the push,
// then ACQUIRED replies with the pushed token, and nothing else.
func TestHandover(t *testing.T) {
	t.Parallel()
	const io = 300 * time.Millisecond
	const holderLease = time.Second
	tests := []struct {
		name      string
		lease     time.Duration // the holder's
		smallRbuf bool          // the holder gets a small receive buffer
		trigger   func(t *testing.T, ts *batontest.Server, h *batontest.Conn)
		minAfter  time.Duration // the push comes no earlier after the trigger
		within    time.Duration // and no later
		holderErr wire.Code     // the ERROR the holder gets, 0 if none
		cause     string        // baton_handovers_total label
	}{
		{"close", longLease, false, func(t *testing.T, ts *batontest.Server, h *batontest.Conn) { h.Conn.Close() },
			0, time.Second, 0, "closed"},
		{"reset", longLease, false, func(t *testing.T, ts *batontest.Server, h *batontest.Conn) { resetConn(t, h) },
			0, time.Second, 0, "reset"},
		{"force-release", longLease, false, func(t *testing.T, ts *batontest.Server, h *batontest.Conn) {
			if _, err := ts.Srv.ForceRelease("h"); err != nil {
				t.Errorf("ForceRelease: %v", err)
			}
		}, 0, time.Second, wire.CodeForceReleased, "force_released"},
		// The trigger is the holder's last frame: its heartbeat just before.
		{"lease expiry", holderLease, false, func(t *testing.T, ts *batontest.Server, h *batontest.Conn) {},
			holderLease, holderLease + time.Second, wire.CodeLeaseExpired, "lease_expired"},
		{"read timeout", longLease, false, func(t *testing.T, ts *batontest.Server, h *batontest.Conn) { h.Write([]byte{0x02}) },
			io, io + time.Second, wire.CodeProtocol, "read_timeout"},
		{"write timeout", longLease, true, func(t *testing.T, ts *batontest.Server, h *batontest.Conn) { flood(t, h) },
			io, 10 * time.Second, 0, "write_timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ts := batontest.StartServer(t, ioTimeout(io))
			var h *batontest.Conn
			if tt.smallRbuf {
				h = dialSmallBuffer(t, ts)
			} else {
				h = batontest.Dial(t, ts.Addr)
			}
			h.Acquire("h", tt.lease, false, "holder")
			tok := expectAcquired(t, h)
			w := queue(t, ts, "h", longLease, 1)
			behind := queue(t, ts, "h", longLease, 2)

			var triggered time.Time
			pushTok, pushAt := watchHandover(t, w, tt.within+frameWait, func() {
				if tt.name == "lease expiry" {
					triggered = time.Now() // the heartbeat's send: the lease runs from its arrival
					h.Heartbeat()
					expectAcquired(t, h)
				} else {
					triggered = time.Now()
				}
				tt.trigger(t, ts, h)
			})
			latency := pushAt.Sub(triggered)
			t.Logf("push %v after the trigger", latency)
			if pushTok <= tok {
				t.Errorf("push token %d, want > %d", pushTok, tok)
			}
			if latency < tt.minAfter {
				t.Errorf("push %v after the trigger, want at least %v", latency, tt.minAfter)
			}
			if latency > tt.within {
				t.Errorf("push %v after the trigger, want within %v", latency, tt.within)
			}
			if tt.holderErr != 0 {
				expectError(t, h, tt.holderErr)
			}
			// The one behind moved up and heard nothing else.
			expectQueued(t, behind, 1)
			eventuallyMetric(t, ts.Srv.Registry(), "baton_handovers_total", "cause="+tt.cause, 1)
		})
	}
}

// watchHandover pipelines heartbeats on waiter w (up to 8 in flight) and
// reads what comes back. Once replies flow it calls trigger, which must
// make the holder go away. It checks the order of w's frames (WAITING
// replies; exactly one ACQUIRED PUSH=1; then only ACQUIRED PUSH=0 replies
// with the pushed token; one reply per frame sent) and returns the pushed
// token and when the push was read.
func watchHandover(t *testing.T, w *batontest.Conn, within time.Duration, trigger func()) (uint64, time.Time) {
	t.Helper()
	hb := wire.AppendHeartbeat(nil)
	slots := make(chan struct{}, 8)
	stop := make(chan struct{})
	sent := make(chan int, 1)
	go func() {
		n := 0
		defer func() { sent <- n }()
		for {
			select {
			case <-stop:
				return
			case slots <- struct{}{}:
			}
			if _, err := w.Conn.Write(hb); err != nil {
				return
			}
			n++
		}
	}()
	var stopOnce sync.Once
	total := -1 // heartbeats sent, once the writer has stopped
	halt := func() {
		stopOnce.Do(func() {
			close(stop)
			total = <-sent
		})
	}
	defer halt()

	var (
		replies, after int
		triggered      bool
		pushTok        uint64
		pushAt         time.Time
	)
	deadline := time.Now().Add(within)
	for total < 0 || replies < total {
		if !pushAt.IsZero() && after >= 20 && total < 0 {
			halt() // then read the replies still due
			continue
		}
		f, err := w.TryReadFrame(time.Until(deadline))
		if err != nil {
			t.Fatalf("waiter: %v (after %d replies; push at %v)", err, replies, pushAt)
		}
		switch {
		case f.Type == wire.TypeWaiting:
			if !pushAt.IsZero() {
				t.Fatalf("WAITING %d after the push", f.Position)
			}
			if f.Position != 1 {
				t.Fatalf("got WAITING %d, want 1", f.Position)
			}
			replies++
			<-slots
			if !triggered && replies >= 3 {
				triggered = true
				trigger()
			}
		case f.Type == wire.TypeAcquired && f.Push:
			if !pushAt.IsZero() {
				t.Fatalf("a second push %v", f)
			}
			if !triggered {
				t.Fatalf("push %v before the holder went away", f)
			}
			pushTok, pushAt = f.Token, time.Now()
		case f.Type == wire.TypeAcquired:
			if pushAt.IsZero() {
				t.Fatalf("ACQUIRED reply %v before the push", f)
			}
			if f.Token != pushTok {
				t.Fatalf("ACQUIRED reply with token %d, want the pushed %d", f.Token, pushTok)
			}
			replies++
			after++
			<-slots
		default:
			t.Fatalf("waiter got %v", f)
		}
	}
	if pushAt.IsZero() {
		t.Fatal("no push")
	}
	expectHolds(t, w, pushTok) // and nothing was left over
	return pushTok, pushAt
}
