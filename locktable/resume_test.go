package locktable_test

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/batonlock/baton/locktable"
)

// The claims of version 3 that go on: tickets, moves, resumes after a
// crash, pending claims of a planned handover, frozen claims, conflicts.

// Ids of terms: a token or ticket is epoch<<40 | sequence. The tables of
// these tests serve epoch 2; a claim of epoch 1 comes from the term
// before.
const epoch2 = 2 << 40

func of1(n uint64) uint64 { return 1<<40 | n }

// counter hands out epoch 2's tokens or tickets from 1.
type counter struct{ last uint64 }

func (k *counter) next() uint64 {
	k.last++
	return epoch2 | k.last
}

// v3Table returns a table of epoch 2 with tickets, which after a crash
// (cfg.NoGrantBefore set) admits the claims of epoch 1.
func v3Table(t testing.TB, cfg locktable.Config) (*locktable.Table, *clock) {
	t.Helper()
	tokens, tickets := &counter{}, &counter{}
	cfg.NextToken, cfg.NextTicket = tokens.next, tickets.next
	if cfg.ResumeBelow == 0 {
		cfg.ResumeBelow = epoch2
	}
	return locktable.New(cfg), &clock{now: t0}
}

// holderOf is a holder's claim, with its token, on attempt 1.
func holderOf(r locktable.Request, token uint64) locktable.Claim {
	return locktable.Claim{Request: r, Token: token, Attempt: 1}
}

// waiterOf is a waiter's claim, with its ticket, on attempt 1.
func waiterOf(r locktable.Request, ticket uint64) locktable.Claim {
	return locktable.Claim{Request: r, Ticket: ticket, Attempt: 1}
}

// resume resumes c on id and fails the test on a refusal or an error.
func resume(t *testing.T, tb *locktable.Table, now time.Time, id locktable.SessionID, c locktable.Claim) (locktable.State, []locktable.Exit) {
	t.Helper()
	st, ref, exits, err := tb.Resume(now, id, c, nil)
	if err != nil || ref != locktable.NotRefused {
		t.Fatalf("Resume(%d, %q, token %x, ticket %x): got refusal %v, error %v, want neither", id, c.Name, c.Token, c.Ticket, ref, err)
	}
	checkInvariants(t, tb)
	return st, exits
}

// refusedResume checks that resuming c on id is refused with want and
// enters nothing.
func refusedResume(t *testing.T, tb *locktable.Table, now time.Time, id locktable.SessionID, c locktable.Claim, want locktable.Refusal) []locktable.Exit {
	t.Helper()
	n := tb.Sessions()
	st, ref, exits, err := tb.Resume(now, id, c, nil)
	if err != nil || ref != want || st != (locktable.State{}) {
		t.Fatalf("Resume(%d, %q): got %+v, refusal %v, error %v, want the zero state and %v", id, c.Name, st, ref, err, want)
	}
	if _, ok := tb.Session(now, id); ok || tb.Sessions() > n {
		t.Fatalf("refused resume entered session %d", id)
	}
	checkInvariants(t, tb)
	return exits
}

// pending enters c as listed by a planned handover: on its first
// connection (attempt 0), so that its resume (attempt 1) moves it.
func pending(t *testing.T, tb *locktable.Table, now time.Time, id locktable.SessionID, c locktable.Claim, until time.Time) []locktable.Exit {
	t.Helper()
	c.Attempt = 0
	ref, exits, err := tb.AddPending(now, id, c, until, nil)
	if err != nil || ref != locktable.NotRefused {
		t.Fatalf("AddPending(%d, %q): got refusal %v, error %v, want neither", id, c.Name, ref, err)
	}
	checkInvariants(t, tb)
	return exits
}

func session(t *testing.T, tb *locktable.Table, now time.Time, id locktable.SessionID) locktable.Info {
	t.Helper()
	in, ok := tb.Session(now, id)
	if !ok {
		t.Fatalf("Session(%d): not in the table", id)
	}
	return in
}

func waiterIDs(t *testing.T, tb *locktable.Table, now time.Time, name string) []locktable.SessionID {
	t.Helper()
	var ids []locktable.SessionID
	for i, w := range mustLock(t, tb, now, name).Waiters {
		ids = append(ids, w.ID)
		if st := seenOrPending(tb, now, w.ID); !w.Pending && st.Position != i+1 {
			t.Fatalf("waiter %d: Seen says position %d, the queue %d", w.ID, st.Position, i+1)
		}
	}
	return ids
}

func seenOrPending(tb *locktable.Table, now time.Time, id locktable.SessionID) locktable.State {
	st, _ := tb.Seen(now, id)
	return st
}

func holderIDs(t *testing.T, tb *locktable.Table, now time.Time, name string) []locktable.SessionID {
	t.Helper()
	li, ok := tb.Lock(now, name)
	if !ok {
		return nil
	}
	var ids []locktable.SessionID
	for _, h := range li.Holders {
		ids = append(ids, h.ID)
	}
	return ids
}

