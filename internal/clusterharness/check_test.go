package clusterharness

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// The checker's rules, per name, over every hold of a run (of every
// client, across every fault):
//
//  1. holder intervals, from the grant to the moment the holder saw its
//     loss or was about to close, never overlap; on a name with shared
//     claims, an exclusive holder's interval overlaps nobody's, and at no
//     instant do more shared holders' intervals overlap than the limit;
//  2. tokens strictly rise in the order of the grants; on a name with
//     shared claims, where grants made together reach their holders in
//     any order, no token is given twice and every claim asked after a
//     grant arrived gets a higher token than it;
//  3. the register never took a lower token after a higher one, and no
//     holder wrote with, or read a value above, a token the register had
//     already passed (it believed it held a lock that had moved on); the
//     slot counter (the semaphore's resource, semaphore_test.go) refused
//     nothing.
//
// Rule 1 is the promise itself; 2 and 3 are what a fenced resource sees.
//
// Protocol version 3 adds two rules, counted apart from the overlaps:
//
//  4. a claim that must survive the run's faults (a holder or a waiter
//     with a 10 s lease, resume_test.go) is never LOST: a holder's loss
//     seen before the deadline it last had (Lock.ValidUntil) is a claim
//     ended although its client's deadline had not passed, and a waiter
//     whose Acquire failed lost its place;
//  5. waiters queued one after the other on a name are granted in that
//     order (FIFO), across every move.

// verdict is what the checker found.
type verdict struct {
	holds    int
	overlaps []overlap
	crowds   []crowd  // more shared holders than the limit
	bad      []string // violations of rules 2 and 3, and the run's own
	lost     []string // rule 4: claims lost in a fault they should survive
	fifo     []string // rule 5: waiters granted out of their order
	// semaphores are the figures of the names with shared claims.
	semaphores map[string]semStat
}

// runLog is what a run recorded.
type runLog struct {
	holds  []*hold
	writes []regWrite // the register's
	// slotRefusals are the slot counter's, bad the violations the run saw
	// on the way (a client error no correct server sends).
	slotRefusals, bad []string
	// lost are the claims that had to survive and whose loss the run saw
	// outside a hold (a waiter's Acquire that failed); queues the order in
	// which waiters queued on a name (client ids).
	lost   []string
	queues map[string][]int
}

// overlap is one pair of holds of a name that overlapped.
type overlap struct {
	a, b *hold
}

func (o overlap) String() string {
	return fmt.Sprintf("lock %q: two holders for %v:\n    %v\n    %v", o.a.name,
		o.a.ended.Sub(o.b.granted).Round(time.Millisecond), o.a, o.b)
}

// ok reports whether no rule was broken.
func (v verdict) ok() bool {
	return len(v.overlaps) == 0 && len(v.crowds) == 0 && len(v.bad) == 0 && len(v.lost) == 0 && len(v.fifo) == 0
}

// violations lists every broken rule, one line each.
func (v verdict) violations() []string {
	var out []string
	for _, o := range v.overlaps {
		out = append(out, o.String())
	}
	for _, c := range v.crowds {
		out = append(out, c.String())
	}
	out = append(out, v.bad...)
	out = append(out, v.lost...)
	return append(out, v.fifo...)
}

