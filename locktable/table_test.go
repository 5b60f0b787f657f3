package locktable_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonlock/baton/locktable"
)

// clock is the fake clock: a time the test moves by hand.
type clock struct{ now time.Time }

func (c *clock) advance(d time.Duration) time.Time {
	c.now = c.now.Add(d)
	return c.now
}

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// tokens is a token source that counts from 100, so a test can tell a token
// from a small integer.
type tokens struct{ last uint64 }

func (k *tokens) next() uint64 {
	k.last++
	return k.last
}

// newTable returns a table with cfg (NextToken filled in), its clock at t0
// and its token source.
func newTable(t testing.TB, cfg locktable.Config) (*locktable.Table, *clock, *tokens) {
	t.Helper()
	k := &tokens{last: 99}
	if cfg.NextToken == nil {
		cfg.NextToken = k.next
	}
	return locktable.New(cfg), &clock{now: t0}, k
}

func req(name string, lease time.Duration) locktable.Request {
	return locktable.Request{Name: name, Owner: "test", Lease: lease}
}

// acquire enters id and fails the test on a refusal or an error.
func acquire(t *testing.T, tb *locktable.Table, now time.Time, id locktable.SessionID, r locktable.Request) (locktable.State, []locktable.Exit) {
	t.Helper()
	st, ref, exits, err := tb.Acquire(now, id, r, nil)
	if err != nil || ref != locktable.NotRefused {
		t.Fatalf("Acquire(%d, %q): got refusal %v, error %v, want neither", id, r.Name, ref, err)
	}
	return st, exits
}

func mustHold(t *testing.T, st locktable.State) uint64 {
	t.Helper()
	if !st.Held || st.Token == 0 || st.Position != 0 {
		t.Fatalf("got state %+v, want held with a token", st)
	}
	return st.Token
}

func mustWait(t *testing.T, st locktable.State, pos int) {
	t.Helper()
	if st.Held || st.Token != 0 || st.Position != pos {
		t.Fatalf("got state %+v, want waiting at position %d", st, pos)
	}
}

// exitIDs gives the sessions of exits with their causes, for messages.
func exitIDs(exits []locktable.Exit) string {
	var b strings.Builder
	for i, e := range exits {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%d:%v", e.Session.ID, e.Cause)
		for i, g := range e.Promoted {
			sep := "->"
			if i > 0 {
				sep = "+"
			}
			fmt.Fprintf(&b, "%s%d", sep, g.ID)
		}
	}
	return "[" + b.String() + "]"
}

// wantExits checks exits against "id:cause" or "id:cause->promoted" items.
func wantExits(t *testing.T, exits []locktable.Exit, want ...string) {
	t.Helper()
	if got, w := exitIDs(exits), "["+strings.Join(want, ", ")+"]"; got != w {
		t.Fatalf("got exits %s, want %s", got, w)
	}
}

func TestFreeLockGranted(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{})
	st, ref, exits, err := tb.Acquire(c.now, 1, locktable.Request{Name: "jobs", Owner: "h:1", Lease: time.Second}, nil)
	if err != nil || ref != locktable.NotRefused || len(exits) != 0 {
		t.Fatalf("got refusal %v, exits %v, error %v, want none", ref, exits, err)
	}
	if tok := mustHold(t, st); tok != 100 {
		t.Fatalf("got token %d, want 100 (the first from NextToken)", tok)
	}
	if got := tb.Sessions(); got != 1 {
		t.Errorf("Sessions: got %d, want 1", got)
	}
	if got := tb.Locks(); got != 1 {
		t.Errorf("Locks: got %d, want 1", got)
	}
	c.advance(300 * time.Millisecond)
	in, ok := tb.Session(c.now, 1)
	want := locktable.Info{ID: 1, Name: "jobs", Owner: "h:1", Lease: time.Second, Held: true, Token: 100, Since: 300 * time.Millisecond, Silent: 300 * time.Millisecond}
	if !ok || in != want {
		t.Fatalf("Session: got %+v, %v, want %+v", in, ok, want)
	}
	// NOWAIT on a free lock is granted like any other.
	st, _ = acquire(t, tb, c.now, 2, locktable.Request{Name: "other", Lease: time.Second, NoWait: true})
	if tok := mustHold(t, st); tok != 101 {
		t.Fatalf("got token %d, want 101", tok)
	}
}

func TestSecondSessionQueued(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{})
	mustHold(t, first(acquire(t, tb, c.now, 1, req("jobs", time.Second))))
	for i := 2; i <= 4; i++ {
		st, exits := acquire(t, tb, c.advance(time.Millisecond), locktable.SessionID(i), req("jobs", time.Second))
		mustWait(t, st, i-1)
		if len(exits) != 0 {
			t.Fatalf("got exits %s, want none", exitIDs(exits))
		}
	}
	st, ok := tb.Seen(c.now, 3)
	if !ok {
		t.Fatalf("Seen(3): got false, want true")
	}
	mustWait(t, st, 2)
	if got := tb.Locks(); got != 1 {
		t.Errorf("Locks: got %d, want 1", got)
	}
	if got := tb.Sessions(); got != 4 {
		t.Errorf("Sessions: got %d, want 4", got)
	}
}

func first(st locktable.State, _ []locktable.Exit) locktable.State { return st }

// seen records a frame from id and fails the test if it is not in the table.
func seen(t *testing.T, tb *locktable.Table, now time.Time, id locktable.SessionID) locktable.State {
	t.Helper()
	st, ok := tb.Seen(now, id)
	if !ok {
		t.Fatalf("Seen(%d): got false, want true", id)
	}
	return st
}

