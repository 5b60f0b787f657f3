package locktable_test

import (
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/locktable"
)

// graceTable returns a table whose grace period ends 10s after t0.
func graceTable(t *testing.T, cfg locktable.Config) (*locktable.Table, *clock, time.Time) {
	t.Helper()
	end := t0.Add(10 * time.Second)
	cfg.NoGrantBefore = end
	tb, c, _ := newTable(t, cfg)
	return tb, c, end
}

func checkInvariants(t *testing.T, tb *locktable.Table) {
	t.Helper()
	if err := tb.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

func TestGraceQueuesFreeLocks(t *testing.T) {
	tb, c, end := graceTable(t, locktable.Config{})
	st, _ := acquire(t, tb, c.now, 1, req("a", time.Minute))
	mustWait(t, st, 1)
	st, _ = acquire(t, tb, c.now, 2, req("a", time.Minute))
	mustWait(t, st, 2)
	st, _ = acquire(t, tb, c.now, 3, req("b", time.Minute))
	mustWait(t, st, 1)
	checkInvariants(t, tb)
	if next, ok := tb.NextDeadline(); !ok || !next.Equal(end) {
		t.Fatalf("NextDeadline: got %v %v, want the end of grace %v", next, ok, end)
	}
	if until, ok := tb.GraceUntil(); !ok || !until.Equal(end) {
		t.Fatalf("GraceUntil: got %v %v, want %v true", until, ok, end)
	}

	// Nothing is granted a moment before the bound, not even by an ACQUIRE.
	c.now = end.Add(-time.Nanosecond)
	if exits := tb.Expire(c.now, nil); len(exits) != 0 {
		t.Fatalf("Expire before the bound: got exits %s, want none", exitIDs(exits))
	}
	st, _ = acquire(t, tb, c.now, 4, req("c", time.Minute))
	mustWait(t, st, 1)
	if li, _ := tb.Lock(c.now, "a"); li.Holder != nil || len(li.Waiters) != 2 {
		t.Fatalf("lock a before the bound: got %+v, want two waiters and no holder", li)
	}

	// At the bound, the head of every queue is granted, in name order,
	// with rising tokens; the others keep their place.
	c.now = end
	exits := tb.Expire(c.now, nil)
	var names []string
	var last uint64
	for _, e := range exits {
		if e.Cause != locktable.CauseGraceEnded || len(e.Promoted) == 0 || e.Session.ID != 0 {
			t.Fatalf("exit %+v: want a grace-ended grant with no session", e)
		}
		if e.Promoted[0].Token <= last {
			t.Fatalf("token %d after %d: want rising tokens", e.Promoted[0].Token, last)
		}
		last = e.Promoted[0].Token
		names = append(names, e.Promoted[0].Name)
	}
	if got, want := strings.Join(names, " "), "a b c"; got != want {
		t.Fatalf("granted at the bound: got %q, want %q", got, want)
	}
	if exits[0].Promoted[0].ID != 1 || exits[1].Promoted[0].ID != 3 || exits[2].Promoted[0].ID != 4 {
		t.Fatalf("granted %s, want sessions 1, 3, 4 (the heads)", exitIDs(exits))
	}
	if w := exits[0].Promoted[0].Waited; w != 10*time.Second {
		t.Fatalf("session 1 waited %v, want 10s", w)
	}
	checkInvariants(t, tb)
	if st, ok := tb.Seen(c.now, 2); !ok {
		t.Fatal("session 2 gone, want waiting")
	} else {
		mustWait(t, st, 1)
	}
	if _, ok := tb.GraceUntil(); ok {
		t.Fatal("GraceUntil: still pending after the bound")
	}
	if exits := tb.Expire(c.now, nil); len(exits) != 0 {
		t.Fatalf("second Expire: got exits %s, want none", exitIDs(exits))
	}

	// FIFO holds afterwards: session 1 leaves, session 2 is next.
	exits, _ = tb.Release(c.now, 1, nil)
	if len(exits) != 1 || len(exits[0].Promoted) == 0 || exits[0].Promoted[0].ID != 2 || exits[0].Promoted[0].Token <= last {
		t.Fatalf("release of 1: got %+v, want 2 promoted with a larger token", exits)
	}
	// And a free lock is granted at once again.
	st, _ = acquire(t, tb, c.now, 5, req("d", time.Minute))
	mustHold(t, st)
	checkInvariants(t, tb)
}

func TestGraceAcquireAtTheBoundGrantsTheQueueFirst(t *testing.T) {
	tb, c, end := graceTable(t, locktable.Config{})
	acquire(t, tb, c.now, 1, req("a", time.Minute))
	st, exits := acquire(t, tb, end, 2, req("a", time.Minute))
	if len(exits) != 1 || exits[0].Promoted[0].ID != 1 {
		t.Fatalf("ACQUIRE at the bound: got exits %s, want session 1 granted", exitIDs(exits))
	}
	mustWait(t, st, 1)
	checkInvariants(t, tb)
}

func TestGraceWaitersExpire(t *testing.T) {
	tb, c, end := graceTable(t, locktable.Config{})
	acquire(t, tb, c.now, 1, req("a", 3*time.Second)) // silent: expires at t0+3s
	acquire(t, tb, c.now, 2, req("a", 5*time.Second))
	acquire(t, tb, c.now, 3, req("b", 10*time.Second)) // its deadline is the bound itself
	if next, _ := tb.NextDeadline(); !next.Equal(t0.Add(3 * time.Second)) {
		t.Fatalf("NextDeadline: got %v, want the first expiry before the bound", next)
	}
	exits := tb.Expire(c.advance(3*time.Second), nil)
	if len(exits) != 1 || exits[0].Session.ID != 1 || exits[0].Cause != locktable.CauseExpired || len(exits[0].Promoted) > 0 {
		t.Fatalf("Expire at 3s: got %s, want 1 expired and nobody granted", exitIDs(exits))
	}
	for now := c.advance(time.Second); now.Before(end); now = c.advance(time.Second) {
		tb.Seen(now, 2)
	}
	checkInvariants(t, tb)
	exits = tb.Expire(end, nil)
	// Session 3's lease ran out at the bound: it leaves, and lock b is
	// not granted; session 2 kept its lease and is granted.
	if len(exits) != 2 || exits[0].Session.ID != 3 || exits[0].Cause != locktable.CauseExpired ||
		exits[1].Cause != locktable.CauseGraceEnded || exits[1].Promoted[0].ID != 2 {
		t.Fatalf("Expire at the bound: got %s, want 3 expired, then 2 granted", exitIDs(exits))
	}
	if tb.Locks() != 1 {
		t.Fatalf("Locks: got %d, want 1", tb.Locks())
	}
	checkInvariants(t, tb)
}

func TestGraceRefusesNoWait(t *testing.T) {
	tb, c, end := graceTable(t, locktable.Config{MaxWaitersPerLock: 1})
	r := req("a", time.Minute)
	r.NoWait = true
	if _, ref, _, _ := tb.Acquire(c.now, 1, r, nil); ref != locktable.RefusedGrace {
		t.Fatalf("NOWAIT during grace: got refusal %v, want grace", ref)
	}
	acquire(t, tb, c.now, 2, req("a", time.Minute))
	if _, ref, _, _ := tb.Acquire(c.now, 3, req("a", time.Minute), nil); ref != locktable.RefusedWaiters {
		t.Fatalf("second waiter over the limit during grace: got refusal %v, want waiters", ref)
	}
	if tb.Sessions() != 1 {
		t.Fatalf("Sessions: got %d, want 1 (refused ones are not entered)", tb.Sessions())
	}
	// After the bound, NOWAIT on the now-held lock is busy, on a free one granted.
	tb.Expire(end, nil)
	if _, ref, _, _ := tb.Acquire(end, 4, r, nil); ref != locktable.RefusedBusy {
		t.Fatalf("NOWAIT after grace on a held lock: got refusal %v, want busy", ref)
	}
	r.Name = "b"
	st, _ := acquire(t, tb, end, 5, r)
	mustHold(t, st)
}

func TestGraceEmptyTable(t *testing.T) {
	tb, c, end := graceTable(t, locktable.Config{})
	if next, ok := tb.NextDeadline(); !ok || !next.Equal(end) {
		t.Fatalf("NextDeadline of an empty table in grace: got %v %v, want %v true", next, ok, end)
	}
	if exits := tb.Expire(end, nil); len(exits) != 0 {
		t.Fatalf("Expire: got %s, want nothing", exitIDs(exits))
	}
	if _, ok := tb.NextDeadline(); ok {
		t.Fatal("NextDeadline after grace of an empty table: want false")
	}
	st, _ := acquire(t, tb, c.advance(11*time.Second), 1, req("a", time.Minute))
	mustHold(t, st)
}

func TestNoGraceByDefault(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{})
	if _, ok := tb.GraceUntil(); ok {
		t.Fatal("GraceUntil: want none with a zero NoGrantBefore")
	}
	st, _ := acquire(t, tb, c.now, 1, req("a", time.Minute))
	mustHold(t, st)
}