// check applies the rules to what a run recorded.
func check(l runLog) verdict {
	v := verdict{holds: len(l.holds)}
	byName := map[string][]*hold{}
	shared := sharedNames(l.holds)
	for _, h := range l.holds {
		byName[h.name] = append(byName[h.name], h)
		if h.survive && h.lost != nil && h.ended.Before(h.validUntil) {
			v.lost = append(v.lost, fmt.Sprintf("lock %q: LOST: %v, %v before its deadline", h.name, h,
				h.validUntil.Sub(h.ended).Round(time.Millisecond)))
		}
		if h.readAbove != 0 {
			v.bad = append(v.bad, fmt.Sprintf("lock %q: %v read %d from the register, above its token", h.name, h, h.readAbove))
		}
	}
	for name, hs := range byName {
		slices.SortStableFunc(hs, func(a, b *hold) int { return a.granted.Compare(b.granted) })
		if shared[name] {
			v.checkShared(name, hs)
			continue
		}
		for i, a := range hs {
			for _, b := range hs[i+1:] {
				if !b.granted.Before(a.ended) {
					break // sorted by grant: no later one starts before a ended
				}
				v.overlaps = append(v.overlaps, overlap{a, b})
			}
			if i > 0 && a.token <= hs[i-1].token {
				v.bad = append(v.bad, fmt.Sprintf("lock %q: token did not rise: %v, then %v", name, hs[i-1], a))
			}
		}
	}
	highest := map[string]uint64{}
	// The refused writes of one token are one violation: a holder that
	// believes too long writes many times.
	type refusal struct {
		name        string
		token       uint64
		first, last time.Time
		n           int
		taken       uint64
	}
	type key struct {
		name  string
		token uint64
	}
	var refused []*refusal
	byToken := map[key]*refusal{}
	for _, w := range l.writes {
		switch {
		case !w.ok:
			if r := byToken[key{w.name, w.token}]; r != nil {
				r.last, r.n = w.at, r.n+1
				continue
			}
			r := &refusal{name: w.name, token: w.token, first: w.at, last: w.at, n: 1, taken: highest[w.name]}
			refused = append(refused, r)
			byToken[key{w.name, w.token}] = r
		case w.token < highest[w.name]:
			v.bad = append(v.bad, fmt.Sprintf("lock %q: the register took token %d after %d", w.name, w.token, highest[w.name]))
		default:
			highest[w.name] = w.token
		}
	}
	for _, r := range refused {
		v.bad = append(v.bad, fmt.Sprintf("lock %q: a holder wrote with token %d %d times from %s to %s after the register took %d",
			r.name, r.token, r.n, r.first.Format("15:04:05.000"), r.last.Format("15:04:05.000"), r.taken))
	}
	v.bad = append(append(v.bad, l.slotRefusals...), l.bad...)
	v.lost = append(v.lost, l.lost...)
	v.fifo = checkFIFO(l)
	return v
}

// checkFIFO applies rule 5: on each name of l.queues, the grants to its
// waiters come in the order they queued.
func checkFIFO(l runLog) []string {
	var out []string
	for name, order := range l.queues {
		var got []*hold
		for _, h := range l.holds {
			if h.name == name && slices.Contains(order, h.client) {
				got = append(got, h)
			}
		}
		slices.SortStableFunc(got, func(a, b *hold) int { return a.granted.Compare(b.granted) })
		var ids []int
		for _, h := range got {
			ids = append(ids, h.client)
		}
		if !slices.Equal(ids, order) {
			out = append(out, fmt.Sprintf("lock %q: FIFO: waiters queued as clients %v were granted as %v", name, order, ids))
		}
	}
	slices.Sort(out)
	return out
}