func TestNoWaitBusy(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{})
	acquire(t, tb, c.now, 1, req("jobs", time.Second))
	st, ref, exits, err := tb.Acquire(c.now, 2, locktable.Request{Name: "jobs", Lease: time.Second, NoWait: true}, nil)
	if err != nil || ref != locktable.RefusedBusy || st != (locktable.State{}) || len(exits) != 0 {
		t.Fatalf("got %+v, refusal %v, exits %v, error %v, want the zero state, RefusedBusy", st, ref, exits, err)
	}
	if _, ok := tb.Session(c.now, 2); ok {
		t.Errorf("refused session 2 is in the table, want it not entered")
	}
	if got := tb.Sessions(); got != 1 {
		t.Errorf("Sessions: got %d, want 1", got)
	}
}

func TestMaxSessions(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{MaxSessions: 2})
	acquire(t, tb, c.now, 1, req("a", time.Second))
	acquire(t, tb, c.now, 2, req("a", time.Second))
	for _, name := range []string{"a", "b"} {
		_, ref, _, err := tb.Acquire(c.now, 3, req(name, time.Second), nil)
		if err != nil || ref != locktable.RefusedSessions {
			t.Fatalf("Acquire of a third session on %q: got refusal %v, error %v, want RefusedSessions", name, ref, err)
		}
	}
	if got, got2 := tb.Sessions(), tb.Locks(); got != 2 || got2 != 1 {
		t.Fatalf("Sessions, Locks: got %d, %d, want 2, 1 (a refusal enters nothing)", got, got2)
	}
	tb.Release(c.now, 2, nil)
	mustHold(t, first(acquire(t, tb, c.now, 3, req("b", time.Second))))
}

func TestMaxSessionsCountsOnlyLiveSessions(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{MaxSessions: 1})
	acquire(t, tb, c.now, 1, req("a", time.Second))
	// Session 1 has been silent for its whole lease: it is over, even if
	// the server's expiry timer has not run yet, so it must not make the
	// table refuse a newcomer on another lock.
	c.advance(time.Second)
	st, ref, exits, err := tb.Acquire(c.now, 2, req("b", time.Second), nil)
	if err != nil || ref != locktable.NotRefused {
		t.Fatalf("got refusal %v, error %v, want a grant", ref, err)
	}
	mustHold(t, st)
	wantExits(t, exits, "1:expired")
}

func TestMaxWaitersPerLock(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{MaxWaitersPerLock: 2})
	acquire(t, tb, c.now, 1, req("a", time.Second))
	acquire(t, tb, c.now, 2, req("a", time.Second))
	acquire(t, tb, c.now, 3, req("a", time.Second))
	_, ref, _, err := tb.Acquire(c.now, 4, req("a", time.Second), nil)
	if err != nil || ref != locktable.RefusedWaiters {
		t.Fatalf("got refusal %v, error %v, want RefusedWaiters", ref, err)
	}
	if _, ok := tb.Session(c.now, 4); ok {
		t.Fatalf("refused session 4 is in the table")
	}
	// Another lock has its own queue; a free lock needs no queue at all.
	acquire(t, tb, c.now, 5, req("b", time.Second))
	acquire(t, tb, c.now, 6, req("b", time.Second))
	// Once a waiter leaves there is room again.
	tb.Kick(c.now, 2, nil)
	mustWait(t, first(acquire(t, tb, c.now, 4, req("a", time.Second))), 2)
}

func TestReleasePromotesHead(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{})
	tok1 := mustHold(t, first(acquire(t, tb, c.now, 1, req("jobs", time.Minute))))
	c.advance(time.Second)
	acquire(t, tb, c.now, 2, req("jobs", time.Minute))
	c.advance(time.Second)
	acquire(t, tb, c.now, 3, req("jobs", time.Minute))
	c.advance(2 * time.Second)
	exits, ok := tb.Release(c.now, 1, nil)
	if !ok {
		t.Fatalf("Release(1): got false, want true")
	}
	wantExits(t, exits, "1:released->2")
	e := exits[0]
	if !e.Session.Held || e.Session.Token != tok1 || e.Session.Since != 4*time.Second {
		t.Errorf("exit session: got %+v, want the holder with token %d, since 4s", e.Session, tok1)
	}
	g := e.Promoted[0]
	if g.Name != "jobs" || g.Token <= tok1 || g.Waited != 3*time.Second {
		t.Errorf("promoted: got %+v, want jobs, token > %d, waited 3s", g, tok1)
	}
	st, _ := tb.Seen(c.now, 2)
	if tok := mustHold(t, st); tok != g.Token {
		t.Errorf("Seen(2) token: got %d, want the grant's %d", tok, g.Token)
	}
	in, _ := tb.Session(c.advance(time.Second), 2)
	if in.Since != time.Second {
		t.Errorf("promoted holder's Since: got %v, want 1s (from the promotion)", in.Since)
	}
	mustWait(t, seen(t, tb, c.now, 3), 1)
	if _, ok := tb.Release(c.now, 1, nil); ok {
		t.Errorf("second Release(1): got true, want false")
	}
}

