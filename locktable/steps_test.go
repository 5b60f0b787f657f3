package locktable_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/batonlock/baton/locktable"
)

// TestPromoteInSteps: a writer leaves before ten readers; with a grant
// step of 3 the release grants three and leaves the queue moving, and
// Promote grants the rest three at a time, in queue order with rising
// tokens. A reader that comes meanwhile queues behind them (a NOWAIT one
// is refused), and is granted in its turn.
func TestPromoteInSteps(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{GrantStep: 3})
	acquire(t, tb, c.now, 1, req("rw", time.Hour))
	for id := locktable.SessionID(2); id <= 11; id++ {
		acquire(t, tb, c.now, id, shared("rw", 100, time.Hour))
	}
	exits, _ := tb.Release(c.now, 1, nil)
	wantExits(t, exits, "1:released->2+3+4")
	if !exits[0].Moving || exits[0].Lock != "rw" || !tb.Moving() {
		t.Fatalf("release: got Moving %v, Lock %q, table Moving %v, want true, rw, true", exits[0].Moving, exits[0].Lock, tb.Moving())
	}
	last := exits[0].Promoted[2].Token
	checkInvariants(t, tb)
	if _, ref, _, _ := tb.Acquire(c.now, 12, locktable.Request{Name: "rw", Lease: time.Hour, Shared: true, Limit: 100, NoWait: true}, nil); ref != locktable.RefusedBusy {
		t.Fatalf("NOWAIT behind a moving queue: got refusal %v, want RefusedBusy", ref)
	}
	st, _ := acquire(t, tb, c.now, 12, shared("rw", 100, time.Hour))
	mustWait(t, st, 8)
	var got []locktable.SessionID
	for round := 0; tb.Moving(); round++ {
		if round > 3 {
			t.Fatal("Promote does not finish")
		}
		exits := tb.Promote(c.now, nil)
		if len(exits) != 1 || exits[0].Cause != locktable.CauseQueueMoved || exits[0].Lock != "rw" || len(exits[0].Promoted) > 3 {
			t.Fatalf("Promote: got %s (%+v), want one queue_moved exit of rw with at most 3 grants", exitIDs(exits), exits)
		}
		for _, g := range exits[0].Promoted {
			if g.Token <= last {
				t.Fatalf("grant to %d: token %d after %d", g.ID, g.Token, last)
			}
			last = g.Token
			got = append(got, g.ID)
		}
		if exits[0].Moving != tb.Moving() {
			t.Fatalf("Promote: exit's Moving %v, table's %v", exits[0].Moving, tb.Moving())
		}
		checkInvariants(t, tb)
	}
	if want := []locktable.SessionID{5, 6, 7, 8, 9, 10, 11, 12}; !slices.Equal(got, want) {
		t.Fatalf("Promote granted %v, want %v", got, want)
	}
	if exits := tb.Promote(c.now, nil); len(exits) != 0 {
		t.Fatalf("Promote with nothing moving: got %s", exitIDs(exits))
	}
}

// TestPromoteSharesTheStep: one call's grants, over every queue it moves,
// are at most the step; Promote moves the queues on in the order they
// were left, skipping one that stopped meanwhile.
func TestPromoteSharesTheStep(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{GrantStep: 4})
	id := locktable.SessionID(0)
	for _, name := range []string{"a", "b", "c"} {
		id++
		acquire(t, tb, c.now, id, req(name, time.Second)) // the writers, silent
		for range 3 {
			id++
			acquire(t, tb, c.now, id, shared(name, 10, time.Hour))
		}
	}
	exits := tb.Expire(c.advance(time.Second), nil)
	wantExits(t, exits, "1:expired->2+3+4", "5:expired->6", "9:expired")
	if exits[0].Moving || !exits[1].Moving || !exits[2].Moving {
		t.Fatalf("Moving: got %v %v %v, want false true true", exits[0].Moving, exits[1].Moving, exits[2].Moving)
	}
	checkInvariants(t, tb)
	// b's waiters leave: its queue stops moving before Promote comes to it.
	for _, w := range []locktable.SessionID{8, 7} {
		exits, err := tb.Kick(c.now, w, nil)
		if err != nil || len(exits) != 1 || exits[0].Promoted != nil {
			t.Fatalf("kick %d: got %s, %v", w, exitIDs(exits), err)
		}
	}
	exits = tb.Promote(c.now, nil)
	wantExits(t, exits, "0:queue_moved->10+11+12")
	if exits[0].Lock != "c" || exits[0].Moving || tb.Moving() {
		t.Fatalf("Promote: got lock %q Moving %v, table Moving %v, want c, false, false", exits[0].Lock, exits[0].Moving, tb.Moving())
	}
	checkInvariants(t, tb)
}