// TestCheckerRules: the checker finds each kind of violation and passes a
// clean run. Runs everywhere (no processes).
func TestCheckerRules(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond) }
	h := func(token uint64, from, to int) *hold {
		return &hold{name: "l", token: token, granted: at(from), ended: at(to)}
	}
	wr := func(token uint64, ok bool) regWrite { return regWrite{name: "l", token: token, ok: ok} }
	lostHold := h(1<<40|2, 20, 30)
	lostHold.lost = errors.New("NOT_LEADER")
	readAbove := h(1<<40|2, 20, 30)
	readAbove.readAbove = 2<<40 | 1
	for _, tc := range []struct {
		name     string
		holds    []*hold
		writes   []regWrite
		overlaps int
		bad      int
	}{
		{"one after the other", []*hold{h(1<<40|1, 0, 10), h(1<<40|2, 10, 20), h(2<<40|1, 25, 30)},
			[]regWrite{wr(1<<40|1, true), wr(1<<40|2, true), wr(2<<40|1, true)}, 0, 0},
		{"lost, then the next", []*hold{h(1<<40|1, 0, 10), lostHold, h(2<<40|1, 30, 40)}, nil, 0, 0},
		{"overlap", []*hold{h(1<<40|1, 0, 20), h(2<<40|1, 10, 30)}, nil, 1, 0},
		{"one long holder, two inside it", []*hold{h(1<<40|1, 0, 100), h(2<<40|1, 10, 20), h(2<<40|2, 30, 40)}, nil, 2, 0},
		{"token fell across a failover", []*hold{h(2<<40|5, 0, 10), h(1<<40|9, 20, 30)}, nil, 0, 1},
		{"token reused", []*hold{h(1<<40|1, 0, 10), h(1<<40|1, 20, 30)}, nil, 0, 1},
		{"stale write refused", nil, []regWrite{wr(2<<40|1, true), wr(1<<40|7, false)}, 0, 1},
		{"register took a lower token", nil, []regWrite{wr(2<<40|1, true), wr(1<<40|7, true)}, 0, 1},
		{"one stale holder, many refused writes between the new one's", nil,
			[]regWrite{wr(2<<40|1, true), wr(1<<40|7, false), wr(2<<40|1, true), wr(1<<40|7, false), wr(1<<40|8, false)}, 0, 2},
		{"read above its token", []*hold{h(1<<40|1, 0, 10), readAbove}, nil, 0, 1},
	} {
		v := check(runLog{holds: tc.holds, writes: tc.writes})
		if len(v.overlaps) != tc.overlaps || len(v.bad) != tc.bad || len(v.lost) != 0 || len(v.fifo) != 0 {
			t.Errorf("%s: %d overlaps and %d other violations, want %d and %d: %q", tc.name,
				len(v.overlaps), len(v.bad), tc.overlaps, tc.bad, v.violations())
		}
	}

	// Rules 4 and 5.
	survivor := func(client int, token uint64, from, to, deadline int, lost error) *hold {
		x := h(token, from, to)
		x.client, x.survive, x.validUntil, x.lost = client, true, at(deadline), lost
		return x
	}
	ended := errors.New("SUPERSEDED")
	for _, tc := range []struct {
		name       string
		holds      []*hold
		queues     map[string][]int
		lost, fifo int
	}{
		{"kept", []*hold{survivor(1, 1<<40|1, 0, 100, 108, nil)}, nil, 0, 0},
		{"lost at its deadline", []*hold{survivor(1, 1<<40|1, 0, 108, 108, errUnconfirmed)}, nil, 0, 0},
		{"lost before its deadline", []*hold{survivor(1, 1<<40|1, 0, 50, 108, ended)}, nil, 1, 0},
		{"a loss outside survival is not counted", []*hold{lostHold}, nil, 0, 0},
		{"waiters in order", []*hold{survivor(1, 1<<40|1, 0, 10, 20, nil), survivor(2, 1<<40|2, 10, 20, 30, nil), survivor(3, 2<<40|1, 20, 30, 40, nil)},
			map[string][]int{"l": {1, 2, 3}}, 0, 0},
		{"waiters out of order", []*hold{survivor(1, 1<<40|1, 0, 10, 20, nil), survivor(3, 1<<40|2, 10, 20, 30, nil), survivor(2, 2<<40|1, 20, 30, 40, nil)},
			map[string][]int{"l": {1, 2, 3}}, 0, 1},
		{"a waiter never granted", []*hold{survivor(1, 1<<40|1, 0, 10, 20, nil)}, map[string][]int{"l": {1, 2}}, 0, 1},
	} {
		v := check(runLog{holds: tc.holds, queues: tc.queues})
		if len(v.lost) != tc.lost || len(v.fifo) != tc.fifo || len(v.overlaps) != 0 || len(v.bad) != 0 {
			t.Errorf("%s: %d lost, %d FIFO, %d overlaps, %d other; want %d lost and %d FIFO: %q", tc.name,
				len(v.lost), len(v.fifo), len(v.overlaps), len(v.bad), tc.lost, tc.fifo, v.violations())
		}
	}
}
