package floor

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// A Row is one figure of the comparison: the floor's, Baton's, their
// ratio (Baton ÷ floor) and, where issue 16 sets one, the target.
type Row struct {
	Figure string  `json:"figure"`
	Floor  string  `json:"floor"`
	Baton  string  `json:"baton"`
	Ratio  float64 `json:"ratio"` // Baton ÷ floor, median over the rounds; 0 if the floor is 0
	// Ratios are each round's.
	Ratios []float64 `json:"ratios"`
	// Target is the largest ratio allowed (lower is better), or 0: none.
	Target float64 `json:"target,omitempty"`
	// HigherBetter marks rates (grants/s, claims/s), where a ratio above
	// 1 means Baton does more than the floor.
	HigherBetter bool `json:"higher_better,omitempty"`
	// Key names the row for charts and tests.
	Key string `json:"key"`
}

// Verdict is "met", "not met" or "–" (no target).
func (r Row) Verdict() string {
	switch {
	case r.Target == 0:
		return "–"
	case r.Ratio > 0 && r.Ratio <= r.Target:
		return "met"
	}
	return "not met"
}

// Rows are the comparison's figures in the order of the table:
// for each, the median over the rounds of the floor's figure, of Baton's,
// and of their ratio within each round.
func (r *Result) Rows() []Row {
	type spec struct {
		key, figure string
		get         func(*Figures) float64
		isDur       bool
		target      float64
	}
	cpuGrant := func(f *Figures) float64 { return float64(f.HotLock.CPUPerGrant) }
	c := len(r.Rounds)
	opened, workers := 0, 0
	if c > 0 {
		opened, workers = r.Rounds[0].Baton.Heartbeat.Opened, r.Rounds[0].Floor.Claims.Workers
	}
	n := r.Contenders
	idle := strings.Replace(r.Idle.String(), "ms", " ms", 1)
	specs := []spec{
		{"hot-cpu", fmt.Sprintf("hot lock, %d contenders: server CPU per grant", n), cpuGrant, true, 1.0},
		{"hot-rate", fmt.Sprintf("hot lock, %d contenders: owner changes/s", n), func(f *Figures) float64 { return f.HotLock.ChangesPerSec }, false, 0},
		{"idle-p50", fmt.Sprintf("handover p50 after %s idle (close → push read)", idle), func(f *Figures) float64 { return float64(f.AfterIdle.P50) }, true, 1.05},
		{"b2b-p50", fmt.Sprintf("handover p50 back to back, %d contenders (close → push read)", n), func(f *Figures) float64 { return float64(f.HotLock.Latency.P50) }, true, 0},
		{"hb-cpu", fmt.Sprintf("heartbeat: server CPU per heartbeat at %d held sessions", opened), func(f *Figures) float64 { return float64(f.Heartbeat.CPUPerBeat) }, true, 1.2},
		{"claims", fmt.Sprintf("uncontended claims/s, %d workers, client closes normally (floor: bare accept/reply/close)", workers), func(f *Figures) float64 { return f.Claims.PerSec }, false, 0},
		{"claims-cpu", "… server CPU per claim", func(f *Figures) float64 { return float64(f.Claims.CPUPerClaim) }, true, 0},
		{"claims-rst", fmt.Sprintf("uncontended claims/s, %d workers, client releases with RST", workers), func(f *Figures) float64 { return f.ClaimsRST.PerSec }, false, 0},
		{"claims-rst-cpu", "… server CPU per claim", func(f *Figures) float64 { return float64(f.ClaimsRST.CPUPerClaim) }, true, 0},
	}
	rows := make([]Row, 0, len(specs))
	for _, sp := range specs {
		var fv, bv, ratios []float64
		for i := range r.Rounds {
			f, b := sp.get(&r.Rounds[i].Floor), sp.get(&r.Rounds[i].Baton)
			fv, bv = append(fv, f), append(bv, b)
			ratios = append(ratios, ratioOf(b, f))
		}
		row := Row{Key: sp.key, Figure: sp.figure, Ratio: median(ratios), Ratios: ratios, Target: sp.target, HigherBetter: !sp.isDur}
		if sp.isDur {
			row.Floor, row.Baton = dur(time.Duration(median(fv))), dur(time.Duration(median(bv)))
		} else {
			row.Floor, row.Baton = fmt.Sprintf("%.0f", median(fv)), fmt.Sprintf("%.0f", median(bv))
		}
		rows = append(rows, row)
	}
	return rows
}

// median of xs (the mean of the middle two for an even count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 0 {
		return (s[m-1] + s[m]) / 2
	}
	return s[m]
}

func ratioOf(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}