// TestGraceEndsInSteps: the end of a grace period grants the heads of
// every queue in steps too.
func TestGraceEndsInSteps(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{GrantStep: 2, NoGrantBefore: t0.Add(time.Second)})
	for id := locktable.SessionID(1); id <= 5; id++ {
		acquire(t, tb, c.now, id, shared("g", 5, time.Hour))
	}
	exits := tb.Expire(c.advance(time.Second), nil)
	if len(exits) != 1 || exits[0].Cause != locktable.CauseGraceEnded || len(exits[0].Promoted) != 2 || !exits[0].Moving {
		t.Fatalf("end of grace: got %s, want one grace_ended exit granting 2, left moving", exitIDs(exits))
	}
	for tb.Moving() {
		exits[len(exits)-1].Promoted = slices.Clone(exits[len(exits)-1].Promoted) // valid until the next call
		exits = tb.Promote(c.now, exits)
		checkInvariants(t, tb)
	}
	if got := exitIDs(exits); got != "[0:grace_ended->1+2, 0:queue_moved->3+4, 0:queue_moved->5]" {
		t.Fatalf("got exits %s", got)
	}
}

// TestForceReleaseThrough: the holders of one instant are ended a step at
// a time, in grant order; a reader granted between two steps (it took a
// slot the release freed) is not among them.
func TestForceReleaseThrough(t *testing.T) {
	tb, c, _ := newTable(t, locktable.Config{})
	for id := locktable.SessionID(1); id <= 5; id++ {
		acquire(t, tb, c.now, id, shared("s", 5, time.Hour))
	}
	through, ok := tb.NewestToken("s")
	if !ok {
		t.Fatal("NewestToken: nobody holds s")
	}
	if _, ok := tb.NewestToken("free"); ok {
		t.Fatal("NewestToken of a free lock: got true")
	}
	exits, more, err := tb.ForceReleaseThrough(c.now, "s", through, 2, nil)
	if err != nil || !more {
		t.Fatalf("first step: got more %v, %v, want true, nil", more, err)
	}
	wantExits(t, exits, "1:force_released", "2:force_released")
	st, _ := acquire(t, tb, c.now, 6, shared("s", 5, time.Hour)) // a freed slot
	mustHold(t, st)
	if _, ok := tb.Release(c.now, 4, nil); !ok {
		t.Fatal("release of 4: not in the table")
	}
	exits, more, err = tb.ForceReleaseThrough(c.now, "s", through, 2, nil)
	if err != nil || more {
		t.Fatalf("second step: got more %v, %v, want false, nil", more, err)
	}
	wantExits(t, exits, "3:force_released", "5:force_released")
	if _, _, err := tb.ForceReleaseThrough(c.now, "s", through, 2, nil); !errors.Is(err, locktable.ErrNotHeld) {
		t.Fatalf("third step: got %v, want ErrNotHeld", err)
	}
	if in, ok := tb.Session(c.now, 6); !ok || !in.Held {
		t.Fatalf("reader 6, granted after the release began: got %+v, %v, want it holding", in, ok)
	}
	checkInvariants(t, tb)
}

// TestStepsRandom runs random schedules on a table with a small grant
// step, with the queues left moving and a force-release in steps going on
// while sessions come and go, and checks the promises after every call:
// the table's invariants (the limit, an exclusive holder alone, tokens
// rising in grant order, a queue left moving exactly when its head may
// hold), grants in queue order with rising tokens, each call within the
// step, and a release that ends exactly the holders of its instant.
func TestStepsRandom(t *testing.T) {
	schedules := 300
	if testing.Short() {
		schedules = 30
	}
	base := rand.Uint64()
	var promotes, releases int
	for i := range schedules {
		p, r := runSteps(t, base+uint64(i))
		promotes += p
		releases += r
	}
	t.Logf("seeds %d..%d: %d calls of Promote with a queue moving, %d releases in several steps", base, base+uint64(schedules)-1, promotes, releases)
	if promotes == 0 || releases == 0 {
		t.Errorf("the schedules never reached a case they exist for: %d promotes, %d releases in steps", promotes, releases)
	}
}

