package report

import (
	"fmt"
	"image/color"
	"sort"
	"strings"

	"github.com/batonlock/baton/bench/internal/floor"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// FloorChart is the chart of Baton's figures as ratios to the floor.
const FloorChart = "floor-ratios.png"

// FloorMarkdown renders the floor comparison: each figure for the floor
// lock server and for Baton, their ratio and the target.
func FloorMarkdown(r *Results) string {
	fl := r.Floor
	if fl == nil {
		return ""
	}
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("### The floor: Baton against a minimal lock server\n\n")
	w("The floor lock server (`bench/internal/floor`, a process of its own as Baton is) speaks Baton's protocol with nothing else: FIFO per name, close = release, one global mutex, one goroutine per connection, tokens rising; the claims floor is a bare accept/reply/close server. Same clients (raw frames from the bench; the Go client too in Baton's RST ÷ normal close rows), same run, one after the other. Ratio: Baton ÷ floor (for rates, above 1 is more than the floor). Server CPU from the process's CPU clock (`clock_gettime` of `clock_getcpuclockid(PID)`, to the nanosecond) over each window; heartbeats counted by the load generator (a process of its own; half holders, half waiters, every session on a %s lease, a beat every lease/4). A session lost in the heartbeat window (Baton ends one whose beats come late; the floor never does) is counted below. The handovers after idle of each round run in %d short windows, the floor's and Baton's alternated, each server's samples pooled, so that the machine's swings from one second to the next fall on both alike.\n\n", Dur(floor.HeartbeatLease), floor.IdleSlices)
	if len(fl.Rounds) > 1 {
		w("%d rounds, the floor and Baton in turn in each (the floor first in odd rounds); floor and Baton give each figure's median over the rounds, ratio the median of the rounds' ratios, each round's in the last column.\n\n", len(fl.Rounds))
	}
	before := map[string]floor.Row{}
	if r.FloorBefore != nil {
		for _, row := range r.FloorBefore.Rows() {
			before[row.Key] = row
		}
		w("Ratio before: the same figure in the run of `%s` (`-floor-before`).\n\n", r.FloorBeforeFrom)
		w("| figure | floor | Baton | ratio | ratio before | target | verdict | ratio in each round |\n|---|---:|---:|---:|---:|---:|---|---|\n")
	} else {
		w("| figure | floor | Baton | ratio | target | verdict | ratio in each round |\n|---|---:|---:|---:|---:|---|---|\n")
	}
	for _, row := range fl.Rows() {
		if !row.Measured {
			continue // a run from before this figure existed
		}
		target := "–"
		switch {
		case row.Target > 0 && row.AtLeast:
			target = fmt.Sprintf("≥ %.2f×", row.Target)
		case row.Target > 0:
			target = fmt.Sprintf("≤ %.2f×", row.Target)
		}
		ratio := "–"
		if row.Ratio > 0 {
			ratio = fmt.Sprintf("%.2f×", row.Ratio)
		}
		each := make([]string, len(row.Ratios))
		for i, x := range row.Ratios {
			each[i] = fmt.Sprintf("%.2f", x)
		}
		if r.FloorBefore != nil {
			prev := "–"
			if b, ok := before[row.Key]; ok && b.Ratio > 0 {
				prev = fmt.Sprintf("%.2f×", b.Ratio)
			}
			w("| %s | %s | %s | %s | %s | %s | %s | %s |\n", row.Figure, row.Floor, row.Baton, ratio, prev, target, row.Verdict(), strings.Join(each, " · "))
			continue
		}
		w("| %s | %s | %s | %s | %s | %s | %s |\n", row.Figure, row.Floor, row.Baton, ratio, target, row.Verdict(), strings.Join(each, " · "))
	}
	self := false
	for _, row := range fl.Rows() {
		self = self || row.Self && row.Measured
	}
	if self {
		w("\nThe rows \"Baton, … RST release ÷ normal close\" are Baton against itself: each round runs the same clients twice, one run releasing by reset (`SO_LINGER 0` before the close; the Go client's default) and one closing normally (FIN), back to back (the reset first in odd rounds); the Baton column gives the two medians, RST / normal close. Every claims and hot-lock run dials the servers at a loopback address of its own (127.42.x.y; both listen on every address), so the TIME_WAIT sockets of a run's normal close do not slow the dials of the runs after it.\n")
	}
	if rn := fl.RealNetwork; rn != nil && rn.Skipped != "" {
		w("\nThe claims with tcp_tw_reuse=0 in a network namespace were not measured: %s.\n", rn.Skipped)
	} else if rn != nil {
		w("\nWith tcp_tw_reuse=0 (a network namespace per run, the Go client and Baton in it, %s each): the reset %.0f claims/s (server CPU per claim %s, %d failed, %s left in TIME_WAIT), the normal close %.0f claims/s (%s, %d failed%s, %d left in TIME_WAIT).\n",
			Dur(rn.Window), rn.ClaimsRST.PerSec, Dur(rn.ClaimsRST.CPUPerClaim), rn.ClaimsRST.Errors, fmt.Sprint(rn.ClaimsRST.TimeWait.Count),
			rn.Claims.PerSec, Dur(rn.Claims.CPUPerClaim), rn.Claims.Errors, lastErr(rn.Claims.LastError), rn.Claims.TimeWait.Count)
		switch h, hr := rn.HotLock, rn.HotLockRST; {
		case rn.HotLockSkipped != "":
			w("The hot lock with tcp_tw_reuse=0 was not measured: %s.\n", rn.HotLockSkipped)
		case h.ChangesPerSec != 0 || hr.ChangesPerSec != 0:
			w("The hot lock there (%d Go clients on one lock, every grant a new connection, %s each): the reset %d grants, %.0f owner changes/s (server CPU per grant %s, %d failed, %d left in TIME_WAIT), the normal close %d grants, %.0f owner changes/s (%s, %d failed%s, %d left in TIME_WAIT).\n",
				rn.Contenders, Dur(rn.HotLockWindow), hr.Grants, hr.ChangesPerSec, Dur(hr.CPUPerGrant), hr.Errors, hr.TimeWait.Count,
				h.Grants, h.ChangesPerSec, Dur(h.CPUPerGrant), h.Errors, lastErr(h.LastError), h.TimeWait.Count)
		}
	}
	if full := fl.FullTimeWait(); len(full) > 0 {
		w("\n**The machine's TIME_WAIT table was full** (net.ipv4.tcp_max_tw_buckets, shared with every other process) at the end of: %s. The kernel then keeps no TIME_WAIT for a closed connection, so a normal close there cost less than it does below the ceiling, and the RST ÷ normal close ratios of those rounds are too low.\n", strings.Join(full, "; "))
	}
	w("\n")
	for i, rd := range fl.Rounds {
		for _, f := range []floor.Figures{rd.Floor, rd.Baton} {
			h := f.Heartbeat
			w("- Round %d, %s: hot lock p99 close → push %s, after idle p99 %s; heartbeats: %d sessions opened (%d failed to open), %d heartbeats in %s (round trip p50 %s, p99 %s), server CPU %s, load generator CPU %s, sessions lost %d before the window and %d in it.\n",
				i+1, f.System, Dur(f.HotLock.Latency.P99), Dur(f.AfterIdle.P99), h.Opened, h.Failed, h.Beats, Dur(h.Window), Dur(h.RTT.P50), Dur(h.RTT.P99), Dur(h.ServerCPU), Dur(h.LoadGenCPU), h.LostBefore, h.Lost)
			if g := f.GoClient; g != nil {
				w("- Round %d, %s with the Go client: claims %.0f/s with a normal close, %.0f/s with RST (server CPU per claim %s, %s); hot lock %.0f and %.0f owner changes/s (server CPU per grant %s, %s).\n",
					i+1, f.System, g.Claims.PerSec, g.ClaimsRST.PerSec, Dur(g.Claims.CPUPerClaim), Dur(g.ClaimsRST.CPUPerClaim),
					g.HotLock.ChangesPerSec, g.HotLockRST.ChangesPerSec, Dur(g.HotLock.CPUPerGrant), Dur(g.HotLockRST.CPUPerGrant))
			}
		}
	}
	if len(fl.Profiles) > 0 {
		labels := make([]string, 0, len(fl.Profiles))
		for l := range fl.Profiles {
			labels = append(labels, l)
		}
		sort.Strings(labels)
		w("- CPU profiles of this run (`go tool pprof -top` beside each, `.top.txt`): %s.\n", strings.Join(labels, ", "))
	}
	w("\n")
	return b.String()
}

// floorChart draws Baton's ratio to the floor for each figure, the
// target beside it where there is one, and the floor itself as a
// dashed line at 1.
func floorChart(file string, r *Results) error {
	p := plot.New()
	p.Title.Text = "Baton ÷ the floor lock server, one run (CPU, latency: lower is better; rates: higher)"
	p.Y.Label.Text = "ratio to the floor"
	if r.Floor == nil {
		return saveEmpty(p, file)
	}
	short := map[string]string{
		"hot-cpu": "hot lock\nCPU/grant", "hot-rate": "hot lock\nowner changes/s",
		"idle-p50": "handover p50\nafter 20 ms idle", "b2b-p50": "handover p50\nback to back",
		"hb-cpu": "CPU per\nheartbeat", "claims": "claims/s", "claims-cpu": "CPU/claim",
		"claims-rst": "claims/s\nRST release", "claims-rst-cpu": "CPU/claim\nRST release",
		"hot-rst-cpu": "hot lock, RST\nCPU/grant", "hot-rst-rate": "hot lock, RST\nowner changes/s",
	}
	var rows []floor.Row
	for _, row := range r.Floor.Rows() {
		if !row.Self && row.Measured { // Self: Baton ÷ Baton, not a ratio to the floor
			rows = append(rows, row)
		}
	}
	before := map[string]float64{}
	if r.FloorBefore != nil {
		for _, row := range r.FloorBefore.Rows() {
			before[row.Key] = row.Ratio
		}
	}
	names := make([]string, len(rows))
	ratio := make([]float64, len(rows))
	prev := make([]float64, len(rows))
	target := make([]float64, len(rows))
	hi := 1.0
	for i, row := range rows {
		names[i] = short[row.Key]
		if names[i] == "" {
			names[i] = row.Key
		}
		ratio[i], target[i], prev[i] = row.Ratio, row.Target, before[row.Key]
		hi = max(hi, row.Ratio, row.Target, prev[i])
	}
	const barPt = 16.0
	width := vg.Points(barPt)
	// Bars side by side: before (if given), this run, the target.
	series := []struct {
		label  string
		values []float64
	}{{"Baton ÷ floor", ratio}, {"target (at most)", target}}
	if r.FloorBefore != nil {
		series = append([]struct {
			label  string
			values []float64
		}{{"Baton ÷ floor, before (" + r.FloorBeforeFrom + ")", prev}}, series...)
		series[1].label = "Baton ÷ floor, this run"
	}
	for k, sr := range series {
		b := &bars{values: sr.values, width: width, color: plotutil.Color(k),
			offset: width * vg.Length(float64(k)-float64(len(series)-1)/2)}
		p.Add(b)
		p.Legend.Add(sr.label, b)
	}
	one, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: 1}, {X: float64(len(rows)) - 0.5, Y: 1}})
	if err != nil {
		return err
	}
	one.Color = color.RGBA{R: 200, A: 255}
	one.Dashes = []vg.Length{vg.Points(4), vg.Points(4)}
	p.Add(one)
	p.Legend.Add("the floor (1×)", one)
	p.Y.Min, p.Y.Max = 0, hi*1.35
	var ticks []plot.Tick
	for v := 0.0; v <= p.Y.Max; v += 0.25 {
		t := plot.Tick{Value: v}
		if int(v*4)%2 == 0 {
			t.Label = fmt.Sprintf("%.1f×", v)
		}
		ticks = append(ticks, t)
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	p.Legend.Top = true
	p.Legend.Left = true
	p.NominalX(names...)
	p.Add(plotter.NewGrid())
	return p.Save(vg.Points(max(10*72, 90*float64(len(rows))+80)), 4.5*vg.Inch, file)
}

// lastErr is ", the last: err" or nothing.
func lastErr(err string) string {
	if err == "" {
		return ""
	}
	return ", the last: `" + err + "`"
}
