package scenario

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/batonlock/baton/bench/internal/stats"
)

// checkGrants checks every grant of the held names (their holder's and
// waiters': lost claims, lost places, queue order, overlaps, tokens) and
// of the probe names (overlaps, tokens).
func (r *rollingRun) checkGrants() {
	res := &r.res
	var next stats.Recorder
	for k := range r.cfg.Names {
		hb := r.holderBeliefs[k]
		if hb.lost != nil {
			res.HoldersLost++
			early := !r.lastValid[k].IsZero() && hb.gone.Before(r.lastValid[k].Add(-100*time.Millisecond))
			if early {
				res.LostEarly++
			}
			r.problem("holder of rolling-%d lost its claim %v after the start (before its deadline: %v): %v", k, hb.gone.Sub(r.t0).Round(time.Millisecond), early, hb.lost)
		}
		bs := []belief{hb}
		for _, w := range r.waiters[k] {
			w.mu.Lock()
			if w.wasted {
				res.WaitersFailed++
			}
			if len(w.placeLost) > 0 {
				res.PlacesLost++
				r.problem("waiter %d of rolling-%d lost its place %v after the start: %s", w.queue, k, w.placeLost[0].Sub(r.t0).Round(time.Millisecond), w.lostWhy[0])
			}
			w.mu.Unlock()
			if b := w.belief(); !b.granted.IsZero() {
				bs = append(bs, b)
			}
		}
		slices.SortFunc(bs, func(a, b belief) int { return a.granted.Compare(b.granted) })
		if len(bs) > 1 && bs[0].queue == -1 && bs[1].granted.After(hb.gone) {
			next.Add(bs[1].granted.Sub(hb.gone))
		}
		for i, b := range bs {
			if i > 0 && b.queue < bs[i-1].queue {
				res.OutOfOrder++
				r.problem("rolling-%d: waiter %d granted after waiter %d", k, b.queue, bs[i-1].queue)
				break
			}
		}
		res.check(fmt.Sprintf("rolling-%d", k), bs, r.problem)
	}
	for name, bs := range r.probeBeliefs {
		slices.SortFunc(bs, func(a, b belief) int { return a.granted.Compare(b.granted) })
		res.check(name, bs, r.problem)
	}
	res.NextGrant = next.Summary()
}

// everyone is every participant: the holders, the probes, the waiters.
func (r *rollingRun) everyone() []*participant {
	return append(append(slices.Clone(r.holders), r.probes...), flatten(r.waiters)...)
}

// stepFigures works out what each step saw, and what was seen outside
// every step: the steady unconfirmed time and the moves after the last.
func (r *rollingRun) stepFigures() {
	res := &r.res
	for _, sm := range r.samples {
		inStep := false
		for _, w := range r.windows {
			if !sm.at.Before(w[0]) && sm.at.Before(w[1]) {
				inStep = true
			}
		}
		if !inStep {
			res.SteadyUnconfirmed = max(res.SteadyUnconfirmed, sm.unconfirmed)
		}
	}
	if len(r.windows) > 0 {
		end := r.windows[len(r.windows)-1][1]
		for _, p := range r.everyone() {
			p.mu.Lock()
			for _, m := range p.moves {
				if m.at.After(end) {
					res.MovesAfter++
				}
			}
			p.mu.Unlock()
		}
	}
	for i := range res.Steps {
		r.stepFigure(i)
	}
}