// runSteps runs one schedule and counts the calls of Promote that moved a
// queue and the releases that took more than one step.
func runSteps(t *testing.T, seed uint64) (promotes, releases int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	step := 1 + rng.IntN(3)
	tb, c, _ := newTable(t, locktable.Config{GrantStep: step})
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d, grant step %d: "+format, append([]any{seed, step}, args...)...)
	}
	limits := map[string]int{"a": 1 + rng.IntN(4), "b": 1 + rng.IntN(4)}
	queues := map[string][]locktable.SessionID{} // arrival order
	live := map[locktable.SessionID]string{}
	var lastToken uint64
	// The release in steps under way: its name, token and holders, and
	// those of them ended so far, by it or otherwise.
	var rel struct {
		name              string
		through           uint64
		holders, released []locktable.SessionID
		goneOtherwise     map[locktable.SessionID]bool
		steps             int
	}
	// apply checks one call's exits against the shadow queues.
	apply := func(what string, exits []locktable.Exit) {
		t.Helper()
		grants := 0
		for _, e := range exits {
			if e.Session.ID == 0 {
				continue
			}
			delete(live, e.Session.ID)
			q := queues[e.Session.Name]
			if i := slices.Index(q, e.Session.ID); i >= 0 {
				queues[e.Session.Name] = slices.Delete(q, i, i+1)
			}
			if rel.name != "" && slices.Contains(rel.holders, e.Session.ID) {
				if e.Cause == locktable.CauseForceReleased && what == "force-release" {
					rel.released = append(rel.released, e.Session.ID)
				} else {
					rel.goneOtherwise[e.Session.ID] = true
				}
			} else if e.Cause == locktable.CauseForceReleased && what == "force-release" {
				fail("%s ended %d, not a holder when it began (%v)", what, e.Session.ID, rel.holders)
			}
		}
		for _, e := range exits {
			for _, g := range e.Promoted {
				grants++
				if q := queues[g.Name]; len(q) == 0 || q[0] != g.ID {
					fail("%s granted %d of %q, queue %v: overtaken", what, g.ID, g.Name, q)
				}
				queues[g.Name] = queues[g.Name][1:]
				if g.Token <= lastToken {
					fail("%s: token %d after %d", what, g.Token, lastToken)
				}
				lastToken = g.Token
			}
		}
		if grants > step {
			fail("%s made %d grants, over the step", what, grants)
		}
		if err := tb.CheckInvariants(); err != nil {
			fail("after %s: %v", what, err)
		}
	}
	nextID := locktable.SessionID(1)
	pick := func() locktable.SessionID {
		ids := make([]locktable.SessionID, 0, len(live))
		for id := range live {
			ids = append(ids, id)
		}
		if len(ids) == 0 {
			return 0
		}
		slices.Sort(ids)
		return ids[rng.IntN(len(ids))]
	}
	for range 300 {
		switch r := rng.IntN(100); {
		case r < 40:
			name := []string{"a", "b"}[rng.IntN(2)]
			r := locktable.Request{Name: name, Lease: time.Duration(1+rng.IntN(20)) * time.Millisecond, NoWait: rng.IntN(8) == 0}
			if rng.IntN(4) > 0 {
				r.Shared, r.Limit = true, limits[name]
			}
			st, ref, exits, err := tb.Acquire(c.now, nextID, r, nil)
			if err != nil {
				fail("acquire: %v", err)
			}
			apply("acquire's expiry", exits)
			if ref == locktable.NotRefused {
				live[nextID] = name
				if !st.Held {
					queues[name] = append(queues[name], nextID)
				} else if st.Token <= lastToken {
					fail("acquire: token %d after %d", st.Token, lastToken)
				} else {
					lastToken = st.Token
				}
			}
			nextID++
		case r < 55:
			if tb.Moving() {
				promotes++
				apply("promote", tb.Promote(c.now, nil))
			}
		case r < 65:
			c.advance(time.Duration(rng.IntN(8)) * time.Millisecond)
			apply("expire", tb.Expire(c.now, nil))
		case r < 72:
			if id := pick(); id != 0 {
				exits, _ := tb.Release(c.now, id, nil)
				apply("release", exits)
			}
		case r < 77:
			if id := pick(); id != 0 {
				exits, _ := tb.Kick(c.now, id, nil)
				apply("kick", exits)
			}
		case r < 80:
			if id := pick(); id != 0 {
				exits, _ := tb.ForceReleaseSession(c.now, id, nil)
				apply("force-release session", exits)
			}
		default:
			if rel.name == "" {
				name := []string{"a", "b"}[rng.IntN(2)]
				through, ok := tb.NewestToken(name)
				if !ok {
					continue
				}
				rel.name, rel.through, rel.released, rel.goneOtherwise, rel.steps = name, through, nil, map[locktable.SessionID]bool{}, 0
				rel.holders = nil
				for _, h := range mustLock(t, tb, c.now, name).Holders {
					rel.holders = append(rel.holders, h.ID)
				}
			}
			exits, more, err := tb.ForceReleaseThrough(c.now, rel.name, rel.through, 1+rng.IntN(2), nil)
			if err != nil && !errors.Is(err, locktable.ErrNotHeld) {
				fail("force-release: %v", err)
			}
			apply("force-release", exits)
			if rel.steps++; !more {
				if rel.steps > 1 {
					releases++
				}
				var want []locktable.SessionID
				for _, id := range rel.holders {
					if !rel.goneOtherwise[id] {
						want = append(want, id)
					}
				}
				if !slices.Equal(rel.released, want) {
					fail("force-release of %q ended %v, want %v (its holders %v, less those gone otherwise)", rel.name, rel.released, want, rel.holders)
				}
				rel.name = ""
			}
		}
	}
	for tb.Moving() {
		apply("promote", tb.Promote(c.now, nil))
	}
	if err := tb.CheckInvariants(); err != nil {
		fail("at the end: %v", err)
	}
	return promotes, releases
}

func mustLock(t *testing.T, tb *locktable.Table, now time.Time, name string) locktable.LockInfo {
	t.Helper()
	li, ok := tb.Lock(now, name)
	if !ok {
		t.Fatalf("Lock(%q): not found", name)
	}
	return li
}