// TestTickets: every waiter gets a ticket from NextTicket, in arrival
// order; a holder granted at once has none, and one granted from the
// queue keeps the one it waited with. A table without NextTicket gives
// none.
func TestTickets(t *testing.T) {
	tb, c := v3Table(t, locktable.Config{})
	acquire(t, tb, c.now, 1, req("a", time.Hour))
	acquire(t, tb, c.now, 2, req("a", time.Hour))
	acquire(t, tb, c.now, 3, req("a", time.Hour))
	if in := session(t, tb, c.now, 1); in.Ticket != 0 {
		t.Fatalf("holder granted at once: ticket %x, want none", in.Ticket)
	}
	if a, b := session(t, tb, c.now, 2).Ticket, session(t, tb, c.now, 3).Ticket; a != epoch2|1 || b != epoch2|2 {
		t.Fatalf("tickets %x, %x, want %x, %x", a, b, epoch2|1, epoch2|2)
	}
	tb.Release(c.now, 1, nil)
	if in := session(t, tb, c.now, 2); !in.Held || in.Ticket != epoch2|1 {
		t.Fatalf("waiter granted: %+v, want it holding with its ticket", in)
	}
	checkInvariants(t, tb)

	plain, pc, _ := newTable(t, locktable.Config{})
	acquire(t, plain, pc.now, 1, req("a", time.Hour))
	acquire(t, plain, pc.now, 2, req("a", time.Hour))
	if in := session(t, plain, pc.now, 2); in.Ticket != 0 {
		t.Fatalf("a table without NextTicket: ticket %x, want none", in.Ticket)
	}
	if _, _, _, err := plain.Resume(pc.now, 3, holderOf(req("a", time.Hour), 100), nil); err == nil {
		t.Fatal("Resume on a table without NextTicket: got no error")
	}
	if _, _, err := plain.AddPending(pc.now, 3, holderOf(req("a", time.Hour), 100), pc.now, nil); err == nil {
		t.Fatal("AddPending on a table without NextTicket: got no error")
	}
}

// TestResumeAfterCrash: during the grace period a holder of the term
// before holds again with its token while the new arrivals wait; waiters
// come back to their tickets' places, in front of the new arrivals,
// whatever order they come back in; positions follow. At the end of the
// grace the heads that may hold are granted, with tokens of the new term.
func TestResumeAfterCrash(t *testing.T) {
	end := t0.Add(10 * time.Second)
	tb, c := v3Table(t, locktable.Config{NoGrantBefore: end})
	r := req("a", time.Minute)
	mustWait(t, first(acquire(t, tb, c.now, 1, r)), 1) // a new arrival
	st, exits := resume(t, tb, c.advance(time.Millisecond), 2, holderOf(r, of1(7)))
	if tok := mustHold(t, st); tok != of1(7) || len(exits) != 0 {
		t.Fatalf("resumed holder: token %x, exits %s, want its token %x and none", tok, exitIDs(exits), of1(7))
	}
	if in := session(t, tb, c.now, 2); !in.Resumed || in.Token != of1(7) || in.Attempt != 1 {
		t.Fatalf("resumed holder: %+v, want resumed with its token, attempt 1", in)
	}
	// Waiters of the term before, back in another order than their tickets.
	mustWait(t, first(resume(t, tb, c.now, 3, waiterOf(r, of1(20)))), 1)
	mustWait(t, first(resume(t, tb, c.now, 4, waiterOf(r, of1(30)))), 2)
	mustWait(t, first(resume(t, tb, c.now, 5, waiterOf(r, of1(10)))), 1)
	mustWait(t, first(acquire(t, tb, c.now, 6, r)), 5)
	if got, want := waiterIDs(t, tb, c.now, "a"), []locktable.SessionID{5, 3, 4, 1, 6}; !slices.Equal(got, want) {
		t.Fatalf("queue: got %v, want %v (ticket order)", got, want)
	}
	// A NOWAIT during the grace is refused as ever; Seen confirms the
	// resumed holder.
	if _, ref, _, _ := tb.Acquire(c.now, 7, locktable.Request{Name: "b", Lease: time.Minute, NoWait: true}, nil); ref != locktable.RefusedGrace {
		t.Fatalf("NOWAIT in the grace: got %v, want grace", ref)
	}
	if st := seen(t, tb, c.now, 2); st.Token != of1(7) {
		t.Fatalf("Seen of the resumed holder: %+v", st)
	}
	// The end of the grace: a is held (exclusive): nothing is granted.
	// Another name, with only new arrivals, grants its head.
	acquire(t, tb, c.now, 8, req("b", time.Minute))
	exits = tb.Expire(end, nil)
	wantExits(t, exits, "0:grace_ended->8")
	if exits[0].Promoted[0].Token != epoch2|1 {
		t.Fatalf("first grant of the term: token %x, want %x", exits[0].Promoted[0].Token, epoch2|1)
	}
	// The resumed holder leaves: its head (the waiter of ticket 10) is
	// granted with a token of the new term.
	exits, _ = tb.Release(end, 2, nil)
	wantExits(t, exits, "2:released->5")
	if g := exits[0].Promoted[0]; g.Token != epoch2|2 {
		t.Fatalf("grant after the resumed holder: token %x, want %x", g.Token, epoch2|2)
	}
	checkInvariants(t, tb)
}

// TestResumeRefusedOutsideTheGrace: a claim that is not in the table comes
// back only during the grace period, and only if it is of an earlier term
// (below ResumeBelow): one of this term ended here.
func TestResumeRefusedOutsideTheGrace(t *testing.T) {
	end := t0.Add(time.Second)
	tb, c := v3Table(t, locktable.Config{NoGrantBefore: end})
	r := req("a", time.Minute)
	acquire(t, tb, c.now, 1, r) // ticket epoch2|1
	tb.Release(c.now, 1, nil)
	refusedResume(t, tb, c.now, 2, waiterOf(r, epoch2|1), locktable.RefusedResume)
	refusedResume(t, tb, c.now, 2, holderOf(r, epoch2|1), locktable.RefusedResume)
	resume(t, tb, c.now, 3, holderOf(r, of1(5)))
	tb.Expire(end, nil)
	refusedResume(t, tb, end, 4, holderOf(r, of1(4)), locktable.RefusedResume)
	refusedResume(t, tb, end, 4, waiterOf(r, of1(6)), locktable.RefusedResume)

	// ResumeBelow 0 admits none, grace or not.
	none := locktable.New(locktable.Config{NextToken: (&counter{}).next, NextTicket: (&counter{}).next, NoGrantBefore: end})
	refusedResume(t, none, t0, 1, holderOf(r, of1(5)), locktable.RefusedResume)
}