func TestPromotionFIFO(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{})
	holder := locktable.SessionID(1)
	acquire(t, tb, c.now, holder, req("q", time.Hour))
	for id := locktable.SessionID(2); id <= 10; id++ {
		acquire(t, tb, c.advance(time.Millisecond), id, req("q", time.Hour))
	}
	var last uint64
	for want := locktable.SessionID(2); want <= 10; want++ {
		exits, _ := tb.Release(c.advance(time.Millisecond), holder, nil)
		if len(exits) != 1 || len(exits[0].Promoted) == 0 || exits[0].Promoted[0].ID != want {
			t.Fatalf("release of %d: got exits %s, want %d promoted", holder, exitIDs(exits), want)
		}
		if exits[0].Promoted[0].Token <= last {
			t.Fatalf("token: got %d, want more than %d", exits[0].Promoted[0].Token, last)
		}
		last = exits[0].Promoted[0].Token
		holder = want
	}
	exits, _ := tb.Release(c.now, holder, nil)
	wantExits(t, exits, "10:released")
	if tb.Locks() != 0 || tb.Sessions() != 0 {
		t.Fatalf("Locks, Sessions: got %d, %d, want 0, 0", tb.Locks(), tb.Sessions())
	}
}

func TestSeenSlidesLease(t *testing.T) {
	const lease = time.Second
	tb, c, _ := newTable(t, locktable.Config{})
	acquire(t, tb, c.now, 1, req("a", lease)) // holder
	acquire(t, tb, c.now, 2, req("a", lease)) // waiter
	for i := 0; i < 1000; i++ {
		c.advance(lease / 2)
		if exits := tb.Expire(c.now, nil); len(exits) != 0 {
			t.Fatalf("after %d beats: got exits %s, want none", i, exitIDs(exits))
		}
		for _, id := range []locktable.SessionID{1, 2} {
			if _, ok := tb.Seen(c.now, id); !ok {
				t.Fatalf("Seen(%d) after %d beats: got false, want true", id, i)
			}
		}
		if d, ok := tb.NextDeadline(); !ok || !d.Equal(c.now.Add(lease)) {
			t.Fatalf("NextDeadline: got %v, %v, want now+lease %v", d, ok, c.now.Add(lease))
		}
	}
	// Silent from here: both go at exactly their lease, not earlier.
	lastSeen := c.now
	c.now = lastSeen.Add(lease - time.Nanosecond)
	if exits := tb.Expire(c.now, nil); len(exits) != 0 {
		t.Fatalf("1ns before the lease: got exits %s, want none", exitIDs(exits))
	}
	in, _ := tb.Session(c.now, 1)
	if in.Silent != lease-time.Nanosecond {
		t.Errorf("Silent: got %v, want %v", in.Silent, lease-time.Nanosecond)
	}
	c.now = lastSeen.Add(lease)
	exits := tb.Expire(c.now, nil)
	// Both deadlines are due: whichever the heap takes first, the waiter is
	// never promoted, since it is overdue too.
	if len(exits) != 2 || slices.ContainsFunc(exits, func(e locktable.Exit) bool { return len(e.Promoted) > 0 || e.Cause != locktable.CauseExpired }) {
		t.Fatalf("at the lease: got exits %s, want 1 and 2 expired, nobody promoted", exitIDs(exits))
	}
	for _, e := range exits {
		if e.Session.Silent != lease {
			t.Errorf("exit of %d: Silent %v, want exactly the lease %v", e.Session.ID, e.Session.Silent, lease)
		}
	}
	if tb.Sessions() != 0 || tb.Locks() != 0 {
		t.Fatalf("Sessions, Locks: got %d, %d, want 0, 0", tb.Sessions(), tb.Locks())
	}
}

func TestSeenNeverMovesLeaseBack(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{})
	acquire(t, tb, c.advance(time.Second), 1, req("a", time.Second))
	// A call with an earlier now (the caller's clock is monotonic, but
	// calls may be made out of order) must not shorten the lease.
	if _, ok := tb.Seen(t0, 1); !ok {
		t.Fatalf("Seen: got false, want true")
	}
	if d, _ := tb.NextDeadline(); !d.Equal(c.now.Add(time.Second)) {
		t.Fatalf("NextDeadline: got %v, want %v", d, c.now.Add(time.Second))
	}
}

func TestSeenTooLate(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{})
	acquire(t, tb, c.now, 1, req("a", time.Second))
	acquire(t, tb, c.now, 2, req("a", time.Hour))
	// A frame that arrives once the lease has run out is too late: the
	// session ended at its deadline, whether or not Expire has run. Seen
	// must not revive it, nor confirm it to the client.
	c.advance(time.Second)
	if st, ok := tb.Seen(c.now, 1); ok {
		t.Fatalf("Seen at the lease: got %+v, true, want false", st)
	}
	if d, _ := tb.NextDeadline(); !d.Equal(t0.Add(time.Second)) {
		t.Fatalf("NextDeadline: got %v, want the old deadline %v", d, t0.Add(time.Second))
	}
	exits := tb.Expire(c.now, nil)
	wantExits(t, exits, "1:expired->2")
}

func TestExpireSilentHolderPromotes(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{})
	tok1 := mustHold(t, first(acquire(t, tb, c.now, 1, req("a", 2*time.Second))))
	acquire(t, tb, c.advance(500*time.Millisecond), 2, req("a", time.Hour))
	c.now = t0.Add(2 * time.Second)
	if d, ok := tb.NextDeadline(); !ok || !d.Equal(c.now) {
		t.Fatalf("NextDeadline: got %v, %v, want %v", d, ok, c.now)
	}
	exits := tb.Expire(c.now, nil)
	wantExits(t, exits, "1:expired->2")
	if g := exits[0].Promoted[0]; g.Token <= tok1 || g.Waited != 1500*time.Millisecond {
		t.Fatalf("promoted: got %+v, want token > %d, waited 1.5s", g, tok1)
	}
	if d, _ := tb.NextDeadline(); !d.Equal(t0.Add(500*time.Millisecond + time.Hour)) {
		t.Fatalf("NextDeadline: got %v, want the new holder's", d)
	}
}

