package clusterharness

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonlock/baton/internal/batontest"
)

// The semaphore workload: shared believers (protocol version 2) on one
// name with a limit, beside the mutex workload. Believers with 1 s leases
// take it throughout the schedule, believers with 10 s leases join them in
// the 10 s phase: more contenders than slots, so the name is full most of
// the time, and a 1 s waiter reaches a new leader within a second of a
// fault while a 10 s holder cut off on the old one still believes.
//
// Its guarded resource is a slot counter, not the mutex's register: a
// resource that keeps only the highest token would refuse a live shared
// holder whose token is below another live holder's. The counter keeps a
// record per token instead: a holder opens its record at its grant,
// writes into it while it believes, and closes it when its belief ends. A
// token opens one record once; a write with a token whose record another
// holder opened, or that was closed, is refused. The writers inside at an
// instant are the open records, which are the beliefs: the checker counts
// them (rule 1 for shared claims).

// semName is the semaphore's name and semLimit its limit.
const (
	semName  = "sem"
	semLimit = 3
)

// slotCounter is the semaphore's guarded resource.
type slotCounter struct {
	mu       sync.Mutex
	records  map[slotKey]*slotRecord
	refusals []*slotRefusal
	byKey    map[refusalKey]*slotRefusal
}

type slotKey struct {
	name  string
	token uint64
}

// slotRecord is one token's record: who opened it and whether it is
// still open.
type slotRecord struct {
	holder int
	open   bool
	writes int
}

type refusalKey struct {
	slotKey
	holder int
	what   string
}

// slotRefusal is one kind of refused use of a token by one holder; a
// holder that believes too long is refused many times, counted once.
type slotRefusal struct {
	refusalKey
	owner       int // the holder that opened the record (-1: none)
	first, last time.Time
	n           int
}

func (r *slotRefusal) String() string {
	by := "no holder"
	if r.owner >= 0 {
		by = fmt.Sprintf("client %d", r.owner)
	}
	return fmt.Sprintf("lock %q: the slot counter refused client %d's %s with token %d (its record: %s) %d times from %s to %s",
		r.name, r.holder, r.what, r.token, by, r.n, r.first.Format("15:04:05.000"), r.last.Format("15:04:05.000"))
}

func newSlotCounter() *slotCounter {
	return &slotCounter{records: map[slotKey]*slotRecord{}, byKey: map[refusalKey]*slotRefusal{}}
}

// enter opens holder's record of token; it refuses a token that opened a
// record before (two holders with one token, or one holder twice).
func (c *slotCounter) enter(name string, token uint64, holder int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := slotKey{name, token}
	if r := c.records[k]; r != nil {
		c.refuseLocked(k, holder, r.holder, "entry")
		return false
	}
	c.records[k] = &slotRecord{holder: holder, open: true}
	return true
}

// write is one write of holder inside its slot: taken only into the open
// record that holder opened with token.
func (c *slotCounter) write(name string, token uint64, holder int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := slotKey{name, token}
	r := c.records[k]
	switch {
	case r == nil:
		c.refuseLocked(k, holder, -1, "write")
		return false
	case r.holder != holder || !r.open:
		c.refuseLocked(k, holder, r.holder, "write")
		return false
	}
	r.writes++
	return true
}

// leave closes holder's record of token (its belief is over).
func (c *slotCounter) leave(name string, token uint64, holder int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.records[slotKey{name, token}]; r != nil && r.holder == holder {
		r.open = false
	}
}

// c.mu must be held.
func (c *slotCounter) refuseLocked(k slotKey, holder, owner int, what string) {
	now := time.Now()
	rk := refusalKey{k, holder, what}
	if r := c.byKey[rk]; r != nil {
		r.last, r.n = now, r.n+1
		return
	}
	r := &slotRefusal{refusalKey: rk, owner: owner, first: now, last: now, n: 1}
	c.byKey[rk] = r
	c.refusals = append(c.refusals, r)
}

// refused lists the counter's refusals, one line each.
func (c *slotCounter) refused() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, r := range c.refusals {
		out = append(out, r.String())
	}
	return out
}

// crowd is a span in which more shared claims held a name than its limit
// allows (rule 1 for shared claims).
type crowd struct {
	name     string
	limit    int
	from, to time.Time
	most     int     // the most holders at once in it
	holds    []*hold // every hold that held in it
}

func (c crowd) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "lock %q (limit %d): %d holders at once, over the limit for %v from %s:", c.name, c.limit, c.most,
		c.to.Sub(c.from).Round(time.Millisecond), c.from.Format("15:04:05.000"))
	for _, h := range c.holds {
		b.WriteString("\n    ")
		b.WriteString(h.String())
	}
	return b.String()
}