// TestMove: a resume of a claim the table has, on another session, moves
// it there in one step: the old session leaves with CauseMoved and frees
// nothing, the claim keeps its token (or ticket and place), its lease
// starts again, and it moves only to a higher attempt.
func TestMove(t *testing.T) {
	tb, c := v3Table(t, locktable.Config{})
	r := req("a", 10*time.Second)
	tok := mustHold(t, first(acquire(t, tb, c.now, 1, r)))
	acquire(t, tb, c.now, 2, r)
	acquire(t, tb, c.now, 3, r)
	tk3 := session(t, tb, c.now, 3).Ticket

	st, exits := resume(t, tb, c.advance(4*time.Second), 11, holderOf(r, tok))
	if mustHold(t, st) != tok {
		t.Fatalf("moved holder: token %d, want %d", st.Token, tok)
	}
	wantExits(t, exits, "1:moved")
	if !exits[0].Session.Held || exits[0].Session.ID != 1 {
		t.Fatalf("moved exit: %+v, want the old session, holding", exits[0].Session)
	}
	if _, ok := tb.Session(c.now, 1); ok {
		t.Fatal("the old session is still in the table")
	}
	in := session(t, tb, c.now, 11)
	if in.Silent != 0 || !in.Resumed || in.Attempt != 1 || in.Since != 4*time.Second {
		t.Fatalf("moved holder: %+v, want silent 0 (lease from now), resumed, attempt 1, since the grant", in)
	}
	if d, _ := tb.NextDeadline(); !d.Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("NextDeadline: got %v, want the waiters' %v", d, t0.Add(10*time.Second))
	}
	// An older attempt, answered late, does not take it back; a higher one
	// moves it again.
	refusedResume(t, tb, c.now, 12, holderOf(r, tok), locktable.RefusedAttempt)
	again := holderOf(r, tok)
	again.Attempt = 3
	_, exits = resume(t, tb, c.now, 13, again)
	wantExits(t, exits, "11:moved")
	again.Attempt = 2
	refusedResume(t, tb, c.now, 14, again, locktable.RefusedAttempt)

	// A waiter moves with its place.
	mustWait(t, first(resume(t, tb, c.now, 31, waiterOf(r, tk3))), 2)
	if got, want := waiterIDs(t, tb, c.now, "a"), []locktable.SessionID{2, 31}; !slices.Equal(got, want) {
		t.Fatalf("queue after the move: got %v, want %v", got, want)
	}
	// A waiter granted meanwhile (its push lost) resumes by its ticket and
	// is answered as the holder it is.
	tk2 := session(t, tb, c.now, 2).Ticket
	exits, _ = tb.Release(c.now, 13, nil)
	wantExits(t, exits, "13:released->2")
	st, exits = resume(t, tb, c.now, 21, waiterOf(r, tk2))
	if mustHold(t, st) != exits[0].Session.Token || exits[0].Cause != locktable.CauseMoved {
		t.Fatalf("resume of a waiter granted meanwhile: %+v, exits %s", st, exitIDs(exits))
	}
	// The claim as it was made, or nothing: another name, kind, limit or
	// lease is refused.
	for _, bad := range []locktable.Request{
		req("b", 10*time.Second), req("a", 9*time.Second), shared("a", 1, 10*time.Second),
	} {
		refusedResume(t, tb, c.now, 40, waiterOf(bad, tk3), locktable.RefusedResume)
	}
	// A claim that ended is never resumed.
	tb.Release(c.now, 31, nil)
	refusedResume(t, tb, c.now, 41, waiterOf(r, tk3), locktable.RefusedResume)
	// Errors: no lease, a shared claim without a limit, no token and no
	// ticket, an id in use.
	for _, cl := range []locktable.Claim{holderOf(req("a", 0), tok), holderOf(shared("a", 0, time.Second), tok), {Request: r}} {
		if _, _, _, err := tb.Resume(c.now, 50, cl, nil); err == nil {
			t.Fatalf("Resume(%+v): got no error", cl)
		}
	}
	if _, _, _, err := tb.Resume(c.now, 21, holderOf(r, tok), nil); !errors.Is(err, locktable.ErrDuplicate) {
		t.Fatalf("Resume on an id in use: got %v, want ErrDuplicate", err)
	}
}

// TestMoveOfAnExpiredClaim: a claim whose lease ran out ended, even before
// Expire ran: it is expired first, not moved.
func TestMoveOfAnExpiredClaim(t *testing.T) {
	tb, c := v3Table(t, locktable.Config{})
	r := req("a", time.Second)
	tok := mustHold(t, first(acquire(t, tb, c.now, 1, r)))
	acquire(t, tb, c.now, 2, req("a", time.Hour))
	_, _, exits, _ := tb.Resume(c.advance(time.Second), 3, holderOf(r, tok), nil)
	wantExits(t, exits, "1:expired->2")
	refusedResume(t, tb, c.now, 3, holderOf(r, tok), locktable.RefusedResume)
}

