package locktable_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/batonlock/baton/locktable"
)

// TestStepsResumeRandom runs random schedules on a table of version 3 with
// a small grant step: it starts with a planned handover's list (pending
// holders and waiters of epoch 1) and, half the time, in a grace after a
// crash, when claims of epoch 1 come back (some against the rules, which
// makes conflicts); then sessions come and go, claims move to new
// sessions, pending claims come back or run out, operators freeze, kick,
// release (revoking pending holders) in steps, and queues are left moving.
// After every call: the table's invariants, each call within the step
// (a resume's own grant aside), every grant the head of a shadow queue
// kept in ticket order with a token above every earlier one, and never a
// grant of a pending claim.
func TestStepsResumeRandom(t *testing.T) {
	schedules := 300
	if testing.Short() {
		schedules = 30
	}
	base := rand.Uint64()
	var st stepsResumeStats
	for i := range schedules {
		st.add(runStepsResume(t, base+uint64(i)))
	}
	t.Logf("seeds %d..%d: %+v", base, base+uint64(schedules)-1, st)
	if st.promotes == 0 || st.moves == 0 || st.pendingBack == 0 || st.pendingGranted == 0 || st.admitted == 0 ||
		st.superseded == 0 || st.revoked == 0 || st.frozenWaits == 0 {
		t.Errorf("the schedules never reached a case they exist for: %+v", st)
	}
}

type stepsResumeStats struct {
	promotes, moves, pendingBack, pendingGranted, admitted, superseded, revoked, frozenWaits int
}

func (a *stepsResumeStats) add(b stepsResumeStats) {
	a.promotes += b.promotes
	a.moves += b.moves
	a.pendingBack += b.pendingBack
	a.pendingGranted += b.pendingGranted
	a.admitted += b.admitted
	a.superseded += b.superseded
	a.revoked += b.revoked
	a.frozenWaits += b.frozenWaits
}