// semStat is what a run did on one name with shared claims.
type semStat struct {
	grants int
	limit  int // the smallest limit of its shared claims
	most   int // the most shared holders at once
}

// checkShared applies the rules to the holds of a name that has shared
// claims (hs sorted by grant): an exclusive hold overlaps nobody (rule 1,
// as a pair), shared holders never outnumber the limit (rule 1, as a
// crowd), and tokens (rule 2) are never given twice and rise from any grant
// to every claim asked after it arrived. Grants made together reach their
// holders in any order, so the order of arrivals alone proves nothing of
// the order of tokens; an ACQUIRE sent after a grant arrived was certainly
// granted after it.
func (v *verdict) checkShared(name string, hs []*hold) {
	for i, a := range hs {
		for _, b := range hs[i+1:] {
			if !b.granted.Before(a.ended) {
				break
			}
			if !a.shared || !b.shared {
				v.overlaps = append(v.overlaps, overlap{a, b})
			}
		}
	}

	// The sweep: ends before starts at one instant (a hold that ends as
	// another begins does not overlap it).
	type edge struct {
		at    time.Time
		start bool
		h     *hold
	}
	var edges []edge
	st := semStat{}
	for _, h := range hs {
		if !h.shared {
			continue
		}
		st.grants++
		if st.limit == 0 || h.limit < st.limit {
			st.limit = h.limit
		}
		edges = append(edges, edge{h.granted, true, h}, edge{h.ended, false, h})
	}
	slices.SortStableFunc(edges, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		switch {
		case a.start == b.start:
			return 0
		case a.start:
			return 1
		default:
			return -1
		}
	})
	var active []*hold
	var cur *crowd
	for _, e := range edges {
		if !e.start {
			active = slices.DeleteFunc(active, func(h *hold) bool { return h == e.h })
			if cur != nil && len(active) <= cur.limit {
				cur.to = e.at
				v.crowds = append(v.crowds, *cur)
				cur = nil
			}
			continue
		}
		active = append(active, e.h)
		st.most = max(st.most, len(active))
		limit := e.h.limit
		for _, h := range active {
			limit = min(limit, h.limit)
		}
		switch {
		case cur != nil:
			cur.holds = append(cur.holds, e.h)
			cur.most = max(cur.most, len(active))
		case len(active) > limit:
			cur = &crowd{name: name, limit: limit, from: e.at, most: len(active), holds: slices.Clone(active)}
		}
	}
	if v.semaphores == nil {
		v.semaphores = map[string]semStat{}
	}
	v.semaphores[name] = st

	byToken := map[uint64]*hold{}
	for _, h := range hs {
		if first := byToken[h.token]; first != nil {
			v.bad = append(v.bad, fmt.Sprintf("lock %q: one token for two holders: %v, and %v", name, first, h))
			continue
		}
		byToken[h.token] = h
	}
	asked := slices.Clone(hs)
	slices.SortStableFunc(asked, func(a, b *hold) int { return a.asked.Compare(b.asked) })
	var top *hold // the highest token of the grants that arrived before the claim in hand was asked
	j := 0
	for _, b := range asked {
		if b.asked.IsZero() {
			continue // not known: it proves nothing
		}
		for ; j < len(hs) && hs[j].granted.Before(b.asked); j++ {
			if top == nil || hs[j].token > top.token {
				top = hs[j]
			}
		}
		if top != nil && top.token > b.token {
			v.bad = append(v.bad, fmt.Sprintf("lock %q: token did not rise: %v was granted before %v asked (at %s)",
				name, top, b, b.asked.Format("15:04:05.000")))
		}
	}
}

// sharedNames is the names of holds with a shared claim among them.
func sharedNames(holds []*hold) map[string]bool {
	names := map[string]bool{}
	for _, h := range holds {
		if h.shared {
			names[h.name] = true
		}
	}
	return names
}

// semSummary lists a verdict's semaphore figures, one line per name.
func (v verdict) semSummary() string {
	var names []string
	for n := range v.semaphores {
		names = append(names, n)
	}
	slices.SortFunc(names, cmp.Compare)
	var b strings.Builder
	for _, n := range names {
		s := v.semaphores[n]
		fmt.Fprintf(&b, "  semaphore %q (limit %d): %d shared grants, at most %d holders at once\n", n, s.limit, s.grants, s.most)
	}
	return b.String()
}