func TestOverdueWaiterSkipped(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{})
	acquire(t, tb, c.now, 1, req("a", time.Hour))
	acquire(t, tb, c.now, 2, req("a", time.Second)) // silent: overdue at t0+1s
	acquire(t, tb, c.now, 3, req("a", time.Hour))
	// Exactly at its lease the head waiter is over: it must be expired,
	// never granted, even though Expire has not run.
	c.advance(time.Second)
	exits, _ := tb.Release(c.now, 1, nil)
	wantExits(t, exits, "1:released->3", "2:expired")
	if exits[1].Session.Silent != time.Second {
		t.Errorf("expired waiter's Silent: got %v, want 1s", exits[1].Session.Silent)
	}
	if _, ok := tb.Session(c.now, 2); ok {
		t.Errorf("expired waiter 2 is still in the table")
	}
	// An overdue waiter behind a live head is not skipped over: it is left
	// for Expire, which the server's timer runs at its (past) deadline.
	tb3, c3, _ := newTable(t, locktable.Config{})
	acquire(t, tb3, c3.now, 1, req("a", time.Hour))
	acquire(t, tb3, c3.now, 2, req("a", time.Hour))
	acquire(t, tb3, c3.now, 3, req("a", time.Second))
	exits, _ = tb3.Release(c3.advance(time.Second), 1, nil)
	wantExits(t, exits, "1:released->2")
	if _, ok := tb3.Seen(c3.now, 3); ok {
		t.Errorf("Seen of overdue waiter 3: got true, want false")
	}
	wantExits(t, tb3.Expire(c3.now, nil), "3:expired")

	// No waiter alive: the lock goes free and away.
	tb2, c2, _ := newTable(t, locktable.Config{})
	acquire(t, tb2, c2.now, 1, req("a", time.Hour))
	acquire(t, tb2, c2.now, 2, req("a", time.Second))
	exits, _ = forceReleaseAll(tb2, c2.advance(2*time.Second), "a", nil)
	wantExits(t, exits, "1:force_released", "2:expired")
	if tb2.Locks() != 0 || tb2.Sessions() != 0 {
		t.Fatalf("Locks, Sessions: got %d, %d, want 0, 0", tb2.Locks(), tb2.Sessions())
	}
}

func TestAcquireExpiresOverdueHolder(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{})
	tok1 := mustHold(t, first(acquire(t, tb, c.now, 1, req("a", time.Second))))
	c.advance(time.Second)
	st, exits := acquire(t, tb, c.now, 2, req("a", time.Second))
	if tok := mustHold(t, st); tok <= tok1 {
		t.Fatalf("token: got %d, want more than %d", tok, tok1)
	}
	wantExits(t, exits, "1:expired")

	// With a live waiter the waiter is promoted, and the newcomer queues.
	tb, c, _ = newTable(t, locktable.Config{})
	acquire(t, tb, c.now, 1, req("a", time.Second))
	acquire(t, tb, c.now, 2, req("a", time.Hour))
	c.advance(time.Second)
	st, exits = acquire(t, tb, c.now, 3, req("a", time.Hour))
	mustWait(t, st, 1)
	wantExits(t, exits, "1:expired->2")

	// NOWAIT is answered after the dead holder is gone: the lock is free.
	tb, c, _ = newTable(t, locktable.Config{})
	acquire(t, tb, c.now, 1, req("a", time.Second))
	c.advance(time.Second)
	st, exits = acquire(t, tb, c.now, 2, locktable.Request{Name: "a", Lease: time.Second, NoWait: true})
	mustHold(t, st)
	wantExits(t, exits, "1:expired")

	// One nanosecond before its lease the holder is alive: NOWAIT is busy.
	tb, c, _ = newTable(t, locktable.Config{})
	acquire(t, tb, c.now, 1, req("a", time.Second))
	c.advance(time.Second - time.Nanosecond)
	_, ref, exits, _ := tb.Acquire(c.now, 2, locktable.Request{Name: "a", Lease: time.Second, NoWait: true}, nil)
	if ref != locktable.RefusedBusy || len(exits) != 0 {
		t.Fatalf("got refusal %v, exits %s, want RefusedBusy and none", ref, exitIDs(exits))
	}
}

// forceReleaseAll takes name from every holder it has now, as an
// operator's release does, in one step.
func forceReleaseAll(tb *locktable.Table, now time.Time, name string, dst []locktable.Exit) ([]locktable.Exit, error) {
	through, ok := tb.NewestToken(name)
	if !ok {
		return dst, locktable.ErrNotHeld
	}
	exits, more, err := tb.ForceReleaseThrough(now, name, through, math.MaxInt, dst)
	if more {
		panic("ForceReleaseThrough without a bound left holders")
	}
	return exits, err
}

