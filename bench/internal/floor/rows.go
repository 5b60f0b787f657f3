package floor

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/batonlock/baton/bench/internal/stats"
)

// A Row is one figure of the comparison: the floor's, Baton's, their
// ratio (Baton ÷ floor) and, where Baton has one, the target. A Self
// row is Baton against itself instead: its RST release ÷ its normal
// close, measured in the same round.
type Row struct {
	Figure string `json:"figure"`
	Floor  string `json:"floor"` // "–" in a Self row
	Baton  string `json:"baton"` // in a Self row, "RST / normal close"
	// Ratio is Baton ÷ floor (Self: RST ÷ normal close), the median of
	// the rounds' ratios; 0 if the divisor is 0.
	Ratio float64 `json:"ratio"`
	// Ratios are each round's.
	Ratios []float64 `json:"ratios"`
	// Target is the largest ratio allowed (lower is better), or with
	// AtLeast the smallest; 0: none.
	Target  float64 `json:"target,omitempty"`
	AtLeast bool    `json:"at_least,omitempty"`
	Self    bool    `json:"self,omitempty"`
	// HigherBetter marks rates (grants/s, claims/s), where a ratio above
	// 1 means Baton does more than the floor.
	HigherBetter bool `json:"higher_better,omitempty"`
	// Key names the row for charts and tests.
	Key string `json:"key"`
	// Measured: some round has a figure for it (a results.json from
	// before the row existed has none; tables leave such rows out).
	Measured bool `json:"measured"`
}

// Verdict is "met", "not met" or "–" (no target).
func (r Row) Verdict() string {
	switch {
	case r.Target == 0:
		return "–"
	case r.AtLeast && r.Ratio >= r.Target:
		return "met"
	case !r.AtLeast && r.Ratio > 0 && r.Ratio <= r.Target:
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
		{"hot-rst-cpu", fmt.Sprintf("hot lock, %d contenders, clients release with RST: server CPU per grant", n), func(f *Figures) float64 { return float64(f.HotLockRST.CPUPerGrant) }, true, 0},
		{"hot-rst-rate", "… owner changes/s", func(f *Figures) float64 { return f.HotLockRST.ChangesPerSec }, false, 0},
	}
	rows := make([]Row, 0, len(specs))
	for _, sp := range specs {
		var fv, bv, ratios []float64
		for i := range r.Rounds {
			f, b := sp.get(&r.Rounds[i].Floor), sp.get(&r.Rounds[i].Baton)
			fv, bv = append(fv, f), append(bv, b)
			ratios = append(ratios, ratioOf(b, f))
		}
		row := Row{Key: sp.key, Figure: sp.figure, Ratio: stats.Median(ratios), Ratios: ratios, Target: sp.target, HigherBetter: !sp.isDur,
			Measured: slices.ContainsFunc(append(fv, bv...), func(x float64) bool { return x != 0 })}
		if sp.isDur {
			row.Floor, row.Baton = dur(time.Duration(stats.Median(fv))), dur(time.Duration(stats.Median(bv)))
		} else {
			row.Floor, row.Baton = fmt.Sprintf("%.0f", stats.Median(fv)), fmt.Sprintf("%.0f", stats.Median(bv))
		}
		rows = append(rows, row)
	}
	return append(rows, r.selfRows()...)
}

// The targets for the Go client's reset release against its normal
// close, on Baton: claims/s and hot-lock owner changes/s.
const (
	TargetClaimsRST  = 2.0
	TargetHotLockRST = 1.15
)