// TestCheckerSemaphoreRules: the checker's rules for shared claims find
// each kind of violation and pass what a semaphore may do. Runs everywhere
// (no processes).
func TestCheckerSemaphoreRules(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	// sh is a shared hold of limit 3 asked 1 ms before its grant.
	sh := func(token uint64, from, to int) *hold {
		return &hold{name: "s", token: token, shared: true, limit: semLimit, asked: at(from - 1), granted: at(from), ended: at(to)}
	}
	limited := func(h *hold, limit int) *hold { h.limit = limit; return h }
	askedAt := func(h *hold, ms int) *hold { h.asked = at(ms); return h }
	ex := func(token uint64, from, to int) *hold {
		return &hold{name: "s", token: token, granted: at(from), ended: at(to)}
	}
	for _, tc := range []struct {
		name                 string
		holds                []*hold
		overlaps, crowds     int
		bad, most            int
		crowdFrom, crowdTo   int // the first crowd's span (ms)
		crowdMost, crowdSize int // its most at once, and how many holds were in it
	}{
		{name: "three in a limit of 3", holds: []*hold{sh(1, 0, 30), sh(2, 5, 35), sh(3, 10, 40)}, most: 3},
		{name: "a fourth while three hold", holds: []*hold{sh(1, 0, 30), sh(2, 5, 35), sh(3, 10, 40), sh(4, 20, 25)},
			crowds: 1, most: 4, crowdFrom: 20, crowdTo: 25, crowdMost: 4, crowdSize: 4},
		{name: "a fourth as the first ends", holds: []*hold{sh(1, 0, 30), sh(2, 5, 35), sh(3, 10, 40), sh(4, 30, 50)}, most: 3},
		{name: "two too many, one after the other", holds: []*hold{sh(1, 0, 100), sh(2, 0, 100), sh(3, 0, 100), sh(4, 10, 30), sh(5, 20, 40)},
			crowds: 1, most: 5, crowdFrom: 10, crowdTo: 40, crowdMost: 5, crowdSize: 5},
		{name: "two crowds", holds: []*hold{sh(1, 0, 100), sh(2, 0, 100), sh(3, 0, 100), sh(4, 10, 20), sh(5, 50, 60)},
			crowds: 2, most: 4, crowdFrom: 10, crowdTo: 20, crowdMost: 4, crowdSize: 4},
		{name: "three in a limit of 2", holds: []*hold{limited(sh(1, 0, 30), 2), limited(sh(2, 5, 35), 2), limited(sh(3, 10, 40), 2)},
			crowds: 1, most: 3, crowdFrom: 10, crowdTo: 30, crowdMost: 3, crowdSize: 3},
		{name: "a writer with a reader", holds: []*hold{ex(1, 0, 10), sh(2, 5, 15)}, overlaps: 1, most: 1},
		{name: "readers after a writer", holds: []*hold{ex(1, 0, 10), sh(2, 10, 15), sh(3, 11, 15)}, most: 2},
		{name: "one token, two holders", holds: []*hold{sh(1, 0, 10), sh(1, 5, 15)}, bad: 1, most: 2},
		{name: "grants made together arrive out of token order",
			holds: []*hold{askedAt(sh(3, 10, 30), 0), askedAt(sh(2, 11, 30), 0), askedAt(sh(4, 12, 30), 1)}, most: 3},
		{name: "token fell: asked after a higher grant arrived",
			holds: []*hold{sh(2<<40|5, 0, 10), askedAt(sh(1<<40|9, 25, 30), 20)}, bad: 1, most: 1},
		{name: "a lower token to a claim asked before the higher one arrived",
			holds: []*hold{sh(2<<40|5, 10, 20), askedAt(sh(1<<40|9, 25, 30), 5)}, most: 1},
	} {
		v := check(runLog{holds: tc.holds})
		st := v.semaphores["s"]
		if len(v.overlaps) != tc.overlaps || len(v.crowds) != tc.crowds || len(v.bad) != tc.bad || st.most != tc.most {
			t.Errorf("%s: %d overlaps, %d crowds, %d other violations, at most %d at once; want %d, %d, %d, %d: %q", tc.name,
				len(v.overlaps), len(v.crowds), len(v.bad), st.most, tc.overlaps, tc.crowds, tc.bad, tc.most, v.violations())
			continue
		}
		if tc.crowds == 0 {
			continue
		}
		c := v.crowds[0]
		if !c.from.Equal(at(tc.crowdFrom)) || !c.to.Equal(at(tc.crowdTo)) || c.most != tc.crowdMost || len(c.holds) != tc.crowdSize {
			t.Errorf("%s: first crowd %v .. %v, %d at most, %d holds; want %v .. %v, %d, %d", tc.name, c.from, c.to, c.most, len(c.holds),
				at(tc.crowdFrom), at(tc.crowdTo), tc.crowdMost, tc.crowdSize)
		}
	}

	// The slot counter: a token opens one record once, and only its
	// holder writes into it while it is open.
	c := newSlotCounter()
	steps := []struct {
		what   string
		do     func() bool
		wantOK bool
	}{
		{"client 1 enters with token 1", func() bool { return c.enter("s", 1, 1) }, true},
		{"client 2 enters with token 2", func() bool { return c.enter("s", 2, 2) }, true},
		{"client 1 writes", func() bool { return c.write("s", 1, 1) }, true},
		{"client 3 enters with token 1", func() bool { return c.enter("s", 1, 3) }, false},
		{"client 3 writes with token 1", func() bool { return c.write("s", 1, 3) }, false},
		{"client 3 writes with token 1 again", func() bool { return c.write("s", 1, 3) }, false},
		{"client 4 writes with token 9, never entered", func() bool { return c.write("s", 9, 4) }, false},
		{"client 2 leaves, then writes", func() bool { c.leave("s", 2, 2); return c.write("s", 2, 2) }, false},
		{"client 1 enters again with token 1", func() bool { return c.enter("s", 1, 1) }, false},
		{"client 1 writes", func() bool { return c.write("s", 1, 1) }, true},
		{"token 1 on another name", func() bool { return c.enter("t", 1, 5) }, true},
	}
	for _, s := range steps {
		if ok := s.do(); ok != s.wantOK {
			t.Errorf("%s: taken %v, want %v", s.what, ok, s.wantOK)
		}
	}
	// Client 3's entry and its writes (counted once), client 4's write,
	// client 2's late write, client 1's second entry.
	if got := c.refused(); len(got) != 5 {
		t.Errorf("the counter lists %d refusals, want 5: %q", len(got), got)
	}
	if v := check(runLog{slotRefusals: c.refused()}); len(v.bad) != 5 {
		t.Errorf("the checker reports %d of the counter's 5 refusals: %q", len(v.bad), v.bad)
	}
}