// TestPendingHolder: a holder of a planned handover's list keeps its slot
// with no connection: a new claim waits (NOWAIT is busy), Seen confirms
// nothing, and the name is granted as soon as the claim is accounted for:
// at its time, or never while it comes back in time.
func TestPendingHolder(t *testing.T) {
	tb, c := v3Table(t, locktable.Config{})
	r := req("a", 10*time.Second)
	until := t0.Add(7 * time.Second) // its lease, less its silence at the handover
	pending(t, tb, c.now, 100, holderOf(r, of1(7)), until)
	in := session(t, tb, c.now, 100)
	if !in.Pending || in.Resumed || !in.Held || in.Token != of1(7) || in.Silent != 3*time.Second {
		t.Fatalf("pending holder: %+v, want pending, holding its token, silent 3s (lease - time left)", in)
	}
	if n, longest := tb.PendingClaims(); n != 1 || longest != 10*time.Second {
		t.Fatalf("PendingClaims: got %d, %v, want 1, 10s", n, longest)
	}
	if _, ok := tb.Seen(c.now, 100); ok {
		t.Fatal("Seen of a pending claim: got true")
	}
	// Another name grants at once; this one is held.
	mustHold(t, first(acquire(t, tb, c.now, 1, req("b", time.Minute))))
	if _, ref, _, _ := tb.Acquire(c.now, 2, locktable.Request{Name: "a", Lease: time.Minute, NoWait: true}, nil); ref != locktable.RefusedBusy {
		t.Fatalf("NOWAIT on a name with a pending holder: got %v, want busy", ref)
	}
	mustWait(t, first(acquire(t, tb, c.now, 3, req("a", time.Minute))), 1)
	if d, _ := tb.NextDeadline(); !d.Equal(until) {
		t.Fatalf("NextDeadline: got %v, want the pending claim's end %v", d, until)
	}
	// Its time runs out: it expires, and the queue moves.
	if exits := tb.Expire(until.Add(-time.Nanosecond), nil); len(exits) != 0 {
		t.Fatalf("before its time: got %s", exitIDs(exits))
	}
	wantExits(t, tb.Expire(until, nil), "100:expired->3")
	if n, longest := tb.PendingClaims(); n != 0 || longest != 0 {
		t.Fatalf("PendingClaims after: got %d, %v, want 0, 0", n, longest)
	}

	// Back in time: a move; the queue does not move, the slot is its.
	tb, c = v3Table(t, locktable.Config{})
	pending(t, tb, c.now, 100, holderOf(r, of1(7)), until)
	acquire(t, tb, c.now, 3, req("a", time.Minute))
	st, exits := resume(t, tb, c.advance(time.Second), 4, holderOf(r, of1(7)))
	wantExits(t, exits, "100:moved")
	if mustHold(t, st) != of1(7) || !exits[0].Session.Pending {
		t.Fatalf("pending holder back: %+v, exit %+v", st, exits[0].Session)
	}
	if in := session(t, tb, c.now, 4); in.Pending || !in.Resumed {
		t.Fatalf("after the move: %+v, want resumed, not pending", in)
	}
	if n, _ := tb.PendingClaims(); n != 0 {
		t.Fatalf("PendingClaims after the move: %d", n)
	}
	if exits := tb.Expire(until, nil); len(exits) != 0 {
		t.Fatalf("at the old end: got %s, want none (its lease runs from the resume)", exitIDs(exits))
	}
	// An unlisted claim is refused: no grace.
	refusedResume(t, tb, c.now, 5, holderOf(r, of1(6)), locktable.RefusedResume)
}

// TestPendingSlots: on a semaphore, pending holders take slots, and the
// free slots are granted meanwhile; they set the name's limit.
func TestPendingSlots(t *testing.T) {
	tb, c := v3Table(t, locktable.Config{})
	r := shared("s", 3, 10*time.Second)
	pending(t, tb, c.now, 100, holderOf(r, of1(5)), t0.Add(5*time.Second))
	pending(t, tb, c.now, 101, holderOf(r, of1(6)), t0.Add(5*time.Second))
	if l, ok := tb.Limit("s"); !ok || l != 3 {
		t.Fatalf("Limit: got %d %v, want 3 (the pending claims')", l, ok)
	}
	if _, ref, _, _ := tb.Acquire(c.now, 1, shared("s", 4, time.Minute), nil); ref != locktable.RefusedLimit {
		t.Fatalf("another limit: got %v, want limit", ref)
	}
	mustHold(t, first(acquire(t, tb, c.now, 2, shared("s", 3, time.Minute))))
	mustWait(t, first(acquire(t, tb, c.now, 3, shared("s", 3, time.Minute))), 1)
	if got, want := holderIDs(t, tb, c.now, "s"), []locktable.SessionID{100, 101, 2}; !slices.Equal(got, want) {
		t.Fatalf("holders: got %v, want %v (token order)", got, want)
	}
	wantExits(t, tb.Expire(t0.Add(5*time.Second), nil), "100:expired->3", "101:expired")
}