// selfRows are Baton's RST release ÷ its normal close, each round's from
// the two runs of that round: with the Go client (the RST targets)
// and with the bench's raw-wire clients.
func (r *Result) selfRows() []Row {
	type spec struct {
		key, figure string
		normal, rst func(*Figures) float64
		target      float64
	}
	goClient := func(get func(*GoClient) float64) func(*Figures) float64 {
		return func(f *Figures) float64 {
			if f.GoClient == nil { // a run from before the Go client's rows
				return 0
			}
			return get(f.GoClient)
		}
	}
	workers := 0
	if len(r.Rounds) > 0 {
		workers = r.Rounds[0].Baton.Claims.Workers
	}
	n := r.Contenders
	specs := []spec{
		{"self-claims-go", fmt.Sprintf("Baton, uncontended claims/s, %d workers, the Go client (github.com/batonlock/baton/clients/go): RST release ÷ normal close (`WithNormalClose`)", workers),
			goClient(func(g *GoClient) float64 { return g.Claims.PerSec }), goClient(func(g *GoClient) float64 { return g.ClaimsRST.PerSec }), TargetClaimsRST},
		{"self-hot-go", fmt.Sprintf("Baton, hot lock owner changes/s, %d contenders, the Go client: RST release ÷ normal close", n),
			goClient(func(g *GoClient) float64 { return g.HotLock.ChangesPerSec }), goClient(func(g *GoClient) float64 { return g.HotLockRST.ChangesPerSec }), TargetHotLockRST},
		{"self-claims-wire", fmt.Sprintf("Baton, uncontended claims/s, %d workers, the bench's raw-wire clients (SO_LINGER 0 before the close, as the Go client): RST release ÷ normal close", workers),
			func(f *Figures) float64 { return f.Claims.PerSec }, func(f *Figures) float64 { return f.ClaimsRST.PerSec }, 0},
		{"self-hot-wire", fmt.Sprintf("Baton, hot lock owner changes/s, %d contenders, the raw-wire clients: RST release ÷ normal close", n),
			func(f *Figures) float64 { return f.HotLock.ChangesPerSec }, func(f *Figures) float64 { return f.HotLockRST.ChangesPerSec }, 0},
	}
	rows := make([]Row, 0, len(specs))
	for _, sp := range specs {
		var nv, rv, ratios []float64
		for i := range r.Rounds {
			b := &r.Rounds[i].Baton
			nv, rv = append(nv, sp.normal(b)), append(rv, sp.rst(b))
			ratios = append(ratios, ratioOf(sp.rst(b), sp.normal(b)))
		}
		rows = append(rows, Row{Key: sp.key, Figure: sp.figure, Floor: "–",
			Measured: slices.ContainsFunc(append(nv, rv...), func(x float64) bool { return x != 0 }),
			Baton:    fmt.Sprintf("%.0f / %.0f", stats.Median(rv), stats.Median(nv)),
			Ratio:    stats.Median(ratios), Ratios: ratios, Target: sp.target, AtLeast: true, Self: true, HigherBetter: true})
	}
	if rn := r.RealNetwork; rn != nil && rn.Skipped == "" {
		// Once per run, not per round.
		ratio := ratioOf(rn.ClaimsRST.PerSec, rn.Claims.PerSec)
		rows = append(rows, Row{Key: "self-claims-go-netns",
			Figure: fmt.Sprintf("Baton, uncontended claims/s, %d workers, the Go client, client and server in a network namespace with tcp_tw_reuse=0 (as between two hosts), %s each, once per run: RST release ÷ normal close", rn.Claims.Workers, dur(rn.Window)),
			Floor:  "–", Baton: fmt.Sprintf("%.0f / %.0f", rn.ClaimsRST.PerSec, rn.Claims.PerSec), Measured: true,
			Ratio: ratio, Ratios: []float64{ratio}, AtLeast: true, Self: true, HigherBetter: true})
		if rn.HotLockSkipped == "" && (rn.HotLock.ChangesPerSec != 0 || rn.HotLockRST.ChangesPerSec != 0) {
			// The hot-lock RST target where the normal close runs out of
			// ports, as between two hosts; the loopback row above keeps it too.
			ratio := ratioOf(rn.HotLockRST.ChangesPerSec, rn.HotLock.ChangesPerSec)
			rows = append(rows, Row{Key: "self-hot-go-netns",
				Figure: fmt.Sprintf("Baton, hot lock owner changes/s, %d contenders, the Go client, in a network namespace with tcp_tw_reuse=0 (as between two hosts), %s each, once per run: RST release ÷ normal close", rn.Contenders, dur(rn.HotLockWindow)),
				Floor:  "–", Baton: fmt.Sprintf("%.0f / %.0f", rn.HotLockRST.ChangesPerSec, rn.HotLock.ChangesPerSec), Measured: true,
				Ratio: ratio, Ratios: []float64{ratio}, Target: TargetHotLockRST, AtLeast: true, Self: true, HigherBetter: true})
		}
	}
	return rows
}

func ratioOf(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}