// stepFigure works out what the i-th step saw, from its signal until
// the cluster was healthy again: moves, claims and places lost, the
// longest unconfirmed time, the probes' gaps.
func (r *rollingRun) stepFigure(i int) {
	st := &r.res.Steps[i]
	from, to := r.windows[i][0], r.windows[i][1]
	in := func(t time.Time) bool { return !t.Before(from) && t.Before(to) }
	for _, p := range r.everyone() {
		p.mu.Lock()
		for _, m := range p.moves {
			if !in(m.at) {
				continue
			}
			if m.m.Held {
				st.HolderMoves++
				st.LongestMove = max(st.LongestMove, m.m.Took)
			} else {
				st.WaiterMoves++
			}
		}
		p.mu.Unlock()
	}
	for _, hb := range r.holderBeliefs {
		if hb.lost != nil && in(hb.gone) {
			st.Lost++
		}
	}
	for _, w := range flatten(r.waiters) {
		w.mu.Lock()
		for _, at := range w.placeLost {
			if in(at) {
				st.PlacesLost++
				break
			}
		}
		w.mu.Unlock()
	}
	if st.Lost > 0 || st.PlacesLost > 0 {
		r.logf("  step %d lost %d claims and %d places; the log of %s's life it ended, the end:\n%s", i+1, st.Lost, st.PlacesLost, st.Node, lastLines(r.stoppedLogs[i], 40))
	}
	for _, s := range r.samples {
		if in(s.at) {
			st.MostUnconfirmed = max(st.MostUnconfirmed, s.unconfirmed)
		}
	}
	if r.cfg.Probes > 0 {
		r.probeGaps(st, from, to)
	}
}

// probeGaps sets the step's first probe grant, its longest time without
// any probe grant, and the longest one probe name went without one.
func (r *rollingRun) probeGaps(st *RollingStep, from, to time.Time) {
	last := from
	for _, g := range r.probeGrants {
		if g.Before(from) {
			continue
		}
		if st.FirstGrant == 0 {
			st.FirstGrant = g.Sub(from)
		}
		if g.After(to) {
			break
		}
		st.LongestGap = max(st.LongestGap, g.Sub(last))
		last = g
	}
	for _, gs := range r.byName {
		last := from
		for _, g := range gs {
			if g.Before(from) {
				continue
			}
			if g.After(to) {
				break
			}
			st.NameGap = max(st.NameGap, g.Sub(last))
			last = g
		}
		st.NameGap = max(st.NameGap, to.Sub(last)) // none since
	}
}

// verdict fails the run on safety always; on a claim or a place lost in
// a planned step too. A kill -9 resets the connections that had unread
// bytes, and a reset is a loss by the protocol's rule: counted, not
// failed.
func (r *rollingRun) verdict() error {
	res := &r.res
	planned := func(st RollingStep) bool { return st.Kind != StepCrash }
	lostPlanned, placesPlanned, crashPlaces := 0, 0, 0
	for _, st := range res.Steps {
		if planned(st) {
			lostPlanned += st.Lost
			placesPlanned += st.PlacesLost
		} else {
			crashPlaces += st.PlacesLost
		}
	}
	switch {
	case res.Overlaps > 0 || res.TokensFell > 0 || res.WaitersFailed > 0:
		return fmt.Errorf("%d overlaps, %d tokens not rising, %d waiters failed; first: %v", res.Overlaps, res.TokensFell, res.WaitersFailed, res.Problems)
	case lostPlanned > 0 || placesPlanned > 0:
		return fmt.Errorf("a planned step lost %d holders' claims and %d waiters' places; first: %v", lostPlanned, placesPlanned, res.Problems)
	case res.OutOfOrder > res.PlacesLost:
		return fmt.Errorf("%d names out of queue order, but only %d waiters lost their place; first: %v", res.OutOfOrder, res.PlacesLost, res.Problems)
	case res.Drain == 0:
		return errors.New("the waiters did not drain")
	}
	return nil
}

// check counts the overlaps and falling tokens of one name's beliefs,
// sorted by grant.
func (res *RollingResult) check(name string, bs []belief, problem func(string, ...any)) {
	res.Grants += len(bs)
	var last belief // the belief that ends last of those before b
	for i, b := range bs {
		if i > 0 && b.granted.Before(last.gone) {
			res.Overlaps++
			problem("%s: token %d granted %v before token %d stopped believing", name, b.token, last.gone.Sub(b.granted), last.token)
		}
		if i == 0 || b.gone.After(last.gone) {
			last = b
		}
		if i == 0 {
			continue
		}
		if prev := bs[i-1]; b.token <= prev.token {
			res.TokensFell++
			problem("%s: token %d granted after token %d", name, b.token, prev.token)
		}
	}
}

func flatten(ps [][]*participant) []*participant {
	var out []*participant
	for _, p := range ps {
		out = append(out, p...)
	}
	return out
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