// TestPendingWaiter: a pending waiter keeps its place and is never
// granted: the waiters behind it wait, even on a free name. It comes back
// and is granted (in its answer), and the shared claims behind it with it;
// or its time runs out, or it is kicked, and the queue moves.
func TestPendingWaiter(t *testing.T) {
	for _, how := range []string{"resume", "expire", "kick"} {
		t.Run(how, func(t *testing.T) {
			tb, c := v3Table(t, locktable.Config{})
			r := shared("s", 3, 10*time.Second)
			until := t0.Add(5 * time.Second)
			pending(t, tb, c.now, 100, waiterOf(r, of1(9)), until)
			if in := session(t, tb, c.now, 100); !in.Pending || in.Held || in.Position != 1 || in.Ticket != of1(9) {
				t.Fatalf("pending waiter: %+v", in)
			}
			mustWait(t, first(acquire(t, tb, c.now, 1, shared("s", 3, time.Minute))), 2)
			mustWait(t, first(acquire(t, tb, c.now, 2, shared("s", 3, time.Minute))), 3)
			var exits []locktable.Exit
			switch how {
			case "resume":
				var st locktable.State
				st, exits = resume(t, tb, c.advance(time.Second), 3, waiterOf(r, of1(9)))
				if tok := mustHold(t, st); tok != epoch2|1 {
					t.Fatalf("pending waiter back: token %x, want the first of the term", tok)
				}
				wantExits(t, exits, "100:moved->1+2")
			case "expire":
				exits = tb.Expire(until, nil)
				wantExits(t, exits, "100:expired->1+2")
			case "kick":
				var err error
				exits, err = tb.Kick(c.now, 100, nil)
				if err != nil {
					t.Fatal(err)
				}
				wantExits(t, exits, "100:kicked->1+2")
			}
			checkInvariants(t, tb)
		})
	}
}

// TestPendingNamesGrantAtOnce: a planned handover's successor grants each
// name as soon as it may: names without pending claims at once, the
// others when their pending claims are accounted for, each on its own.
func TestPendingNamesGrantAtOnce(t *testing.T) {
	tb, c := v3Table(t, locktable.Config{})
	pending(t, tb, c.now, 100, holderOf(req("a", 10*time.Second), of1(1)), t0.Add(3*time.Second))
	pending(t, tb, c.now, 101, holderOf(req("b", 10*time.Second), of1(2)), t0.Add(8*time.Second))
	mustHold(t, first(acquire(t, tb, c.now, 1, req("c", time.Minute))))
	acquire(t, tb, c.now, 2, req("a", time.Minute))
	acquire(t, tb, c.now, 3, req("b", time.Minute))
	wantExits(t, tb.Expire(t0.Add(3*time.Second), nil), "100:expired->2")
	resume(t, tb, t0.Add(4*time.Second), 4, holderOf(req("b", 10*time.Second), of1(2)))
	if exits := tb.Expire(t0.Add(8*time.Second), nil); len(exits) != 0 {
		t.Fatalf("b's pending holder came back: got %s, want nothing", exitIDs(exits))
	}
}