func TestForceRelease(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{})
	if _, _, err := tb.ForceReleaseThrough(c.now, "nobody", math.MaxUint64, 1, nil); !errors.Is(err, locktable.ErrNotHeld) {
		t.Fatalf("ForceReleaseThrough of an unknown lock: got %v, want ErrNotHeld", err)
	}
	acquire(t, tb, c.now, 1, req("a", time.Hour))
	acquire(t, tb, c.now, 2, req("a", time.Hour))
	dst := make([]locktable.Exit, 1) // exits are appended, never overwrite
	exits, err := forceReleaseAll(tb, c.now, "a", dst)
	if err != nil {
		t.Fatal(err)
	}
	wantExits(t, exits[1:], "1:force_released->2")
	exits, err = forceReleaseAll(tb, c.now, "a", nil)
	if err != nil {
		t.Fatal(err)
	}
	wantExits(t, exits, "2:force_released")
	if _, err := forceReleaseAll(tb, c.now, "a", nil); !errors.Is(err, locktable.ErrNotHeld) {
		t.Fatalf("release of a released lock: got %v, want ErrNotHeld", err)
	}
	if tb.Locks() != 0 {
		t.Fatalf("Locks: got %d, want 0", tb.Locks())
	}
}

func TestKick(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{})
	if _, err := tb.Kick(c.now, 9, nil); !errors.Is(err, locktable.ErrUnknownSession) {
		t.Fatalf("Kick(unknown): got %v, want ErrUnknownSession", err)
	}
	acquire(t, tb, c.now, 1, req("a", time.Hour))
	acquire(t, tb, c.now, 2, req("a", time.Hour))
	acquire(t, tb, c.now, 3, req("a", time.Hour))
	if exits, err := tb.Kick(c.now, 1, nil); !errors.Is(err, locktable.ErrHolder) || len(exits) != 0 {
		t.Fatalf("Kick(holder): got %s, %v, want ErrHolder and no exits", exitIDs(exits), err)
	}
	exits, err := tb.Kick(c.now, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantExits(t, exits, "2:kicked")
	if exits[0].Session.Position != 1 || exits[0].Session.Held {
		t.Errorf("kicked session: got %+v, want the waiter at position 1", exits[0].Session)
	}
	mustWait(t, seen(t, tb, c.now, 3), 1)
	if _, err := tb.Kick(c.now, 2, nil); !errors.Is(err, locktable.ErrUnknownSession) {
		t.Fatalf("second Kick(2): got %v, want ErrUnknownSession", err)
	}
	// The holder is untouched.
	if in, _ := tb.Session(c.now, 1); !in.Held {
		t.Fatalf("holder after a kick: got %+v, want held", in)
	}
}

func TestPositionsAfterRemovals(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{})
	acquire(t, tb, c.now, 1, req("a", time.Hour))
	for id := locktable.SessionID(2); id <= 8; id++ {
		acquire(t, tb, c.now, id, req("a", time.Hour))
	}
	// Queue 2 3 4 5 6 7 8; take 3 (release), 5 (kick), 8 (the tail).
	tb.Release(c.now, 3, nil)
	tb.Kick(c.now, 5, nil)
	tb.Release(c.now, 8, nil)
	want := []locktable.SessionID{2, 4, 6, 7}
	for i, id := range want {
		mustWait(t, seen(t, tb, c.now, id), i+1)
	}
	li, _ := tb.Lock(c.now, "a")
	var got []locktable.SessionID
	for i, w := range li.Waiters {
		got = append(got, w.ID)
		if w.Position != i+1 {
			t.Errorf("Lock().Waiters[%d]: position %d, want %d", i, w.Position, i+1)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("waiters: got %v, want %v", got, want)
	}
	// A newcomer goes to the end.
	mustWait(t, first(acquire(t, tb, c.now, 9, req("a", time.Hour))), 5)
	// The head leaves: everybody moves up one.
	tb.Kick(c.now, 2, nil)
	for i, id := range []locktable.SessionID{4, 6, 7, 9} {
		mustWait(t, seen(t, tb, c.now, id), i+1)
	}
}

func TestSnapshotAndLock(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{})
	if got := tb.Snapshot(c.now); len(got) != 0 {
		t.Fatalf("Snapshot of an empty table: got %v, want none", got)
	}
	if _, ok := tb.Lock(c.now, "b"); ok {
		t.Fatalf("Lock of an empty table: got true, want false")
	}
	acquire(t, tb, c.now, 1, locktable.Request{Name: "b", Owner: "h:1", Lease: time.Minute})
	acquire(t, tb, c.advance(time.Second), 2, locktable.Request{Name: "b", Owner: "h:2", Lease: 2 * time.Minute})
	acquire(t, tb, c.advance(time.Second), 3, locktable.Request{Name: "a", Owner: "h:3", Lease: 3 * time.Minute})
	acquire(t, tb, c.advance(time.Second), 4, locktable.Request{Name: "b", Owner: "h:4", Lease: 4 * time.Minute})
	tb.Seen(c.advance(time.Second), 1)
	c.advance(time.Second) // now t0+5s; 1 last seen at t0+4s

	snap := tb.Snapshot(c.now)
	if len(snap) != 2 || snap[0].Name != "a" || snap[1].Name != "b" {
		t.Fatalf("Snapshot: got %d locks %v, want a then b", len(snap), snap)
	}
	a := snap[0]
	if a.Holder == nil || len(a.Waiters) != 0 {
		t.Fatalf("lock a: got %+v, want a holder and no waiters", a)
	}
	wantA := locktable.Info{ID: 3, Name: "a", Owner: "h:3", Lease: 3 * time.Minute, Held: true, Token: 101, Since: 3 * time.Second, Silent: 3 * time.Second}
	if *a.Holder != wantA {
		t.Errorf("a's holder: got %+v, want %+v", *a.Holder, wantA)
	}
	b := snap[1]
	wantB := locktable.LockInfo{
		Name:   "b",
		Holder: &locktable.Info{ID: 1, Name: "b", Owner: "h:1", Lease: time.Minute, Held: true, Token: 100, Since: 5 * time.Second, Silent: time.Second},
		Waiters: []locktable.Info{
			{ID: 2, Name: "b", Owner: "h:2", Lease: 2 * time.Minute, Position: 1, Since: 4 * time.Second, Silent: 4 * time.Second},
			{ID: 4, Name: "b", Owner: "h:4", Lease: 4 * time.Minute, Position: 2, Since: 2 * time.Second, Silent: 2 * time.Second},
		},
	}
	if b.Holder == nil || *b.Holder != *wantB.Holder {
		t.Errorf("b's holder: got %+v, want %+v", b.Holder, *wantB.Holder)
	}
	if !slices.Equal(b.Waiters, wantB.Waiters) {
		t.Errorf("b's waiters:\ngot  %+v\nwant %+v", b.Waiters, wantB.Waiters)
	}
	lb, ok := tb.Lock(c.now, "b")
	if !ok || lb.Name != "b" || *lb.Holder != *wantB.Holder || !slices.Equal(lb.Waiters, wantB.Waiters) {
		t.Errorf("Lock(b): got %+v, want the snapshot's b", lb)
	}
	for _, w := range wantB.Waiters {
		if in, ok := tb.Session(c.now, w.ID); !ok || in != w {
			t.Errorf("Session(%d): got %+v, want %+v", w.ID, in, w)
		}
	}
	// Since and Silent never go negative for a now before the session's.
	if in, _ := tb.Session(t0, 4); in.Since != 0 || in.Silent != 0 {
		t.Errorf("Session at an earlier now: got Since %v Silent %v, want 0, 0", in.Since, in.Silent)
	}
}

