package floor

import (
	"fmt"
	"strings"
	"time"
)

// A Row is one figure of the comparison: the floor's, Baton's, their
// ratio (Baton ÷ floor) and, where issue 16 sets one, the target.
type Row struct {
	Figure string  `json:"figure"`
	Floor  string  `json:"floor"`
	Baton  string  `json:"baton"`
	Ratio  float64 `json:"ratio"` // Baton ÷ floor; 0 if the floor is 0
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

// Rows are the comparison's figures in the order of the table.
func (r *Result) Rows() []Row {
	f, b := &r.Floor, &r.Baton
	durRow := func(key, fig string, fv, bv time.Duration, target float64) Row {
		return Row{Key: key, Figure: fig, Floor: dur(fv), Baton: dur(bv), Ratio: ratioOf(float64(bv), float64(fv)), Target: target}
	}
	rateRow := func(key, fig string, fv, bv float64) Row {
		return Row{Key: key, Figure: fig, Floor: fmt.Sprintf("%.0f", fv), Baton: fmt.Sprintf("%.0f", bv), Ratio: ratioOf(bv, fv), HigherBetter: true}
	}
	c := r.Contenders
	return []Row{
		durRow("hot-cpu", fmt.Sprintf("hot lock, %d contenders: server CPU per grant", c), f.HotLock.CPUPerGrant, b.HotLock.CPUPerGrant, 1.0),
		rateRow("hot-rate", fmt.Sprintf("hot lock, %d contenders: owner changes/s", c), f.HotLock.ChangesPerSec, b.HotLock.ChangesPerSec),
		durRow("idle-p50", fmt.Sprintf("handover p50 after %s idle (close → push read)", strings.Replace(r.Idle.String(), "ms", " ms", 1)), f.AfterIdle.P50, b.AfterIdle.P50, 1.05),
		durRow("b2b-p50", fmt.Sprintf("handover p50 back to back, %d contenders (close → push read)", c), f.HotLock.Latency.P50, b.HotLock.Latency.P50, 0),
		durRow("hb-cpu", fmt.Sprintf("heartbeat: server CPU per heartbeat at %d held sessions", b.Heartbeat.Opened), f.Heartbeat.CPUPerBeat, b.Heartbeat.CPUPerBeat, 1.2),
		rateRow("claims", fmt.Sprintf("uncontended claims/s, %d workers, client closes normally (floor: bare accept/reply/close)", f.Claims.Workers), f.Claims.PerSec, b.Claims.PerSec),
		durRow("claims-cpu", "… server CPU per claim", f.Claims.CPUPerClaim, b.Claims.CPUPerClaim, 0),
		rateRow("claims-rst", fmt.Sprintf("uncontended claims/s, %d workers, client releases with RST", f.ClaimsRST.Workers), f.ClaimsRST.PerSec, b.ClaimsRST.PerSec),
		durRow("claims-rst-cpu", "… server CPU per claim", f.ClaimsRST.CPUPerClaim, b.ClaimsRST.CPUPerClaim, 0),
	}
}

func ratioOf(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}