// TestRevokePending: an operator's release of a pending holder cannot be
// told to its client, which may still believe: the claim is revoked, keeps
// its slot until its time runs out, and its resume is refused
// (RefusedRevoked). A release of the name ends the live holders and
// revokes the pending ones, a step at a time.
func TestRevokePending(t *testing.T) {
	tb, c := v3Table(t, locktable.Config{})
	r := shared("s", 3, 10*time.Second)
	until := t0.Add(6 * time.Second)
	pending(t, tb, c.now, 100, holderOf(r, of1(5)), until)
	mustHold(t, first(acquire(t, tb, c.now, 1, shared("s", 3, time.Minute))))
	pending(t, tb, c.now, 101, holderOf(r, of1(6)), t0.Add(8*time.Second))
	mustWait(t, first(acquire(t, tb, c.now, 2, req("s", time.Minute))), 1)

	exits, err := tb.ForceReleaseSession(c.now, 100, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantExits(t, exits, "100:revoked")
	if in := session(t, tb, c.now, 100); !in.Revoked || !in.Held {
		t.Fatalf("revoked claim: %+v, want it holding its slot, revoked", in)
	}
	if exits, err := tb.ForceReleaseSession(c.now, 100, nil); err != nil || len(exits) != 0 {
		t.Fatalf("second release of a revoked claim: got %s, %v, want nothing", exitIDs(exits), err)
	}
	refusedResume(t, tb, c.now, 3, holderOf(r, of1(5)), locktable.RefusedRevoked)

	// The name's release: the live holder ends, the other pending one is
	// revoked, the first (revoked already) is skipped; one step at a time.
	through, _ := tb.NewestToken("s")
	exits, more, err := tb.ForceReleaseThrough(c.now, "s", through, 1, nil)
	if err != nil || !more {
		t.Fatalf("first step: more %v, %v", more, err)
	}
	wantExits(t, exits, "101:revoked")
	exits, more, err = tb.ForceReleaseThrough(c.now, "s", through, 1, nil)
	if err != nil || more {
		t.Fatalf("second step: more %v, %v", more, err)
	}
	wantExits(t, exits, "1:force_released")
	if _, _, err := tb.ForceReleaseThrough(c.now, "s", through, 1, nil); !errors.Is(err, locktable.ErrNotHeld) {
		t.Fatalf("third step: got %v, want ErrNotHeld (only revoked claims left)", err)
	}
	// The writer waits for the revoked claims' time.
	wantExits(t, tb.Expire(until, nil), "100:expired")
	wantExits(t, tb.Expire(t0.Add(8*time.Second), nil), "101:expired->2")
	checkInvariants(t, tb)
}

// TestFreeze: a claim being ended is confirmed no more (its lease does not
// start again), does not move, and a frozen waiter is not granted: the
// queue waits for its end.
func TestFreeze(t *testing.T) {
	tb, c := v3Table(t, locktable.Config{})
	r := req("a", 10*time.Second)
	tok := mustHold(t, first(acquire(t, tb, c.now, 1, r)))
	acquire(t, tb, c.now, 2, r)
	acquire(t, tb, c.now, 3, r)
	if err := tb.Freeze(1); err != nil {
		t.Fatal(err)
	}
	if err := tb.Freeze(99); !errors.Is(err, locktable.ErrUnknownSession) {
		t.Fatalf("Freeze(unknown): got %v", err)
	}
	st, ok := tb.Seen(c.advance(time.Second), 1)
	if ok || !st.Frozen {
		t.Fatalf("Seen of a frozen holder: got %+v, %v, want frozen and false", st, ok)
	}
	if in := session(t, tb, c.now, 1); !in.Frozen || in.Silent != time.Second {
		t.Fatalf("frozen holder: %+v, want frozen, silent 1s (not confirmed)", in)
	}
	refusedResume(t, tb, c.now, 11, holderOf(r, tok), locktable.RefusedFrozen)
	// A frozen waiter at the head is not granted when the holder leaves.
	tb.Freeze(2)
	exits, _ := tb.ForceReleaseSession(c.now, 1, nil)
	wantExits(t, exits, "1:force_released")
	checkInvariants(t, tb)
	exits, _ = tb.Kick(c.now, 2, nil)
	wantExits(t, exits, "2:kicked->3")

	// FreezeThrough: the holders of one instant, and a claim that comes
	// back with such a token, not a later grant.
	tb, c = v3Table(t, locktable.Config{NoGrantBefore: t0.Add(time.Second)})
	s := shared("s", 5, 10*time.Second)
	resume(t, tb, c.now, 1, holderOf(s, of1(5)))
	resume(t, tb, c.now, 2, holderOf(s, of1(7)))
	if err := tb.FreezeThrough("s", of1(7)); err != nil {
		t.Fatal(err)
	}
	if err := tb.FreezeThrough("none", 1); !errors.Is(err, locktable.ErrNotHeld) {
		t.Fatalf("FreezeThrough of a free name: got %v, want ErrNotHeld", err)
	}
	refusedResume(t, tb, c.now, 3, holderOf(s, of1(6)), locktable.RefusedFrozen)
	tb.Expire(t0.Add(time.Second), nil)
	mustHold(t, first(acquire(t, tb, t0.Add(time.Second), 4, s)))
	for id, want := range map[locktable.SessionID]bool{1: true, 2: true, 4: false} {
		if st, ok := tb.Seen(t0.Add(time.Second), id); st.Frozen != want || ok == want {
			t.Fatalf("Seen(%d): got %+v %v, want frozen %v", id, st, ok, want)
		}
	}
	if _, more, _ := tb.ForceReleaseThrough(t0.Add(time.Second), "s", of1(7), 10, nil); more {
		t.Fatal("release of the frozen instant left holders")
	}
	if got := holderIDs(t, tb, t0.Add(time.Second), "s"); !slices.Equal(got, []locktable.SessionID{4}) {
		t.Fatalf("holders after: got %v, want [4]", got)
	}
}

// TestConflicts: holders that come back and cannot all hold: the higher
// tokens win, whichever comes back first.
func TestConflicts(t *testing.T) {
	type back struct {
		id    locktable.SessionID
		claim locktable.Claim
	}
	ex := func(tok uint64) locktable.Claim { return holderOf(req("n", time.Minute), of1(tok)) }
	sh := func(tok uint64, limit int) locktable.Claim {
		return holderOf(shared("n", limit, time.Minute), of1(tok))
	}
	tests := []struct {
		name string
		in   []back
		// the outcome of each resume: "" (admitted), "superseded" (refused)
		// or the exits it caused
		want    []string
		holders []locktable.SessionID
	}{
		{"two exclusive, the lower first", []back{{1, ex(5)}, {2, ex(6)}}, []string{"", "1:superseded"}, []locktable.SessionID{2}},
		{"two exclusive, the higher first", []back{{2, ex(6)}, {1, ex(5)}}, []string{"", "refused superseded"}, []locktable.SessionID{2}},
		{"over the limit", []back{{1, sh(5, 2)}, {2, sh(7, 2)}, {3, sh(6, 2)}}, []string{"", "", "1:superseded"}, []locktable.SessionID{3, 2}},
		{"over the limit, the lowest last", []back{{2, sh(7, 2)}, {3, sh(6, 2)}, {1, sh(5, 2)}}, []string{"", "", "refused superseded"}, []locktable.SessionID{3, 2}},
		{"an exclusive over shared ones", []back{{1, sh(5, 3)}, {2, sh(6, 3)}, {3, ex(7)}}, []string{"", "", "1:superseded, 2:superseded"}, []locktable.SessionID{3}},
		{"shared over an exclusive", []back{{1, ex(5)}, {2, sh(6, 3)}}, []string{"", "1:superseded"}, []locktable.SessionID{2}},
		{"limits that disagree", []back{{1, sh(5, 3)}, {2, sh(6, 2)}, {3, sh(4, 2)}}, []string{"", "1:superseded", ""}, []locktable.SessionID{3, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb, c := v3Table(t, locktable.Config{NoGrantBefore: t0.Add(time.Second)})
			for i, b := range tt.in {
				st, ref, exits, err := tb.Resume(c.now, b.id, b.claim, nil)
				if err != nil {
					t.Fatal(err)
				}
				got := exitIDs(exits)
				got = got[1 : len(got)-1]
				if ref != locktable.NotRefused {
					got = "refused " + ref.String()
				} else if st.Token != b.claim.Token {
					t.Fatalf("resume %d: token %x, want %x", b.id, st.Token, b.claim.Token)
				}
				if got != tt.want[i] {
					t.Fatalf("resume %d: got %q, want %q", b.id, got, tt.want[i])
				}
				checkInvariants(t, tb)
			}
			if got := holderIDs(t, tb, c.now, "n"); !slices.Equal(got, tt.holders) {
				t.Fatalf("holders: got %v, want %v", got, tt.holders)
			}
		})
	}
}

// TestConflictWithPending: a pending holder (of the term that handed
// over) and a claim that comes back in the grace the handover was made in
// obey the same rule.
func TestConflictWithPending(t *testing.T) {
	tb, c := v3Table(t, locktable.Config{NoGrantBefore: t0.Add(time.Second)})
	r := req("n", time.Minute)
	pending(t, tb, c.now, 100, holderOf(r, of1(5)), t0.Add(time.Minute))
	_, exits := resume(t, tb, c.now, 1, holderOf(r, of1(7)))
	wantExits(t, exits, "100:superseded")
	if exits[0].Session.Pending != true {
		t.Fatalf("superseded: %+v, want the pending claim", exits[0].Session)
	}
	if n, _ := tb.PendingClaims(); n != 0 {
		t.Fatalf("PendingClaims: %d, want 0", n)
	}
	if ref, _, _ := tb.AddPending(c.now, 101, holderOf(r, of1(6)), t0.Add(time.Minute), nil); ref != locktable.RefusedSuperseded {
		t.Fatalf("a pending claim that loses: got %v, want superseded", ref)
	}
	if _, _, err := tb.AddPending(c.now, 102, holderOf(r, of1(7)), t0.Add(time.Minute), nil); !errors.Is(err, locktable.ErrDuplicateClaim) {
		t.Fatalf("a pending claim already in the table: got %v, want ErrDuplicateClaim", err)
	}
}

// TestResumedWaiterCaps: a waiter that comes back to a full queue takes
// its place, and the waiter with the newest ticket leaves instead; one
// that would itself be the newest is refused. A holder that comes back is
// admitted past MaxSessions; a waiter is not.
func TestResumedWaiterCaps(t *testing.T) {
	tb, c := v3Table(t, locktable.Config{NoGrantBefore: t0.Add(time.Second), MaxWaitersPerLock: 2, MaxSessions: 4})
	r := req("a", time.Minute)
	acquire(t, tb, c.now, 1, r) // epoch2|1
	acquire(t, tb, c.now, 2, r) // epoch2|2
	_, exits := resume(t, tb, c.now, 3, waiterOf(r, of1(8)))
	wantExits(t, exits, "2:overloaded")
	if got, want := waiterIDs(t, tb, c.now, "a"), []locktable.SessionID{3, 1}; !slices.Equal(got, want) {
		t.Fatalf("queue: got %v, want %v", got, want)
	}
	_, exits = resume(t, tb, c.now, 4, waiterOf(r, of1(9)))
	wantExits(t, exits, "1:overloaded")
	refusedResume(t, tb, c.now, 5, waiterOf(r, of1(10)), locktable.RefusedWaiters)
	// Sessions: 3, 4, then two holders; the table is full.
	resume(t, tb, c.now, 6, holderOf(r, of1(1)))
	resume(t, tb, c.now, 7, holderOf(req("b", time.Minute), of1(2)))
	resume(t, tb, c.now, 8, holderOf(req("c", time.Minute), of1(3)))
	if tb.Sessions() != 5 {
		t.Fatalf("Sessions: %d, want 5 (a holder is admitted past the limit)", tb.Sessions())
	}
	refusedResume(t, tb, c.now, 9, waiterOf(req("c", time.Minute), of1(11)), locktable.RefusedSessions)
}

// TestResumedLimitPrecedence: a claim that comes back keeps the name's
// limit over the waiters that queued in the grace with another; a waiter
// that comes back with a limit other than the holders' is refused.
func TestResumedLimitPrecedence(t *testing.T) {
	tb, c := v3Table(t, locktable.Config{NoGrantBefore: t0.Add(time.Second)})
	mustWait(t, first(acquire(t, tb, c.now, 1, shared("s", 5, time.Minute))), 1)
	mustWait(t, first(acquire(t, tb, c.now, 2, req("s", time.Minute))), 2)
	mustWait(t, first(acquire(t, tb, c.now, 3, shared("s", 5, time.Minute))), 3)
	_, exits := resume(t, tb, c.now, 4, waiterOf(shared("s", 3, time.Minute), of1(9)))
	wantExits(t, exits, "1:limit_overruled", "3:limit_overruled")
	if l, _ := tb.Limit("s"); l != 3 {
		t.Fatalf("Limit: got %d, want 3", l)
	}
	resume(t, tb, c.now, 5, holderOf(shared("s", 3, time.Minute), of1(4)))
	refusedResume(t, tb, c.now, 6, waiterOf(shared("s", 4, time.Minute), of1(10)), locktable.RefusedLimit)
	// A waiter that came back, with another limit than one that came back
	// before it, is refused; so is a new claim.
	if _, ref, _, _ := tb.Acquire(c.now, 7, shared("s", 5, time.Minute), nil); ref != locktable.RefusedLimit {
		t.Fatalf("a new claim with another limit: got %v", ref)
	}
	// A holder with another limit and a higher token wins, and the
	// waiters with the old limit give way to it.
	_, exits = resume(t, tb, c.now, 8, holderOf(shared("s", 2, time.Minute), of1(6)))
	wantExits(t, exits, "5:superseded", "4:limit_overruled")
}

// TestPendingInAGrace: a planned handover made inside its leader's own
// grace after a crash: the list enters, nothing is granted until the
// grace ends, and unlisted claims of earlier terms come back meanwhile.
func TestPendingInAGrace(t *testing.T) {
	end := t0.Add(5 * time.Second)
	tb, c := v3Table(t, locktable.Config{NoGrantBefore: end})
	pending(t, tb, c.now, 100, waiterOf(req("a", time.Minute), of1(3)), t0.Add(time.Minute))
	acquire(t, tb, c.now, 1, req("b", time.Minute))
	mustWait(t, first(resume(t, tb, c.now, 2, waiterOf(req("a", time.Minute), of1(2)))), 1)
	st, exits := resume(t, tb, c.now, 3, waiterOf(req("a", time.Minute), of1(3)))
	mustWait(t, st, 2)
	wantExits(t, exits, "100:moved")
	wantExits(t, tb.Expire(end, nil), "0:grace_ended->2", "0:grace_ended->1")
}

// TestPositionsAfterInsertion: a waiter that comes back in front of
// others moves them back one; the cached positions follow.
func TestPositionsAfterInsertion(t *testing.T) {
	tb, c := v3Table(t, locktable.Config{NoGrantBefore: t0.Add(time.Hour)})
	r := req("a", time.Hour)
	resume(t, tb, c.now, 1, waiterOf(r, of1(50)))
	for id := locktable.SessionID(2); id <= 5; id++ {
		acquire(t, tb, c.now, id, r)
	}
	for i, id := range []locktable.SessionID{1, 2, 3, 4, 5} {
		mustWait(t, seen(t, tb, c.now, id), i+1) // the caches are filled
	}
	resume(t, tb, c.now, 6, waiterOf(r, of1(40))) // the head
	resume(t, tb, c.now, 7, waiterOf(r, of1(60))) // behind 1
	tb.Kick(c.now, 3, nil)
	for i, id := range []locktable.SessionID{6, 1, 7, 2, 4, 5} {
		mustWait(t, seen(t, tb, c.now, id), i+1)
	}
}

// TestOrderPanics: a token or ticket source that does not rise above the
// claims carried in is a bug that would break fencing or FIFO: the table
// refuses to go on.
func TestOrderPanics(t *testing.T) {
	mustPanic := func(what string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s: did not panic", what)
			}
		}()
		f()
	}
	low := func() uint64 { return 1 }
	tb := locktable.New(locktable.Config{NextToken: low, NextTicket: (&counter{}).next, ResumeBelow: math.MaxUint64, NoGrantBefore: t0.Add(time.Second)})
	resume(t, tb, t0, 1, holderOf(shared("s", 3, time.Minute), of1(5)))
	tb.Expire(t0.Add(time.Second), nil)
	mustPanic("a token below a holder's", func() { tb.Acquire(t0.Add(time.Second), 2, shared("s", 3, time.Minute), nil) })

	tb = locktable.New(locktable.Config{NextToken: (&counter{}).next, NextTicket: low, ResumeBelow: math.MaxUint64, NoGrantBefore: t0.Add(time.Second)})
	resume(t, tb, t0, 1, waiterOf(req("a", time.Minute), of1(5)))
	mustPanic("a ticket below the tail's", func() { tb.Acquire(t0, 2, req("a", time.Minute), nil) })
}