func TestNextDeadline(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{})
	if _, ok := tb.NextDeadline(); ok {
		t.Fatalf("NextDeadline of an empty table: got true, want false")
	}
	acquire(t, tb, c.now, 1, req("a", 5*time.Second))
	acquire(t, tb, c.now, 2, req("a", 3*time.Second))
	acquire(t, tb, c.now, 3, req("b", 4*time.Second))
	check := func(want time.Time) {
		t.Helper()
		if d, ok := tb.NextDeadline(); !ok || !d.Equal(want) {
			t.Fatalf("NextDeadline: got %v, %v, want %v", d, ok, want)
		}
	}
	check(t0.Add(3 * time.Second))
	tb.Seen(c.advance(2*time.Second), 2) // 2 now due at t0+5s
	check(t0.Add(4 * time.Second))
	tb.Release(c.now, 3, nil)
	check(t0.Add(5 * time.Second))
	tb.Release(c.now, 1, nil)
	check(t0.Add(5 * time.Second))
	tb.Release(c.now, 2, nil)
	if _, ok := tb.NextDeadline(); ok {
		t.Fatalf("NextDeadline after every release: got true, want false")
	}
}

func TestLockDroppedWhenEmpty(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{})
	acquire(t, tb, c.now, 1, req("a", time.Hour))
	acquire(t, tb, c.now, 2, req("a", time.Hour))
	tb.Kick(c.now, 2, nil)
	if _, ok := tb.Lock(c.now, "a"); !ok || tb.Locks() != 1 {
		t.Fatalf("after kicking the only waiter: got Locks %d, want the lock kept for its holder", tb.Locks())
	}
	tb.Release(c.now, 1, nil)
	if _, ok := tb.Lock(c.now, "a"); ok || tb.Locks() != 0 {
		t.Fatalf("after the last release: got Locks %d, want 0", tb.Locks())
	}
	acquire(t, tb, c.now, 3, req("b", time.Second))
	tb.Expire(c.advance(time.Second), nil)
	if tb.Locks() != 0 || tb.Sessions() != 0 || len(tb.Snapshot(c.now)) != 0 {
		t.Fatalf("after expiry: got Locks %d Sessions %d, want 0, 0", tb.Locks(), tb.Sessions())
	}
}

func TestAcquireErrors(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{})
	tok := mustHold(t, first(acquire(t, tb, c.now, 1, req("a", time.Hour))))
	for _, name := range []string{"a", "b"} {
		_, _, _, err := tb.Acquire(c.now, 1, req(name, time.Hour), nil)
		if !errors.Is(err, locktable.ErrDuplicate) {
			t.Fatalf("Acquire of id 1 again on %q: got %v, want ErrDuplicate", name, err)
		}
	}
	for _, lease := range []time.Duration{0, -time.Second} {
		if _, _, _, err := tb.Acquire(c.now, 2, req("a", lease), nil); err == nil {
			t.Fatalf("Acquire with lease %v: got no error, want one", lease)
		}
	}
	if in, _ := tb.Session(c.now, 1); in.Token != tok || tb.Sessions() != 1 || tb.Locks() != 1 {
		t.Fatalf("after the errors: got %+v, Sessions %d, Locks %d, want the table unchanged", in, tb.Sessions(), tb.Locks())
	}
	if _, ok := tb.Seen(c.now, 2); ok {
		t.Fatalf("Seen of a session never entered: got true, want false")
	}
}

func TestPanics(t *testing.T) {
	mustPanic := func(what string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s: did not panic", what)
			}
		}()
		f()
	}
	mustPanic("New without NextToken", func() { locktable.New(locktable.Config{}) })
	tb := locktable.New(locktable.Config{NextToken: func() uint64 { return 0 }})
	mustPanic("a token of 0", func() { tb.Acquire(t0, 1, req("a", time.Second), nil) })
}

