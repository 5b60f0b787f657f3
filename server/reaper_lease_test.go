package server_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
)

// TestReaperPushesCheckLeaderLease: the pushes no frame of the waiter's
// asks for, which the reaper makes on its own timer (a waiter promoted
// when its holder's lease runs out, every queue's head at the end of the
// failover grace), check the leader lease first, as every other push
// does: a replicated leader whose lease ran out while all its sessions
// were silent fails closed at that moment (the waiter hears NOT_LEADER,
// never ACQUIRED), and tells its node once.
func TestReaperPushesCheckLeaderLease(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"expiry", "grace end"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			for attempt := 1; ; attempt++ {
				if reaperPushAttempt(t, how) {
					return
				}
				if attempt == 5 {
					t.Fatalf("%d attempts: the set-up never took less than half the deadline (a machine this slow cannot run this test)", attempt)
				}
			}
		})
	}
}

// reaperPushAttempt runs one try of TestReaperPushesCheckLeaderLease; false
// if its set-up took so long that the reaper may have acted before the
// lease ran out (then nothing is checked).
func reaperPushAttempt(t *testing.T, how string) bool {
	t.Helper()
	const deadline = time.Second // the holder's lease, or the grace
	var may atomic.Bool
	var lost atomic.Int32
	ts := leaderServer(t, false, &may, &lost)
	start := time.Now()
	var w *batontest.Conn
	switch how {
	case "expiry":
		h, _ := hold(t, ts, "jobs", deadline) // silent from now on
		defer h.Conn.Close()
		w = queue(t, ts, "jobs", longLease, 1)
	case "grace end":
		ts.Srv.BeginTerm(deadline) // a new term, with a grace
		w = batontest.Dial(t, ts.Addr)
		w.Acquire("jobs", longLease, false, "test:jobs")
		if f := w.ReadFrame(frameWait); f.Type != wire.TypeWaiting {
			t.Fatalf("ACQUIRE in the grace: got %v, want WAITING", f)
		}
	}
	may.Store(false) // nothing else asks before the reaper's deadline
	if took := time.Since(start); took > deadline/2 {
		t.Logf("the set-up took %v, over half the %v deadline: again", took, deadline)
		w.Conn.Close()
		return false
	}
	if f := w.ReadFrame(frameWait); f.Type != wire.TypeError || f.Err.Code != wire.CodeNotLeader {
		t.Fatalf("waiter at the %s after the leader lease ran out: got %v, want ERROR NOT_LEADER, never ACQUIRED", how, f)
	}
	batontest.Eventually(t, frameWait, func() bool { return lost.Load() == 1 }, "TermLost called %d times, want 1", lost.Load())
	if ts.Srv.Serving() {
		t.Fatal("the server still serves after failing closed")
	}
	return true
}