func TestResumeStrings(t *testing.T) {
	tests := []struct{ got, want string }{
		{locktable.RefusedResume.String(), "resume"},
		{locktable.RefusedAttempt.String(), "attempt"},
		{locktable.RefusedFrozen.String(), "frozen"},
		{locktable.RefusedRevoked.String(), "revoked"},
		{locktable.RefusedSuperseded.String(), "superseded"},
		{locktable.CauseMoved.String(), "moved"},
		{locktable.CauseSuperseded.String(), "superseded"},
		{locktable.CauseOverloaded.String(), "overloaded"},
		{locktable.CauseLimitOverruled.String(), "limit_overruled"},
		{locktable.CauseRevoked.String(), "revoked"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}

// TestEndedInTheGraceStaysEnded: a claim that came back in the grace and
// ended since (closed, expired, kicked, or lost a conflict) does not come
// back again in the same grace: a replay, or a client past its rules.
// The loser of a conflict is told so again, even once its winner left.
func TestEndedInTheGraceStaysEnded(t *testing.T) {
	tb, c := v3Table(t, locktable.Config{NoGrantBefore: t0.Add(time.Minute)})
	r := req("a", time.Second)
	resume(t, tb, c.now, 1, holderOf(r, of1(5)))
	tb.Release(c.now, 1, nil)
	again := holderOf(r, of1(5))
	again.Attempt = 2
	refusedResume(t, tb, c.now, 2, again, locktable.RefusedResume)

	resume(t, tb, c.now, 3, waiterOf(req("b", time.Second), of1(9)))
	wantExits(t, tb.Expire(c.advance(time.Second), nil), "3:expired")
	refusedResume(t, tb, c.now, 4, waiterOf(req("b", time.Second), of1(9)), locktable.RefusedResume)

	resume(t, tb, c.now, 5, holderOf(r, of1(6)))
	_, exits := resume(t, tb, c.now, 6, holderOf(r, of1(7)))
	wantExits(t, exits, "5:superseded")
	tb.Release(c.now, 6, nil)
	refusedResume(t, tb, c.now, 7, holderOf(r, of1(6)), locktable.RefusedSuperseded)
	// A claim that never came back is admitted as ever.
	resume(t, tb, c.now, 8, holderOf(r, of1(8)))
}