// TestSemaphoreBelieversStandalone: shared believers on one standalone
// server (in this process, no root) fill the semaphore to its limit and no
// further, and the checker passes them; a believer whose limit differs is
// told LIMIT_MISMATCH, which the checker reports. Runs everywhere.
func TestSemaphoreBelieversStandalone(t *testing.T) {
	srv := batontest.StartServer(t)
	w := newWorkload()
	t.Cleanup(func() { w.stop() })
	g := w.believers([]string{srv.Addr}, believerSpec{names: []string{semName}, perName: semLimit + 2, lease: time.Second,
		holdMin: 300 * time.Millisecond, holdMax: 600 * time.Millisecond, limit: semLimit})
	batontest.Eventually(t, 20*time.Second, func() bool { return len(g.holdingOn(0)) == semLimit }, "%d shared believers never held at once", semLimit)
	// Slots change hands: the waiters get the slots the first holders close.
	batontest.Eventually(t, 20*time.Second, func() bool { return check(w.snapshot()).semaphores[semName].grants >= 2*semLimit },
		"fewer than %d shared grants", 2*semLimit)
	v := check(w.snapshot())
	st := v.semaphores[semName]
	if !v.ok() || st.most != semLimit || st.grants < 2*semLimit {
		t.Fatalf("got %d shared grants, at most %d at once, violations %q; want at least %d, exactly %d, none",
			st.grants, st.most, v.violations(), 2*semLimit, semLimit)
	}
	t.Logf("%d shared grants, at most %d at once", st.grants, st.most)

	odd := w.believers([]string{srv.Addr}, believerSpec{names: []string{semName}, perName: 1, lease: time.Second,
		holdMin: time.Second, holdMax: time.Second, firstID: 50, limit: semLimit + 1})
	batontest.Eventually(t, 20*time.Second, func() bool { return !check(w.snapshot()).ok() },
		"a believer with limit %d beside those of %d: the checker reports nothing", semLimit+1, semLimit)
	odd.stop()
	g.stop()
	v = check(w.stop())
	if len(v.bad) != 1 || !strings.Contains(v.bad[0], "LIMIT_MISMATCH") || len(v.crowds) != 0 || len(v.overlaps) != 0 {
		t.Fatalf("got %q, want one violation: LIMIT_MISMATCH", v.violations())
	}
	t.Logf("the odd believer: %s", v.bad[0])
}