func TestStrings(t *testing.T) {
	tests := []struct{ got, want string }{
		{locktable.NotRefused.String(), "none"},
		{locktable.RefusedBusy.String(), "busy"},
		{locktable.RefusedSessions.String(), "sessions"},
		{locktable.RefusedWaiters.String(), "waiters"},
		{locktable.Refusal(9).String(), "refusal(9)"},
		{locktable.CauseReleased.String(), "released"},
		{locktable.CauseExpired.String(), "expired"},
		{locktable.CauseForceReleased.String(), "force_released"},
		{locktable.CauseKicked.String(), "kicked"},
		{locktable.Cause(0).String(), "cause(0)"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

func TestHolderOf(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{})
	if _, _, ok := tb.HolderOf("jobs"); ok {
		t.Fatalf("HolderOf on an unknown lock: got ok")
	}
	acquire(t, tb, c.now, 1, req("jobs", time.Minute))
	check := func(wantID locktable.SessionID, wantWaiters int) {
		t.Helper()
		id, w, ok := tb.HolderOf("jobs")
		if !ok || id != wantID || w != wantWaiters {
			t.Fatalf("HolderOf: got %d, %d waiters, %v; want %d, %d waiters, true", id, w, ok, wantID, wantWaiters)
		}
	}
	check(1, 0)
	acquire(t, tb, c.now, 2, req("jobs", time.Minute))
	acquire(t, tb, c.now, 3, req("jobs", time.Minute))
	check(1, 2)
	tb.Release(c.now, 1, nil)
	check(2, 1)
	tb.Release(c.now, 3, nil)
	check(2, 0)
}

// shared is a shared claim on name with limit.
func shared(name string, limit int, lease time.Duration) locktable.Request {
	return locktable.Request{Name: name, Owner: "test", Lease: lease, Shared: true, Limit: limit}
}

// TestSemaphore: shared claims of limit 3 hold three at a time, each with
// its own rising token; the fourth waits, and is granted when one leaves.
func TestSemaphore(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{})
	var last uint64
	for id := locktable.SessionID(1); id <= 3; id++ {
		tok := mustHold(t, first(acquire(t, tb, c.now, id, shared("sem", 3, time.Second))))
		if tok <= last {
			t.Fatalf("holder %d: token %d, want more than %d", id, tok, last)
		}
		last = tok
	}
	mustWait(t, first(acquire(t, tb, c.now, 4, shared("sem", 3, time.Second))), 1)
	li, _ := tb.Lock(c.now, "sem")
	if len(li.Holders) != 3 || li.Limit != 3 || li.Holder == nil || li.Holder.ID != 1 || !li.Holders[2].Shared {
		t.Fatalf("Lock: got %+v, want holders 1, 2, 3 (shared), limit 3", li)
	}
	exits, _ := tb.Release(c.advance(time.Millisecond), 2, nil)
	wantExits(t, exits, "2:released->4")
	if g := exits[0].Promoted[0]; g.Token <= last || !g.Shared || g.Waited != time.Millisecond {
		t.Fatalf("grant: got %+v, want shared, a token above %d, waited 1ms", g, last)
	}
	checkInvariants(t, tb)
}

// TestReadWriteLock: a writer waits for the readers; readers that come
// after it wait behind it (nobody overtakes, so a writer is never
// starved); when the writer leaves, the readers behind it are granted
// together, in queue order, with rising tokens.
func TestReadWriteLock(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{})
	mustHold(t, first(acquire(t, tb, c.now, 1, shared("rw", 10, time.Second))))
	mustHold(t, first(acquire(t, tb, c.now, 2, shared("rw", 10, time.Second))))
	mustWait(t, first(acquire(t, tb, c.now, 3, req("rw", time.Second))), 1)
	mustWait(t, first(acquire(t, tb, c.now, 4, shared("rw", 10, time.Second))), 2)
	mustWait(t, first(acquire(t, tb, c.now, 5, shared("rw", 10, time.Second))), 3)
	exits, _ := tb.Release(c.now, 1, nil)
	wantExits(t, exits, "1:released")
	exits, _ = tb.Release(c.now, 2, nil)
	wantExits(t, exits, "2:released->3")
	exits, _ = tb.Release(c.now, 3, nil)
	wantExits(t, exits, "3:released->4+5")
	if g := exits[0].Promoted; g[1].Token <= g[0].Token {
		t.Fatalf("tokens %d then %d, want them rising in queue order", g[0].Token, g[1].Token)
	}
	checkInvariants(t, tb)
}

// TestHeadWaiterLeavingMovesTheQueue: a writer waiting at the head, when it
// leaves (closed, kicked or expired), lets the readers behind it in.
func TestHeadWaiterLeavingMovesTheQueue(t *testing.T) {
	for _, how := range []string{"release", "kick", "expire"} {
		t.Run(how, func(t *testing.T) {
			tb, c, _ := newTable(t, locktable.Config{})
			mustHold(t, first(acquire(t, tb, c.now, 1, shared("rw", 3, time.Hour))))
			acquire(t, tb, c.now, 2, req("rw", time.Second))
			acquire(t, tb, c.now, 3, shared("rw", 3, time.Hour))
			acquire(t, tb, c.now, 4, shared("rw", 3, time.Hour))
			var exits []locktable.Exit
			switch how {
			case "release":
				exits, _ = tb.Release(c.now, 2, nil)
			case "kick":
				exits, _ = tb.Kick(c.now, 2, nil)
			case "expire":
				exits = tb.Expire(c.advance(time.Second), nil)
			}
			cause := map[string]string{"release": "released", "kick": "kicked", "expire": "expired"}[how]
			wantExits(t, exits, "2:"+cause+"->3+4")
			checkInvariants(t, tb)
		})
	}
}

