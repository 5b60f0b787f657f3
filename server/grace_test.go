package server_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/clients/go/wire"
	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/server"
)

// TestCrashGrace: during the grace period a free lock's first ACQUIRE gets
// WAITING 1, a NOWAIT one ERROR OVERLOADED, and at the end of the period
// the head of the queue is pushed ACQUIRED, not before.
func TestCrashGrace(t *testing.T) {
	t.Parallel()
	const grace = 300 * time.Millisecond
	start := time.Now()
	var mu sync.Mutex
	var noted []time.Duration
	ts := batontest.StartServer(t, func(c *server.Config) {
		c.NoGrantFor = grace
		c.Leases = batontest.LeaseFunc(func(d time.Duration) error {
			mu.Lock()
			defer mu.Unlock()
			noted = append(noted, d)
			return nil
		})
	})
	if g := metric(t, ts.Srv.Registry(), "baton_grace_remaining_seconds", ""); g <= 0 || g > grace.Seconds() {
		t.Errorf("baton_grace_remaining_seconds %v, want in (0, %v]", g, grace.Seconds())
	}
	w1 := queue(t, ts, "grace", longLease, 1)
	w2 := queue(t, ts, "grace", longLease, 2)

	nw := batontest.Dial(t, ts.Addr)
	nw.Acquire("grace", longLease, true, "")
	if e := expectError(t, nw, wire.CodeOverloaded); !strings.Contains(e.Msg, "grace period") {
		t.Errorf("NOWAIT during grace: message %q, want it to name the grace period", e.Msg)
	}

	tok := expectPush(t, w1, grace+frameWait)
	if at := time.Since(start); at < grace {
		t.Fatalf("push after %v, want no grant before the grace period of %v", at, grace)
	}
	expectHolds(t, w1, tok)
	expectQueued(t, w2, 1)
	// After the grace period, a free lock is granted at once.
	_, tok2 := hold(t, ts, "other", longLease)
	if tok2 <= tok {
		t.Fatalf("token %d after the grace period, want > %d", tok2, tok)
	}
	if g := metric(t, ts.Srv.Registry(), "baton_grace_remaining_seconds", ""); g != 0 {
		t.Errorf("baton_grace_remaining_seconds %v after the grace period, want 0", g)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(noted) != 4 || noted[0] != longLease {
		t.Errorf("NoteLease calls %v, want four of %v", noted, longLease)
	}
}

// TestNoteLeaseFailureRefuses: a lease that cannot be recorded is not
// granted.
func TestNoteLeaseFailureRefuses(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t, func(c *server.Config) {
		c.Leases = batontest.LeaseFunc(func(time.Duration) error { return errors.New("disk full") })
	})
	c := batontest.Dial(t, ts.Addr)
	c.Acquire("a", longLease, false, "")
	expectError(t, c, wire.CodeOverloaded)
	if _, ok := ts.Srv.Lock("a"); ok {
		t.Fatal("lock a is listed after a refused ACQUIRE")
	}
}