func runStepsResume(t *testing.T, seed uint64) (st stepsResumeStats) {
	rng := rand.New(rand.NewPCG(seed, 11))
	step := 1 + rng.IntN(3)
	cfg := locktable.Config{GrantStep: step}
	grace := rng.IntN(2) == 0
	if grace {
		cfg.NoGrantBefore = t0.Add(5 * time.Millisecond)
	}
	tb, c := v3Table(t, cfg)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d, grant step %d, grace %v: "+format, append([]any{seed, step, grace}, args...)...)
	}
	names := []string{"a", "b"}
	limits := map[string]int{"a": 1 + rng.IntN(4), "b": 1 + rng.IntN(4)}
	request := func(name string, shared bool, lease time.Duration) locktable.Request {
		if shared {
			return locktable.Request{Name: name, Lease: lease, Shared: true, Limit: limits[name]}
		}
		return locktable.Request{Name: name, Lease: lease}
	}
	// The shadow: each name's queue in ticket order, the live sessions and
	// their claims, the pending ones.
	queues := map[string][]locktable.SessionID{}
	claims := map[locktable.SessionID]locktable.Claim{}
	pendingIDs := map[locktable.SessionID]bool{}
	var lastToken uint64
	nextID := locktable.SessionID(1)
	ticketOf := func(id locktable.SessionID) uint64 {
		in, ok := tb.Session(c.now, id)
		if !ok {
			fail("session %d not in the table", id)
		}
		return in.Ticket
	}
	// place puts waiter id in the shadow queue at its ticket's place.
	place := func(name string, id locktable.SessionID) {
		q := queues[name]
		tk := ticketOf(id)
		i := len(q)
		for i > 0 && ticketOf(q[i-1]) > tk {
			i--
		}
		queues[name] = slices.Insert(q, i, id)
	}
	grant := func(what string, id locktable.SessionID, name string, token uint64) {
		t.Helper()
		if q := queues[name]; len(q) == 0 || q[0] != id {
			fail("%s granted %d of %q, queue %v: not the head", what, id, name, q)
		}
		if pendingIDs[id] {
			fail("%s granted pending claim %d", what, id)
		}
		if token <= lastToken {
			fail("%s: token %x after %x", what, token, lastToken)
		}
		lastToken = token
		queues[name] = queues[name][1:]
		cl := claims[id]
		cl.Token = token
		claims[id] = cl
	}
	// apply checks one call's exits against the shadow; own is a grant the
	// call answered (a pending waiter's resume), before those in the exits.
	apply := func(what string, exits []locktable.Exit) {
		t.Helper()
		grants := 0
		for _, e := range exits {
			id := e.Session.ID
			switch e.Cause {
			case locktable.CauseGraceEnded, locktable.CauseQueueMoved, locktable.CauseRevoked:
				if e.Cause == locktable.CauseRevoked {
					st.revoked++
				}
			case locktable.CauseMoved:
				// the caller rebinds
			default:
				if e.Cause == locktable.CauseSuperseded {
					st.superseded++
				}
				delete(claims, id)
				delete(pendingIDs, id)
				if i := slices.Index(queues[e.Session.Name], id); i >= 0 {
					queues[e.Session.Name] = slices.Delete(queues[e.Session.Name], i, i+1)
				}
			}
		}
		for _, e := range exits {
			for _, g := range e.Promoted {
				grants++
				grant(what, g.ID, g.Name, g.Token)
			}
		}
		if grants > step {
			fail("%s made %d grants, over the step", what, grants)
		}
		if err := tb.CheckInvariants(); err != nil {
			fail("after %s: %v", what, err)
		}
	}
	// The planned list: per name a few holders and waiters of epoch 1,
	// holders first (tokens), waiters by rising tickets, entered in a
	// random order, each with its own time.
	var listed []locktable.Claim
	for n, name := range names {
		shared := rng.IntN(3) > 0
		holders := 1
		if shared {
			holders = rng.IntN(limits[name] + 1)
		}
		for i := range holders {
			listed = append(listed, locktable.Claim{Request: request(name, shared, time.Duration(2+rng.IntN(10))*time.Millisecond), Token: of1(uint64(10 + i + 100*n))})
		}
		for i := range rng.IntN(4) {
			listed = append(listed, locktable.Claim{Request: request(name, rng.IntN(2) == 0, time.Duration(2+rng.IntN(10))*time.Millisecond), Ticket: of1(uint64(20 + i + 100*n))})
		}
	}
	rng.Shuffle(len(listed), func(i, j int) { listed[i], listed[j] = listed[j], listed[i] })
	for _, cl := range listed {
		id := nextID
		nextID++
		ref, exits, err := tb.AddPending(c.now, id, cl, c.now.Add(cl.Lease-time.Duration(rng.IntN(2))*time.Millisecond), nil)
		if err != nil {
			fail("list: %v", err)
		}
		if ref != locktable.NotRefused {
			continue // a waiter whose limit another listed claim's contradicts
		}
		claims[id] = cl
		pendingIDs[id] = true
		if cl.Token == 0 {
			place(cl.Name, id)
		}
		apply("list", exits)
	}
	// A claim of epoch 1 as a client would resume it: a listed one, or one
	// the table never had (after a crash; some contradict the others).
	epoch1 := func() locktable.Claim {
		if len(listed) > 0 && rng.IntN(2) == 0 {
			cl := listed[rng.IntN(len(listed))]
			cl.Attempt = 1 + uint32(rng.IntN(3))
			return cl
		}
		name := names[rng.IntN(2)]
		cl := locktable.Claim{Request: request(name, rng.IntN(3) > 0, time.Duration(2+rng.IntN(10))*time.Millisecond), Attempt: 1}
		if rng.IntN(2) == 0 {
			cl.Token = of1(uint64(1 + rng.IntN(60)))
		} else {
			cl.Ticket = of1(uint64(1 + rng.IntN(60)))
		}
		return cl
	}
	live := func() locktable.SessionID {
		var ids []locktable.SessionID
		for id := range claims {
			if !pendingIDs[id] {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 {
			return 0
		}
		slices.Sort(ids)
		return ids[rng.IntN(len(ids))]
	}
	resume := func(what string, cl locktable.Claim) {
		t.Helper()
		id := nextID
		nextID++
		var was locktable.Info
		var wasID locktable.SessionID
		for sid, have := range claims {
			if cl.Token != 0 && have.Token == cl.Token || cl.Token == 0 && cl.Ticket != 0 && have.Ticket == cl.Ticket {
				wasID = sid
				was, _ = tb.Session(c.now, sid)
			}
		}
		state, ref, exits, err := tb.Resume(c.now, id, cl, nil)
		if err != nil {
			fail("%s: %v", what, err)
		}
		// The expiry's exits, then the move's, whose own grant comes first.
		k := slices.IndexFunc(exits, func(e locktable.Exit) bool {
			return e.Cause == locktable.CauseMoved || e.Cause == locktable.CauseSuperseded || e.Cause == locktable.CauseLimitOverruled || e.Cause == locktable.CauseOverloaded
		})
		if k < 0 {
			k = len(exits)
		}
		apply(what+"'s expiry", exits[:k])
		if ref != locktable.NotRefused {
			if k != len(exits) {
				fail("%s refused (%v) with exits %s", what, ref, exitIDs(exits))
			}
			return
		}
		moved := k < len(exits) && exits[k].Cause == locktable.CauseMoved
		if moved {
			old := exits[k].Session.ID
			if old != wasID {
				fail("%s moved %d, the claim was on %d", what, old, wasID)
			}
			claims[id] = claims[old]
			delete(claims, old)
			if pendingIDs[old] {
				st.pendingBack++
			}
			delete(pendingIDs, old)
			if i := slices.Index(queues[cl.Name], old); i >= 0 {
				queues[cl.Name][i] = id
			}
			st.moves++
			if state.Held && was.Pending && !was.Held {
				st.pendingGranted++
				grant(what, id, cl.Name, state.Token) // its own grant, outside the step
			}
		} else {
			st.admitted++
			claims[id] = cl
			if !state.Held {
				place(cl.Name, id)
			} else if state.Token != cl.Token {
				fail("%s: a holder back with token %x, want its %x", what, state.Token, cl.Token)
			}
		}
		apply(what, exits[k:])
	}
	frozen := map[locktable.SessionID]bool{}
	for range 300 {
		switch r := rng.IntN(100); {
		case r < 25:
			name := names[rng.IntN(2)]
			req := request(name, rng.IntN(4) > 0, time.Duration(1+rng.IntN(20))*time.Millisecond)
			req.NoWait = rng.IntN(8) == 0
			state, ref, exits, err := tb.Acquire(c.now, nextID, req, nil)
			if err != nil {
				fail("acquire: %v", err)
			}
			apply("acquire's expiry", exits)
			if ref == locktable.NotRefused {
				claims[nextID] = locktable.Claim{Request: req, Token: state.Token}
				if !state.Held {
					cl := claims[nextID]
					cl.Ticket = ticketOf(nextID)
					claims[nextID] = cl
					queues[name] = append(queues[name], nextID)
				} else if state.Token <= lastToken {
					fail("acquire: token %x after %x", state.Token, lastToken)
				} else {
					lastToken = state.Token
				}
			}
			nextID++
		case r < 35:
			if tb.Moving() {
				st.promotes++
				apply("promote", tb.Promote(c.now, nil))
			}
		case r < 45:
			c.advance(time.Duration(rng.IntN(4)) * time.Millisecond)
			apply("expire", tb.Expire(c.now, nil))
		case r < 52:
			if id := live(); id != 0 {
				exits, _ := tb.Release(c.now, id, nil)
				apply("release", exits)
			}
		case r < 62:
			if id := live(); id != 0 {
				cl := claims[id]
				in, _ := tb.Session(c.now, id)
				cl.Attempt = in.Attempt + 1
				if cl.Token != 0 && cl.Ticket != 0 && rng.IntN(3) == 0 {
					cl.Token = 0 // its grant never reached it: by its ticket
				}
				resume("move", cl)
			}
		case r < 74:
			resume("come back", epoch1())
		case r < 80:
			// An operator's kick or release, accepted: frozen first, ended
			// later (the record committed).
			var ids []locktable.SessionID
			for id := range claims {
				ids = append(ids, id)
			}
			if len(ids) == 0 {
				continue
			}
			slices.Sort(ids)
			id := ids[rng.IntN(len(ids))]
			if err := tb.Freeze(id); err != nil {
				fail("freeze %d: %v", id, err)
			}
			frozen[id] = true
			if err := tb.CheckInvariants(); err != nil {
				fail("after freeze: %v", err)
			}
		case r < 86:
			ids := make([]locktable.SessionID, 0, len(frozen))
			for id := range frozen {
				ids = append(ids, id)
			}
			slices.Sort(ids)
			for _, id := range ids {
				if claims[id].Name == "" {
					delete(frozen, id) // it ended meanwhile
					continue
				}
				in, _ := tb.Session(c.now, id)
				if li, _ := tb.Lock(c.now, in.Name); !in.Held && len(li.Waiters) > 0 && li.Waiters[0].ID == id {
					st.frozenWaits++
				}
				var exits []locktable.Exit
				var err error
				if in.Held {
					exits, err = tb.ForceReleaseSession(c.now, id, nil)
				} else {
					exits, err = tb.Kick(c.now, id, nil)
				}
				if err != nil {
					fail("end frozen %d: %v", id, err)
				}
				delete(frozen, id)
				apply("end frozen", exits)
				break
			}
		default:
			// A release of a name's holders, in steps.
			name := names[rng.IntN(2)]
			through, ok := tb.NewestToken(name)
			if !ok {
				continue
			}
			tb.FreezeThrough(name, through)
			for more := true; more; {
				var exits []locktable.Exit
				var err error
				exits, more, err = tb.ForceReleaseThrough(c.now, name, through, 1+rng.IntN(2), nil)
				if err != nil && !errors.Is(err, locktable.ErrNotHeld) {
					fail("force-release: %v", err)
				}
				apply("force-release", exits)
			}
		}
	}
	for tb.Moving() {
		apply("promote", tb.Promote(c.now, nil))
	}
	return st
}