// TestLimitBelongsToTheName: while shared sessions exist (holding or
// waiting), a shared claim with another limit is refused with
// RefusedLimit, NOWAIT or not and before BUSY; exclusive claims neither set
// nor check it; a refused claim sets nothing; after the last shared
// session the next shared claim sets it anew.
func TestLimitBelongsToTheName(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{})
	refused := func(id locktable.SessionID, r locktable.Request, want locktable.Refusal) {
		t.Helper()
		st, ref, _, err := tb.Acquire(c.now, id, r, nil)
		if err != nil || ref != want || st != (locktable.State{}) {
			t.Fatalf("Acquire(%d, %+v): got %+v, %v, %v, want %v", id, r, st, ref, err, want)
		}
	}
	// A refused claim sets nothing: a NOWAIT shared claim behind an
	// exclusive holder is BUSY, and leaves no limit.
	mustHold(t, first(acquire(t, tb, c.now, 1, req("n", time.Hour))))
	refused(2, locktable.Request{Name: "n", Lease: time.Hour, Shared: true, Limit: 4, NoWait: true}, locktable.RefusedBusy)
	if l, ok := tb.Limit("n"); ok {
		t.Fatalf("Limit after a refused claim: got %d, want none", l)
	}
	// A waiting shared claim sets it.
	mustWait(t, first(acquire(t, tb, c.now, 3, shared("n", 2, time.Hour))), 1)
	if l, ok := tb.Limit("n"); !ok || l != 2 {
		t.Fatalf("Limit: got %d %v, want 2", l, ok)
	}
	refused(4, shared("n", 3, time.Hour), locktable.RefusedLimit)
	refused(5, locktable.Request{Name: "n", Lease: time.Hour, Shared: true, Limit: 3, NoWait: true}, locktable.RefusedLimit)
	mustWait(t, first(acquire(t, tb, c.now, 6, req("n", time.Hour))), 2) // exclusive: not checked
	tb.Release(c.now, 1, nil)                                            // 3 holds
	tb.Release(c.now, 3, nil)                                            // 6 holds; no shared session left
	if l, ok := tb.Limit("n"); ok {
		t.Fatalf("Limit with no shared session: got %d, want none", l)
	}
	mustWait(t, first(acquire(t, tb, c.now, 7, shared("n", 5, time.Hour))), 1)
	if l, _ := tb.Limit("n"); l != 5 {
		t.Fatalf("Limit set anew: got %d, want 5", l)
	}
	checkInvariants(t, tb)
	if _, _, _, err := tb.Acquire(c.now, 8, shared("n", 0, time.Hour), nil); err == nil {
		t.Fatal("a shared claim with limit 0: got no error")
	}
}

// TestForceReleaseEveryHolder: a name's force-release ends every holder,
// in grant order, and moves the queue once (with the last exit); one
// holder's force-release by session ends it alone.
func TestForceReleaseEveryHolder(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{})
	for id := locktable.SessionID(1); id <= 3; id++ {
		acquire(t, tb, c.now, id, shared("s", 3, time.Hour))
	}
	acquire(t, tb, c.now, 4, req("s", time.Hour))
	acquire(t, tb, c.now, 5, shared("s", 3, time.Hour))
	exits, err := tb.ForceReleaseSession(c.now, 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantExits(t, exits, "2:force_released")
	if _, err := tb.ForceReleaseSession(c.now, 4, nil); !errors.Is(err, locktable.ErrWaiter) {
		t.Fatalf("ForceReleaseSession of a waiter: got %v, want ErrWaiter", err)
	}
	if _, err := tb.ForceReleaseSession(c.now, 99, nil); !errors.Is(err, locktable.ErrUnknownSession) {
		t.Fatalf("ForceReleaseSession of nobody: got %v, want ErrUnknownSession", err)
	}
	exits, err = forceReleaseAll(tb, c.now, "s", nil)
	if err != nil {
		t.Fatal(err)
	}
	wantExits(t, exits, "1:force_released", "3:force_released->4")
	exits, _ = forceReleaseAll(tb, c.now, "s", nil)
	wantExits(t, exits, "4:force_released->5")
	checkInvariants(t, tb)
}

// TestHolderPage: holders are read a page at a time, in grant order,
// resuming after the last one read.
func TestHolderPage(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{})
	for id := locktable.SessionID(1); id <= 5; id++ {
		acquire(t, tb, c.now, id, shared("p", 5, time.Hour))
	}
	var got []locktable.SessionID
	var after locktable.SessionID
	for skip := 0; ; {
		page, more := tb.HolderPage(c.now, "p", after, skip, 2)
		for _, h := range page {
			got = append(got, h.ID)
		}
		if !more {
			break
		}
		skip += len(page)
		after = page[len(page)-1].ID
		if after == 2 {
			// The page's last leaves: the next page resumes by count, and 3,
			// moved up into the page read already, is missed (a listing in
			// steps is not one instant; GET /v1/locks says so).
			tb.Release(c.now, 2, nil)
		}
	}
	if want := []locktable.SessionID{1, 2, 4, 5}; !slices.Equal(got, want) {
		t.Fatalf("holders read: got %v, want %v", got, want)
	}
}
