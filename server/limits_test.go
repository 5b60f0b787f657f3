package server_test

import (
	"testing"

	"github.com/batonlock/baton/internal/batontest"
	"github.com/batonlock/baton/wire"
)

// TestLimitSessions: with MaxSessions sessions in the table, the next
// ACQUIRE gets OVERLOADED; the sessions in place are not disturbed, and a
// place freed is usable again. Connections that have not sent ACQUIRE do
// not count.
func TestLimitSessions(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t, maxSessions(2))
	reg := ts.Srv.Registry()
	batontest.Dial(t, ts.Addr) // connected, no ACQUIRE: not a session yet
	a, tokA := hold(t, ts, "a", longLease)
	w := queue(t, ts, "a", longLease, 1) // waiters count too

	for _, name := range []string{"b", "a"} {
		c := batontest.Dial(t, ts.Addr)
		c.Acquire(name, longLease, false, "")
		expectError(t, c, wire.CodeOverloaded)
		c.Conn.Close()
	}
	if got := metric(t, reg, "baton_limit_refusals_total", "limit=sessions"); got != 2 {
		t.Fatalf("limit_refusals{sessions} = %v, want 2", got)
	}
	expectHolds(t, a, tokA)
	expectQueued(t, w, 1)

	// A place freed (by a kick, which takes effect at once) is usable.
	lv, _ := ts.Srv.Lock("a")
	if _, err := ts.Srv.Kick(lv.Waiters[0].ID); err != nil {
		t.Fatal(err)
	}
	expectError(t, w, wire.CodeKicked)
	b, tokB := hold(t, ts, "b", longLease)
	expectHolds(t, b, tokB)
	expectHolds(t, a, tokA)
}

// TestLimitWaiters: a lock's queue takes MaxWaitersPerLock waiters; the
// next is refused with OVERLOADED, and other locks are not affected.
func TestLimitWaiters(t *testing.T) {
	t.Parallel()
	ts := batontest.StartServer(t, maxWaiters(2))
	reg := ts.Srv.Registry()
	h, tok := hold(t, ts, "full", longLease)
	w1 := queue(t, ts, "full", longLease, 1)
	w2 := queue(t, ts, "full", longLease, 2)

	over := batontest.Dial(t, ts.Addr)
	over.Acquire("full", longLease, false, "")
	expectError(t, over, wire.CodeOverloaded)
	if got := metric(t, reg, "baton_limit_refusals_total", "limit=waiters"); got != 1 {
		t.Fatalf("limit_refusals{waiters} = %v, want 1", got)
	}
	if got := metric(t, reg, "baton_limit_refusals_total", "limit=sessions"); got != 0 {
		t.Fatalf("limit_refusals{sessions} = %v, want 0", got)
	}
	expectHolds(t, h, tok)
	expectQueued(t, w1, 1)
	expectQueued(t, w2, 2)

	// NOWAIT on the full lock is BUSY (held), not OVERLOADED.
	nw := batontest.Dial(t, ts.Addr)
	nw.Acquire("full", longLease, true, "")
	expectError(t, nw, wire.CodeBusy)

	// Another lock queues as usual.
	hold(t, ts, "other", longLease)
	queue(t, ts, "other", longLease, 1)
	queue(t, ts, "other", longLease, 2)

	// A promotion frees a place in the queue.
	h.Conn.Close()
	expectPush(t, w1, frameWait)
	queue(t, ts, "full", longLease, 2)
}
